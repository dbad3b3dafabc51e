//! Measures the two prefault methods on fresh memory, per backing, in one
//! run (each method is the other's baseline):
//!
//! * `nt`: write zeros with the prezero engine (faults each page in; the
//!   kernel clears it; the engine clears it again with non-temporal stores),
//! * `populate`: `MADV_POPULATE_WRITE` on disjoint chunks in parallel (the
//!   kernel's clear only).
//!
//! `cargo run --release -p guestmem --example prefault_bench -- [size] [reps] [threads]`
//! Hugetlb rows need free hugepages (see scripts/with-hugepages.sh); they
//! are reported as skipped otherwise. Prints a table and one JSON line per
//! backing.

use guestmem::{GuestRam, MemoryConfig};
use vm_memory::GuestAddress;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = guestmem::parse_size("size", args.first().map_or("2G", |s| s))?;
    let reps: usize = args.get(1).map_or(Ok(5), |s| s.parse())?;
    let threads: usize = args.get(2).map_or(Ok(0), |s| s.parse())?;
    let backings = [
        ("anon_4k", "thp=off"),
        ("anon_thp", "thp=on"),
        ("hugetlb_2m", "hugepages=on,hugepage_size=2M"),
        ("hugetlb_1g", "hugepages=on,hugepage_size=1G"),
    ];
    println!(
        "prefault of {} MiB fresh memory, {reps} reps alternating, threads={threads} (0=all)",
        size >> 20
    );
    println!(
        "{:<11} {:>12} {:>12} {:>9}  faster",
        "backing", "nt GiB/s", "populate GiB/s", "ratio"
    );
    for (name, opts) in backings {
        let mut res: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut skipped = None;
        'reps: for _ in 0..reps {
            for (i, m) in ["nt", "populate"].iter().enumerate() {
                let cfg = MemoryConfig::parse(&format!(
                    "size={size},{opts},prefault=on,prefault_method={m},threads={threads}"
                ))?;
                match GuestRam::create(&cfg, &[(GuestAddress(0), size)], None) {
                    Ok(r) => res[i].push(r.report().gib_per_s),
                    Err(e) => {
                        skipped = Some(e.to_string());
                        break 'reps;
                    }
                }
            }
        }
        if let Some(why) = skipped {
            println!("{name:<11} skipped: {why}");
            continue;
        }
        let (nt, pop) = (median(&mut res[0]), median(&mut res[1]));
        // verify_zero over the whole (prefaulted) RAM, for the verify mode's cost.
        let cfg = MemoryConfig::parse(&format!(
            "size={size},{opts},prefault=on,prefault_method=populate,threads={threads}"
        ))?;
        let ram = GuestRam::create(&cfg, &[(GuestAddress(0), size)], None)?;
        let hint = ram.zero_hint()?.ok_or("no hint")?;
        let t = std::time::Instant::now();
        let checked = ram.verify_zero(&hint)?;
        let verify = checked as f64 / (1u64 << 30) as f64 / t.elapsed().as_secs_f64();
        drop(ram);
        println!(
            "{name:<11} {nt:>12.2} {pop:>14.2} {:>9.2}  {:<9} verify {verify:.2} GiB/s",
            pop / nt,
            if pop >= nt { "populate" } else { "nt" }
        );
        println!(
            "{{\"backing\":\"{name}\",\"size\":{size},\"reps\":{reps},\"nt_gib_s\":{nt:.3},\"populate_gib_s\":{pop:.3},\"verify_gib_s\":{verify:.3},\"nt_all\":{:?},\"populate_all\":{:?}}}",
            res[0], res[1]
        );
    }
    Ok(())
}
