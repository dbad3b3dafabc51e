//! The one verdict line the probe prints, and every reason it can fail.
//!
//! Grammar (README.md has the full table):
//! `ZSPROBE: PASS hint=valid ranges=<n> hinted_bytes=<N> zero_bytes=<N> nonzero_bytes=0 e820=<n>`,
//! `ZSPROBE: PASS hint=absent e820=<n>`,
//! `ZSPROBE: FAIL hint=invalid error=<ErrorName>[ index=<i>]`,
//! `ZSPROBE: FAIL hint=valid nonzero_bytes=<N> first_nonzero=0x<gpa> …`,
//! `ZSPROBE: FAIL reason=<name> [key=value …]`.

use core::fmt;

use crate::cmdline::Expect;
use crate::ranges::Written;
use crate::LINE_PREFIX;

/// Why the probe failed, other than an invalid hint or non-zero memory.
/// Each variant prints as `reason=<snake_case name>` plus its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The probe was not running at the address it was linked for (it is
    /// not relocatable); printed by the entry stub itself.
    WrongLoadAddress,
    /// The `boot_params` page could not be read.
    BootParamsUnreadable,
    /// The `boot_params` page is not inside any e820 entry.
    BootParamsNotInE820 {
        /// Its address.
        addr: u64,
    },
    /// The setup header copy lacks "HdrS".
    BadHeaderMagic {
        /// The u32 found at 0x202.
        found: u32,
    },
    /// Protocol version outside 2.09..=2.ff.
    BadProtocolVersion {
        /// The version found.
        version: u16,
    },
    /// `e820_entries` is 0 or above 128.
    E820Count {
        /// The count found.
        count: usize,
    },
    /// An entry of size 0.
    E820EmptyEntry {
        /// Its index.
        index: usize,
    },
    /// An entry whose end overflows 64 bits.
    E820Overflow {
        /// Its index.
        index: usize,
    },
    /// An entry starts below the previous one.
    E820Unsorted {
        /// Its index.
        index: usize,
    },
    /// An entry starts below the previous one's end.
    E820Overlap {
        /// Its index.
        index: usize,
    },
    /// No usable RAM entry.
    E820NoRam,
    /// `cmd_line_ptr` is 0.
    NoCmdline,
    /// The command line is not inside e820-described memory.
    CmdlineNotInMemory {
        /// Its address.
        addr: u64,
    },
    /// No NUL within the command line's maximum size.
    CmdlineUnterminated {
        /// Its address.
        addr: u64,
    },
    /// `zsprobe.expect=` has a value other than `absent` or `valid`.
    BadExpect,
    /// `zsprobe.fault=` has a value other than `ud` or `pf`.
    BadFault,
    /// `zsprobe.fault=` asked for a fault and none happened.
    FaultNotRaised,
    /// The probe's image, bss and stack are not inside usable RAM.
    ImageNotInRam {
        /// First byte.
        start: u64,
        /// Exclusive end.
        end: u64,
    },
    /// Usable RAM ends above what the probe can map.
    RamBeyondMap {
        /// End of usable RAM.
        ram_end: u64,
        /// Highest address the probe can map.
        limit: u64,
    },
    /// A `setup_data` node header is not inside e820-described memory.
    SetupDataBadPointer {
        /// Node index.
        index: usize,
        /// Its address.
        addr: u64,
    },
    /// A node's data runs out of e820-described memory.
    SetupDataBadLength {
        /// Node index.
        index: usize,
        /// Its address.
        addr: u64,
        /// Its `len`.
        len: u32,
    },
    /// A node points back to one already visited.
    SetupDataLoop {
        /// Node index.
        index: usize,
        /// Its address.
        addr: u64,
    },
    /// A node overlaps an earlier one.
    SetupDataOverlap {
        /// Node index.
        index: usize,
        /// Its address.
        addr: u64,
    },
    /// More than the maximum number of nodes.
    SetupDataTooMany {
        /// The maximum.
        max: usize,
    },
    /// Two hint nodes: the spec defines one hint per transport.
    MultipleHints {
        /// Address of the first hint node.
        first: u64,
        /// Address of the second.
        second: u64,
    },
    /// A scrub request in setup_data: only valid on fw_cfg; its ranges are
    /// not zero.
    ScrubRequestInSetupData,
    /// A hinted range overlaps memory written before the scan (a VMM bug:
    /// the VMM wrote it, or must leave it to the kernel).
    HintOverlapsWritten {
        /// Hint entry index.
        index: usize,
        /// What it overlaps.
        what: Written,
        /// First byte of that area.
        area: u64,
    },
    /// The command line's `zsprobe.expect=` does not match what was found.
    ExpectMismatch {
        /// Expected.
        expected: Expect,
        /// Found: `absent` or `valid`.
        found: Expect,
    },
    /// A hinted range could not be read after mapping all RAM.
    RangeUnreadable {
        /// Its start.
        start: u64,
    },
    /// A CPU exception.
    Exception {
        /// Vector number.
        vector: u64,
        /// Faulting instruction.
        rip: u64,
        /// Error code (0 for vectors without one).
        error_code: u64,
        /// CR2 (the fault address for a page fault).
        cr2: u64,
    },
    /// A Rust panic (a probe bug).
    Panic,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Failure::WrongLoadAddress => f.write_str("reason=wrong_load_address"),
            Failure::BootParamsUnreadable => f.write_str("reason=boot_params_unreadable"),
            Failure::BootParamsNotInE820 { addr } => {
                write!(f, "reason=boot_params_not_in_e820 addr={addr:#x}")
            }
            Failure::BadHeaderMagic { found } => {
                write!(f, "reason=boot_params_bad_magic found={found:#x}")
            }
            Failure::BadProtocolVersion { version } => {
                write!(f, "reason=boot_params_bad_version version={version:#06x}")
            }
            Failure::E820Count { count } => write!(f, "reason=e820_count count={count}"),
            Failure::E820EmptyEntry { index } => write!(f, "reason=e820_empty_entry index={index}"),
            Failure::E820Overflow { index } => write!(f, "reason=e820_overflow index={index}"),
            Failure::E820Unsorted { index } => write!(f, "reason=e820_unsorted index={index}"),
            Failure::E820Overlap { index } => write!(f, "reason=e820_overlap index={index}"),
            Failure::E820NoRam => f.write_str("reason=e820_no_ram"),
            Failure::NoCmdline => f.write_str("reason=no_cmdline"),
            Failure::CmdlineNotInMemory { addr } => {
                write!(f, "reason=cmdline_not_in_memory addr={addr:#x}")
            }
            Failure::CmdlineUnterminated { addr } => {
                write!(f, "reason=cmdline_unterminated addr={addr:#x}")
            }
            Failure::BadExpect => f.write_str("reason=bad_expect"),
            Failure::BadFault => f.write_str("reason=bad_fault"),
            Failure::FaultNotRaised => f.write_str("reason=fault_not_raised"),
            Failure::ImageNotInRam { start, end } => {
                write!(f, "reason=image_not_in_ram start={start:#x} end={end:#x}")
            }
            Failure::RamBeyondMap { ram_end, limit } => {
                write!(f, "reason=ram_beyond_map ram_end={ram_end:#x} limit={limit:#x}")
            }
            Failure::SetupDataBadPointer { index, addr } => {
                write!(f, "reason=setup_data_bad_pointer index={index} addr={addr:#x}")
            }
            Failure::SetupDataBadLength { index, addr, len } => write!(
                f,
                "reason=setup_data_bad_length index={index} addr={addr:#x} len={len}"
            ),
            Failure::SetupDataLoop { index, addr } => {
                write!(f, "reason=setup_data_loop index={index} addr={addr:#x}")
            }
            Failure::SetupDataOverlap { index, addr } => {
                write!(f, "reason=setup_data_overlap index={index} addr={addr:#x}")
            }
            Failure::SetupDataTooMany { max } => {
                write!(f, "reason=setup_data_too_many max={max}")
            }
            Failure::MultipleHints { first, second } => {
                write!(f, "reason=multiple_hints first={first:#x} second={second:#x}")
            }
            Failure::ScrubRequestInSetupData => f.write_str("reason=scrub_request_in_setup_data"),
            Failure::HintOverlapsWritten { index, what, area } => write!(
                f,
                "reason=hint_overlaps_written index={index} area={what} area_start={area:#x}"
            ),
            Failure::ExpectMismatch { expected, found } => {
                write!(f, "reason=expect_mismatch expected={expected} found={found}")
            }
            Failure::RangeUnreadable { start } => {
                write!(f, "reason=range_unreadable start={start:#x}")
            }
            Failure::Exception {
                vector,
                rip,
                error_code,
                cr2,
            } => write!(
                f,
                "reason=exception vector={vector} rip={rip:#x} error_code={error_code:#x} cr2={cr2:#x}"
            ),
            Failure::Panic => f.write_str("reason=panic"),
        }
    }
}

/// The outcome of a probe run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A valid hint, every hinted byte zero.
    PassValid {
        /// Hint entries.
        ranges: usize,
        /// Sum of their lengths.
        hinted_bytes: u64,
        /// Bytes that read as zero (equal to `hinted_bytes`).
        zero_bytes: u64,
        /// e820 entries.
        e820: usize,
    },
    /// No hint node in setup_data.
    PassAbsent {
        /// e820 entries.
        e820: usize,
    },
    /// The hint failed validation.
    HintInvalid(zerohint::Error),
    /// A valid hint with non-zero bytes inside: the worst VMM bug.
    Nonzero {
        /// Hint entries.
        ranges: usize,
        /// Sum of their lengths.
        hinted_bytes: u64,
        /// Bytes that read as zero.
        zero_bytes: u64,
        /// Bytes that did not.
        nonzero_bytes: u64,
        /// Guest-physical address of the first non-zero byte.
        first_nonzero: u64,
    },
    /// Anything else.
    Fail(Failure),
}

impl Verdict {
    /// Whether this is a PASS.
    pub fn passed(&self) -> bool {
        matches!(self, Verdict::PassValid { .. } | Verdict::PassAbsent { .. })
    }
}

impl From<Failure> for Verdict {
    fn from(f: Failure) -> Self {
        Verdict::Fail(f)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(LINE_PREFIX)?;
        match *self {
            Verdict::PassValid {
                ranges,
                hinted_bytes,
                zero_bytes,
                e820,
            } => write!(
                f,
                "PASS hint=valid ranges={ranges} hinted_bytes={hinted_bytes} zero_bytes={zero_bytes} nonzero_bytes=0 e820={e820}"
            ),
            Verdict::PassAbsent { e820 } => write!(f, "PASS hint=absent e820={e820}"),
            Verdict::HintInvalid(e) => {
                write!(f, "FAIL hint=invalid error={}", e.name())?;
                match e.index() {
                    Some(i) => write!(f, " index={i}"),
                    None => Ok(()),
                }
            }
            Verdict::Nonzero {
                ranges,
                hinted_bytes,
                zero_bytes,
                nonzero_bytes,
                first_nonzero,
            } => write!(
                f,
                "FAIL hint=valid nonzero_bytes={nonzero_bytes} first_nonzero={first_nonzero:#x} ranges={ranges} hinted_bytes={hinted_bytes} zero_bytes={zero_bytes}"
            ),
            Verdict::Fail(r) => write!(f, "FAIL {r}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_grammar() {
        let v = Verdict::PassValid {
            ranges: 2,
            hinted_bytes: 8192,
            zero_bytes: 8192,
            e820: 3,
        };
        assert_eq!(
            v.to_string(),
            "ZSPROBE: PASS hint=valid ranges=2 hinted_bytes=8192 zero_bytes=8192 nonzero_bytes=0 e820=3"
        );
        assert!(v.passed());
        assert_eq!(
            Verdict::PassAbsent { e820: 2 }.to_string(),
            "ZSPROBE: PASS hint=absent e820=2"
        );
        assert_eq!(
            Verdict::HintInvalid(zerohint::Error::BadChecksum).to_string(),
            "ZSPROBE: FAIL hint=invalid error=BadChecksum"
        );
        assert_eq!(
            Verdict::HintInvalid(zerohint::Error::OutOfRam { index: 3 }).to_string(),
            "ZSPROBE: FAIL hint=invalid error=OutOfRam index=3"
        );
        let n = Verdict::Nonzero {
            ranges: 1,
            hinted_bytes: 4096,
            zero_bytes: 4095,
            nonzero_bytes: 1,
            first_nonzero: 0x20_0010,
        };
        assert!(!n.passed());
        assert_eq!(
            n.to_string(),
            "ZSPROBE: FAIL hint=valid nonzero_bytes=1 first_nonzero=0x200010 ranges=1 hinted_bytes=4096 zero_bytes=4095"
        );
        assert_eq!(
            Verdict::from(Failure::Exception {
                vector: 14,
                rip: 0x10_0234,
                error_code: 2,
                cr2: 0xdead_0000
            })
            .to_string(),
            "ZSPROBE: FAIL reason=exception vector=14 rip=0x100234 error_code=0x2 cr2=0xdead0000"
        );
        assert_eq!(
            Verdict::from(Failure::ExpectMismatch {
                expected: Expect::Valid,
                found: Expect::Absent
            })
            .to_string(),
            "ZSPROBE: FAIL reason=expect_mismatch expected=valid found=absent"
        );
        assert_eq!(
            Verdict::from(Failure::BadProtocolVersion { version: 0x105 }).to_string(),
            "ZSPROBE: FAIL reason=boot_params_bad_version version=0x0105"
        );
    }
}
