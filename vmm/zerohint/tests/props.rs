//! Property tests: round trips, corruption always detected, and the builder
//! never claims a byte it was not given (the security property).

use proptest::prelude::*;
use zerohint::*;

const P: u64 = PAGE_SIZE;

/// A valid hint: sorted, disjoint (possibly adjacent), aligned entries.
fn valid_hint() -> impl Strategy<Value = (u32, Vec<Entry>)> {
    hint_in(1 << 32, 1 << 20, 1 << 20)
}

/// A valid hint starting below page `base_pages`, with gaps and lengths
/// below `gap_pages` / `len_pages` pages.
fn hint_in(
    base_pages: u64,
    gap_pages: u64,
    len_pages: u64,
) -> impl Strategy<Value = (u32, Vec<Entry>)> {
    let shift = prop::sample::select(PAGE_SHIFTS.to_vec());
    (
        any::<bool>(),
        0..base_pages,
        prop::collection::vec((0..gap_pages, 1..len_pages, shift), 0..40),
    )
        .prop_map(|(scrub, base, parts)| {
            let flags = u32::from(scrub);
            let mut cur = base * P;
            let mut entries = Vec::new();
            for (gap, len, page_shift) in parts {
                let start = cur + gap * P;
                entries.push(Entry {
                    start,
                    length: len * P,
                    flags: if scrub { 0 } else { ENTRY_FLAG_ZEROED },
                    page_shift,
                });
                cur = start + len * P;
            }
            (flags, entries)
        })
}

fn encode(flags: u32, entries: &[Entry]) -> Vec<u8> {
    let mut out = vec![0; encoded_size(entries.len())];
    encode_into(flags, entries, &mut out).expect("valid input encodes");
    out
}

/// Page numbers (in a small address space) covered by `(start, len)` byte
/// ranges: a page counts only if every byte of it is covered.
fn full_pages(ranges: &[(u64, u64)], pages: u64) -> Vec<bool> {
    (0..pages)
        .map(|p| {
            // Byte-exact: walk the page in pieces.
            let (mut cur, end) = (p * P, (p + 1) * P);
            while cur < end {
                match ranges
                    .iter()
                    .filter(|&&(s, l)| s <= cur && cur < s + l)
                    .map(|&(s, l)| s + l)
                    .max()
                {
                    Some(e) => cur = e,
                    None => return false,
                }
            }
            true
        })
        .collect()
}

fn hint_pages(h: &Hint, pages: u64) -> Vec<bool> {
    (0..pages)
        .map(|p| {
            h.entries
                .iter()
                .any(|e| e.start <= p * P && (p + 1) * P <= e.end())
        })
        .collect()
}

/// Byte ranges inside a 64-page address space: unaligned, or in half
/// pages so that ranges meeting or overlapping mid-page are common.
fn small_ranges() -> impl Strategy<Value = Vec<(u64, u64)>> {
    let range = prop_oneof![
        (0u64..60 * P, 0u64..8 * P),
        (0u64..120, 0u64..16).prop_map(|(s, l)| (s * P / 2, l * P / 2)),
    ];
    prop::collection::vec(range, 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn round_trip((flags, entries) in valid_hint()) {
        let bytes = encode(flags, &entries);
        let view = decode_exact(&bytes).unwrap();
        prop_assert_eq!(view.flags(), flags);
        prop_assert_eq!(view.entries().collect::<Vec<_>>(), entries.clone());
        prop_assert_eq!(view.size(), bytes.len());
        let hint = Hint { flags, entries };
        prop_assert_eq!(hint.encode().unwrap(), bytes.clone());
        prop_assert_eq!(Hint::from(&view), hint);
    }

    #[test]
    fn any_single_byte_corruption_is_rejected(
        (flags, entries) in valid_hint(),
        pos in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let mut bytes = encode(flags, &entries);
        let i = pos.index(bytes.len());
        bytes[i] ^= mask;
        prop_assert!(decode_exact(&bytes).is_err(), "byte {} ^ {:#x} accepted", i, mask);
    }

    #[test]
    fn decode_never_panics_and_success_is_valid(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(v) = decode(&bytes) {
            let entries: Vec<Entry> = v.entries().collect();
            let again = encode(v.flags(), &entries);
            prop_assert_eq!(again.as_slice(), v.as_bytes());
        }
    }

    #[test]
    fn zeroed_from_ranges_is_exactly_the_full_pages(ranges in small_ranges()) {
        let h = Hint::zeroed_from_ranges(&ranges, 12).unwrap();
        // Never a page (so never a byte) not wholly given, and no page lost.
        prop_assert_eq!(hint_pages(&h, 72), full_pages(&ranges, 72));
        for e in &h.entries {
            // The whole entry, byte-exact, inside the input (pages past the
            // small space included).
            prop_assert!(full_pages(&ranges, e.end() / P)[(e.start / P) as usize..].iter().all(|&b| b));
        }
        // Always a valid, coalesced hint.
        let bytes = h.encode().unwrap();
        let v = decode_exact(&bytes).unwrap();
        for w in h.entries.windows(2) {
            prop_assert!(w[0].end() < w[1].start, "not coalesced: {:?}", w);
        }
        prop_assert_eq!(v.total_bytes(), h.total_bytes());
    }

    #[test]
    fn subtract_removes_every_byte_and_only_the_rounded_span(
        ranges in small_ranges(),
        start in 0u64..70 * P,
        len in 0u64..10 * P,
    ) {
        let before = Hint::zeroed_from_ranges(&ranges, 12).unwrap();
        let mut h = before.clone();
        h.subtract(start, len);
        for e in &h.entries {
            prop_assert!(len == 0 || e.end() <= start || e.start >= start + len,
                "{:?} keeps part of [{:#x}, +{:#x})", e, start, len);
        }
        let (lo, hi) = (start / P, (start + len).div_ceil(P));
        let want: Vec<bool> = hint_pages(&before, 80)
            .into_iter()
            .enumerate()
            .map(|(p, b)| b && (len == 0 || (p as u64) < lo || (p as u64) >= hi))
            .collect();
        prop_assert_eq!(hint_pages(&h, 80), want);
        decode_exact(&h.encode().unwrap()).unwrap();
    }

    #[test]
    fn check_in_ram_matches_page_model(
        (flags, entries) in hint_in(64, 32, 64),
        ram in prop::collection::vec((0u64..1 << 12, 0u64..1 << 10), 0..8),
    ) {
        // Hints stay below 64 + 40 * 96 < 2^12 pages.
        let bytes = encode(flags, &entries);
        let view = decode_exact(&bytes).unwrap();
        let ram: Vec<(u64, u64)> = ram.iter().map(|&(s, l)| (s * P, l * P)).collect();
        let in_ram = full_pages(&ram, 1 << 12);
        let first_bad = entries.iter().position(|e| {
            (e.start / P..e.end() / P).any(|p| !in_ram[p as usize])
        });
        prop_assert_eq!(
            check_in_ram(&view, &ram),
            match first_bad { Some(index) => Err(Error::OutOfRam { index }), None => Ok(()) }
        );
    }
}
