//! First fill with one zeroing (`make bench-pool-first-fill`,
//! docs/pool.md): a new region made clean by populating it (the kernel
//! zeroes each new page; what the pool does) vs populating it and then
//! zeroing it again with the engine (two zeroings: what a scrub of new
//! memory did), and the whole daemon start to "all clean", interleaved in
//! one run. Every way must end with a region that reads zero.
//!
//! Usage: first_fill GIB REPS (2M pages if enough are free, else 4K).

use std::time::{Duration, Instant};

use pool::daemon::{Config, Daemon, Ops};
use pool::memory::{RegionMemory, ScrubFault};
use pool::PageSize;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let gib: u64 = args.get(1).map_or(1, |s| s.parse().expect("GIB"));
    let reps: usize = args.get(2).map_or(5, |s| s.parse().expect("REPS"));
    let len = gib << 30;
    let page = if pool::memory::free_hugepages(PageSize::Size2M) >= len / PageSize::Size2M.bytes() {
        PageSize::Size2M
    } else {
        println!(
            "NOTE: fewer than {} free 2M pages: measuring 4K shmem",
            len >> 21
        );
        PageSize::Size4K
    };
    let zeroer = prezero::Zeroer::new(prezero::Choice::Auto).expect("zeroing engine");
    let names = [
        "fallocate (one zeroing: the pool now)",
        "MADV_POPULATE_WRITE (one zeroing: the pool before)",
        "populate + engine zeroing (two zeroings)",
        "daemon start to all clean",
    ];
    let mut times: [Vec<f64>; 4] = Default::default();
    let dir = std::env::temp_dir().join(format!("zerostart-firstfill-{}", std::process::id()));
    // Rep 0 is an untimed warm-up of each.
    for rep in 0..=reps {
        for (k, t) in times.iter_mut().enumerate() {
            let start = Instant::now();
            match k {
                0 => {
                    let m = RegionMemory::memfd("ff", len, page).unwrap();
                    m.prepare_fresh(false, 0, false).unwrap();
                    let e = start.elapsed();
                    m.prepare_fresh(true, 0, false).expect("reads zero");
                    if rep > 0 {
                        t.push(e.as_secs_f64() * 1e3);
                    }
                }
                1 => {
                    let m = RegionMemory::memfd("ff", len, page).unwrap();
                    m.populate_mapped().unwrap();
                    let e = start.elapsed();
                    m.prepare_fresh(true, 0, false).expect("reads zero");
                    if rep > 0 {
                        t.push(e.as_secs_f64() * 1e3);
                    }
                }
                2 => {
                    let m = RegionMemory::memfd("ff", len, page).unwrap();
                    // SAFETY: our own new region, nobody else has it.
                    unsafe { m.scrub(&zeroer, false, 0, ScrubFault::None) }.unwrap();
                    let e = start.elapsed();
                    m.prepare_fresh(true, 0, false).expect("reads zero");
                    if rep > 0 {
                        t.push(e.as_secs_f64() * 1e3);
                    }
                }
                _ => {
                    let d = Daemon::start_with(
                        Config::memfds(dir.join("pool.sock"), len, len, page),
                        Ops::default(),
                    )
                    .unwrap();
                    assert!(d.wait_all_clean(Duration::from_secs(600)));
                    let e = start.elapsed();
                    drop(d);
                    if rep > 0 {
                        t.push(e.as_secs_f64() * 1e3);
                    }
                }
            }
        }
    }
    println!("{gib} GiB region, {page} pages, {reps} reps (after a warm-up), ms");
    println!("| method | median | all reps |");
    println!("|---|---:|---|");
    for (k, name) in names.iter().enumerate() {
        let mut v = times[k].clone();
        let all: Vec<String> = v.iter().map(|m| format!("{m:.0}")).collect();
        v.sort_by(f64::total_cmp);
        println!("| {name} | {:.0} | {} |", v[v.len() / 2], all.join(" / "));
    }
}
