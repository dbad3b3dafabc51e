//! Each error, built from a valid hint by changing one thing, plus the
//! encoder's refusals and the builder's shrink-only behaviour.

use zerohint::*;

const M: u64 = 0x10_0000;

fn valid() -> Vec<u8> {
    let entries = [Entry::zeroed(M, M, 12), Entry::zeroed(4 * M, 2 * M, 21)];
    let mut out = vec![0; encoded_size(2)];
    assert_eq!(encode_into(0, &entries, &mut out), Ok(out.len()));
    out
}

/// Recomputes the checksum so a later rule is what fails.
fn fix_crc(b: &mut [u8]) {
    let n = 32 + 24 * u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let n = n.min(b.len());
    b[24..28].fill(0);
    let c = crc32(&b[..n]);
    b[24..28].copy_from_slice(&c.to_le_bytes());
}

fn with(f: impl FnOnce(&mut Vec<u8>)) -> Result<(), Error> {
    let mut b = valid();
    f(&mut b);
    fix_crc(&mut b);
    decode_exact(&b).map(|_| ())
}

#[test]
fn valid_decodes() {
    let b = valid();
    let v = decode_exact(&b).unwrap();
    assert_eq!(v.len(), 2);
    assert!(!v.is_empty());
    assert!(!v.is_scrub_request());
    assert_eq!(v.size(), 80);
    assert_eq!(v.entry(1), Entry::zeroed(4 * M, 2 * M, 21));
    assert_eq!(v.get(2), None);
    assert_eq!(v.total_bytes(), 3 * M);
    assert_eq!(v.entries().next_back().unwrap().start, 4 * M);
    assert!(v.covers(M, 4096));
    assert!(v.covers(M, M));
    assert!(!v.covers(M, M + 1));
    assert!(!v.covers(0, 4096));
    assert!(!v.covers(u64::MAX, 2));
    assert!(v.covers(0, 0) && v.covers(3 * M, 0));
    // Across adjacent entries, but not across a gap.
    let adj = [Entry::zeroed(0, M, 12), Entry::zeroed(M, M, 21)];
    let mut b = vec![0; encoded_size(2)];
    encode_into(0, &adj, &mut b).unwrap();
    let a = decode(&b).unwrap();
    assert!(a.covers(M - 4096, 8192));
    assert!(a.covers(0, 2 * M));
    assert!(!a.covers(0, 2 * M + 1));
    // A scrub request covers nothing: its ranges are not zero.
    let mut s = vec![0; encoded_size(1)];
    encode_into(1, &[Entry { flags: 0, ..adj[0] }], &mut s).unwrap();
    assert!(!decode(&s).unwrap().covers(0, 4096));
}

#[test]
fn header_errors() {
    assert_eq!(decode(&valid()[..31]), Err(Error::Truncated));
    assert_eq!(decode(&[]), Err(Error::Truncated));
    assert_eq!(with(|b| b[0] = b'z'), Err(Error::BadMagic));
    assert_eq!(with(|b| b[8] = 2), Err(Error::BadVersion));
    assert_eq!(with(|b| b[10] = 33), Err(Error::BadHeaderSize));
    assert_eq!(with(|b| b[12] = 23), Err(Error::BadHeaderSize));
    assert_eq!(
        with(|b| b[16..20].copy_from_slice(&513u32.to_le_bytes())),
        Err(Error::TooManyEntries)
    );
    assert_eq!(with(|b| b[14] = 1), Err(Error::ReservedNonZero));
    assert_eq!(with(|b| b[31] = 1), Err(Error::ReservedNonZero));
    assert_eq!(with(|b| b[20] = 2), Err(Error::ReservedNonZero));
    assert_eq!(with(|b| b[23] = 0x80), Err(Error::ReservedNonZero));
    assert_eq!(with(|b| b[16] = 3), Err(Error::Truncated));
    assert_eq!(with(|b| b.push(0)), Err(Error::BadLength));
    let mut b = valid();
    b[24] ^= 1;
    assert_eq!(decode(&b), Err(Error::BadChecksum));
}

#[test]
fn trailing_bytes() {
    let mut b = valid();
    b.extend_from_slice(b"garbage");
    let v = decode(&b).unwrap();
    assert_eq!(v.size(), 80);
    assert_eq!(v.as_bytes(), &b[..80]);
    assert_eq!(decode_exact(&b), Err(Error::BadLength));
}

#[test]
fn entry_errors() {
    let e1 = 32 + 24; // entry 1
    assert_eq!(
        with(|b| b[e1 + 16] = 3),
        Err(Error::BadEntryFlags { index: 1 })
    );
    assert_eq!(
        with(|b| b[e1 + 16] = 0),
        Err(Error::BadEntryFlags { index: 1 })
    );
    assert_eq!(
        with(|b| b[e1 + 22] = 1),
        Err(Error::BadEntryFlags { index: 1 })
    );
    assert_eq!(
        with(|b| b[32 + 23] = 1),
        Err(Error::BadEntryFlags { index: 0 })
    );
    // Scrub request: ZEROED must be clear.
    assert_eq!(with(|b| b[20] = 1), Err(Error::BadEntryFlags { index: 0 }));
    assert_eq!(
        with(|b| b[e1 + 20] = 13),
        Err(Error::BadPageShift { index: 1 })
    );
    assert_eq!(with(|b| b[e1] = 1), Err(Error::Misaligned { index: 1 }));
    assert_eq!(with(|b| b[e1 + 8] = 1), Err(Error::Misaligned { index: 1 }));
    assert_eq!(
        with(|b| b[e1 + 8..e1 + 16].fill(0)),
        Err(Error::EmptyRange { index: 1 })
    );
    assert_eq!(
        with(|b| b[e1..e1 + 8].copy_from_slice(&(u64::MAX - 4095).to_le_bytes())),
        Err(Error::Overflow { index: 1 })
    );
    assert_eq!(
        with(|b| b[e1..e1 + 8].copy_from_slice(&0u64.to_le_bytes())),
        Err(Error::Unsorted { index: 1 })
    );
    assert_eq!(
        with(|b| b[e1..e1 + 8].copy_from_slice(&(M + 4096).to_le_bytes())),
        Err(Error::Overlapping { index: 1 })
    );
    // Adjacent is fine.
    assert_eq!(
        with(|b| b[e1..e1 + 8].copy_from_slice(&(2 * M).to_le_bytes())),
        Ok(())
    );
}

#[test]
fn ram_check() {
    let b = valid();
    let v = decode(&b).unwrap();
    assert_eq!(check_in_ram(&v, &[(0, 16 * M)]), Ok(()));
    // Any order, adjacent pieces, overlapping pieces.
    assert_eq!(
        check_in_ram(&v, &[(5 * M, M), (0, 2 * M), (4 * M, M)]),
        Ok(())
    );
    assert_eq!(check_in_ram(&v, &[(0, 3 * M), (2 * M, 8 * M)]), Ok(()));
    assert_eq!(
        check_in_ram(&v, &[(0, 2 * M), (4 * M, M)]),
        Err(Error::OutOfRam { index: 1 })
    );
    assert_eq!(
        check_in_ram(&v, &[(0, 2 * M - 1), (4 * M, 8 * M)]),
        Err(Error::OutOfRam { index: 0 })
    );
    assert_eq!(check_in_ram(&v, &[]), Err(Error::OutOfRam { index: 0 }));
    // A RAM range reaching 2^64 neither wraps nor panics.
    assert_eq!(
        check_in_ram(&v, &[(0, u64::MAX), (u64::MAX, u64::MAX)]),
        Ok(())
    );
}

#[test]
fn encoder_refuses_invalid() {
    let mut out = vec![0u8; encoded_size(3)];
    let z = Entry::zeroed;
    let cases: [(u32, Vec<Entry>, Error); 10] = [
        (2, vec![], Error::ReservedNonZero),
        (
            0,
            vec![Entry {
                flags: 0,
                ..z(0, 4096, 12)
            }],
            Error::BadEntryFlags { index: 0 },
        ),
        (1, vec![z(0, 4096, 12)], Error::BadEntryFlags { index: 0 }),
        (
            0,
            vec![Entry {
                flags: 3,
                ..z(0, 4096, 12)
            }],
            Error::BadEntryFlags { index: 0 },
        ),
        (0, vec![z(0, 4096, 20)], Error::BadPageShift { index: 0 }),
        (
            0,
            vec![z(0, 4096, 12), z(8192, 100, 12)],
            Error::Misaligned { index: 1 },
        ),
        (0, vec![z(0, 0, 12)], Error::EmptyRange { index: 0 }),
        (
            0,
            vec![z(u64::MAX - 4095, 4096, 12)],
            Error::Overflow { index: 0 },
        ),
        (
            0,
            vec![z(8192, 4096, 12), z(0, 4096, 12)],
            Error::Unsorted { index: 1 },
        ),
        (
            0,
            vec![z(0, 8192, 12), z(4096, 4096, 12)],
            Error::Overlapping { index: 1 },
        ),
    ];
    for (flags, entries, want) in cases {
        out.fill(0xaa);
        assert_eq!(
            encode_into(flags, &entries, &mut out),
            Err(want),
            "{entries:?}"
        );
        assert!(out.iter().all(|&b| b == 0xaa), "wrote on error: {want:?}");
    }
    let many = vec![z(0, 4096, 12); 513];
    assert_eq!(encode_into(0, &many, &mut out), Err(Error::TooManyEntries));
    assert_eq!(
        encode_into(0, &[z(0, 4096, 12)], &mut [0u8; 55]),
        Err(Error::Truncated)
    );
    let hint = Hint {
        flags: 0,
        entries: vec![z(0, 0, 12)],
    };
    assert_eq!(hint.encode(), Err(Error::EmptyRange { index: 0 }));
}

#[test]
fn error_names_and_display() {
    let all = [
        Error::Truncated,
        Error::BadMagic,
        Error::BadVersion,
        Error::BadHeaderSize,
        Error::TooManyEntries,
        Error::ReservedNonZero,
        Error::BadLength,
        Error::BadChecksum,
        Error::BadEntryFlags { index: 3 },
        Error::BadPageShift { index: 3 },
        Error::Misaligned { index: 3 },
        Error::EmptyRange { index: 3 },
        Error::Overflow { index: 3 },
        Error::Unsorted { index: 3 },
        Error::Overlapping { index: 3 },
        Error::OutOfRam { index: 3 },
    ];
    for (i, e) in all.iter().enumerate() {
        assert_eq!(usize::from(e.code()), i + 1);
        assert_eq!(e.name(), Error::ALL_NAMES[i]);
        assert_eq!(format!("{e:?}").split(' ').next().unwrap(), e.name());
        let msg = e.to_string();
        assert!(!msg.contains('\n') && msg.len() > 10, "{msg}");
        if e.index().is_some() {
            assert!(msg.contains("entry 3"), "{msg}");
        }
    }
}

#[test]
fn constants() {
    assert_eq!(&MAGIC, b"ZSHINT01");
    assert_eq!(encoded_size(MAX_ENTRIES), 32 + 24 * 512);
    // 225103f7-a0ec-4bf9-842b-060463cf664e: the first three fields are
    // little-endian in EFI_GUID memory order, the last 8 bytes as written.
    let (a, b, c) = (0x2251_03f7u32, 0xa0ecu16, 0x4bf9u16);
    let mut g = Vec::new();
    g.extend_from_slice(&a.to_le_bytes());
    g.extend_from_slice(&b.to_le_bytes());
    g.extend_from_slice(&c.to_le_bytes());
    g.extend_from_slice(&[0x84, 0x2b, 0x06, 0x04, 0x63, 0xcf, 0x66, 0x4e]);
    assert_eq!(EFI_TABLE_GUID.as_slice(), g.as_slice());
    // (The boot-timer port values moved to the `boottimer` crate.)
}

#[test]
fn builder_shrinks_and_merges() {
    let h = Hint::zeroed_from_ranges(&[(0x1800, 0x3000), (0x10000, 0x1000), (0x11000, 0x800)], 12)
        .unwrap();
    // [0x1800,0x4800) -> [0x2000,0x4000); [0x10000,0x11800) merged -> [0x10000,0x11000).
    assert_eq!(
        h.entries,
        vec![
            Entry::zeroed(0x2000, 0x2000, 12),
            Entry::zeroed(0x10000, 0x1000, 12)
        ]
    );
    // Two half pages that together make a page: merged first, so one page.
    let h = Hint::zeroed_from_ranges(&[(0x1800, 0x800), (0x1000, 0x800)], 12).unwrap();
    assert_eq!(h.entries, vec![Entry::zeroed(0x1000, 0x1000, 12)]);
    // Smaller than a page: dropped.
    assert!(Hint::zeroed_from_ranges(&[(0x1001, 0xffe)], 12)
        .unwrap()
        .entries
        .is_empty());
    // Near the top: aligning up must not wrap.
    assert!(Hint::zeroed_from_ranges(&[(u64::MAX - 10, 10)], 12)
        .unwrap()
        .entries
        .is_empty());
    assert_eq!(
        Hint::zeroed_from_ranges(&[(1, u64::MAX)], 12),
        Err(Error::Overflow { index: 0 })
    );
    assert_eq!(
        Hint::zeroed_from_ranges(&[], 11),
        Err(Error::BadPageShift { index: 0 })
    );
    let many: Vec<(u64, u64)> = (0..513).map(|i| (i * 0x2000, 0x1000)).collect();
    assert_eq!(
        Hint::zeroed_from_ranges(&many, 12),
        Err(Error::TooManyEntries)
    );
    let s = Hint::scrub_from_ranges(&[(0, 0x2000)], 21).unwrap();
    assert!(s.is_scrub_request());
    let bytes = s.encode().unwrap();
    assert!(decode_exact(&bytes).unwrap().is_scrub_request());
}

#[test]
fn subtract_rounds_outward() {
    let mut h = Hint::zeroed_from_ranges(&[(0, 0x10000)], 12).unwrap();
    h.subtract(0x3001, 1); // one byte in page 3 -> page 3 gone
    assert_eq!(
        h.entries,
        vec![
            Entry::zeroed(0, 0x3000, 12),
            Entry::zeroed(0x4000, 0xc000, 12)
        ]
    );
    h.subtract(0x2fff, 2); // straddles pages 2 and 3
    assert_eq!(
        h.entries,
        vec![
            Entry::zeroed(0, 0x2000, 12),
            Entry::zeroed(0x4000, 0xc000, 12)
        ]
    );
    h.subtract(0x5000, 0);
    assert_eq!(h.total_bytes(), 0xe000);
    h.subtract(0xf000, u64::MAX); // past 2^64: everything from 0xf000 up
    assert_eq!(h.entries.last().unwrap().end(), 0xf000);
    h.subtract(0, 0x2000);
    assert_eq!(h.entries, vec![Entry::zeroed(0x4000, 0xb000, 12)]);
    h.subtract(0, u64::MAX);
    assert!(h.entries.is_empty());
    assert_eq!(h.encode().unwrap().len(), 32);
}

#[test]
fn keep_largest_drops_smallest() {
    let mut h =
        Hint::zeroed_from_ranges(&[(0, 0x1000), (0x10000, 0x3000), (0x20000, 0x2000)], 12).unwrap();
    h.keep_largest(2);
    assert_eq!(
        h.entries,
        vec![
            Entry::zeroed(0x10000, 0x3000, 12),
            Entry::zeroed(0x20000, 0x2000, 12)
        ]
    );
    let v = Hint::from(&decode(&h.encode().unwrap()).unwrap());
    assert_eq!(v, h);
}
