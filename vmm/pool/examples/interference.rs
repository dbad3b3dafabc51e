//! Who pays for zeroing: a memory-bandwidth-bound host workload's
//! throughput while the pool fills vs while it is idle, same run,
//! interleaved (`make bench-pool-interference`, docs/pool.md).
//!
//! The workload is a STREAM-style copy between two 256 MiB buffers per
//! thread (far larger than any cache), so its throughput is what DRAM
//! gives it. Each repetition runs, in order:
//!
//! * `idle`: the workload alone for the window;
//! * `fill/idle-prio`: the workload while an in-process pool of `--gib`
//!   fills (the default: SCHED_IDLE scrub, no cap);
//! * `fill/normal-prio`: the same with `--scrub-priority normal`;
//! * `fill/idle-prio+cap`: idle priority and a CAP_MIB_S cap;
//! * `fill/normal-prio+cap`: normal priority and the cap.
//!
//! Output: one JSON line per sample, then a table of medians (workload
//! GiB/s, its ratio to `idle`, the pool's fill rate within the window and
//! its CPU seconds). Fill phases end when the pool is clean or after the
//! window, whichever is first.
//!
//! Usage: interference PAGE GIB REPS WORKLOAD_THREADS CAP_MIB_S WINDOW_S

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::daemon::{Config, Daemon, Ops};
use pool::pace::Priority;
use pool::PageSize;

const BUF: usize = 256 << 20;

/// A fill phase: the scrub's priority and cap.
type Fill = (Priority, Option<u64>);
/// A phase's samples: name, workload GiB/s, fill GiB/s, scrub CPU s.
type Row = (&'static str, Vec<f64>, Vec<f64>, Vec<f64>);

/// Copies back and forth until `stop`, adding bytes moved (read + write).
fn workload(stop: Arc<AtomicBool>, moved: Arc<AtomicU64>) {
    let mut a = vec![1u8; BUF];
    let mut b = vec![2u8; BUF];
    const STEP: usize = 16 << 20;
    while !stop.load(Ordering::Relaxed) {
        for off in (0..BUF).step_by(STEP) {
            b[off..off + STEP].copy_from_slice(&a[off..off + STEP]);
            moved.fetch_add(2 * STEP as u64, Ordering::Relaxed);
            std::mem::swap(&mut a, &mut b);
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
    std::hint::black_box((&a, &b));
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let page: PageSize = arg(1, "2M").parse().expect("PAGE is 4K, 2M or 1G");
    let gib: u64 = arg(2, "4").parse().expect("GIB is a number");
    let reps: usize = arg(3, "3").parse().expect("REPS is a number");
    let threads: usize = arg(4, "1").parse().expect("WORKLOAD_THREADS is a number");
    let cap_mib: u64 = arg(5, "1024").parse().expect("CAP_MIB_S is a number");
    let window: f64 = arg(6, "5").parse().expect("WINDOW_S is a number");
    // Small regions so the bytes prepared within a window are counted
    // finely (a region counts when it is done).
    let region = (256u64 << 20).min(gib << 30);

    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (s, m) = (stop.clone(), moved.clone());
            std::thread::spawn(move || workload(s, m))
        })
        .collect();
    // Warm-up: buffers faulted in, clocks up.
    std::thread::sleep(Duration::from_secs(1));
    let gibs = |bytes: u64, d: Duration| bytes as f64 / (1u64 << 30) as f64 / d.as_secs_f64();

    let phases: [(&str, Option<Fill>); 5] = [
        ("idle", None),
        ("fill/idle-prio", Some((Priority::Idle, None))),
        ("fill/normal-prio", Some((Priority::Normal, None))),
        (
            "fill/idle-prio+cap",
            Some((Priority::Idle, Some(cap_mib << 20))),
        ),
        (
            "fill/normal-prio+cap",
            Some((Priority::Normal, Some(cap_mib << 20))),
        ),
    ];
    let mut rows: Vec<Row> = phases
        .iter()
        .map(|p| (p.0, vec![], vec![], vec![]))
        .collect();
    let dir = std::env::temp_dir().join(format!("zerostart-interf-{}", std::process::id()));
    for rep in 0..reps {
        for (pi, (name, fill)) in phases.iter().enumerate() {
            let Some((prio, cap)) = fill else {
                let m0 = moved.load(Ordering::Relaxed);
                let t0 = Instant::now();
                std::thread::sleep(Duration::from_secs_f64(window));
                let rate = gibs(moved.load(Ordering::Relaxed) - m0, t0.elapsed());
                println!(
                    "{}",
                    serde_json::json!({"rep": rep, "phase": name, "workload_gib_s": rate})
                );
                rows[pi].1.push(rate);
                continue;
            };
            let m0 = moved.load(Ordering::Relaxed);
            let t0 = Instant::now();
            let d = Daemon::start_with(
                Config::memfds(dir.join("pool.sock"), gib << 30, region, page),
                Ops {
                    metrics: None,
                    scrub_bandwidth: *cap,
                    scrub_priority: *prio,
                    fill_progress: false,
                    socket_group: None,
                    scrubbers: 0,
                },
            )
            .unwrap_or_else(|e| {
                eprintln!("interference: {e}");
                std::process::exit(1)
            });
            // The workload is measured while the pool fills, for at most
            // the window (an idle-priority fill on a saturated host may
            // barely move: that is the point of idle priority).
            let all = d.wait_all_clean(Duration::from_secs_f64(window));
            let el = t0.elapsed();
            let rate = gibs(moved.load(Ordering::Relaxed) - m0, el);
            let filled = d.status().scrubbed_bytes;
            // The scrub's own CPU seconds (thread rusage), as exported.
            let cpu = d.metrics().scrub_cpu_seconds.get();
            let fill_rate = gibs(filled, el);
            println!(
                "{}",
                serde_json::json!({"rep": rep, "phase": name, "workload_gib_s": rate,
                    "secs": el.as_secs_f64(), "filled_bytes": filled, "all_clean": all,
                    "fill_gib_s": fill_rate, "scrub_cpu_s": cpu})
            );
            drop(d);
            rows[pi].1.push(rate);
            rows[pi].2.push(fill_rate);
            rows[pi].3.push(cpu);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let idle = median(rows[0].1.clone());
    println!();
    println!(
        "{gib} GiB pool of {page} pages, {threads} workload thread(s), {reps} reps, cap {cap_mib} MiB/s; medians"
    );
    println!("| phase | workload GiB/s (all reps) | vs idle | pool fill GiB/s | scrub CPU s |");
    println!("|---|---:|---:|---:|---:|");
    for (name, rates, fills, cpus) in &rows {
        let all: Vec<String> = rates.iter().map(|r| format!("{r:.2}")).collect();
        let m = median(rates.clone());
        let f = median(fills.clone());
        println!(
            "| {name} | {m:.2} ({}) | {:.2}x | {} | {} |",
            all.join(" / "),
            m / idle,
            dash(f),
            dash(median(cpus.clone()))
        );
    }
}

fn dash(v: f64) -> String {
    if v.is_nan() {
        "-".to_string()
    } else {
        format!("{v:.2}")
    }
}
