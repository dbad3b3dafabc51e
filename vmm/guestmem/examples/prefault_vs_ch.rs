//! Prefault of fresh memory (`prefault=on`, no pool) vs cloud-hypervisor's
//! parallel `MADV_POPULATE_WRITE` (its rule: threads = min(CPUs, 16,
//! size / 4 GiB), at least 1, one chunk each), same run, interleaved, at
//! each size (`make bench-prefault`, docs/memory.md).
//!
//! The cloud-hypervisor side is re-implemented here from that rule (no
//! code of theirs): mmap of the same backing, then one
//! `MADV_POPULATE_WRITE` per thread over its chunk.
//!
//! Usage: prefault_vs_ch SIZES_GIB REPS (e.g. 1,4,8 3). Hugetlb rows need
//! free 2M pages (scripts/with-hugepages.sh); they are skipped otherwise.

use std::time::Instant;

use guestmem::GuestRam;
use vm_memory::GuestAddress;

fn ch_threads(size: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.min(16).min(size >> 32).max(1)
}

/// cloud-hypervisor's prefault: a fresh mapping, populated by
/// `ch_threads(size)` threads, one chunk each. Returns seconds.
fn ch_prefault(size: usize, huge: bool) -> Result<f64, String> {
    let page = if huge {
        hostmem::PageSize::Size2M
    } else {
        hostmem::PageSize::Size4K
    };
    let t = Instant::now();
    let m = hostmem::Mapping::anonymous(size)
        .noreserve()
        .hugetlb(page)
        .map()
        .map_err(|e| format!("mmap: {}", e.os_error()))?;
    if !huge {
        // guestmem's THP backing does the same; failure only costs speed.
        let _ = m.advise(libc::MADV_HUGEPAGE);
    }
    let n = ch_threads(size);
    let page = page.bytes() as usize;
    let chunk = (size / n).div_ceil(page) * page;
    let m = &m;
    let ok = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                s.spawn(move || {
                    let off = i * chunk;
                    let len = chunk.min(size.saturating_sub(off));
                    len == 0 || m.populate_range(off, len).is_ok()
                })
            })
            .collect();
        hs.into_iter().all(|h| h.join().unwrap())
    });
    let secs = t.elapsed().as_secs_f64();
    if ok {
        Ok(secs)
    } else {
        Err("MADV_POPULATE_WRITE failed (hugepages short?)".into())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes: Vec<usize> = args
        .first()
        .map_or("1,4,8", |s| s)
        .split(',')
        .map(|s| s.trim().parse::<usize>().map(|g| g << 30))
        .collect::<Result<_, _>>()?;
    let reps: usize = args.get(1).map_or(Ok(3), |s| s.parse())?;
    println!("prefault of fresh memory: zerostart prefault=on vs cloud-hypervisor rule, {reps} reps after a warm-up, order alternating; ms, median (all)");
    println!("| backing | GiB | zerostart prefault=on | cloud-hypervisor (threads) | ratio (CH / ours) |");
    println!("|---|---:|---:|---:|---:|");
    for (name, opts, huge) in [
        ("anon THP", "thp=on", false),
        ("hugetlb 2M", "hugepages=on,hugepage_size=2M", true),
    ] {
        for &size in &sizes {
            let (mut ours, mut ch) = (Vec::new(), Vec::new());
            let mut skip = None;
            // Rep 0 is an untimed warm-up of both (the first touch of host
            // memory that is backed lazily underneath is far slower, and
            // would land on whichever ran first); then the order alternates.
            for rep in 0..=reps {
                for k in 0..2 {
                    let ours_turn = (rep + k) % 2 == 0;
                    let r = if ours_turn {
                        let cfg = options::memory(&format!("size={size},{opts},prefault=on"))?;
                        let t = Instant::now();
                        GuestRam::create(&cfg, &[(GuestAddress(0), size as u64)], None)
                            .map(|r| {
                                let ms = t.elapsed().as_secs_f64() * 1e3;
                                drop(r);
                                ms
                            })
                            .map_err(|e| e.to_string())
                    } else {
                        ch_prefault(size, huge).map(|s| s * 1e3)
                    };
                    match r {
                        Ok(ms) if rep > 0 => {
                            if ours_turn {
                                ours.push(ms)
                            } else {
                                ch.push(ms)
                            }
                        }
                        Ok(_) => {}
                        Err(e) => skip = Some(e),
                    }
                }
                if skip.is_some() {
                    break;
                }
            }
            let gib = size >> 30;
            if let Some(why) = skip {
                println!("| {name} | {gib} | SKIP: {why} | | |");
                continue;
            }
            let (o, c) = (median(ours.clone()), median(ch.clone()));
            let all = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            println!(
                "| {name} | {gib} | {o:.0} ({}) | {c:.0} ({}) ({}) | {:.2}x |",
                all(&ours),
                all(&ch),
                ch_threads(size),
                c / o
            );
        }
    }
    Ok(())
}
