//! Red-team properties of the producer's trimming path: a hint with more
//! than 512 ranges (many small writes scattered over RAM) is cut down by
//! `keep_largest`, and the result must still encode, claim only bytes that
//! were claimed before (ranges dropped whole, never merged across the gaps
//! that hold written pages), and keep the largest ranges.

use proptest::prelude::*;
use zerohint::{decode_exact, Hint, MAX_ENTRIES, PAGE_SIZE};

const P: u64 = PAGE_SIZE;

/// RAM `[0, pages * 4K)` minus `writes` (page, byte offset, length), the
/// way the VMM builds its hint.
fn scattered(pages: u64, writes: &[(u64, u64, u64)]) -> Hint {
    let mut h = Hint::zeroed_from_ranges(&[(0, pages * P)], 12).unwrap();
    for &(page, off, len) in writes {
        h.subtract(page * P + off, len);
    }
    h
}

fn covered(h: &Hint, a: u64) -> bool {
    h.entries.iter().any(|e| a >= e.start && a < e.end())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn keep_largest_only_drops_whole_ranges(
        writes in prop::collection::vec((0u64..40_000, 0u64..4096, 1u64..9000), 400..1500),
        max in prop_oneof![Just(MAX_ENTRIES), 1usize..600],
    ) {
        let before = scattered(40_000, &writes);
        let mut after = before.clone();
        after.keep_largest(max);
        prop_assert!(after.entries.len() <= max);
        // Every kept entry is one of the entries before, unchanged: nothing
        // was merged across a written gap or stretched.
        for e in &after.entries {
            prop_assert!(before.entries.contains(e), "{:x?} is new", e);
        }
        // No written byte is claimed.
        for &(page, off, len) in &writes {
            let s = page * P + off;
            for a in [s, s + len / 2, s + len - 1] {
                prop_assert!(!covered(&after, a), "written byte {:#x} hinted", a);
            }
        }
        // What was dropped is never larger than what was kept.
        let smallest_kept = after.entries.iter().map(|e| e.length).min();
        let largest_dropped = before
            .entries
            .iter()
            .filter(|e| !after.entries.contains(e))
            .map(|e| e.length)
            .max();
        if let (Some(k), Some(d)) = (smallest_kept, largest_dropped) {
            prop_assert!(d <= k, "dropped {d:#x} but kept {k:#x}");
        }
        // The trimmed hint (at most 512) is valid on the wire.
        if after.entries.len() <= MAX_ENTRIES {
            let bytes = after.encode().unwrap();
            let view = decode_exact(&bytes).unwrap();
            prop_assert_eq!(Hint::from(&view), after);
        }
    }
}

/// Above 512 ranges `encode` refuses rather than emitting an invalid or
/// truncated hint.
#[test]
fn too_many_ranges_do_not_encode_untrimmed() {
    let writes: Vec<(u64, u64, u64)> = (0..600).map(|i| (i * 3 + 1, 0, 1)).collect();
    let mut h = scattered(4000, &writes);
    assert!(h.entries.len() > MAX_ENTRIES);
    assert!(h.encode().is_err());
    h.keep_largest(MAX_ENTRIES);
    assert_eq!(h.entries.len(), MAX_ENTRIES);
    h.encode().unwrap();
}
