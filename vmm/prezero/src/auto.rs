//! `auto`: choosing the fastest backend for this machine by measuring.
//!
//! Which backend wins depends on the CPU and memory system, so instead of
//! a table of CPU models the first large job calibrates, once per process:
//!
//! * The buffer is private, touched first (page faults would dominate
//!   otherwise), and 4× the last-level cache (clamped to 64..256 MiB; 128
//!   MiB here), so a pass cannot stay in cache.
//! * Each candidate zeroes the whole buffer in [`WINDOWS`] timed windows
//!   (8 MiB here); its estimate is the median window after the first (the
//!   first pays for the previous candidate's dirty lines). The median
//!   ignores both windows where the thread was preempted (a busy machine)
//!   and short bursts the memory system absorbs (on this machine a single
//!   window can run at 70–80 GiB/s for every backend, so the best window
//!   says nothing). Measured here, median of 16 × 8 MiB, one thread:
//!   `rep stosb` ≈18, `movnti` ≈21, AVX2 NT ≈35, AVX-512 NT ≈46, `clzero`
//!   ≈48 GiB/s.
//! * Candidates: every available backend, except that `portable` is
//!   skipped when `rep stosb` exists (glibc's `memset` is `rep stosb` for
//!   large sizes) and `movnti` when a vector NT backend exists (same
//!   protocol, 8-byte instead of 32/64-byte stores).
//! * The fastest non-temporal candidate wins unless a cache-allocating one
//!   is more than [`CACHED_MARGIN`] faster: throughput alone does not show
//!   that a cache-allocating pass over GiBs evicts everyone's working set.
//! * One full round always runs (≈25 ms of stores on this machine plus
//!   the touch); more rounds, pooled into the same medians, run only while
//!   under [`CALIBRATION_BUDGET`].
//!
//! Small jobs (below [`small_threshold`], half the cache) do not use the calibrated
//! backend: their data is likely wanted in cache soon (page tables, boot
//! structures, a just-allocated buffer), and non-temporal stores would push
//! it out to DRAM, so they use cache-allocating `rep stosb` (or `memset`,
//! if that measures faster: see [`small_backend`]).
//!
//! The cost is dominated by touching the buffer: ≈0.1 s on ordinary
//! hardware, up to ≈1 s on a machine whose memory is backed lazily
//! underneath (first touch ≈0.4 GiB/s; those pages are then reused by the
//! guest RAM mapped next, which would have paid for them anyway). A VMM
//! hides it with [`start_calibration`] at process start; callers that know
//! the answer choose a fixed backend with [`crate::Choice::Backend`].

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{kernels, Backend};

/// The smallest [`small_threshold`]: below 1 MiB a job is always small.
pub const SMALL_THRESHOLD: usize = 1 << 20;
/// The largest [`small_threshold`].
pub const MAX_SMALL_THRESHOLD: usize = 64 << 20;

/// Jobs smaller than this use [`small_backend`] under [`crate::Choice::Auto`]:
/// half the last-level cache (from sysfs; 16 MiB on the development
/// machine), clamped to [`SMALL_THRESHOLD`]..=[`MAX_SMALL_THRESHOLD`].
///
/// A job that fits in half the cache leaves its zeros cache-resident for
/// whoever reads them next without evicting everything else, so ordinary
/// stores win (criterion, 2 MiB: `rep stosb` ≈ 16 GiB/s against ≈ 11 GiB/s
/// for NT stores when the buffer is reused). Guest RAM regions are far
/// larger than any cache and store-bandwidth bound: they take the
/// calibrated backend.
pub fn small_threshold() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| threshold_for_llc(llc_bytes()))
}

fn threshold_for_llc(llc: Option<usize>) -> usize {
    llc.map_or(SMALL_THRESHOLD, |c| {
        (c / 2).clamp(SMALL_THRESHOLD, MAX_SMALL_THRESHOLD)
    })
}

/// Calibration stops starting new rounds after this much time.
pub const CALIBRATION_BUDGET: Duration = Duration::from_millis(50);

/// Timed windows per candidate pass over the buffer.
pub const WINDOWS: usize = 16;
/// Most rounds over all candidates.
const ROUNDS: usize = 3;

/// The measurement behind [`auto_backend`].
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The fastest backend.
    pub backend: Backend,
    /// Median single-thread window throughput per measured candidate,
    /// GiB/s, in [`Backend::ALL`] order.
    pub gib_per_s: Vec<(Backend, f64)>,
    /// Wall time spent calibrating, including touching the buffer.
    pub elapsed: Duration,
    /// Size of the calibration buffer.
    pub buffer_bytes: usize,
}

/// The calibrated fastest backend for large jobs on this machine.
///
/// The first call measures (bounded: about [`CALIBRATION_BUDGET`]); later
/// calls return the cached answer.
pub fn auto_backend() -> Backend {
    calibration().backend
}

/// Starts the calibration on a background thread and returns at once, so a
/// VMM can overlap it with loading the kernel and setting up KVM; the
/// first [`auto_backend`] call then waits only for what is left. Calling
/// it again, or after calibration, does nothing.
pub fn start_calibration() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("prezero-calibrate".into())
            .spawn(|| {
                calibration();
            });
        // Without a thread the first auto job calibrates inline instead.
        drop(spawned);
    });
}

/// The full calibration result (runs it on first use).
pub fn calibration() -> &'static Calibration {
    static CAL: OnceLock<Calibration> = OnceLock::new();
    CAL.get_or_init(calibrate)
}

/// The backend [`crate::Choice::Auto`] uses for jobs below
/// [`small_threshold`]: the faster cache-allocating backend, `rep stosb`
/// or the C library's `memset` ([`Backend::Portable`]), on a 256 KiB
/// cache-resident buffer. Measured once (well under a millisecond); `rep
/// stosb` wins ties within 5 %. Without ERMS it is always `memset`.
pub fn small_backend() -> Backend {
    static SMALL: OnceLock<Backend> = OnceLock::new();
    *SMALL.get_or_init(|| {
        if !Backend::RepStosb.is_available() {
            return Backend::Portable;
        }
        let mut buf = vec![1u8; 256 << 10];
        let mut time = |b: Backend| {
            (0..16)
                .map(|_| {
                    let t = Instant::now();
                    // SAFETY: our own buffer; both backends are available.
                    unsafe { kernels::zero(b, buf.as_mut_ptr(), buf.len()) };
                    t.elapsed()
                })
                .min()
                .unwrap_or_default()
        };
        let (rep, memset) = (time(Backend::RepStosb), time(Backend::Portable));
        if rep.as_secs_f64() <= memset.as_secs_f64() * 1.05 {
            Backend::RepStosb
        } else {
            Backend::Portable
        }
    })
}

/// The backend [`crate::Choice::Auto`] uses for a job of `len` bytes.
pub fn auto_backend_for(len: usize) -> Backend {
    if len < small_threshold() {
        small_backend()
    } else {
        auto_backend()
    }
}

/// The calibrated fastest backend for large jobs that run on `threads`
/// workers.
///
/// Why per thread count: the fastest backend on one thread need not be the
/// fastest on several. On an AMD EPYC with avx2 and clzero, `auto`
/// calibrated on one thread chose clzero and ran at 0.85x the best backend
/// on two threads, where AVX2 NT stores were faster (the memory system
/// saturates differently). One thread uses [`calibration`]; each other
/// count is measured once, on first use, with that many threads zeroing
/// their own buffers at the same time, and cached for the process.
pub fn auto_backend_threads(threads: usize) -> Backend {
    calibration_for(threads).backend
}

/// The calibration behind [`auto_backend_threads`] (runs it on first use).
pub fn calibration_for(threads: usize) -> &'static Calibration {
    if threads <= 1 {
        return calibration();
    }
    static CALS: std::sync::Mutex<Vec<(usize, &'static Calibration)>> =
        std::sync::Mutex::new(Vec::new());
    let mut cals = CALS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = cals.iter().find(|(t, _)| *t == threads) {
        return c;
    }
    // Bounded: one entry per thread count a process uses (at most the CPU
    // count), kept for the process's life.
    let c: &'static Calibration = Box::leak(Box::new(calibrate_threads(threads)));
    cals.push((threads, c));
    c
}

/// [`calibrate`] with `threads` workers zeroing at once, each its own
/// buffer of [`buffer_bytes`] / 2 (at least 32 MiB): aggregate GiB/s per
/// candidate, median of the rounds, picked by the same rule.
fn calibrate_threads(threads: usize) -> Calibration {
    let start = Instant::now();
    let candidates = candidates();
    let per = (buffer_bytes() / 2).max(32 << 20);
    let fallback = |start: Instant| Calibration {
        backend: calibration().backend,
        gib_per_s: Vec::new(),
        elapsed: start.elapsed(),
        buffer_bytes: 0,
    };
    let bufs: Option<Vec<Buffer>> = (0..threads).map(|_| Buffer::new(per)).collect();
    let Some(bufs) = bufs else {
        return fallback(start);
    };
    for b in &bufs {
        // SAFETY: our mapping, whole length (first-touch faults out of the
        // samples).
        unsafe { std::ptr::write_bytes(b.ptr, 1, b.len) };
    }
    let ptrs: Vec<(usize, usize)> = bufs.iter().map(|b| (b.ptr as usize, b.len)).collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); candidates.len()];
    for round in 0..ROUNDS + 2 {
        if round > 1 && start.elapsed() > CALIBRATION_BUDGET * threads as u32 {
            break;
        }
        for (i, &b) in candidates.iter().enumerate() {
            let barrier = std::sync::Barrier::new(threads);
            let t0 = std::thread::scope(|s| {
                let hs: Vec<_> = ptrs
                    .iter()
                    .map(|&(p, l)| {
                        let barrier = &barrier;
                        s.spawn(move || {
                            barrier.wait();
                            let t = Instant::now();
                            // SAFETY: this worker's own buffer; b is
                            // available.
                            unsafe { kernels::zero(b, p as *mut u8, l) };
                            (t, Instant::now())
                        })
                    })
                    .collect();
                let spans: Vec<(Instant, Instant)> = hs
                    .into_iter()
                    .map(|h| h.join().expect("no panic"))
                    .collect();
                let first = spans.iter().map(|s| s.0).min().expect("threads > 1");
                let last = spans.iter().map(|s| s.1).max().expect("threads > 1");
                last.duration_since(first)
            });
            let secs = t0.as_secs_f64().max(1e-9);
            if round > 0 {
                samples[i].push((per * threads) as f64 / secs / (1u64 << 30) as f64);
            }
        }
    }
    let best: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let winner = pick(
        &candidates
            .iter()
            .copied()
            .zip(best.iter().copied())
            .collect::<Vec<_>>(),
    );
    match winner {
        Some(backend) => Calibration {
            backend,
            gib_per_s: candidates.into_iter().zip(best).collect(),
            elapsed: start.elapsed(),
            buffer_bytes: per * threads,
        },
        None => fallback(start),
    }
}

/// An anonymous private mapping, unmapped on drop.
struct Buffer {
    ptr: *mut u8,
    len: usize,
}

impl Buffer {
    fn new(len: usize) -> Option<Buffer> {
        // SAFETY: fresh anonymous mapping; checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Guest RAM is hugepage backed; measure with the same TLB reach.
        // SAFETY: advice on our own mapping; failure is harmless.
        unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        Some(Buffer {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The backends worth measuring (see the module docs for the pruning).
pub(crate) fn candidates() -> Vec<Backend> {
    let avail = crate::available_backends();
    let has = |b| avail.contains(&b);
    avail
        .iter()
        .copied()
        .filter(|&b| match b {
            Backend::Portable => !has(Backend::RepStosb),
            Backend::Movnti => !has(Backend::Avx2Nt) && !has(Backend::Avx512Nt),
            _ => true,
        })
        .collect()
}

/// A cache-allocating backend must beat the best non-temporal one by this
/// factor to be chosen for large jobs: its measured speed leaves out what
/// it costs everyone else (a job of GiBs flushes every cache of the
/// machine), and a short calibration flatters it (see module docs).
pub const CACHED_MARGIN: f64 = 1.2;

/// Chooses from measured (backend, GiB/s) pairs: the fastest
/// non-temporal backend unless a cache-allocating one is more than
/// [`CACHED_MARGIN`] faster.
pub(crate) fn pick(measured: &[(Backend, f64)]) -> Option<Backend> {
    let best = |nt: bool| {
        measured
            .iter()
            .filter(|m| m.0.is_non_temporal() == nt)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .copied()
    };
    match (best(true), best(false)) {
        (Some(nt), Some(c)) if c.1 > nt.1 * CACHED_MARGIN => Some(c.0),
        (Some(nt), _) => Some(nt.0),
        (None, c) => c.map(|c| c.0),
    }
}

/// Last-level cache size of CPU 0 from sysfs (largest `index*/size`).
fn llc_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| {
            let s = s.trim();
            let (n, mult) = match s.strip_suffix('K') {
                Some(n) => (n, 1 << 10),
                None => match s.strip_suffix('M') {
                    Some(n) => (n, 1 << 20),
                    None => (s, 1),
                },
            };
            n.parse::<usize>().ok().map(|n| n * mult)
        })
        .max()
}

/// Calibration buffer size: 4× the last-level cache, 64..256 MiB.
pub(crate) fn buffer_bytes() -> usize {
    (llc_bytes().unwrap_or(32 << 20) * 4).clamp(64 << 20, 256 << 20)
}

/// Median of `v` (0 for none); sorts `v`.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn calibrate() -> Calibration {
    let start = Instant::now();
    let candidates = candidates();
    let len = buffer_bytes();
    let fallback = |start: Instant| Calibration {
        backend: small_backend(),
        gib_per_s: Vec::new(),
        elapsed: start.elapsed(),
        buffer_bytes: 0,
    };
    let Some(buf) = Buffer::new(len) else {
        return fallback(start);
    };
    // Touch it: first-touch page faults would dominate the samples.
    // SAFETY: our mapping, whole length.
    unsafe { std::ptr::write_bytes(buf.ptr, 1, buf.len) };

    let window = len / WINDOWS;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); candidates.len()];
    for round in 0..ROUNDS {
        if round > 0 && start.elapsed() > CALIBRATION_BUDGET {
            break;
        }
        for (i, &b) in candidates.iter().enumerate() {
            for w in 0..WINDOWS {
                let t = Instant::now();
                // SAFETY: the window lies inside our mapping; b is available.
                unsafe { kernels::zero(b, buf.ptr.add(w * window), window) };
                let secs = t.elapsed().as_secs_f64().max(1e-9);
                if w > 0 {
                    samples[i].push(window as f64 / secs / (1u64 << 30) as f64);
                }
            }
        }
    }
    let best: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let winner = pick(
        &candidates
            .iter()
            .copied()
            .zip(best.iter().copied())
            .collect::<Vec<_>>(),
    );
    match winner {
        Some(backend) => Calibration {
            backend,
            gib_per_s: candidates.into_iter().zip(best).collect(),
            elapsed: start.elapsed(),
            buffer_bytes: len,
        },
        None => fallback(start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_count_is_calibrated_once() {
        let c = candidates();
        let two = calibration_for(2);
        assert!(c.contains(&two.backend), "{two:?}");
        assert_eq!(two.gib_per_s.len(), c.len(), "every candidate measured");
        assert!(two.gib_per_s.iter().all(|(_, g)| *g > 0.0), "{two:?}");
        // Cached: the same measurement, not a second one.
        assert!(std::ptr::eq(two, calibration_for(2)));
        assert!(std::ptr::eq(calibration_for(1), calibration()));
        assert_eq!(auto_backend_threads(2), two.backend);
    }

    #[test]
    fn small_jobs_stay_cache_friendly() {
        // Below the threshold Auto never picks a non-temporal backend ...
        let t = small_threshold();
        assert!((SMALL_THRESHOLD..=MAX_SMALL_THRESHOLD).contains(&t));
        for len in [0, 1, 4096, 64 << 10, SMALL_THRESHOLD - 1, t - 1] {
            let b = auto_backend_for(len);
            assert!(!b.is_non_temporal(), "{len}: {b}");
            assert!(matches!(b, Backend::RepStosb | Backend::Portable));
            assert_eq!(b, small_backend());
        }
        // ... and at or above it, it takes the calibrated one.
        assert_eq!(auto_backend_for(t), auto_backend());
        assert_eq!(auto_backend_for(MAX_SMALL_THRESHOLD), auto_backend());
        assert_eq!(auto_backend_for(1 << 30), auto_backend());
    }

    #[test]
    fn median_ignores_outliers() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0]), 3.0);
        // Preempted windows (1.0) and bursts (80.0) do not move it.
        assert_eq!(median(&mut [20.0, 1.0, 22.0, 80.0, 21.0]), 21.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn threshold_follows_the_cache() {
        assert_eq!(threshold_for_llc(None), SMALL_THRESHOLD);
        assert_eq!(threshold_for_llc(Some(512 << 10)), SMALL_THRESHOLD);
        assert_eq!(threshold_for_llc(Some(32 << 20)), 16 << 20);
        assert_eq!(threshold_for_llc(Some(1 << 30)), MAX_SMALL_THRESHOLD);
    }

    #[test]
    fn pick_prefers_non_temporal_within_margin() {
        use Backend::*;
        assert_eq!(
            pick(&[(RepStosb, 11.0), (Avx2Nt, 24.0), (Avx512Nt, 25.0)]),
            Some(Avx512Nt)
        );
        assert_eq!(pick(&[(RepStosb, 28.0), (Avx512Nt, 25.0)]), Some(Avx512Nt));
        assert_eq!(pick(&[(RepStosb, 31.0), (Avx512Nt, 25.0)]), Some(RepStosb));
        assert_eq!(pick(&[(Portable, 5.0)]), Some(Portable));
        assert_eq!(pick(&[(Clzero, 5.0)]), Some(Clzero));
        assert_eq!(pick(&[]), None);
    }

    #[test]
    fn candidates_prune_dominated_backends() {
        let c = candidates();
        assert!(!c.is_empty() && c.iter().all(|b| b.is_available()));
        if Backend::RepStosb.is_available() {
            assert!(!c.contains(&Backend::Portable));
        }
        if Backend::Avx2Nt.is_available() {
            assert!(!c.contains(&Backend::Movnti));
        }
        let b = buffer_bytes();
        assert!((64 << 20..=256 << 20).contains(&b));
        assert_eq!(b % WINDOWS, 0);
    }

    #[test]
    fn background_calibration_agrees() {
        start_calibration();
        start_calibration();
        assert_eq!(auto_backend(), calibration().backend);
    }

    #[test]
    fn calibration_is_bounded_and_complete() {
        let c = calibration();
        assert!(c.backend.is_available());
        assert_eq!(c.gib_per_s.len(), candidates().len());
        assert!((64 << 20..=256 << 20).contains(&c.buffer_bytes));
        assert!(c.gib_per_s.iter().all(|&(_, g)| g > 0.0));
        let best = c.gib_per_s.iter().map(|x| x.1).fold(0.0, f64::max);
        assert!(c
            .gib_per_s
            .iter()
            .any(|&(b, g)| b == c.backend && g == best));
        // One round + touching the buffer; generous for a loaded CI box and
        // unoptimized test builds.
        assert!(c.elapsed < Duration::from_secs(10), "{:?}", c.elapsed);
        // Cached: the same answer again.
        assert_eq!(auto_backend(), c.backend);
    }
}
