//! The parallel driver: splits a job into chunks and zeroes them on scoped
//! worker threads.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::plan::{make_plan, worker_count, Plan, Worker, MAX_CHUNK};
use crate::{auto, fault, kernels, numa, Backend, Choice, Error};
use hostmem::PageSize;

/// What a zeroing job did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZeroStats {
    /// Bytes zeroed.
    pub bytes: u64,
    /// Wall time of the job, including thread start-up.
    pub elapsed: Duration,
    /// Worker threads used (small jobs use fewer than requested).
    pub threads: usize,
    /// Backend that ran (for `auto`, the one it resolved to).
    pub backend: Backend,
}

impl ZeroStats {
    /// Throughput in GiB/s (0 for an empty or instant job).
    pub fn gib_per_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 / (1u64 << 30) as f64 / s
    }
}

/// The zeroing engine, configured with a builder.
///
/// ```
/// use prezero::{Choice, PageSize, Zeroer};
/// let z = Zeroer::new(Choice::Auto)?.threads(0).granule(PageSize::Size2M);
/// let mut buf = vec![0xa5u8; 8 << 20];
/// let stats = z.zero_slice(&mut buf);
/// assert!(buf.iter().all(|&b| b == 0));
/// assert_eq!(stats.bytes, 8 << 20);
/// # Ok::<(), prezero::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Zeroer {
    choice: Choice,
    threads: usize,
    granule: PageSize,
    pin: bool,
}

/// Progress callback: receives the total bytes zeroed so far, monotonically,
/// from whichever worker finished a chunk (one call at a time).
pub type Progress<'a> = Option<&'a (dyn Fn(u64) + Sync)>;

impl Zeroer {
    /// An engine using `choice`, all online CPUs, 2 MiB granules, no
    /// pinning. Fails with [`Error::Unavailable`] for a backend this CPU
    /// lacks.
    pub fn new(choice: Choice) -> Result<Zeroer, Error> {
        if let Choice::Backend(b) = choice {
            if !b.is_available() {
                return Err(Error::unavailable(b));
            }
        }
        Ok(Zeroer {
            choice,
            threads: 0,
            granule: PageSize::Size2M,
            pin: false,
        })
    }

    /// Most worker threads; 0 means every CPU the process may use
    /// (`available_parallelism`). Jobs use one worker per 2 MiB at most.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Chunk alignment: the page size backing the memory (default 2M, a
    /// multiple of 4 KiB so also right for base pages). Chunk boundaries
    /// fall on multiples of it, so no (huge) page is ever written by two
    /// workers: two threads faulting or zeroing the same 2 MiB page contend
    /// on it, and a page lives on one NUMA node, so an aligned chunk is
    /// entirely on one node.
    pub fn granule(mut self, g: PageSize) -> Self {
        self.granule = g;
        self
    }

    /// Pin each worker to one CPU (of its NUMA node, on NUMA machines).
    /// Steadier numbers for benchmarks; off by default so a busy CPU does
    /// not stall the job.
    pub fn pin_cpus(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }

    /// What was asked for.
    pub fn choice(&self) -> Choice {
        self.choice
    }

    /// The backend large jobs use (for `auto`, the calibrated one; this
    /// runs the calibration on first use).
    pub fn backend(&self) -> Backend {
        match self.choice {
            Choice::Auto => auto::auto_backend_threads(self.max_threads()),
            Choice::Backend(b) => b,
        }
    }

    /// The backend a job of `len` bytes uses.
    pub fn backend_for(&self, len: usize) -> Backend {
        match self.choice {
            // Large jobs: the backend calibrated for the workers this job
            // will run on.
            Choice::Auto if len >= auto::small_threshold() => {
                auto::auto_backend_threads(crate::plan::worker_count(len, self.max_threads()))
            }
            Choice::Auto => auto::auto_backend_for(len),
            Choice::Backend(b) => b,
        }
    }

    /// The thread limit after resolving 0 to the CPU count.
    pub fn max_threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            cpu_count()
        }
    }

    /// Zeroes exactly `[ptr, ptr + len)` in parallel.
    ///
    /// `progress`, if given, is called with the running total of bytes
    /// zeroed after each chunk (chunks are at most 64 MiB).
    ///
    /// # Safety
    /// The range must be valid for writes and not accessed by anyone else
    /// (including through references) until this returns.
    pub unsafe fn zero_raw(&self, ptr: *mut u8, len: usize, progress: Progress<'_>) -> ZeroStats {
        self.zero_ranges(&[(ptr, len)], progress)
    }

    /// Zeroes several disjoint ranges as one parallel job (for example all
    /// regions of a guest's memory), with one backend choice for the total.
    ///
    /// A store to memory the kernel cannot supply (for example an exhausted
    /// hugetlb pool) raises SIGBUS; use [`Zeroer::try_zero_ranges`] for
    /// memory that is not known to be populated or reserved.
    ///
    /// # Safety
    /// As [`Zeroer::zero_raw`], for every range; ranges must not overlap.
    pub unsafe fn zero_ranges(
        &self,
        ranges: &[(*mut u8, usize)],
        progress: Progress<'_>,
    ) -> ZeroStats {
        self.job(ranges, progress, false).0
    }

    /// Like [`Zeroer::zero_ranges`], but every chunk is first faulted in
    /// with `MADV_POPULATE_WRITE`, so memory the kernel cannot supply is an
    /// [`Error::Fault`] instead of a SIGBUS. Costs about nothing for
    /// untouched memory (the stores would take the same faults) and a page
    /// table walk for touched memory.
    ///
    /// On error the job stops early: part of the memory may be zeroed and
    /// part not, so none of it may be called zero.
    ///
    /// # Safety
    /// As [`Zeroer::zero_ranges`].
    pub unsafe fn try_zero_ranges(
        &self,
        ranges: &[(*mut u8, usize)],
        progress: Progress<'_>,
    ) -> Result<ZeroStats, Error> {
        match self.job(ranges, progress, true) {
            (stats, None) => Ok(stats),
            (_, Some(e)) => Err(e),
        }
    }

    /// [`Zeroer::try_zero_ranges`] for one range.
    ///
    /// # Safety
    /// As [`Zeroer::zero_raw`].
    pub unsafe fn try_zero_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        progress: Progress<'_>,
    ) -> Result<ZeroStats, Error> {
        self.try_zero_ranges(&[(ptr, len)], progress)
    }

    /// Runs a job; `populate` faults chunks in first and the first error
    /// stops the job.
    unsafe fn job(
        &self,
        ranges: &[(*mut u8, usize)],
        progress: Progress<'_>,
        populate: bool,
    ) -> (ZeroStats, Option<Error>) {
        let start = Instant::now();
        let total: usize = ranges.iter().map(|r| r.1).sum();
        let backend = self.backend_for(total);
        let topo = numa::system_topology();
        // Fast path: a job of one chunk for one unpinned worker on a
        // one-node machine runs right here, without planning (small jobs
        // are common in a VMM and the plan costs more than zeroing a page).
        // Longer jobs are planned even on one thread, so progress is
        // reported per chunk.
        if total <= MAX_CHUNK
            && worker_count(total, self.max_threads()) == 1
            && !self.pin
            && !topo.is_numa()
        {
            for &(p, l) in ranges {
                if populate {
                    if let Err(e) = fault::populate(p as usize, l) {
                        let stats = ZeroStats {
                            bytes: 0,
                            elapsed: start.elapsed(),
                            threads: 1,
                            backend,
                        };
                        return (stats, Some(e));
                    }
                }
                kernels::zero(backend, p, l);
            }
            if let (Some(p), true) = (progress, total > 0) {
                p(total as u64);
            }
            let stats = ZeroStats {
                bytes: total as u64,
                elapsed: start.elapsed(),
                threads: 1,
                backend,
            };
            return (stats, None);
        }
        let spans: Vec<(usize, usize)> = ranges
            .iter()
            .filter(|r| r.1 > 0)
            .map(|&(p, l)| (p as usize, l))
            .collect();
        let allowed = if self.pin || topo.is_numa() {
            numa::allowed_cpus()
        } else {
            Vec::new()
        };
        let plan = make_plan(
            &spans,
            self.max_threads(),
            self.granule.bytes() as usize,
            self.pin,
            topo,
            &allowed,
            &numa::node_of,
        );
        let (threads, err) = run_plan(&plan, backend, progress, populate);
        let stats = ZeroStats {
            bytes: total as u64,
            elapsed: start.elapsed(),
            threads,
            backend,
        };
        (stats, err)
    }

    /// Zeroes a byte slice (in parallel when it is large).
    pub fn zero_slice(&self, buf: &mut [u8]) -> ZeroStats {
        // SAFETY: a unique borrow of the whole slice.
        unsafe { self.zero_raw(buf.as_mut_ptr(), buf.len(), None) }
    }
}

/// CPUs the process may use, read once: `available_parallelism` reads
/// cgroup files on every call (≈100 µs on the development machine, 1000×
/// the cost of zeroing 4 KiB).
fn cpu_count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `plan` and returns the number of workers that ran and, with
/// `populate`, the first fault-in error (which stops every worker).
///
/// The calling thread is worker 0 unless that worker must be pinned
/// (pinning the caller would leak affinity into it). If a thread cannot be
/// spawned, the caller drains the queues itself, so the job always
/// completes.
///
/// # Safety
/// Every chunk of the plan must be valid for writes and unshared;
/// `backend` must be available.
pub(crate) unsafe fn run_plan(
    plan: &Plan,
    backend: Backend,
    progress: Progress<'_>,
    populate: bool,
) -> (usize, Option<Error>) {
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let cursors: Vec<AtomicUsize> = plan.queues.iter().map(|_| AtomicUsize::new(0)).collect();
    let done = AtomicU64::new(0);
    let reported = Mutex::new(0u64);

    let drain = |home: usize| {
        let mut order = vec![home, plan.shared()];
        order.extend(0..plan.queues.len());
        let mut seen = vec![false; plan.queues.len()];
        for q in order {
            if std::mem::replace(&mut seen[q], true) {
                continue;
            }
            loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let i = cursors[q].fetch_add(1, Ordering::Relaxed);
                let Some(c) = plan.queues[q].get(i) else {
                    break;
                };
                if populate {
                    // SAFETY: the caller's own writable mapping.
                    if let Err(e) = unsafe { fault::populate(c.addr, c.len) } {
                        stop.store(true, Ordering::Relaxed);
                        failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                }
                // SAFETY: the caller guarantees every chunk is writable;
                // each index is taken by exactly one worker.
                unsafe { kernels::zero(backend, c.addr as *mut u8, c.len) };
                let total = done.fetch_add(c.len as u64, Ordering::Relaxed) + c.len as u64;
                if let Some(p) = progress {
                    let mut r = reported.lock().unwrap_or_else(|e| e.into_inner());
                    if total > *r {
                        *r = total;
                        p(total);
                    }
                }
            }
        }
    };

    let Some(first) = plan.workers.first() else {
        return (0, None);
    };
    let caller_works = first.cpus.is_none();
    let spawned: &[Worker] = if caller_works {
        &plan.workers[1..]
    } else {
        &plan.workers
    };
    std::thread::scope(|s| {
        let mut failed = false;
        for w in spawned {
            let drain = &drain;
            let r = std::thread::Builder::new()
                .name("prezero".into())
                .spawn_scoped(s, move || {
                    if let Some(cpus) = &w.cpus {
                        numa::pin_current_thread(cpus);
                    }
                    drain(w.home);
                });
            failed |= r.is_err();
        }
        if caller_works || failed {
            drain(first.home);
        }
    });
    let err = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    (plan.workers.len(), err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Node, Topology};

    #[test]
    fn unavailable_backend_is_an_error_not_sigill() {
        for b in Backend::ALL {
            let r = Zeroer::new(Choice::Backend(b));
            assert_eq!(r.is_ok(), b.is_available(), "{b}");
            if let Err(e) = r {
                let msg = e.to_string();
                assert!(msg.contains(b.name()) && msg.contains("portable"), "{msg}");
                let mut x = [1u8; 4];
                // SAFETY: a local array.
                assert!(unsafe { crate::zero_with(b, x.as_mut_ptr(), 4) }.is_err());
                assert_eq!(x, [1; 4], "nothing written");
            }
        }
    }

    #[test]
    fn progress_is_monotonic_and_complete() {
        // A large job on every CPU: below the LLC-derived small threshold
        // (up to 64 MiB: a 480 MiB L3 was seen) auto takes the small-job
        // backend, not the 2-worker calibration asserted below.
        let len = (40 << 20).max(crate::auto::small_threshold());
        let mut buf = vec![7u8; len];
        let seen = Mutex::new(Vec::new());
        let cb = |n: u64| seen.lock().unwrap().push(n);
        let z = Zeroer::new(Choice::Auto).unwrap().threads(2);
        // SAFETY: our own buffer.
        let st = unsafe { z.zero_raw(buf.as_mut_ptr(), len, Some(&cb)) };
        assert!(buf.iter().all(|&b| b == 0));
        let seen = seen.into_inner().unwrap();
        assert!(seen.len() > 1, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*seen.last().unwrap(), len as u64);
        assert_eq!(st.bytes, len as u64);
        assert_eq!(st.threads, 2);
        // Calibrated for the 2 workers the job ran on.
        assert_eq!(st.backend, crate::auto_backend_threads(2));
        assert!(st.gib_per_s() > 0.0);
    }

    /// A shared file mapping longer than its file: stores past end of file
    /// would raise SIGBUS.
    struct PastEof {
        ptr: *mut u8,
        _map: hostmem::Mapping,
    }

    impl PastEof {
        fn new(file_len: usize, map_len: usize) -> PastEof {
            use std::os::fd::AsFd;
            let f = hostmem::memfd(
                c"prezero-test",
                file_len as u64,
                PageSize::Size4K,
                hostmem::Sealing::Never,
            )
            .unwrap();
            let m = hostmem::Mapping::file(f.as_fd(), 0, map_len).map().unwrap();
            PastEof {
                ptr: m.as_ptr(),
                _map: m,
            }
        }
    }

    #[test]
    fn unsuppliable_memory_is_an_error_not_sigbus() {
        // Small job (inline path) and large job (planned, two workers).
        for (file, map, threads) in [(4096, 3 * 4096, 1), (8 << 20, 24 << 20, 2)] {
            let m = PastEof::new(file, map);
            let z = Zeroer::new(Choice::Auto)
                .unwrap()
                .threads(threads)
                .granule(PageSize::Size4K);
            // SAFETY: our mapping; the part past EOF is what is tested.
            let e = unsafe { z.try_zero_raw(m.ptr, map, None) }.unwrap_err();
            assert!(matches!(e, Error::Fault { .. }), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains("cannot fault in") && msg.contains("hugepages"),
                "{msg}"
            );
            // Within the file it works and zeroes.
            // SAFETY: as above, within the file.
            unsafe { std::ptr::write_bytes(m.ptr, 0x33, file) };
            let st = unsafe { z.try_zero_raw(m.ptr, file, None) }.unwrap();
            assert_eq!(st.bytes, file as u64);
            let s = unsafe { std::slice::from_raw_parts(m.ptr, file) };
            assert!(s.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn one_thread_long_jobs_still_report_progress() {
        let len = 3 * MAX_CHUNK + 5;
        let mut buf = vec![7u8; len];
        let calls = AtomicUsize::new(0);
        let cb = |_: u64| {
            calls.fetch_add(1, Ordering::Relaxed);
        };
        let z = Zeroer::new(Choice::Auto).unwrap().threads(1);
        // SAFETY: our own buffer.
        let st = unsafe { z.zero_raw(buf.as_mut_ptr(), len, Some(&cb)) };
        assert_eq!(st.threads, 1);
        assert!(calls.into_inner() >= 4);
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn threads_zero_means_all_cpus_and_small_jobs_one_worker() {
        let z = Zeroer::new(Choice::Auto).unwrap();
        assert_eq!(
            z.max_threads(),
            std::thread::available_parallelism().unwrap().get()
        );
        let mut small = [3u8; 4096];
        let st = z.zero_slice(&mut small);
        assert_eq!(st.threads, 1);
        assert_eq!(st.backend, crate::small_backend());
        assert!(small.iter().all(|&b| b == 0));
        let st = z.zero_slice(&mut []);
        assert_eq!(st.bytes, 0);
    }

    #[test]
    fn pinned_workers_zero_everything() {
        let mut buf = vec![9u8; 16 << 20];
        let z = Zeroer::new(Choice::Auto)
            .unwrap()
            .threads(3)
            .pin_cpus(true)
            .granule(PageSize::Size4K);
        let st = z.zero_slice(&mut buf[5..]);
        assert_eq!(st.threads, 3);
        assert_eq!(buf[..5], [9; 5]);
        assert!(buf[5..].iter().all(|&b| b == 0));
    }

    #[test]
    fn fake_numa_plan_executes_exactly() {
        // Two fake nodes on this machine's CPUs; the upper half of the
        // buffer "lives" on node 1. Workers pin to their node's CPUs.
        let cpus = numa::allowed_cpus();
        let (a, b) = (cpus[0], *cpus.last().unwrap());
        let topo = Topology {
            nodes: vec![
                Node {
                    id: 0,
                    cpus: vec![a],
                },
                Node {
                    id: 1,
                    cpus: vec![b],
                },
            ],
        };
        let len = 24 << 20;
        let mut buf = vec![0x5au8; len + 2];
        let base = buf.as_mut_ptr() as usize + 1;
        let mid = base + len / 2;
        let node_of = |x: usize| Some(usize::from(x >= mid));
        let plan = make_plan(&[(base, len)], 2, 4096, false, &topo, &cpus, &node_of);
        assert_eq!(plan.workers.len(), 2);
        assert!(plan.workers.iter().all(|w| w.cpus.is_some()));
        // SAFETY: the plan covers our buffer minus one byte at each end.
        let (n, err) = unsafe { run_plan(&plan, crate::small_backend(), None, true) };
        assert_eq!(n, 2);
        assert!(err.is_none());
        assert_eq!((buf[0], buf[len + 1]), (0x5a, 0x5a));
        assert!(buf[1..=len].iter().all(|&b| b == 0));
    }
}
