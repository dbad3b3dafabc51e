//! Who pays for zeroing, on the real daemon binary: its scrub thread runs at
//! SCHED_IDLE (the kernel's own view, `/proc/PID/task/TID/stat`), and
//! `--scrub-bandwidth` holds the fill rate under the cap. Each has its
//! negative control (`--scrub-priority normal`; no cap), so the checks can
//! fail.

mod common;

use std::time::Duration;

use common::*;

/// Scheduling policy (field 41 of `stat`) of the daemon's thread named
/// `name`, if it has one now.
fn thread_policy(pid: u32, name: &str) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks {
        let t = t.ok()?.path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.join("stat")).ok()?;
        // Fields after the parenthesised comm start at field 3.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        return f[41 - 3].parse().ok();
    }
    None
}

/// The policies of the scrub worker (while it works: a slow, capped fill)
/// and of the coordinating scrub thread.
fn policies(extra: &[&str]) -> (u32, u32) {
    let dir = tempfile::tempdir().unwrap();
    // 3 x 8 MiB at 4 MiB/s: about 6 s of work to catch the worker in.
    let mut args = vec!["--scrub-bandwidth", "4M"];
    args.extend_from_slice(extra);
    let d = Daemon::start(&sock(&dir), None, &args);
    let pid = d.child.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let (Some(w), Some(c)) = (
            thread_policy(pid, "pool-scrub-idle"),
            thread_policy(pid, "pool-scrub"),
        ) {
            return (w, c);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pool-scrub-idle worker seen during a 6 s fill"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_scrub_work_runs_at_sched_idle_and_its_coordinator_does_not() {
    let (worker, coordinator) = policies(&[]);
    assert_eq!(
        worker,
        libc::SCHED_IDLE as u32,
        "the fill must not compete with the host's normal work"
    );
    // The thread that takes the pool mutex must not be starved while
    // holding it (leases would wait for it).
    assert_eq!(coordinator, libc::SCHED_OTHER as u32);
    // Negative control: asked for normal priority, the worker is
    // SCHED_OTHER too.
    let (worker, _) = policies(&["--scrub-priority", "normal"]);
    assert_eq!(worker, libc::SCHED_OTHER as u32);
}

#[test]
fn the_bandwidth_cap_holds_the_fill_rate() {
    let cap = 16u64 << 20;
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let d = Daemon::start(&sock(&dir), None, &["--scrub-bandwidth", &cap.to_string()]);
    let s = d.all_clean();
    let took = t.elapsed();
    let rate = s.scrub_gib_s_avg * (1u64 << 30) as f64;
    // 3 regions of 8 MiB at 16 MiB/s: 1.5 s at least.
    let least = Duration::from_secs_f64((REGIONS * region_bytes()) as f64 / cap as f64);
    assert!(
        took >= least.mul_f64(0.95),
        "filled in {took:?} under a cap that needs {least:?}"
    );
    assert!(rate <= cap as f64 * 1.05, "{rate} B/s over a {cap} B/s cap");
    drop(d);
    // Negative control: uncapped, the same fill runs faster than the cap.
    let d = Daemon::start(&sock(&dir), None, &[]);
    let s = d.all_clean();
    let rate = s.scrub_gib_s_avg * (1u64 << 30) as f64;
    assert!(rate > cap as f64 * 1.5, "uncapped fill only {rate} B/s");
}

#[test]
fn bad_pacing_options_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (["--scrub-bandwidth", "fast"], "'fast' is not a size"),
        (["--scrub-priority", "low"], "--scrub-priority low: "),
    ] {
        let err = refused(serve_cmd(&sock(&dir), REGIONS, &args));
        assert!(err.contains(want), "{err}");
    }
}
