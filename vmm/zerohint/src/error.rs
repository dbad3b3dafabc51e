//! Why a hint was rejected. The variants, their order and their names are
//! part of the ABI: they match the C `ZSHINT_E_*` codes and the golden
//! vectors' `expect` field (see docs/hint-abi.md, "Validation").

use core::fmt;

/// The first validation rule a hint (or a hint being built) broke.
///
/// Entry errors carry the zero-based index of the offending entry (for
/// [`crate::Hint::zeroed_from_ranges`], the index of the input range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// Fewer bytes than the header, or than the header's entry count needs
    /// (for [`crate::encode_into`]: the output buffer is too small).
    Truncated,
    /// The first 8 bytes are not `ZSHINT01`.
    BadMagic,
    /// `version` is not 1.
    BadVersion,
    /// `header_size` is not 32 or `entry_size` is not 24.
    BadHeaderSize,
    /// More than [`crate::MAX_ENTRIES`] entries.
    TooManyEntries,
    /// A reserved header field or header flag bit is set.
    ReservedNonZero,
    /// The transport's length is larger than the hint's exact size.
    BadLength,
    /// The CRC-32 does not match.
    BadChecksum,
    /// Reserved entry flag bits or bytes are set, or `ZEROED` does not match
    /// the hint kind (required in a zero hint, forbidden in a scrub request).
    BadEntryFlags {
        /// Index of the entry.
        index: usize,
    },
    /// `page_shift` is not 12, 21 or 30.
    BadPageShift {
        /// Index of the entry.
        index: usize,
    },
    /// `start` or `length` is not a multiple of 4096.
    Misaligned {
        /// Index of the entry.
        index: usize,
    },
    /// `length` is 0.
    EmptyRange {
        /// Index of the entry.
        index: usize,
    },
    /// `start + length` does not fit in 64 bits (an end of exactly 2^64
    /// included).
    Overflow {
        /// Index of the entry.
        index: usize,
    },
    /// `start` is below the previous entry's start.
    Unsorted {
        /// Index of the entry.
        index: usize,
    },
    /// `start` is below the previous entry's end.
    Overlapping {
        /// Index of the entry.
        index: usize,
    },
    /// The range is not wholly inside usable RAM.
    OutOfRam {
        /// Index of the entry.
        index: usize,
    },
}

impl Error {
    /// Every error name in ABI order: `ALL_NAMES[i]` is C code
    /// `ZSHINT_E_<NAME>` = `i + 1` (0 is `ZSHINT_E_OK`).
    pub const ALL_NAMES: [&'static str; 16] = [
        "Truncated",
        "BadMagic",
        "BadVersion",
        "BadHeaderSize",
        "TooManyEntries",
        "ReservedNonZero",
        "BadLength",
        "BadChecksum",
        "BadEntryFlags",
        "BadPageShift",
        "Misaligned",
        "EmptyRange",
        "Overflow",
        "Unsorted",
        "Overlapping",
        "OutOfRam",
    ];

    /// The ABI name (`"BadMagic"` …), shared with the C codes and vectors.
    pub fn name(&self) -> &'static str {
        Self::ALL_NAMES[usize::from(self.code()) - 1]
    }

    /// The C code `ZSHINT_E_*` (1-based; 0 means success).
    pub fn code(&self) -> u8 {
        match self {
            Error::Truncated => 1,
            Error::BadMagic => 2,
            Error::BadVersion => 3,
            Error::BadHeaderSize => 4,
            Error::TooManyEntries => 5,
            Error::ReservedNonZero => 6,
            Error::BadLength => 7,
            Error::BadChecksum => 8,
            Error::BadEntryFlags { .. } => 9,
            Error::BadPageShift { .. } => 10,
            Error::Misaligned { .. } => 11,
            Error::EmptyRange { .. } => 12,
            Error::Overflow { .. } => 13,
            Error::Unsorted { .. } => 14,
            Error::Overlapping { .. } => 15,
            Error::OutOfRam { .. } => 16,
        }
    }

    /// The entry the error is about, if it is an entry error.
    pub fn index(&self) -> Option<usize> {
        match *self {
            Error::BadEntryFlags { index }
            | Error::BadPageShift { index }
            | Error::Misaligned { index }
            | Error::EmptyRange { index }
            | Error::Overflow { index }
            | Error::Unsorted { index }
            | Error::Overlapping { index }
            | Error::OutOfRam { index } => Some(index),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated => f.write_str(
                "hint truncated: fewer bytes than the header or its entry count needs",
            ),
            Error::BadMagic => f.write_str("not a zerostart hint: magic is not \"ZSHINT01\""),
            Error::BadVersion => f.write_str("unsupported hint version: only version 1 is known"),
            Error::BadHeaderSize => {
                f.write_str("bad hint layout: header_size must be 32 and entry_size 24")
            }
            Error::TooManyEntries => f.write_str("hint has more than 512 entries"),
            Error::ReservedNonZero => {
                f.write_str("hint header has reserved fields or reserved flag bits set")
            }
            Error::BadLength => {
                f.write_str("hint transport length is larger than the hint's exact size")
            }
            Error::BadChecksum => f.write_str("hint CRC-32 does not match its contents"),
            Error::BadEntryFlags { index } => write!(
                f,
                "hint entry {index}: reserved flags/bytes set or ZEROED flag wrong for the hint kind"
            ),
            Error::BadPageShift { index } => {
                write!(f, "hint entry {index}: page_shift is not 12, 21 or 30")
            }
            Error::Misaligned { index } => write!(
                f,
                "hint entry {index}: start or length is not a multiple of 4096"
            ),
            Error::EmptyRange { index } => write!(f, "hint entry {index}: length is zero"),
            Error::Overflow { index } => {
                write!(f, "hint entry {index}: start + length overflows 64 bits")
            }
            Error::Unsorted { index } => write!(
                f,
                "hint entry {index}: start is below the previous entry's start (entries must be sorted)"
            ),
            Error::Overlapping { index } => {
                write!(f, "hint entry {index}: overlaps the previous entry")
            }
            Error::OutOfRam { index } => {
                write!(f, "hint entry {index}: range is not wholly inside usable RAM")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}
