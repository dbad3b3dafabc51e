//! `auto`: choosing the fastest backend for this machine by measuring.
//!
//! Which backend wins depends on the CPU and memory system (on the AMD EPYC
//! this was developed on, `rep stosb` zeroes ≈10 GiB/s per thread and
//! non-temporal stores ≈24 GiB/s), so instead of a table of CPU models the
//! first large job calibrates: every available backend zeroes a private,
//! already-touched 2×32 MiB buffer (larger than a typical last-level cache
//! slice, alternating halves so the previous pass is not cache-resident), a
//! few rounds, single-threaded, best round kept; the whole calibration is
//! capped at [`CALIBRATION_BUDGET`] plus one round. The result is cached for
//! the process.
//!
//! Small jobs (below [`SMALL_THRESHOLD`]) do not use the calibrated
//! backend: their data is likely wanted in cache soon (page tables, boot
//! structures, a just-allocated buffer), and non-temporal stores would push
//! it out to DRAM, so they use cache-allocating `rep stosb`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{kernels, Backend};

/// Jobs smaller than this use [`small_backend`] under [`crate::Choice::Auto`].
///
/// 1 MiB: well under half the last-level cache of current server CPUs
/// (often 32 MiB per CCD or more), so zeroed data stays cache-resident for
/// whoever reads it next, while multi-MiB guest RAM regions are far larger
/// than any cache and are store-bandwidth bound. A fixed constant instead
/// of a per-machine cache size keeps behaviour predictable.
pub const SMALL_THRESHOLD: usize = 1 << 20;

/// Calibration stops starting new rounds after this much time.
pub const CALIBRATION_BUDGET: Duration = Duration::from_millis(50);

/// Bytes zeroed per timed sample (one half of the calibration buffer).
const SAMPLE: usize = 32 << 20;
/// Most rounds over all backends.
const ROUNDS: usize = 3;

/// The measurement behind [`auto_backend`].
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The fastest backend.
    pub backend: Backend,
    /// Best single-thread throughput per backend, GiB/s, in
    /// [`Backend::ALL`] order.
    pub gib_per_s: Vec<(Backend, f64)>,
    /// Wall time spent calibrating, including touching the buffer.
    pub elapsed: Duration,
}

/// The calibrated fastest backend for large jobs on this machine.
///
/// The first call measures (bounded: about [`CALIBRATION_BUDGET`]); later
/// calls return the cached answer.
pub fn auto_backend() -> Backend {
    calibration().backend
}

/// The full calibration result (runs it on first use).
pub fn calibration() -> &'static Calibration {
    static CAL: OnceLock<Calibration> = OnceLock::new();
    CAL.get_or_init(calibrate)
}

/// The backend [`crate::Choice::Auto`] uses for jobs below
/// [`SMALL_THRESHOLD`]: cache-allocating `rep stosb` when the CPU has
/// fast strings, the C library's `memset` otherwise.
pub fn small_backend() -> Backend {
    if Backend::RepStosb.is_available() {
        Backend::RepStosb
    } else {
        Backend::Portable
    }
}

/// The backend [`crate::Choice::Auto`] uses for a job of `len` bytes.
pub fn auto_backend_for(len: usize) -> Backend {
    if len < SMALL_THRESHOLD {
        small_backend()
    } else {
        auto_backend()
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

fn calibrate() -> Calibration {
    let start = Instant::now();
    let candidates = crate::available_backends();
    let fallback = |start: Instant| Calibration {
        backend: small_backend(),
        gib_per_s: Vec::new(),
        elapsed: start.elapsed(),
    };
    let Some(buf) = Buffer::new(2 * SAMPLE) else {
        return fallback(start);
    };
    // Touch it: first-touch page faults would dominate the samples.
    // SAFETY: our mapping, whole length.
    unsafe { std::ptr::write_bytes(buf.ptr, 1, buf.len) };

    let mut best = vec![0f64; candidates.len()];
    let mut half = 0;
    for round in 0..ROUNDS {
        if round > 0 && start.elapsed() > CALIBRATION_BUDGET {
            break;
        }
        for (i, &b) in candidates.iter().enumerate() {
            // SAFETY: the sample lies inside our mapping; b is available.
            let t = Instant::now();
            unsafe { kernels::zero(b, buf.ptr.add(half * SAMPLE), SAMPLE) };
            let secs = t.elapsed().as_secs_f64().max(1e-9);
            best[i] = best[i].max(SAMPLE as f64 / secs / (1u64 << 30) as f64);
            half ^= 1;
        }
    }
    let winner = (0..candidates.len())
        .max_by(|&a, &b| best[a].total_cmp(&best[b]))
        .map(|i| candidates[i]);
    match winner {
        Some(backend) => Calibration {
            backend,
            gib_per_s: candidates.into_iter().zip(best).collect(),
            elapsed: start.elapsed(),
        },
        None => fallback(start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_jobs_stay_cache_friendly() {
        // Below the threshold Auto never picks a non-temporal backend ...
        for len in [0, 1, 4096, 64 << 10, SMALL_THRESHOLD - 1] {
            let b = auto_backend_for(len);
            assert!(!b.is_non_temporal(), "{len}: {b}");
            assert_eq!(b, small_backend());
        }
        // ... and at or above it, it takes the calibrated one.
        assert_eq!(auto_backend_for(SMALL_THRESHOLD), auto_backend());
        assert_eq!(auto_backend_for(1 << 30), auto_backend());
    }

    #[test]
    fn calibration_is_bounded_and_complete() {
        let c = calibration();
        assert!(c.backend.is_available());
        assert_eq!(c.gib_per_s.len(), crate::available_backends().len());
        assert!(c.gib_per_s.iter().all(|&(_, g)| g > 0.0));
        let best = c.gib_per_s.iter().map(|x| x.1).fold(0.0, f64::max);
        assert!(c
            .gib_per_s
            .iter()
            .any(|&(b, g)| b == c.backend && g == best));
        // Budget + one round + touching 64 MiB; generous for a loaded CI box.
        assert!(c.elapsed < Duration::from_secs(2), "{:?}", c.elapsed);
        // Cached: the same answer again.
        assert_eq!(auto_backend(), c.backend);
    }
}
