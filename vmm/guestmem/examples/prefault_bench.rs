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
//! backing. Reports wall GiB/s and GiB per CPU-second (robust on a shared
//! host); the choice in `PREFAULT_TABLE` follows the CPU figure.

use guestmem::GuestRam;
use vm_memory::GuestAddress;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// User + system CPU seconds of this process (all threads) so far. On a
/// shared host wall time mostly measures the other tenants; the CPU the
/// prefault burns (nearly all of it in the kernel's page clearing and in
/// the engine's stores) does not depend on them.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = hostmem::parse_size(args.first().map_or("2G", |s| s))?;
    let reps: usize = args.get(1).map_or(Ok(5), |s| s.parse())?;
    let threads: usize = args.get(2).map_or(Ok(0), |s| s.parse())?;
    let gib = size as f64 / (1u64 << 30) as f64;
    let backings = [
        ("anon_4k", "thp=off"),
        ("anon_thp", "thp=on"),
        ("hugetlb_2m", "hugepages=on,hugepage_size=2M"),
        ("hugetlb_1g", "hugepages=on,hugepage_size=1G"),
    ];
    println!(
        "prefault of {} MiB fresh memory, {reps} reps alternating, threads={threads} (0=all); medians",
        size >> 20
    );
    println!(
        "{:<11} {:>9} {:>9} {:>11} {:>11} {:>7}  {:<9} {:>8}",
        "backing",
        "nt wall",
        "pop wall",
        "nt GiB/cpu-s",
        "pop GiB/cpu-s",
        "cpu x",
        "faster",
        "verify"
    );
    for (name, opts) in backings {
        // [method][wall GiB/s, GiB per CPU-second]
        let mut wall: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut skipped = None;
        'reps: for _ in 0..reps {
            for (i, m) in ["nt", "populate"].iter().enumerate() {
                let cfg = options::memory(&format!(
                    "size={size},{opts},prefault=on,prefault_method={m},threads={threads}"
                ))?;
                let c0 = cpu_seconds();
                match GuestRam::create(&cfg, &[(GuestAddress(0), size)], None) {
                    Ok(r) => {
                        cpu[i].push(gib / (cpu_seconds() - c0).max(1e-9));
                        wall[i].push(r.prefault_stats().gib_per_s());
                    }
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
        let (nt_w, pop_w) = (median(&mut wall[0].clone()), median(&mut wall[1].clone()));
        let (nt_c, pop_c) = (median(&mut cpu[0].clone()), median(&mut cpu[1].clone()));
        // verify_zero over the whole (prefaulted) RAM, for the verify mode's cost.
        let cfg = options::memory(&format!(
            "size={size},{opts},prefault=on,prefault_method=populate,threads={threads}"
        ))?;
        let ram = GuestRam::create(&cfg, &[(GuestAddress(0), size)], None)?;
        let hint = ram.zero_hint()?.ok_or("no hint")?;
        let t = std::time::Instant::now();
        let checked = ram.verify_zero(&hint)?;
        let verify = checked as f64 / (1u64 << 30) as f64 / t.elapsed().as_secs_f64();
        drop(ram);
        println!(
            "{name:<11} {nt_w:>9.2} {pop_w:>9.2} {nt_c:>11.2} {pop_c:>11.2} {:>7.2}  {:<9} {verify:>8.2}",
            pop_c / nt_c,
            if pop_c >= nt_c { "populate" } else { "nt" }
        );
        println!(
            "{{\"backing\":\"{name}\",\"size\":{size},\"reps\":{reps},\"nt_wall_gib_s\":{nt_w:.3},\"populate_wall_gib_s\":{pop_w:.3},\"nt_gib_per_cpu_s\":{nt_c:.3},\"populate_gib_per_cpu_s\":{pop_c:.3},\"verify_gib_s\":{verify:.3},\"nt_wall_all\":{:?},\"populate_wall_all\":{:?},\"nt_cpu_all\":{:?},\"populate_cpu_all\":{:?}}}",
            wall[0], wall[1], cpu[0], cpu[1]
        );
    }
    Ok(())
}
