//! The zerostart pre-zeroed hint ABI, version 1 (docs/hint-abi.md): the one
//! place that encodes, validates and decodes the hint the VMM hands a guest.
//!
//! A hint lists guest-physical ranges that read as zero at the guest's first
//! instruction. A false "zero" leaks another tenant's data, so this crate
//! refuses to decode *or emit* anything the spec does not allow, and checks
//! in exactly the order the spec lists so the Rust, EDK2 and Linux consumers
//! agree on the first error (the golden vectors in `tests/vectors/` pin it).
//!
//! ```
//! # fn main() -> Result<(), zerohint::Error> {
//! // Producer: RAM known zero, minus everything written before the guest runs.
//! let mut hint = zerohint::Hint::zeroed_from_ranges(&[(0, 0x9f000), (0x10_0000, 0x3ff0_0000)], 21)?;
//! hint.subtract(0x100_0000, 0x52_3456); // the kernel image, rounded outward to 4 KiB
//! let bytes = hint.encode()?; // a setup_data / fw_cfg payload of exactly this length
//!
//! // Consumer: validate, then check against its own RAM map.
//! let view = zerohint::decode_exact(&bytes)?;
//! zerohint::check_in_ram(&view, &[(0, 0x9f000), (0x10_0000, 0x3ff0_0000)])?;
//! assert!(view.covers(0x200_0000, 0x1000));
//! assert!(!view.covers(0x150_0000, 0x1000)); // inside the kernel image
//! # Ok(())
//! # }
//! ```
//!
//! The same bytes also travel as text, for the channels every VMM already
//! has: the kernel parameter `prezero.hint=<text>` and an SMBIOS OEM string
//! of the same form (docs/hint-abi.md, "Text form"). The text is canonical
//! base64url, so one hint has exactly one text; [`find_in_cmdline`] (which
//! splits the line as the kernel does) or [`find_in_oem_strings`] finds it,
//! [`decode_text`] turns it back into bytes for [`decode_exact`], and a
//! producer fits it into the kernel's limits with
//! [`Hint::encode_text_fitting`] or [`cmdline_with_hint`], which drop the
//! smallest ranges first and never emit an empty hint.
//!
//! ```
//! let hint = zerohint::Hint::zeroed_from_ranges(&[(0x10_0000, 0x3ff0_0000)], 21).unwrap();
//! let (cmdline, dropped) = zerohint::cmdline_with_hint("console=ttyS0 -- init-arg", &hint).unwrap();
//! assert_eq!(dropped, 0);
//! assert!(cmdline.starts_with("console=ttyS0 prezero.hint=")); // before `--`
//!
//! let text = zerohint::find_in_cmdline(&cmdline).unwrap().expect("one hint");
//! let mut buf = [0u8; zerohint::TEXT_MAX_BYTES];
//! let n = zerohint::decode_text(text, &mut buf).unwrap();
//! assert_eq!(zerohint::decode_exact(&buf[..n]).unwrap().entries().count(), 1);
//! ```
//!
//! `no_std`; decoding never allocates (the bare-metal probe guest uses it
//! with `default-features = false`). Feature `alloc` (default) adds the owned
//! [`Hint`] builder and the text encoder, `std` adds `std::error::Error`.
#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod crc;
mod error;
#[cfg(feature = "alloc")]
mod hint;
mod text;

pub use crc::crc32;
pub use error::Error;
#[cfg(feature = "alloc")]
pub use hint::Hint;
#[cfg(feature = "alloc")]
pub use text::{
    cmdline_text_budget, cmdline_with_hint, cmdline_with_text, encode_text, CmdlineError,
};
pub use text::{
    decode_text, find_in_cmdline, find_in_oem_strings, text_len, TextError, CMDLINE_MAX,
    TEXT_MAX_BYTES, TEXT_MAX_CHARS, TEXT_MAX_ENTRIES, TEXT_PARAM, TEXT_PREFIX,
};

/// Header magic, ASCII `ZSHINT01`.
pub const MAGIC: [u8; 8] = *b"ZSHINT01";
/// The only ABI version.
pub const VERSION: u16 = 1;
/// Header size in bytes.
pub const HEADER_SIZE: usize = 32;
/// Entry size in bytes.
pub const ENTRY_SIZE: usize = 24;
/// Most entries a hint may hold.
pub const MAX_ENTRIES: usize = 512;
/// Granule of every range: starts and lengths are multiples of this.
pub const PAGE_SIZE: u64 = 4096;
/// Linux boot protocol `setup_data` type (`SETUP_ZEROSTART_HINT`).
pub const SETUP_TYPE: u32 = 0x5a48_0001;
/// QEMU fw_cfg file name.
pub const FW_CFG_NAME: &str = "opt/org.zerostart/prezeroed";
/// EFI configuration table GUID `225103f7-a0ec-4bf9-842b-060463cf664e`, in
/// `EFI_GUID` memory order (first three fields little-endian).
pub const EFI_TABLE_GUID: [u8; 16] = [
    0xf7, 0x03, 0x51, 0x22, 0xec, 0xa0, 0xf9, 0x4b, 0x84, 0x2b, 0x06, 0x04, 0x63, 0xcf, 0x66, 0x4e,
];
/// Header flag: the hint is a scrub request (fw_cfg only), its ranges are
/// *not* zero.
pub const HDR_FLAG_SCRUB_REQUEST: u32 = 1;
/// Entry flag: the range is zero. Required in a zero hint, forbidden in a
/// scrub request.
pub const ENTRY_FLAG_ZEROED: u32 = 1;
/// The page shifts a range may declare (4 KiB, 2 MiB, 1 GiB backing).
pub const PAGE_SHIFTS: [u8; 3] = [12, 21, 30];

// Header field offsets.
const OFF_VERSION: usize = 0x08;
const OFF_HEADER_SIZE: usize = 0x0a;
const OFF_ENTRY_SIZE: usize = 0x0c;
const OFF_RESERVED0: usize = 0x0e;
const OFF_COUNT: usize = 0x10;
const OFF_FLAGS: usize = 0x14;
const OFF_CHECKSUM: usize = 0x18;
const OFF_RESERVED1: usize = 0x1c;

/// One guest-physical range of a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// First byte, a multiple of 4096.
    pub start: u64,
    /// Length in bytes, a non-zero multiple of 4096.
    pub length: u64,
    /// [`ENTRY_FLAG_ZEROED`] in a zero hint, 0 in a scrub request.
    pub flags: u32,
    /// log2 of the host backing page size: 12, 21 or 30. Informational only.
    pub page_shift: u8,
}

impl Entry {
    /// A zero-hint entry (flags [`ENTRY_FLAG_ZEROED`]).
    pub const fn zeroed(start: u64, length: u64, page_shift: u8) -> Entry {
        Entry {
            start,
            length,
            flags: ENTRY_FLAG_ZEROED,
            page_shift,
        }
    }

    /// Exclusive end, saturating at `u64::MAX` (a valid entry never
    /// saturates: an end of 2^64 is rejected as [`Error::Overflow`]).
    pub const fn end(&self) -> u64 {
        self.start.saturating_add(self.length)
    }

    /// The entry's marker page (docs/hint-abi.md "Lifetime"): its last
    /// 4 KiB page, into which the first boot that finds the hint writes
    /// [`consumed_marker`], so that no later boot in the same VM honours the
    /// hint again. Hinted memory like the rest of the range: a producer
    /// promises it zero and owes nothing more.
    pub const fn marker_page(&self) -> u64 {
        self.end() - PAGE_SIZE
    }

    /// Whether `[start, start+len)` lies wholly inside this entry.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        match start.checked_add(len) {
            Some(end) => start >= self.start && end <= self.end(),
            None => false,
        }
    }
}

/// First bytes of a consumed-marker (docs/hint-abi.md "Lifetime").
pub const MARKER_MAGIC: [u8; 8] = *b"ZSUSED01";
/// Size of a consumed-marker; the rest of its page stays zero.
pub const MARKER_SIZE: usize = 16;

/// The consumed-marker a boot writes into each marker page of a hint whose
/// header `checksum` is `checksum`: [`MARKER_MAGIC`], the checksum
/// (little-endian), four zero bytes.
pub fn consumed_marker(checksum: u32) -> [u8; MARKER_SIZE] {
    let mut m = [0u8; MARKER_SIZE];
    m[..8].copy_from_slice(&MARKER_MAGIC);
    m[8..12].copy_from_slice(&checksum.to_le_bytes());
    m
}

/// What a marker page holds, as a consumer reads it before trusting a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerState {
    /// All zero: the hint's promise still holds here.
    Zero,
    /// A consumed-marker and zeros: an earlier boot in this VM took the
    /// hint, which is `Stale` now.
    Consumed,
    /// Anything else: written since the hint was made, also `Stale`.
    Dirty,
}

/// Classifies the contents of a marker page (the kernel's
/// `zshint_marker_state()`).
pub fn marker_state(page: &[u8]) -> MarkerState {
    if page.iter().all(|&b| b == 0) {
        MarkerState::Zero
    } else if page.len() >= MARKER_SIZE
        && page[..8] == MARKER_MAGIC
        && page[MARKER_SIZE..].iter().all(|&b| b == 0)
    {
        MarkerState::Consumed
    } else {
        MarkerState::Dirty
    }
}

/// The exact encoded size of a hint with `n_entries` entries.
pub const fn encoded_size(n_entries: usize) -> usize {
    HEADER_SIZE + ENTRY_SIZE * n_entries
}

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn le32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Parses one 24-byte entry; the bool says whether its reserved bytes are
/// non-zero (they are not part of [`Entry`]).
fn parse_entry(b: &[u8]) -> (Entry, bool) {
    (
        Entry {
            start: le64(b, 0),
            length: le64(b, 8),
            flags: le32(b, 16),
            page_shift: b[20],
        },
        b[21..24].iter().any(|&x| x != 0),
    )
}

/// Step 9 of the spec for entry `index`, in the spec's order.
fn check_entry(
    e: &Entry,
    reserved_set: bool,
    scrub: bool,
    prev: Option<&Entry>,
    index: usize,
) -> Result<(), Error> {
    let zeroed = e.flags & ENTRY_FLAG_ZEROED != 0;
    if reserved_set || e.flags & !ENTRY_FLAG_ZEROED != 0 || zeroed == scrub {
        return Err(Error::BadEntryFlags { index });
    }
    if !PAGE_SHIFTS.contains(&e.page_shift) {
        return Err(Error::BadPageShift { index });
    }
    if !e.start.is_multiple_of(PAGE_SIZE) || !e.length.is_multiple_of(PAGE_SIZE) {
        return Err(Error::Misaligned { index });
    }
    if e.length == 0 {
        return Err(Error::EmptyRange { index });
    }
    if e.start.checked_add(e.length).is_none() {
        return Err(Error::Overflow { index });
    }
    if let Some(p) = prev {
        if e.start < p.start {
            return Err(Error::Unsorted { index });
        }
        if e.start < p.end() {
            return Err(Error::Overlapping { index });
        }
    }
    Ok(())
}

/// A validated hint, borrowed from the bytes it was decoded from.
///
/// Holding one proves steps 1–9 of the spec passed; step 10 (RAM map) is
/// [`check_in_ram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintView<'a> {
    /// Exactly `encoded_size(len)` bytes.
    bytes: &'a [u8],
}

impl<'a> HintView<'a> {
    /// Header flags (0 or [`HDR_FLAG_SCRUB_REQUEST`]).
    pub fn flags(&self) -> u32 {
        le32(self.bytes, OFF_FLAGS)
    }

    /// A scrub request (ranges to be zeroed by firmware, *not* zero).
    pub fn is_scrub_request(&self) -> bool {
        self.flags() & HDR_FLAG_SCRUB_REQUEST != 0
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        (self.bytes.len() - HEADER_SIZE) / ENTRY_SIZE
    }

    /// No entries: nothing is known zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`.
    ///
    /// # Panics
    /// If `i >= self.len()`, like slice indexing; see [`HintView::get`].
    pub fn entry(&self, i: usize) -> Entry {
        match self.get(i) {
            Some(e) => e,
            None => panic!("hint entry index {i} out of range (len {})", self.len()),
        }
    }

    /// Entry `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Entry> {
        if i >= self.len() {
            return None;
        }
        let off = HEADER_SIZE + i * ENTRY_SIZE;
        Some(parse_entry(&self.bytes[off..off + ENTRY_SIZE]).0)
    }

    /// The entries in order (sorted, non-overlapping).
    pub fn entries(&self) -> Entries<'a> {
        Entries {
            chunks: self.bytes[HEADER_SIZE..].chunks_exact(ENTRY_SIZE),
        }
    }

    /// The hint's exact encoded size, `32 + 24 * len`.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The hint's exact bytes (trailing bytes given to [`decode`] excluded).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Sum of all range lengths (cannot overflow: ranges are disjoint).
    pub fn total_bytes(&self) -> u64 {
        self.entries().map(|e| e.length).sum()
    }

    /// Whether `[start, start+len)` lies wholly inside one range of a *zero
    /// hint*. Always false for a scrub request, whose ranges are not zero.
    /// Ranges are coalesced by the producer, but adjacent entries are legal,
    /// so a span crossing two adjacent entries is also accepted. An empty
    /// span is covered (by a zero hint).
    pub fn covers(&self, start: u64, len: u64) -> bool {
        if self.is_scrub_request() {
            return false;
        }
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        if len == 0 {
            return true;
        }
        let mut cur = start;
        for e in self.entries() {
            if e.end() <= cur {
                continue;
            }
            if e.start > cur {
                return false;
            }
            cur = e.end();
            if cur >= end {
                return true;
            }
        }
        false
    }
}

/// Iterator over a [`HintView`]'s entries.
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    chunks: core::slice::ChunksExact<'a, u8>,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        self.chunks.next().map(|c| parse_entry(c).0)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl DoubleEndedIterator for Entries<'_> {
    fn next_back(&mut self) -> Option<Entry> {
        self.chunks.next_back().map(|c| parse_entry(c).0)
    }
}

impl ExactSizeIterator for Entries<'_> {}
impl core::iter::FusedIterator for Entries<'_> {}

/// Validates a hint at the start of `bytes` (spec steps 1–9); bytes past the
/// hint's size are ignored (for a memory scan or a transport without a
/// length, like the EFI table).
pub fn decode(bytes: &[u8]) -> Result<HintView<'_>, Error> {
    validate(bytes, false)
}

/// Validates a hint that must be exactly `bytes` long (setup_data, fw_cfg):
/// extra bytes are [`Error::BadLength`].
pub fn decode_exact(bytes: &[u8]) -> Result<HintView<'_>, Error> {
    validate(bytes, true)
}

fn validate(bytes: &[u8], exact: bool) -> Result<HintView<'_>, Error> {
    // 1.
    if bytes.len() < HEADER_SIZE {
        return Err(Error::Truncated);
    }
    // 2.
    if bytes[..8] != MAGIC {
        return Err(Error::BadMagic);
    }
    // 3.
    if le16(bytes, OFF_VERSION) != VERSION {
        return Err(Error::BadVersion);
    }
    // 4.
    if usize::from(le16(bytes, OFF_HEADER_SIZE)) != HEADER_SIZE
        || usize::from(le16(bytes, OFF_ENTRY_SIZE)) != ENTRY_SIZE
    {
        return Err(Error::BadHeaderSize);
    }
    // 5. (u32 → usize is lossless on every target we build for; a count that
    // does not fit is too many anyway.)
    let count = usize::try_from(le32(bytes, OFF_COUNT)).unwrap_or(usize::MAX);
    if count > MAX_ENTRIES {
        return Err(Error::TooManyEntries);
    }
    // 6.
    let flags = le32(bytes, OFF_FLAGS);
    if le16(bytes, OFF_RESERVED0) != 0
        || le32(bytes, OFF_RESERVED1) != 0
        || flags & !HDR_FLAG_SCRUB_REQUEST != 0
    {
        return Err(Error::ReservedNonZero);
    }
    // 7.
    let size = encoded_size(count);
    if bytes.len() < size {
        return Err(Error::Truncated);
    }
    if exact && bytes.len() > size {
        return Err(Error::BadLength);
    }
    let bytes = &bytes[..size];
    // 8.
    let mut state = crc::update(!0, &bytes[..OFF_CHECKSUM]);
    state = crc::update(state, &[0; 4]);
    state = crc::update(state, &bytes[OFF_CHECKSUM + 4..]);
    if !state != le32(bytes, OFF_CHECKSUM) {
        return Err(Error::BadChecksum);
    }
    // 9.
    let scrub = flags & HDR_FLAG_SCRUB_REQUEST != 0;
    let mut prev: Option<Entry> = None;
    for (index, chunk) in bytes[HEADER_SIZE..].chunks_exact(ENTRY_SIZE).enumerate() {
        let (e, reserved_set) = parse_entry(chunk);
        check_entry(&e, reserved_set, scrub, prev.as_ref(), index)?;
        prev = Some(e);
    }
    Ok(HintView { bytes })
}

/// Spec step 10: every range must lie wholly inside usable RAM. `ram` lists
/// usable `(start, length)` ranges in any order; they may be adjacent or
/// overlap (a range spanning several adjacent RAM ranges is fine).
pub fn check_in_ram(view: &HintView<'_>, ram: &[(u64, u64)]) -> Result<(), Error> {
    for (index, e) in view.entries().enumerate() {
        if !covered_by(e.start, e.end(), ram) {
            return Err(Error::OutOfRam { index });
        }
    }
    Ok(())
}

/// Whether `[start, end)` is inside the union of `ram`. Each step advances
/// `cur` to the end of a RAM range that contains it, so it finishes in at
/// most `ram.len()` steps. Ends are computed in u128 so a RAM range that
/// reaches 2^64 is neither wrapped nor truncated.
fn covered_by(start: u64, end: u64, ram: &[(u64, u64)]) -> bool {
    let end = u128::from(end);
    let mut cur = u128::from(start);
    while cur < end {
        let next = ram
            .iter()
            .map(|&(s, l)| (u128::from(s), u128::from(s) + u128::from(l)))
            .filter(|&(s, e)| s <= cur && cur < e)
            .map(|(_, e)| e)
            .max();
        match next {
            Some(e) => cur = e,
            None => return false,
        }
    }
    true
}

/// Encodes a hint into `out` and returns its size. Validates first, with the
/// same rules and order as [`decode`] (header flags, entry count, then each
/// entry), and writes nothing on error, so it never emits a hint a consumer
/// would reject. `out` smaller than [`encoded_size`] is [`Error::Truncated`].
pub fn encode_into(flags: u32, entries: &[Entry], out: &mut [u8]) -> Result<usize, Error> {
    if entries.len() > MAX_ENTRIES {
        return Err(Error::TooManyEntries);
    }
    if flags & !HDR_FLAG_SCRUB_REQUEST != 0 {
        return Err(Error::ReservedNonZero);
    }
    let size = encoded_size(entries.len());
    if out.len() < size {
        return Err(Error::Truncated);
    }
    let scrub = flags & HDR_FLAG_SCRUB_REQUEST != 0;
    let mut prev: Option<&Entry> = None;
    for (index, e) in entries.iter().enumerate() {
        check_entry(e, false, scrub, prev, index)?;
        prev = Some(e);
    }
    let out = &mut out[..size];
    out[..8].copy_from_slice(&MAGIC);
    out[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&VERSION.to_le_bytes());
    out[OFF_HEADER_SIZE..OFF_HEADER_SIZE + 2].copy_from_slice(&(HEADER_SIZE as u16).to_le_bytes());
    out[OFF_ENTRY_SIZE..OFF_ENTRY_SIZE + 2].copy_from_slice(&(ENTRY_SIZE as u16).to_le_bytes());
    out[OFF_RESERVED0..OFF_RESERVED0 + 2].fill(0);
    // At most 512: fits.
    out[OFF_COUNT..OFF_COUNT + 4].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    out[OFF_FLAGS..OFF_FLAGS + 4].copy_from_slice(&flags.to_le_bytes());
    out[OFF_CHECKSUM..OFF_CHECKSUM + 4].fill(0);
    out[OFF_RESERVED1..OFF_RESERVED1 + 4].fill(0);
    for (e, chunk) in entries
        .iter()
        .zip(out[HEADER_SIZE..].chunks_exact_mut(ENTRY_SIZE))
    {
        chunk[0..8].copy_from_slice(&e.start.to_le_bytes());
        chunk[8..16].copy_from_slice(&e.length.to_le_bytes());
        chunk[16..20].copy_from_slice(&e.flags.to_le_bytes());
        chunk[20] = e.page_shift;
        chunk[21..24].fill(0);
    }
    let crc = crc32(out);
    out[OFF_CHECKSUM..OFF_CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(size)
}
