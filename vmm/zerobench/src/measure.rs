//! The timed operations: engine, memset and kernel populate.

use std::io;
use std::time::{Duration, Instant};

use prezero::Zeroer;

const HUGE_2M: usize = 2 << 20;

/// How a fresh mapping is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// 4 KiB pages (`MADV_NOHUGEPAGE`).
    Small,
    /// Transparent huge pages (`MADV_HUGEPAGE`).
    Thp,
    /// hugetlb 2 MiB pages (`MAP_HUGETLB`).
    Hugetlb,
}

/// A private anonymous mapping, 2 MiB aligned, unmapped on drop.
pub(crate) struct Mapping(hostmem::Mapping);

impl Mapping {
    pub(crate) fn new(len: usize, backing: Backing) -> io::Result<Mapping> {
        if backing == Backing::Hugetlb {
            // No MAP_NORESERVE: a pool too small fails here, not later.
            let m = hostmem::Mapping::anonymous(len.next_multiple_of(HUGE_2M))
                .hugetlb(hostmem::PageSize::Size2M)
                .map()?;
            return Ok(Mapping(m));
        }
        // Aligned (over-mapped and trimmed), so THP can back every 2 MiB.
        let m = hostmem::Mapping::anonymous(len)
            .noreserve()
            .align(HUGE_2M)
            .map()?;
        let advice = match backing {
            Backing::Small => libc::MADV_NOHUGEPAGE,
            _ => libc::MADV_HUGEPAGE,
        };
        // Failure (THP compiled out) only changes what is measured.
        let _ = m.advise(advice);
        Ok(Mapping(m))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
}

/// `len` split into `threads` contiguous parts, 2 MiB aligned.
pub(crate) fn parts(len: usize, threads: usize) -> Vec<(usize, usize)> {
    let t = threads.max(1);
    let step = len.div_ceil(t).next_multiple_of(HUGE_2M).max(HUGE_2M);
    (0..t)
        .map(|i| (i * step).min(len))
        .map(|off| (off, step.min(len - off)))
        .filter(|p| p.1 > 0)
        .collect()
}

/// Runs `f(offset, len)` on every part, one thread per part (the
/// workspace's chunked driver, `hostmem::parallel`, with as many workers
/// as parts).
fn in_parallel(len: usize, threads: usize, f: impl Fn(usize, usize) + Sync) -> Duration {
    let ps = parts(len, threads);
    let start = Instant::now();
    let _ = hostmem::parallel(&ps, ps.len(), |&(off, l)| {
        f(off, l);
        Ok::<(), ()>(())
    });
    start.elapsed()
}

/// While alive, the calling thread (and every thread it spawns: Linux
/// threads inherit the policy) runs at `SCHED_FIFO` priority 1, the
/// lowest real-time priority; dropping it restores the policy it had.
///
/// Why: on a shared machine a timed run of tens of milliseconds is
/// preempted by other processes many times (load average 5 on 2 CPUs
/// here), so its wall time measures its share of the CPU, not the
/// stores; one and the same backend measured 0.78x-1.28x of itself in
/// one run. At `SCHED_FIFO` the best of a few runs agreed within 2 %
/// across backends that are the same code. It is held only for one
/// timed run (≈0.1 s), and the kernel's real-time throttling
/// (`sched_rt_runtime_us`) keeps 5 % of every CPU for everyone else.
pub(crate) struct Realtime {
    old: Option<(libc::c_int, libc::sched_param)>,
}

impl Realtime {
    /// Enters `SCHED_FIFO` if the process may (root or `CAP_SYS_NICE`,
    /// or an `RLIMIT_RTPRIO`); otherwise does nothing. Returns whether it
    /// did.
    pub(crate) fn enter() -> (Realtime, bool) {
        // SAFETY: plain syscalls on the calling thread with structs we own.
        unsafe {
            let policy = libc::sched_getscheduler(0);
            let mut old: libc::sched_param = std::mem::zeroed();
            if policy < 0 || libc::sched_getparam(0, &mut old) != 0 {
                return (Realtime { old: None }, false);
            }
            let p = libc::sched_param { sched_priority: 1 };
            if libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) != 0 {
                return (Realtime { old: None }, false);
            }
            (
                Realtime {
                    old: Some((policy, old)),
                },
                true,
            )
        }
    }
}

impl Drop for Realtime {
    fn drop(&mut self) {
        if let Some((policy, p)) = self.old {
            // SAFETY: restores what sched_getscheduler/getparam returned.
            unsafe { libc::sched_setscheduler(0, policy, &p) };
        }
    }
}

/// glibc `memset` of `fill` over the mapping, `threads` parts in parallel.
pub(crate) fn memset(m: &Mapping, threads: usize, fill: u8) -> Duration {
    in_parallel(m.len(), threads, |off, l| {
        // SAFETY: disjoint parts of our mapping.
        unsafe { libc::memset(m.ptr().add(off).cast(), fill.into(), l) };
    })
}

/// The engine over the whole mapping.
pub(crate) fn engine(m: &Mapping, z: &Zeroer) -> Duration {
    let start = Instant::now();
    // SAFETY: our mapping, not referenced elsewhere during the call.
    unsafe { z.zero_raw(m.ptr(), m.len(), None) };
    start.elapsed()
}

/// Dirties `len` bytes of `m`, then times `backend` zeroing them from
/// one thread per CPU in `cpus`, each pinned to the whole set (so the
/// threads stay on that NUMA node): the NUMA local/remote measurement,
/// where the engine's own placement would move the work to the memory.
pub(crate) fn pinned_zero(
    m: &Mapping,
    len: usize,
    cpus: &[usize],
    backend: prezero::Backend,
) -> Duration {
    let ps = parts(len.min(m.len()), cpus.len().max(1));
    let run = |zero: bool| {
        let start = Instant::now();
        std::thread::scope(|s| {
            for &(off, l) in &ps {
                s.spawn(move || {
                    hostmem::numa::pin_current_thread(cpus);
                    // SAFETY: disjoint parts of our mapping; the backend
                    // is available (auto chose it).
                    unsafe {
                        let p = m.ptr().add(off);
                        if zero {
                            let _ = prezero::zero_with(backend, p, l);
                        } else {
                            std::ptr::write_bytes(p, 0x5a, l);
                        }
                    }
                });
            }
        });
        start.elapsed()
    };
    run(false);
    run(true)
}

/// Maps `len` fresh bytes with `backing` and times `MADV_POPULATE_WRITE`
/// over it from `threads` threads (disjoint parts): the kernel zeroes
/// every page as it faults it in. Mapping and unmapping are not timed.
pub(crate) fn populate(len: usize, backing: Backing, threads: usize) -> io::Result<Duration> {
    let m = &Mapping::new(len, backing)?;
    let err = std::sync::Mutex::new(None);
    let t = in_parallel(m.len(), threads, |off, l| {
        // SAFETY: inside our own mapping.
        if let Err(e) = unsafe { hostmem::populate_write(m.ptr().add(off), l) } {
            *err.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        }
    });
    match err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realtime_is_entered_and_left() {
        let before = unsafe { libc::sched_getscheduler(0) };
        let (rt, on) = Realtime::enter();
        let during = unsafe { libc::sched_getscheduler(0) };
        if on {
            assert_eq!(during, libc::SCHED_FIFO);
            // Spawned threads inherit it (the engine's workers).
            let child = std::thread::spawn(|| unsafe { libc::sched_getscheduler(0) })
                .join()
                .unwrap();
            assert_eq!(child, libc::SCHED_FIFO);
        } else {
            testsupport::skip(
                "SCHED_FIFO",
                "SCHED_FIFO not permitted here; only the restore is checked",
            );
        }
        drop(rt);
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, before);
    }

    #[test]
    fn parts_cover_exactly() {
        for len in [0, 1, HUGE_2M - 1, HUGE_2M, 5 * HUGE_2M + 3, 1 << 30] {
            for t in 1..=5 {
                let ps = parts(len, t);
                assert!(ps.len() <= t);
                let mut at = 0;
                for &(o, l) in &ps {
                    assert_eq!(o, at);
                    assert!(o % HUGE_2M == 0);
                    at += l;
                }
                assert_eq!(at, len, "{len} {t}");
            }
        }
    }

    #[test]
    fn memset_and_populate_work() {
        let m = Mapping::new(6 << 20, Backing::Thp).unwrap();
        assert_eq!(m.ptr() as usize % HUGE_2M, 0);
        memset(&m, 3, 0x11);
        let s = unsafe { std::slice::from_raw_parts(m.ptr(), m.len()) };
        assert!(s.iter().all(|&b| b == 0x11));
        let z = Zeroer::new(prezero::Choice::Auto).unwrap().threads(2);
        engine(&m, &z);
        let s = unsafe { std::slice::from_raw_parts(m.ptr(), m.len()) };
        assert!(s.iter().all(|&b| b == 0));
        assert!(populate(4 << 20, Backing::Small, 2).unwrap() > Duration::ZERO);
    }
}
