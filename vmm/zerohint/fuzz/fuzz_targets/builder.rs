//! Fuzzes the producer side, `Hint::zeroed_from_ranges` + `Hint::subtract`,
//! over the whole 64-bit space (the property tests use a small one): the
//! result must never claim a byte that was not given as zero or that was
//! subtracted afterwards, and must always encode to a valid hint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zerohint::{decode_exact, Error, Hint, PAGE_SIZE};

fn pairs(data: &[u8]) -> Vec<(u64, u64)> {
    data.chunks_exact(16)
        .map(|c| {
            let mut a = [0u8; 8];
            let mut b = [0u8; 8];
            a.copy_from_slice(&c[..8]);
            b.copy_from_slice(&c[8..]);
            (u64::from_le_bytes(a), u64::from_le_bytes(b))
        })
        .collect()
}

/// Whether `[s, e)` is inside the union of `ranges` (ends in u128).
fn covered(s: u64, e: u64, ranges: &[(u64, u64)]) -> bool {
    let (mut cur, end) = (u128::from(s), u128::from(e));
    while cur < end {
        let next = ranges
            .iter()
            .map(|&(a, l)| (u128::from(a), u128::from(a) + u128::from(l)))
            .filter(|&(a, b)| a <= cur && cur < b)
            .map(|(_, b)| b)
            .max();
        match next {
            Some(b) => cur = b,
            None => return false,
        }
    }
    true
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let all = pairs(rest);
    let n_zero = usize::from(head & 0x0f).min(all.len());
    let page_shift = [12, 21, 30, 13][usize::from(head >> 6)];
    let (zero, cuts) = all.split_at(n_zero);
    let mut hint = match Hint::zeroed_from_ranges(zero, page_shift) {
        Ok(h) => h,
        Err(Error::BadPageShift { .. }) => return assert_eq!(page_shift, 13),
        Err(Error::Overflow { index }) => {
            return assert!(zero[index].0.checked_add(zero[index].1).is_none())
        }
        Err(e) => panic!("unexpected {e}"),
    };
    for &(s, l) in cuts {
        hint.subtract(s, l);
    }
    for (i, e) in hint.entries.iter().enumerate() {
        assert_eq!(e.start % PAGE_SIZE, 0);
        assert_eq!(e.length % PAGE_SIZE, 0);
        assert!(e.length > 0);
        assert!(
            covered(e.start, e.end(), zero),
            "{e:?} not inside the zero input"
        );
        for &(s, l) in cuts {
            let end = u128::from(s) + u128::from(l);
            assert!(
                l == 0 || u128::from(e.end()) <= u128::from(s) || u128::from(e.start) >= end,
                "{e:?} keeps part of subtracted [{s:#x}, +{l:#x})"
            );
        }
        if i > 0 {
            // Sorted with a gap: merging happens before shrinking, and a
            // cut always removes at least one page between the pieces.
            assert!(hint.entries[i - 1].end() < e.start);
        }
    }
    hint.keep_largest(zerohint::MAX_ENTRIES);
    let bytes = hint.encode().expect("a built hint always encodes");
    assert_eq!(
        Hint::from(&decode_exact(&bytes).expect("and decodes")),
        hint
    );
});
