//! Fuzzes `zerohint::decode`/`decode_exact`: never panics, and whatever it
//! accepts really is a valid hint (sorted, disjoint, aligned, consistent
//! flags) that re-encodes to exactly the accepted bytes.
//!
//! Each input is decoded twice: as given, and with its checksum recomputed,
//! so the fuzzer reaches the per-entry rules behind the CRC check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zerohint::{
    crc32, decode, decode_exact, encode_into, Entry, Error, Hint, ENTRY_FLAG_ZEROED, HEADER_SIZE,
    PAGE_SHIFTS, PAGE_SIZE,
};

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= HEADER_SIZE {
        let mut fixed = data.to_vec();
        let count = u32::from_le_bytes([data[16], data[17], data[18], data[19]]) as usize;
        let size = zerohint::encoded_size(count.min(1 << 20)).min(fixed.len());
        fixed[24..28].fill(0);
        let crc = crc32(&fixed[..size]);
        fixed[24..28].copy_from_slice(&crc.to_le_bytes());
        check(&fixed);
    }
});

fn check(data: &[u8]) {
    let loose = decode(data);
    let exact = decode_exact(data);
    match loose {
        Ok(view) => {
            let size = view.size();
            assert!(size <= data.len());
            assert_eq!(view.as_bytes(), &data[..size]);
            assert_eq!(size, HEADER_SIZE + 24 * view.len());
            match exact {
                Ok(v) => assert_eq!((v, size), (view, data.len())),
                Err(e) => assert_eq!((e, size < data.len()), (Error::BadLength, true)),
            }
            let entries: Vec<Entry> = view.entries().collect();
            assert_eq!(entries.len(), view.len());
            let zeroed = if view.is_scrub_request() {
                0
            } else {
                ENTRY_FLAG_ZEROED
            };
            for (i, e) in entries.iter().enumerate() {
                assert_eq!(e.flags, zeroed);
                assert!(PAGE_SHIFTS.contains(&e.page_shift));
                assert_eq!(e.start % PAGE_SIZE, 0);
                assert_eq!(e.length % PAGE_SIZE, 0);
                assert!(e.length > 0);
                assert!(e.start.checked_add(e.length).is_some());
                assert_eq!(view.entry(i), *e);
                if i > 0 {
                    assert!(entries[i - 1].end() <= e.start, "sorted and disjoint");
                }
                if !view.is_scrub_request() {
                    assert!(view.covers(e.start, e.length));
                }
            }
            let mut out = vec![0u8; size];
            assert_eq!(encode_into(view.flags(), &entries, &mut out), Ok(size));
            assert_eq!(out, &data[..size]);
            assert_eq!(Hint::from(&view).encode().as_deref(), Ok(&data[..size]));
            // RAM map = the hint's own ranges: always inside.
            let ram: Vec<(u64, u64)> = entries.iter().map(|e| (e.start, e.length)).collect();
            assert_eq!(zerohint::check_in_ram(&view, &ram), Ok(()));
        }
        Err(e) => {
            // The two only differ in the length rule.
            match exact {
                Ok(_) => panic!("decode_exact accepted what decode rejected ({e})"),
                Err(x) => assert!(x == e || x == Error::BadLength, "{e:?} vs {x:?}"),
            }
            // Every error prints as one line.
            assert!(!e.to_string().contains('\n'));
        }
    }
}
