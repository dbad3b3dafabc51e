//! What it costs the pool to make a returned region clean, per GiB, three
//! ways, interleaved in one run on the same machine:
//!
//! * `in_place`: zero the same pages with the parallel non-temporal engine
//!   (what the pool did before issue 20; unsafe, because a former lessee's
//!   pipe, io_uring buffer or fd in flight still reaches those pages);
//! * `punch_repopulate`: `fallocate(PUNCH_HOLE)` the file, then
//!   `MADV_POPULATE_WRITE` (the kernel allocates and zeroes new pages);
//! * `new_file` (what the pool does now): punch, close the file, create a
//!   new memfd of the same size, map and populate it.
//!
//! Before each measurement the region is filled with a pattern (a lessee's
//! data). `cargo run --release -p pool --example reuse_cost -- [GIB] [REPS]`
//! runs 4K shmem and, if enough 2M hugepages are free, 2M hugetlb
//! (`tests/pool/reuse-cost.sh` reserves and restores them). One JSON
//! object per measurement on stdout, a table on stderr.

use std::time::{Duration, Instant};

use pool::memory::{RegionMemory, ScrubFault};
use pool::PageSize;

/// Writes `b` over the whole region through a second shared mapping of its
/// file (a lessee's writes), unmapped again afterwards.
fn fill(m: &RegionMemory, b: u8) {
    let mut view = hostmem::Mapping::file(m.fd(), 0, m.len() as usize)
        .map()
        .unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: the lessee's view; the pool does not touch the region meanwhile.
    unsafe { view.as_mut_slice() }.fill(b);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let gib: u64 = args.get(1).map_or(1, |s| s.parse().expect("GIB"));
    let reps: usize = args.get(2).map_or(5, |s| s.parse().expect("REPS"));
    let len = gib << 30;
    let zeroer = prezero::Zeroer::new(prezero::Choice::Auto).expect("zeroing engine");
    let mut pages = vec![PageSize::Size4K];
    if pool::memory::free_hugepages(PageSize::Size2M) >= len / PageSize::Size2M.bytes() {
        pages.push(PageSize::Size2M);
    } else {
        println!(
            "SKIP: 2M: fewer than {} free 2M hugepages (tests/pool/reuse-cost.sh reserves them)",
            len / PageSize::Size2M.bytes()
        );
    }
    let mut rows = Vec::new();
    for page in pages {
        let mut mem = RegionMemory::memfd("reuse-cost", len, page).expect("region");
        mem.prepare_fresh(false, 0, false).expect("populate");
        // One untimed round of each first: the machine backs memory lazily
        // underneath, so the first touch of new host memory is slower.
        let mut times: [Vec<Duration>; 3] = Default::default();
        for rep in 0..=reps {
            for (k, t) in times.iter_mut().enumerate() {
                fill(&mem, 0xa5);
                let start = Instant::now();
                match k {
                    0 => {
                        // SAFETY: nobody else writes the region meanwhile.
                        unsafe { mem.scrub(&zeroer, false, 0, ScrubFault::None) }
                            .expect("in-place scrub");
                    }
                    1 => {
                        mem.punch().expect("punch");
                        mem.prepare_fresh(false, 0, false).expect("repopulate");
                    }
                    _ => {
                        mem.punch().expect("punch");
                        drop(mem);
                        mem = RegionMemory::memfd("reuse-cost", len, page).expect("new region");
                        mem.prepare_fresh(false, 0, false).expect("populate");
                    }
                }
                let e = start.elapsed();
                if rep > 0 {
                    t.push(e);
                }
                // Every way must end with a zero region.
                mem.prepare_fresh(true, 0, false)
                    .expect("the region reads zero");
            }
        }
        for (k, name) in ["in_place", "punch_repopulate", "new_file"]
            .iter()
            .enumerate()
        {
            let mut ms: Vec<f64> = times[k]
                .iter()
                .map(|d| d.as_secs_f64() * 1e3 / gib as f64)
                .collect();
            ms.sort_by(f64::total_cmp);
            let median = ms[ms.len() / 2];
            println!(
                "{}",
                serde_json::json!({"page": page.name(), "gib": gib, "method": name,
                    "ms_per_gib": ms, "median_ms_per_gib": median})
            );
            rows.push((page, *name, median, ms));
        }
    }
    eprintln!("page | method | median ms/GiB | all reps");
    for (page, name, median, ms) in rows {
        let all: Vec<String> = ms.iter().map(|m| format!("{m:.0}")).collect();
        eprintln!("{page} | {name} | {median:.0} | {}", all.join(" / "));
    }
}
