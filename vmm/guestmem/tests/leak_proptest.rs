//! End to end on real mappings: whatever mix of tracked writes, untracked
//! vm-memory writes (a loader that forgot to mark) and marked raw writes the
//! VMM does, every byte of the final hint reads zero and no written byte is
//! in it.

use guestmem::GuestRam;
use proptest::prelude::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

const M: u64 = 1 << 20;

fn regions() -> Vec<(GuestAddress, u64)> {
    // Two regions with a hole, like RAM around the MMIO gap.
    vec![(GuestAddress(0), 6 * M), (GuestAddress(16 * M), 2 * M)]
}

#[derive(Debug, Clone)]
enum Write {
    /// `GuestRam::write_tracked`.
    Tracked(u64, usize),
    /// `memory().write_slice` with no mark: the dirty bitmap must catch it.
    Loader(u64, usize),
    /// `mark_written` then a raw host-pointer write (bitmap does not see it).
    MarkedRaw(u64, usize),
}

fn write() -> impl Strategy<Value = Write> {
    let addr = prop_oneof![0u64..6 * M, 16 * M..18 * M];
    (0u8..3, addr, 1usize..20_000).prop_map(|(k, a, l)| match k {
        0 => Write::Tracked(a, l),
        1 => Write::Loader(a, l),
        _ => Write::MarkedRaw(a, l),
    })
}

fn in_ram(a: u64, l: usize) -> bool {
    regions()
        .iter()
        .any(|&(s, len)| a >= s.0 && a + l as u64 <= s.0 + len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn final_hint_is_all_zero_and_excludes_every_write(writes in proptest::collection::vec(write(), 1..24)) {
        let cfg = options::memory("size=8M,thp=off").unwrap();
        let mut ram = GuestRam::create(&cfg, &regions(), None).unwrap();
        let mut done = Vec::new();
        for w in &writes {
            let (a, l) = match *w {
                Write::Tracked(a, l) | Write::Loader(a, l) | Write::MarkedRaw(a, l) => (a, l),
            };
            if !in_ram(a, l) {
                continue;
            }
            let data = vec![0xc3u8; l];
            match *w {
                Write::Tracked(..) => ram.write_tracked(&data, GuestAddress(a)).unwrap(),
                Write::Loader(..) => ram.memory().write_slice(&data, GuestAddress(a)).unwrap(),
                Write::MarkedRaw(..) => {
                    ram.mark_written(GuestAddress(a), l as u64).unwrap();
                    let p = ram.memory().get_host_address(GuestAddress(a)).unwrap();
                    // SAFETY: in_ram checked the span lies in one region.
                    unsafe { std::ptr::write_bytes(p, 0xc3, l) };
                }
            }
            done.push((a, l as u64));
        }
        let hint = ram.finalize_hint().unwrap().unwrap();
        // Everything claimed zero is zero...
        prop_assert_eq!(ram.verify_zero(&hint).unwrap(), hint.total_bytes());
        // ...and nothing written is claimed.
        for &(a, l) in &done {
            for b in [a, a + l / 2, a + l - 1] {
                prop_assert!(!hint.entries.iter().any(|e| b >= e.start && b < e.end()), "{:#x}", b);
            }
        }
        // Untouched pages stay hinted (the hint is not trivially empty).
        let touched = |p: u64| done.iter().any(|&(a, l)| p < a + l && a < p + 4096);
        let expect: u64 = regions()
            .iter()
            .flat_map(|&(s, len)| (s.0..s.0 + len).step_by(4096))
            .filter(|&p| !touched(p))
            .count() as u64 * 4096;
        prop_assert_eq!(hint.total_bytes(), expect);
    }
}
