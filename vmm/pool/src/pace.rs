//! Who pays for zeroing: the scrub's priority, its bandwidth cap and its
//! progress.
//!
//! Why: the mm maintainers' objection to background zeroing is that its
//! cost escapes accounting and steals from others. The pool's answer:
//!
//! * the scrub thread (and the verify threads it spawns, which inherit its
//!   policy) runs at `SCHED_IDLE`, or nice 19 where that is refused, so it
//!   only gets CPU nobody else wants;
//! * its work is done by the daemon's own threads: the kernel's zeroing of
//!   new pages happens inside `MADV_POPULATE_WRITE` on the scrub thread, so
//!   CPU time and hugetlb pages are charged to the daemon's cgroup (nothing
//!   is handed to a kernel worker or another process);
//! * `--scrub-bandwidth` caps the bytes per second it prepares (memory
//!   bandwidth is not governed by CPU priority: an idle-priority thread on
//!   an idle core still competes for DRAM);
//! * its CPU seconds are exported (`zerostart_pool_scrub_cpu_seconds_total`).

use std::time::{Duration, Instant};

/// Scheduling of the background scrub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// `SCHED_IDLE` (falls back to nice 19 where refused). The default.
    #[default]
    Idle,
    /// Whatever the daemon runs at (for comparison runs).
    Normal,
}

impl std::str::FromStr for Priority {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, crate::Error> {
        match s {
            "idle" => Ok(Priority::Idle),
            "normal" => Ok(Priority::Normal),
            _ => Err(crate::Error::BadValue {
                key: "scrub-priority",
                value: s.to_string(),
                fix: "use idle (default: SCHED_IDLE, else nice 19) or normal".into(),
            }),
        }
    }
}

/// What the calling thread got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// `SCHED_IDLE`.
    SchedIdle,
    /// `SCHED_IDLE` was refused; nice 19 instead.
    Nice19,
    /// Unchanged (asked for, or both refused).
    Unchanged,
}

impl Applied {
    /// For logs and status.
    pub fn name(self) -> &'static str {
        match self {
            Applied::SchedIdle => "SCHED_IDLE",
            Applied::Nice19 => "nice 19",
            Applied::Unchanged => "normal",
        }
    }
}

/// Puts the calling thread (and threads it spawns later) at `p`.
pub fn apply(p: Priority) -> Applied {
    if p == Priority::Normal {
        return Applied::Unchanged;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: 0 = the calling thread; a valid param for SCHED_IDLE.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        return Applied::SchedIdle;
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: setpriority on our own thread id.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) } == 0 {
        return Applied::Nice19;
    }
    Applied::Unchanged
}

/// The calling thread's scheduling policy and nice value (tests).
pub fn current() -> (i32, i32) {
    // SAFETY: 0 = the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: getpriority on our own thread id.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    (policy, nice)
}

/// Paces one preparation: sleeps to keep it at or under `bandwidth`
/// bytes/s, and reports progress.
pub struct Pacer<'a> {
    start: Instant,
    done: u64,
    bandwidth: Option<u64>,
    progress: Option<&'a (dyn Fn(u64) + Sync)>,
    stop: Option<&'a std::sync::atomic::AtomicBool>,
}

impl<'a> Pacer<'a> {
    /// No cap, no progress.
    pub fn none() -> Pacer<'static> {
        Pacer {
            start: Instant::now(),
            done: 0,
            bandwidth: None,
            progress: None,
            stop: None,
        }
    }

    /// A cap (bytes per second; `None` = none) and a progress callback
    /// (called with the bytes done after each chunk).
    pub fn new(bandwidth: Option<u64>, progress: Option<&'a (dyn Fn(u64) + Sync)>) -> Pacer<'a> {
        Pacer {
            start: Instant::now(),
            done: 0,
            bandwidth,
            progress,
            stop: None,
        }
    }

    /// Stop between chunks once `flag` is set (a daemon shutting down must
    /// not wait for a whole region's fill at idle priority).
    pub fn stop_on(mut self, flag: &'a std::sync::atomic::AtomicBool) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Whether the preparation should stop now.
    pub fn stopped(&self) -> bool {
        self.stop
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// `bytes` more were done; sleeps until the cap allows the next chunk.
    pub fn account(&mut self, bytes: u64) {
        self.done += bytes;
        if let Some(p) = self.progress {
            p(self.done);
        }
        if let Some(bw) = self.bandwidth.filter(|&b| b > 0) {
            let due = Duration::from_secs_f64(self.done as f64 / bw as f64);
            let spent = self.start.elapsed();
            if due > spent {
                std::thread::sleep(due - spent);
            }
        }
    }

    /// The cap, if any.
    pub fn bandwidth(&self) -> Option<u64> {
        self.bandwidth
    }

    /// Bytes per chunk: small enough that a cap is smooth (about 10
    /// chunks a second) and progress moves, large enough that the
    /// per-call cost is noise.
    pub fn chunk(&self, page: u64) -> u64 {
        let base = match self.bandwidth {
            Some(bw) => (bw / 10).clamp(2 << 20, 64 << 20),
            None => 64 << 20,
        };
        base.div_ceil(page).max(1) * page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_priority_is_applied_to_the_thread_and_inherited() {
        let (applied, here, child) = std::thread::spawn(|| {
            let a = apply(Priority::Idle);
            let here = current();
            let child = std::thread::spawn(current).join().unwrap();
            (a, here, child)
        })
        .join()
        .unwrap();
        match applied {
            Applied::SchedIdle => {
                assert_eq!(here.0, libc::SCHED_IDLE);
                assert_eq!(child.0, libc::SCHED_IDLE, "spawned threads inherit it");
            }
            Applied::Nice19 => {
                assert_eq!(here.1, 19);
                assert_eq!(child.1, 19);
            }
            Applied::Unchanged => panic!("neither SCHED_IDLE nor nice 19 could be set"),
        }
        // The test thread itself is untouched.
        assert_ne!(current().0, libc::SCHED_IDLE);
    }

    #[test]
    fn the_cap_holds_the_rate() {
        let mut p = Pacer::new(Some(100 << 20), None);
        let t = Instant::now();
        for _ in 0..5 {
            p.account(10 << 20);
        }
        // 50 MiB at 100 MiB/s: at least 0.5 s.
        assert!(
            t.elapsed() >= Duration::from_millis(490),
            "{:?}",
            t.elapsed()
        );
        let mut p = Pacer::none();
        let t = Instant::now();
        p.account(1 << 40);
        assert!(t.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn priorities_parse() {
        assert_eq!("idle".parse::<Priority>().unwrap(), Priority::Idle);
        assert_eq!("normal".parse::<Priority>().unwrap(), Priority::Normal);
        let e = "low".parse::<Priority>().unwrap_err().to_string();
        assert!(e.starts_with("--scrub-priority low: "), "{e}");
    }
}
