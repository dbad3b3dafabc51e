//! The golden-vector generator, shared by `examples/gen_vectors.rs` (which
//! writes `tests/vectors/`) and `tests/vectors.rs` (which checks the
//! checked-in files are byte-for-byte what this produces).
//!
//! Bytes are laid out here field by field, independently of the crate's
//! encoder, so a layout bug in one shows up as a mismatch with the other.
//! Every vector states its expected outcome by hand; `generate` refuses to
//! produce a vector the crate's decoder disagrees with.

#![allow(dead_code)]

pub mod text;

use std::fmt::Write as _;

use zerohint::{check_in_ram, crc32, decode, decode_exact, Error};

/// One raw entry, reserved bytes included so they can be corrupted.
#[derive(Clone, Copy)]
pub struct RawEntry {
    pub start: u64,
    pub length: u64,
    pub flags: u32,
    pub page_shift: u8,
    pub reserved: [u8; 3],
}

fn z(start: u64, length: u64, page_shift: u8) -> RawEntry {
    RawEntry {
        start,
        length,
        flags: 1,
        page_shift,
        reserved: [0; 3],
    }
}

fn scrub(start: u64, length: u64, page_shift: u8) -> RawEntry {
    RawEntry {
        flags: 0,
        ..z(start, length, page_shift)
    }
}

/// How the checksum field is filled.
#[derive(Clone, Copy)]
enum Crc {
    /// Correct CRC over the written header and entries.
    Good,
    /// Correct CRC xor this (a wrong checksum).
    Xor(u32),
    /// CRC computed without zeroing the field first: over the bytes with
    /// the field holding this value, then stored.
    OverField(u32),
}

/// A hint laid out field by field; every field can be made wrong.
#[derive(Clone)]
struct Raw {
    magic: [u8; 8],
    version: u16,
    header_size: u16,
    entry_size: u16,
    reserved0: u16,
    count: Option<u32>,
    flags: u32,
    reserved1: u32,
    crc: Crc,
    entries: Vec<RawEntry>,
    /// Keep only this many bytes of the result.
    truncate: Option<usize>,
    /// Appended after the hint (and after truncation).
    trailing: Vec<u8>,
    /// XOR the byte at this offset with this mask after the CRC is stored.
    flip_after_crc: Option<(usize, u8)>,
}

fn raw(entries: Vec<RawEntry>) -> Raw {
    Raw {
        magic: *b"ZSHINT01",
        version: 1,
        header_size: 32,
        entry_size: 24,
        reserved0: 0,
        count: None,
        flags: 0,
        reserved1: 0,
        crc: Crc::Good,
        entries,
        truncate: None,
        trailing: Vec::new(),
        flip_after_crc: None,
    }
}

impl Raw {
    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.magic);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.header_size.to_le_bytes());
        b.extend_from_slice(&self.entry_size.to_le_bytes());
        b.extend_from_slice(&self.reserved0.to_le_bytes());
        let count = self.count.unwrap_or(self.entries.len() as u32);
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&self.reserved1.to_le_bytes());
        for e in &self.entries {
            b.extend_from_slice(&e.start.to_le_bytes());
            b.extend_from_slice(&e.length.to_le_bytes());
            b.extend_from_slice(&e.flags.to_le_bytes());
            b.push(e.page_shift);
            b.extend_from_slice(&e.reserved);
        }
        let crc = match self.crc {
            Crc::Good => crc32(&b),
            Crc::Xor(x) => crc32(&b) ^ x,
            Crc::OverField(v) => {
                b[24..28].copy_from_slice(&v.to_le_bytes());
                crc32(&b)
            }
        };
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        if let Some((off, mask)) = self.flip_after_crc {
            b[off] ^= mask;
        }
        if let Some(n) = self.truncate {
            b.truncate(n);
        }
        b.extend_from_slice(&self.trailing);
        b
    }
}

/// The outcome a consumer must report.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Expect {
    /// Valid, with these header flags and entries.
    Ok,
    /// This error (ABI name) at this entry index (entry errors only).
    Err(&'static str, Option<usize>),
}

/// One golden vector: a file and how to check it.
pub struct Vector {
    /// Unique identifier (C symbol suffix).
    pub name: String,
    /// File name under tests/vectors/.
    pub file: String,
    pub bytes: Vec<u8>,
    /// Decode as a transport with a length (`decode_exact`) or not.
    pub exact: bool,
    pub ram: Option<Vec<(u64, u64)>>,
    pub expect: Expect,
    /// For `Ok`: header flags and the entries a consumer must see.
    pub flags: u32,
    pub entries: Vec<RawEntry>,
    pub description: String,
}

const K4: u64 = 0x1000;
const M1: u64 = 0x10_0000;
const M2: u64 = 0x20_0000;
const G1: u64 = 0x4000_0000;

struct Builder(Vec<Vector>);

impl Builder {
    fn add(&mut self, name: &str, r: Raw, exact: bool, expect: Expect, desc: &str) {
        self.add_ram(name, r, exact, None, expect, desc);
    }

    fn add_ram(
        &mut self,
        name: &str,
        r: Raw,
        exact: bool,
        ram: Option<Vec<(u64, u64)>>,
        expect: Expect,
        desc: &str,
    ) {
        self.push(name, &format!("{name}.bin"), r, exact, ram, expect, desc);
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        name: &str,
        file: &str,
        r: Raw,
        exact: bool,
        ram: Option<Vec<(u64, u64)>>,
        expect: Expect,
        desc: &str,
    ) {
        let entries = if expect == Expect::Ok {
            r.entries.clone()
        } else {
            Vec::new()
        };
        self.0.push(Vector {
            name: name.to_string(),
            file: file.to_string(),
            bytes: r.bytes(),
            exact,
            ram,
            flags: r.flags,
            expect,
            entries,
            description: desc.to_string(),
        });
    }
}

fn err(name: &'static str) -> Expect {
    Expect::Err(name, None)
}

fn err_at(name: &'static str, index: usize) -> Expect {
    Expect::Err(name, Some(index))
}

/// Every vector, in file order.
pub fn vectors() -> Vec<Vector> {
    let mut v = Builder(Vec::new());
    let one = || raw(vec![z(M1, M2, 12)]);
    let two = |a: RawEntry, b: RawEntry| raw(vec![a, b]);

    // ---- valid ----
    v.add(
        "ok_empty",
        raw(vec![]),
        true,
        Expect::Ok,
        "Empty zero hint: valid, nothing is known zero.",
    );
    v.add(
        "ok_one",
        one(),
        true,
        Expect::Ok,
        "One 2 MiB range at 1 MiB, 4 KiB backing.",
    );
    v.add(
        "ok_many",
        raw(vec![
            z(0, 0x9f000, 12),
            z(M1, 0x7f0_0000, 12),
            z(0x800_0000, 0x800_0000, 21),
            z(0x1000_0000, G1, 21),
            z(G1 + 0x1000_0000, K4, 12),
            z(2 * G1, G1, 30),
            z(0x1_0000_0000, 0x4_0000_0000, 30),
            z(0x5_0000_0000 + K4, 0xff_f000, 12),
        ]),
        true,
        Expect::Ok,
        "Eight sorted ranges with gaps and mixed page shifts, starting at address 0.",
    );
    v.add(
        "ok_adjacent",
        two(z(M1, M1, 12), z(M2, M2, 21)),
        true,
        Expect::Ok,
        "Two adjacent ranges (end of one == start of next): allowed.",
    );
    v.add(
        "ok_max_entries",
        raw((0..512u64).map(|i| z(i * 2 * M2, M2, 21)).collect()),
        true,
        Expect::Ok,
        "Exactly 512 entries, the maximum.",
    );
    v.add(
        "ok_1gib_pages",
        raw(vec![z(G1, 3 * G1, 30), z(0x1_0000_0000 + G1, 4 * G1, 30)]),
        true,
        Expect::Ok,
        "1 GiB-backed ranges (page_shift 30).",
    );
    v.add(
        "ok_high_addr",
        raw(vec![
            z((1 << 52) - 2 * M2, M2, 21),
            z((1 << 52) - M2, M2, 21),
        ]),
        true,
        Expect::Ok,
        "Ranges just below 2^52 (the largest x86 physical address width).",
    );
    v.add(
        "ok_top_of_space",
        raw(vec![z(0xffff_ffff_ffff_e000, K4, 12)]),
        true,
        Expect::Ok,
        "A range ending at 2^64 - 4096, the highest end that does not overflow.",
    );
    v.add(
        "ok_scrub_request",
        Raw {
            flags: 1,
            ..raw(vec![scrub(M1, M2, 12), scrub(G1, G1, 30)])
        },
        true,
        Expect::Ok,
        "Scrub request (header flag 1): entries have ZEROED clear. Valid only on fw_cfg; a kernel must refuse it (its own check, not a decode error).",
    );
    v.add(
        "ok_scrub_empty",
        Raw {
            flags: 1,
            ..raw(vec![])
        },
        true,
        Expect::Ok,
        "Empty scrub request.",
    );
    let trailing = Raw {
        trailing: b"\0\0\0\0garbage!\xff\xff\xff\xff".to_vec(),
        ..one()
    };
    v.push(
        "ok_trailing_scan",
        "trailing_garbage.bin",
        trailing.clone(),
        false,
        None,
        Expect::Ok,
        "A valid hint followed by 16 garbage bytes, decoded without a transport length (memory scan / EFI table): trailing bytes are ignored.",
    );
    v.push(
        "bad_length_trailing",
        "trailing_garbage.bin",
        trailing,
        true,
        None,
        err("BadLength"),
        "The same bytes given as a transport with a length (setup_data len, fw_cfg size): longer than the hint is BadLength.",
    );
    v.add(
        "bad_length_one_byte",
        Raw {
            trailing: vec![0],
            ..raw(vec![])
        },
        true,
        err("BadLength"),
        "Empty hint plus one zero byte, with a transport length.",
    );
    v.add_ram(
        "ok_in_ram",
        raw(vec![z(M1, 0x7f0_0000, 12), z(0x1_0000_0000, G1, 30)]),
        true,
        Some(vec![
            (0x1_0000_0000, 2 * G1),
            (0, 0x9f000),
            (M1, 0x3f0_0000),
            (0x400_0000, 0x400_0000),
        ]),
        Expect::Ok,
        "Ranges inside RAM given out of order; the first range spans two adjacent RAM ranges.",
    );

    // ---- header errors, in spec order ----
    v.add(
        "trunc_zero_bytes",
        Raw {
            truncate: Some(0),
            ..one()
        },
        true,
        err("Truncated"),
        "Zero bytes.",
    );
    v.add(
        "trunc_header",
        Raw {
            truncate: Some(31),
            ..one()
        },
        true,
        err("Truncated"),
        "31 bytes: one short of a header.",
    );
    v.add(
        "trunc_entries",
        Raw { truncate: Some(32 + 24 + 23), ..two(z(M1, M1, 12), z(M2, M1, 12)) },
        false,
        err("Truncated"),
        "entry_count 2 but the second entry is one byte short (decoded without a transport length).",
    );
    v.add(
        "trunc_entries_header_only",
        Raw {
            truncate: Some(32),
            ..one()
        },
        true,
        err("Truncated"),
        "entry_count 1 but only the header is present.",
    );
    v.add(
        "bad_magic",
        Raw {
            magic: *b"ZSHINT02",
            ..one()
        },
        true,
        err("BadMagic"),
        "Magic ZSHINT02.",
    );
    v.add(
        "bad_magic_case",
        Raw {
            magic: *b"zshint01",
            ..one()
        },
        true,
        err("BadMagic"),
        "Lower-case magic.",
    );
    v.add(
        "bad_magic_first",
        Raw {
            magic: *b"ZSHINT0\0",
            version: 9,
            crc: Crc::Xor(1),
            truncate: Some(32),
            ..one()
        },
        true,
        err("BadMagic"),
        "Bad magic, version, checksum and truncated entries at once: magic is checked first.",
    );
    v.add(
        "bad_version_0",
        Raw {
            version: 0,
            ..one()
        },
        true,
        err("BadVersion"),
        "version 0.",
    );
    v.add(
        "bad_version_2",
        Raw {
            version: 2,
            ..one()
        },
        true,
        err("BadVersion"),
        "version 2 (a future version is rejected, not guessed at).",
    );
    v.add(
        "bad_version_swapped",
        Raw {
            version: 0x100,
            ..one()
        },
        true,
        err("BadVersion"),
        "version 1 stored big-endian (0x0100).",
    );
    v.add(
        "bad_header_size",
        Raw {
            header_size: 40,
            ..one()
        },
        true,
        err("BadHeaderSize"),
        "header_size 40.",
    );
    v.add(
        "bad_entry_size",
        Raw {
            entry_size: 32,
            ..one()
        },
        true,
        err("BadHeaderSize"),
        "entry_size 32.",
    );
    v.add(
        "too_many_entries",
        Raw { count: Some(513), ..one() },
        true,
        err("TooManyEntries"),
        "entry_count 513 (with only one entry's bytes): the count limit is checked before the length.",
    );
    v.add(
        "too_many_entries_huge",
        Raw { count: Some(u32::MAX), reserved1: 1, ..raw(vec![]) },
        true,
        err("TooManyEntries"),
        "entry_count 0xffffffff and reserved1 set: the count is checked before reserved fields, and never multiplied unchecked.",
    );
    v.add(
        "reserved0",
        Raw {
            reserved0: 1,
            ..one()
        },
        true,
        err("ReservedNonZero"),
        "Header reserved0 = 1.",
    );
    v.add(
        "reserved1",
        Raw {
            reserved1: 0x8000_0000,
            ..one()
        },
        true,
        err("ReservedNonZero"),
        "Header reserved1 = 0x80000000.",
    );
    v.add(
        "reserved_hdr_flag",
        Raw { flags: 2, ..one() },
        true,
        err("ReservedNonZero"),
        "Header flags bit 1 (reserved).",
    );
    v.add(
        "reserved_before_length",
        Raw { flags: 0x8000_0001, truncate: Some(40), ..raw(vec![scrub(M1, M1, 12)]) },
        true,
        err("ReservedNonZero"),
        "Header flags bit 31 set on a truncated hint: reserved fields are checked before the length.",
    );
    v.add(
        "bad_checksum",
        Raw {
            crc: Crc::Xor(0x0000_0100),
            ..one()
        },
        true,
        err("BadChecksum"),
        "One bit of the checksum flipped.",
    );
    v.add(
        "bad_checksum_data",
        Raw { flip_after_crc: Some((32 + 9, 0x10)), ..one() },
        true,
        err("BadChecksum"),
        "Entry length changed from 2 MiB to 3 MiB after the checksum was computed (a corrupted, otherwise valid hint).",
    );
    v.add(
        "bad_checksum_field_not_zeroed",
        Raw {
            crc: Crc::OverField(0xdead_beef),
            ..one()
        },
        true,
        err("BadChecksum"),
        "Checksum computed with the checksum field holding 0xdeadbeef instead of 0.",
    );
    v.add(
        "bad_checksum_before_entries",
        Raw {
            crc: Crc::Xor(1),
            ..raw(vec![z(M1 + 1, 0, 7)])
        },
        true,
        err("BadChecksum"),
        "Bad checksum and a broken entry: the checksum is checked before entries.",
    );

    // ---- entry errors ----
    let e = z(M1, M2, 12);
    v.add(
        "entry_reserved_flag",
        two(
            e,
            RawEntry {
                flags: 3,
                ..z(4 * M1, M1, 12)
            },
        ),
        true,
        err_at("BadEntryFlags", 1),
        "Entry 1 has flags bit 1 (reserved) set.",
    );
    v.add(
        "entry_reserved_byte_first",
        raw(vec![RawEntry {
            reserved: [1, 0, 0],
            ..e
        }]),
        true,
        err_at("BadEntryFlags", 0),
        "Entry 0 reserved byte 0x15 set.",
    );
    v.add(
        "entry_reserved_byte_last",
        raw(vec![RawEntry {
            reserved: [0, 0, 0x80],
            ..e
        }]),
        true,
        err_at("BadEntryFlags", 0),
        "Entry 0 reserved byte 0x17 set.",
    );
    v.add(
        "entry_zeroed_missing",
        two(e, scrub(4 * M1, M1, 12)),
        true,
        err_at("BadEntryFlags", 1),
        "Zero hint whose entry 1 lacks ZEROED.",
    );
    v.add(
        "entry_zeroed_in_scrub",
        Raw {
            flags: 1,
            ..two(scrub(M1, M1, 12), z(4 * M1, M1, 12))
        },
        true,
        err_at("BadEntryFlags", 1),
        "Scrub request whose entry 1 has ZEROED set.",
    );
    v.add(
        "entry_flags_first",
        raw(vec![RawEntry {
            flags: 0,
            page_shift: 0,
            start: 1,
            length: 0,
            reserved: [0; 3],
        }]),
        true,
        err_at("BadEntryFlags", 0),
        "Entry with every entry error at once: flags are checked first.",
    );
    v.add(
        "entry_page_shift_0",
        raw(vec![z(M1, M1, 0)]),
        true,
        err_at("BadPageShift", 0),
        "page_shift 0.",
    );
    v.add(
        "entry_page_shift_22",
        two(e, z(4 * M1, M1, 22)),
        true,
        err_at("BadPageShift", 1),
        "Entry 1 page_shift 22.",
    );
    v.add(
        "entry_page_shift_before_align",
        raw(vec![z(M1 + 1, M1, 13)]),
        true,
        err_at("BadPageShift", 0),
        "page_shift 13 and misaligned start: page_shift is checked first.",
    );
    v.add(
        "entry_misaligned_start",
        raw(vec![z(M1 + 0x800, M1, 12)]),
        true,
        err_at("Misaligned", 0),
        "start 0x100800.",
    );
    v.add(
        "entry_misaligned_length",
        two(e, z(4 * M1, M1 + 1, 12)),
        true,
        err_at("Misaligned", 1),
        "Entry 1 length 0x100001.",
    );
    v.add(
        "entry_empty",
        raw(vec![z(M1, 0, 12)]),
        true,
        err_at("EmptyRange", 0),
        "length 0.",
    );
    v.add(
        "entry_empty_duplicate_start",
        two(e, z(M1, 0, 12)),
        true,
        err_at("EmptyRange", 1),
        "Entry 1 is empty at entry 0's start: EmptyRange, checked before ordering.",
    );
    v.add(
        "entry_end_2_64",
        raw(vec![z(0xffff_ffff_ffff_f000, K4, 12)]),
        true,
        err_at("Overflow", 0),
        "start 2^64-4096, length 4096: end is exactly 2^64, which is Overflow.",
    );
    v.add(
        "entry_overflow_wrap",
        two(e, z(0xffff_ffff_0000_0000, 0x1_0000_1000, 12)),
        true,
        err_at("Overflow", 1),
        "Entry 1 end wraps past 2^64 to 0x1000 (would look sorted and tiny if wrapped).",
    );
    v.add(
        "entry_unsorted",
        two(z(4 * M1, M1, 12), e),
        true,
        err_at("Unsorted", 1),
        "Entry 1 starts below entry 0.",
    );
    v.add(
        "entry_overlapping",
        two(e, z(2 * M1, M2, 12)),
        true,
        err_at("Overlapping", 1),
        "Entry 1 starts 1 MiB before entry 0 ends.",
    );
    v.add(
        "entry_overlapping_one_page",
        two(e, z(3 * M1 - K4, K4, 12)),
        true,
        err_at("Overlapping", 1),
        "Entry 1 is entry 0's last page.",
    );
    v.add(
        "entry_duplicate",
        two(e, e),
        true,
        err_at("Overlapping", 1),
        "Entry 1 equals entry 0: same start is not Unsorted, it is Overlapping.",
    );
    v.add(
        "entry_error_after_valid",
        raw(vec![
            e,
            z(4 * M1, M1, 12),
            z(8 * M1, M1, 12),
            z(6 * M1, M1, 12),
        ]),
        true,
        err_at("Unsorted", 3),
        "Entries 0..2 valid, entry 3 unsorted: the index of the first bad entry is reported.",
    );

    // ---- RAM map ----
    v.add_ram(
        "out_of_ram_past_end",
        raw(vec![z(M1, M1, 12), z(0x7fe0_0000, 0x40_0000, 21)]),
        true,
        Some(vec![(0, 0x9f000), (M1, 0x7ff0_0000 - M1)]),
        err_at("OutOfRam", 1),
        "Entry 1 runs 1 MiB past the end of RAM (RAM ends at 0x7ff00000).",
    );
    v.add_ram(
        "out_of_ram_hole",
        raw(vec![z(0x9f000 - K4, M1, 12)]),
        true,
        Some(vec![(0, 0x9f000), (M1, G1)]),
        err_at("OutOfRam", 0),
        "Entry 0 spans the legacy hole 0x9f000..0x100000 between two RAM ranges.",
    );
    v.add_ram(
        "out_of_ram_empty_map",
        one(),
        true,
        Some(vec![]),
        err_at("OutOfRam", 0),
        "No usable RAM at all.",
    );
    v.add_ram(
        "ram_check_after_entries",
        two(e, z(M1, M1, 12)),
        true,
        Some(vec![]),
        err_at("Overlapping", 1),
        "Overlapping entries with an empty RAM map: entry checks come before the RAM check.",
    );

    let vectors = v.0;
    for vec in &vectors {
        check_against_crate(vec);
    }
    vectors
}

/// Panics unless the crate's decoder reports exactly `vec.expect`.
pub fn check_against_crate(vec: &Vector) {
    let got: Result<(u32, Vec<zerohint::Entry>), Error> = (|| {
        let view = if vec.exact {
            decode_exact(&vec.bytes)?
        } else {
            decode(&vec.bytes)?
        };
        if let Some(ram) = &vec.ram {
            check_in_ram(&view, ram)?;
        }
        Ok((view.flags(), view.entries().collect()))
    })();
    match (&vec.expect, got) {
        (Expect::Ok, Ok((flags, entries))) => {
            assert_eq!(flags, vec.flags, "{}: flags", vec.name);
            let want: Vec<zerohint::Entry> = vec
                .entries
                .iter()
                .map(|e| zerohint::Entry {
                    start: e.start,
                    length: e.length,
                    flags: e.flags,
                    page_shift: e.page_shift,
                })
                .collect();
            assert_eq!(entries, want, "{}: entries", vec.name);
        }
        (Expect::Err(name, index), Err(e)) => {
            assert_eq!(
                (e.name(), e.index()),
                (*name, *index),
                "{}: wrong error",
                vec.name
            );
        }
        (want, got) => panic!("{}: expected {want:?}, decoder said {got:?}", vec.name),
    }
}

fn expect_name(e: &Expect) -> &'static str {
    match e {
        Expect::Ok => "ok",
        Expect::Err(n, _) => n,
    }
}

/// `BadMagic` → `BAD_MAGIC`.
pub fn c_name(name: &str) -> String {
    let mut s = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(ch.to_ascii_uppercase());
    }
    s
}

fn json(vectors: &[Vector]) -> String {
    let mut s = String::from("[\n");
    for (i, v) in vectors.iter().enumerate() {
        let _ = write!(
            s,
            "  {{\"name\": \"{}\", \"file\": \"{}\", \"expect\": \"{}\", \"exact\": {}",
            v.name,
            v.file,
            expect_name(&v.expect),
            v.exact
        );
        if let Expect::Err(_, Some(index)) = v.expect {
            let _ = write!(s, ", \"index\": {index}");
        }
        if let Some(ram) = &v.ram {
            let r: Vec<String> = ram.iter().map(|(a, b)| format!("[{a}, {b}]")).collect();
            let _ = write!(s, ", \"ram\": [{}]", r.join(", "));
        }
        if v.expect == Expect::Ok {
            let e: Vec<String> = v
                .entries
                .iter()
                .map(|e| format!("[{}, {}, {}, {}]", e.start, e.length, e.flags, e.page_shift))
                .collect();
            let _ = write!(
                s,
                ", \"flags\": {}, \"entries\": [{}]",
                v.flags,
                e.join(", ")
            );
        }
        let _ = write!(
            s,
            ", \"description\": \"{}\"}}",
            v.description.replace('"', "\\\"")
        );
        s.push_str(if i + 1 < vectors.len() { ",\n" } else { "\n" });
    }
    s.push_str("]\n");
    s
}

fn errors_h() -> String {
    let mut s = String::from(
        "/* SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause */\n\
         /* Generated by `cargo run -p zerohint --example gen_vectors -- tests/vectors`; do not edit. */\n\
         /* zerostart hint ABI v1 validation results, in the order of docs/hint-abi.md \"Validation\". */\n\
         #ifndef ZSHINT_ERRORS_H\n#define ZSHINT_ERRORS_H\n\n#define ZSHINT_E_OK 0\n",
    );
    for (i, n) in Error::ALL_NAMES.iter().enumerate() {
        let _ = writeln!(s, "#define ZSHINT_E_{} {}", c_name(n), i + 1);
    }
    let _ = writeln!(s, "#define ZSHINT_E_COUNT {}\n", Error::ALL_NAMES.len() + 1);
    s.push_str("/* X-macro: ZSHINT_ERRORS(X) expands X(CODE_SUFFIX, \"Name\") for every code, OK first. */\n");
    s.push_str("#define ZSHINT_ERRORS(X) \\\n\tX(OK, \"Ok\") \\\n");
    for (i, n) in Error::ALL_NAMES.iter().enumerate() {
        let sep = if i + 1 < Error::ALL_NAMES.len() {
            " \\"
        } else {
            ""
        };
        let _ = writeln!(s, "\tX({}, \"{}\"){}", c_name(n), n, sep);
    }
    s.push_str("\n#endif /* ZSHINT_ERRORS_H */\n");
    s
}

fn vectors_h(vectors: &[Vector]) -> String {
    let mut s = String::from(
        "/* SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause */\n\
         /* Generated by `cargo run -p zerohint --example gen_vectors -- tests/vectors`; do not edit. */\n\
         /* zerostart hint ABI v1 golden vectors: the same bytes as the .bin files in tests/vectors. See README.md. */\n\
         #ifndef ZSHINT_VECTORS_H\n#define ZSHINT_VECTORS_H\n\n#include \"zshint_errors.h\"\n\n",
    );
    for v in vectors.iter().filter(|v| !v.bytes.is_empty()) {
        if vectors
            .iter()
            .find(|w| w.file == v.file)
            .is_some_and(|w| w.name != v.name)
        {
            continue; // bytes already emitted under the first vector's name
        }
        let _ = writeln!(
            s,
            "static const unsigned char zshint_vec_{}[{}] = {{",
            sym(v),
            v.bytes.len()
        );
        for chunk in v.bytes.chunks(12) {
            let line: Vec<String> = chunk.iter().map(|b| format!("0x{b:02x}")).collect();
            let _ = writeln!(s, "\t{},", line.join(", "));
        }
        s.push_str("};\n\n");
    }
    for v in vectors {
        if let Some(ram) = v.ram.as_ref().filter(|r| !r.is_empty()) {
            let _ = writeln!(
                s,
                "static const unsigned long long zshint_ram_{}[{}][2] = {{",
                v.name,
                ram.len()
            );
            for (a, b) in ram {
                let _ = writeln!(s, "\t{{ 0x{a:x}ULL, 0x{b:x}ULL }},");
            }
            s.push_str("};\n\n");
        }
    }
    s.push_str(
        "struct zshint_vector {\n\
         \tconst char *name;\n\
         \tconst char *file;\n\
         \t/* NULL when len is 0. */\n\
         \tconst unsigned char *data;\n\
         \tunsigned long len;\n\
         \t/* ZSHINT_E_* */\n\
         \tint expect;\n\
         \t/* Entry index for entry errors, else -1. */\n\
         \tint index;\n\
         \t/* 1: the transport has a length (setup_data, fw_cfg): longer is BadLength. 0: memory scan. */\n\
         \tint exact;\n\
         \t/* 1: check OutOfRam against ram[0..ram_count) (start, length) pairs; ram may be NULL with count 0. */\n\
         \tint has_ram;\n\
         \tconst unsigned long long (*ram)[2];\n\
         \tunsigned int ram_count;\n\
         };\n\n\
         static const struct zshint_vector zshint_vectors[] = {\n",
    );
    for v in vectors {
        let data = if v.bytes.is_empty() {
            "0".to_string()
        } else {
            format!("zshint_vec_{}", sym(v))
        };
        let (code, index) = match &v.expect {
            Expect::Ok => ("OK".to_string(), -1i64),
            Expect::Err(n, i) => (c_name(n), i.map_or(-1, |i| i as i64)),
        };
        let (has_ram, ram, count) = match &v.ram {
            None => (0, "0".to_string(), 0),
            Some(r) if r.is_empty() => (1, "0".to_string(), 0),
            Some(r) => (1, format!("zshint_ram_{}", v.name), r.len()),
        };
        let _ = writeln!(
            s,
            "\t{{ \"{}\", \"{}\", {}, {}, ZSHINT_E_{}, {}, {}, {}, {}, {} }},",
            v.name,
            v.file,
            data,
            v.bytes.len(),
            code,
            index,
            u8::from(v.exact),
            has_ram,
            ram,
            count
        );
    }
    s.push_str(
        "};\n\n#define ZSHINT_VECTOR_COUNT (sizeof(zshint_vectors) / sizeof(zshint_vectors[0]))\n\n\
         #endif /* ZSHINT_VECTORS_H */\n",
    );
    s
}

/// C symbol of the vector's bytes: named after the first vector using the file.
fn sym(v: &Vector) -> String {
    v.file.trim_end_matches(".bin").to_string()
}

fn readme(vectors: &[Vector]) -> String {
    let mut s = String::from(README_HEAD);
    s.push_str("| name | file | exact | expect | description |\n|---|---|---|---|---|\n");
    for v in vectors {
        let expect = match &v.expect {
            Expect::Ok => "ok".to_string(),
            Expect::Err(n, Some(i)) => format!("{n} (entry {i})"),
            Expect::Err(n, None) => n.to_string(),
        };
        let _ = writeln!(
            s,
            "| `{}` | `{}` | {} | {} | {}{} |",
            v.name,
            v.file,
            v.exact,
            expect,
            v.description,
            if v.ram.is_some() {
                " (RAM map given)"
            } else {
                ""
            }
        );
    }
    s
}

const README_HEAD: &str = r#"# Golden vectors for the zerostart hint ABI v1

Generated by `cargo run -p zerohint --example gen_vectors -- tests/vectors`
from `vmm/zerohint/tests/vectorgen/mod.rs`; do not edit by hand. The
checked-in files are the source of truth: `make test-abi` fails if the
generator no longer reproduces them byte for byte, if the Rust decoder
disagrees with any `expect`, or if the C header does not compile and match
the `.bin` files. The spec is `docs/hint-abi.md`.

Every consumer (Rust `zerohint`, EDK2 firmware, Linux kernel) must report
the same first error for each vector: the spec's validation order matters,
and several vectors break more than one rule to pin it.

## Files

- `*.bin`: raw hint bytes (a few are deliberately not a whole hint).
- `vectors.json`: one object per check, with
  - `name`: unique id (also the C name);
  - `file`: the `.bin` file (two checks may share one file);
  - `expect`: `"ok"` or the error name (`Truncated`, `BadMagic`, ... as in
    the spec; C code `ZSHINT_E_<UPPER_SNAKE>`);
  - `index`: for entry errors (`BadEntryFlags` ... `OutOfRam`), the
    zero-based index of the first bad entry;
  - `exact`: `true` = the bytes came with a transport length (setup_data
    `len`, fw_cfg file size), so more bytes than the hint is `BadLength`;
    `false` = no length (memory scan, EFI table), trailing bytes ignored;
  - `ram` (optional): usable RAM as `[start, length]` pairs in any order;
    when present, also run the `OutOfRam` check (step 10); an empty list
    means no RAM at all;
  - for `ok`: `flags` (header flags) and `entries` as
    `[start, length, flags, page_shift]`.
  - `description`.
  Integers are exact and can exceed 2^53: parse them as 64-bit integers
  (Python `json`, serde), not as doubles (e.g. not with `jq`'s arithmetic).
- `zshint_errors.h`: `#define ZSHINT_E_OK 0`, `ZSHINT_E_TRUNCATED 1`, ...
  in spec order, `ZSHINT_E_COUNT`, and an X-macro `ZSHINT_ERRORS(X)` for
  name tables.
- `zshint_vectors.h`: every vector as `static const unsigned char` arrays
  and a table `zshint_vectors[ZSHINT_VECTOR_COUNT]` of
  `struct zshint_vector { name, file, data, len, expect, index, exact,
  has_ram, ram, ram_count }` for the kernel KUnit test and EDK2 host tests.
  `data` is NULL for the zero-length vector.
- `text.json`: the text form's checks (transports (d) kernel command line,
  (e) SMBIOS OEM strings), one object per check, with
  - `name`: unique id (also the C name);
  - `transport`: `"cmdline"` or `"smbios"`;
  - `input`: for `cmdline` the whole command line (a string), for `smbios`
    the OEM strings (a list, possibly empty); the bytes a consumer sees are
    the strings' UTF-8 encoding (the file itself is ASCII, with `\u`
    escapes);
  - `expect`: `"ok"`, `"Absent"`, a text error (`Duplicate`,
    `TextTooLong`, `TextBadChar`, `TextBadLength`, `TextNonCanonical`) or,
    when the text decodes, the error of the decoded bytes validated with an
    exact length (`Truncated`, `BadMagic`, ... as in `vectors.json`);
  - `index`: for `TextBadChar` the zero-based index of the first bad
    character (byte) of the text; for entry errors the entry index;
  - `file` (optional): the `.bin` file the decoded bytes equal;
  - `description`.
- `zshint_text_vectors.h`: `ZSHINT_TEXT_*` limits and result codes
  (`ZSHINT_TEXT_E_OK` 0, `ZSHINT_TEXT_E_ABSENT` 1, then the text errors in
  spec order; X-macro `ZSHINT_TEXT_ERRORS(X)`), and every text vector in a
  table `zshint_text_vectors[ZSHINT_TEXT_VECTOR_COUNT]` of
  `struct zshint_text_vector { name, transport, input, input_count,
  text_expect, text_index, data, len, expect, index }`: `input` the
  command line (`input[0]`) or the OEM strings (NULL when there are none),
  `data`/`len` the decoded bytes and `expect`/`index` their `ZSHINT_E_*`
  result, meaningful only when `text_expect` is `ZSHINT_TEXT_E_OK`.
  Includes `zshint_errors.h`; no libc.
- `check_c_header.c`: compiles both headers, checks `zshint_vectors.h`
  against the `.bin` files and writes the text vectors of
  `zshint_text_vectors.h` out as JSON (`make test-abi` builds and runs it).
- `check_vectors.py`: holds `vectors.json`, `text.json` and (`--c-text`)
  that JSON to the project's one Python reference of the ABI,
  `tests/zstest/hint.py` (stdlib only, written from the spec): a second
  implementation that recomputes every expectation.

A C consumer's test loops over `zshint_vectors`, runs its validator on
`data`/`len` (plus its RAM check when `has_ram`), and compares the result
code and, for entry errors, the entry index. A text consumer loops over
`zshint_text_vectors`, runs its finder and decoder on `input` and compares
`text_expect` (and `text_index`); when that is OK, it compares the decoded
bytes with `data`/`len` and its validator's result with `expect`/`index`.

## Vectors

"#;

/// Every file of `tests/vectors/` the generator owns, as (name, contents).
pub fn files() -> Vec<(String, Vec<u8>)> {
    let vectors = vectors();
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for v in &vectors {
        if let Some((_, bytes)) = out.iter().find(|(f, _)| *f == v.file) {
            assert_eq!(
                *bytes, v.bytes,
                "{}: two vectors share a file with different bytes",
                v.file
            );
            continue;
        }
        out.push((v.file.clone(), v.bytes.clone()));
    }
    let texts = text::vectors(&vectors);
    out.push(("vectors.json".into(), json(&vectors).into_bytes()));
    out.push(("zshint_errors.h".into(), errors_h().into_bytes()));
    out.push(("zshint_vectors.h".into(), vectors_h(&vectors).into_bytes()));
    out.push(("text.json".into(), text::json(&texts).into_bytes()));
    out.push((
        "zshint_text_vectors.h".into(),
        text::header(&texts).into_bytes(),
    ));
    let readme = readme(&vectors) + &text::readme(&texts);
    out.push(("README.md".into(), readme.into_bytes()));
    out
}
