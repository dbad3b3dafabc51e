//! Zero large memory ranges (guest RAM) as fast as the machine allows.
//!
//! This crate has one purpose: turn "these GiBs must read as zero" into the
//! fewest nanoseconds, exactly and safely. A VMM that pre-zeroes guest RAM
//! can tell the guest which ranges are already zero, so firmware and kernel
//! skip clearing them again at boot; this is the engine that does the
//! zeroing.
//!
//! Why not `memset`: zeroing GiBs is bound by store bandwidth, not by the
//! CPU. Ordinary stores first read every cache line from DRAM
//! (read-for-ownership) and fill the cache with zeros nobody reads soon,
//! evicting everything else. Non-temporal stores (`movnti`, `vmovntdq`)
//! and line-zeroing instructions (`clzero`, `movdir64b`) write whole lines
//! straight to memory without reading them and leave the caches to their
//! owners. On the (virtualized, shared) AMD EPYC this was developed on, one
//! thread zeroing a warm 4 GiB buffer in calls of 4–16 MiB ran 50–58 GiB/s
//! with AVX-512 NT stores against 14–23 GiB/s with `rep stosb` or glibc
//! `memset`. That CPU's `rep stosb` switches to streaming stores itself for
//! calls of ≈64 MiB and more, where all three ran ≈50 GiB/s: a single
//! `memset` of a whole guest's RAM is not slow there, but every smaller
//! call, and every CPU without that microcode, is (`zerostart bench zero`
//! measures yours). The engine splits the job over all CPUs, in chunks
//! aligned to the backing page size, with each chunk run on its NUMA node
//! on multi-node machines.
//!
//! * [`Backend`]: the instruction families, runtime CPUID detection
//!   (an unavailable backend is an [`Error::Unavailable`], never a SIGILL).
//! * [`auto_backend`]: a one-off calibration picks the fastest backend for
//!   large jobs (non-temporal unless a cache-allocating one is clearly
//!   faster); small jobs (below [`small_threshold`], half the last-level
//!   cache) use cache-allocating `rep stosb` or `memset`, whichever is
//!   faster here, because their zeros are wanted in cache soon.
//! * [`Zeroer`]: the parallel, NUMA-aware, progress-reporting driver.
//! * [`zero_with`]: one backend, one thread, exact.
//!
//! Every path writes exactly `[ptr, ptr + len)`: unaligned heads and tails
//! use plain stores, and weakly ordered stores are fenced before returning.
//!
//! NUMA: on machines with several nodes in `/sys/devices/system/node`, each
//! chunk whose memory is already placed runs on a worker pinned to that
//! node's CPUs. On a one-node machine (like the 2-core development box)
//! this is a no-op; the placement logic is tested with made-up topologies.

#![deny(missing_docs)]

mod auto;
pub mod autocache;
mod backend;
mod fault;
#[cfg(feature = "vm-memory")]
mod guest;
mod kernels;
mod numa;
mod plan;
mod zeroer;

pub use auto::{
    auto_backend, auto_backend_for, auto_backend_threads, calibration, calibration_for, candidates,
    per_thread_bytes, pick, pick_robust, pin, pinned, small_backend, small_threshold,
    start_calibration, tie_set, Calibration, Source, CACHED_MARGIN, CALIBRATION_BUDGET,
    MAX_CALIBRATION_TOTAL, MAX_SMALL_THRESHOLD, PIN_ENV, SMALL_THRESHOLD, TIE_BAND, WINDOWS,
};
pub use backend::{available_backends, Backend, Choice};
pub use hostmem::PageSize;
pub use zeroer::{Progress, ZeroStats, Zeroer};

/// Everything that can go wrong choosing or running a backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CPU lacks the instructions of the requested backend.
    #[error(
        "zeroing backend '{backend}' is not supported by this CPU; use auto or one of: {available}"
    )]
    Unavailable {
        /// The backend asked for.
        backend: Backend,
        /// Comma-separated names of the backends this CPU has.
        available: String,
    },
    /// A backend name that does not exist.
    #[error("unknown zeroing backend '{name}'; valid choices: {valid}")]
    UnknownBackend {
        /// What was given.
        name: String,
        /// Comma-separated valid names.
        valid: String,
    },
    /// The kernel could not supply memory in the range (exhausted hugetlb
    /// pool, file hole, memory limit). Part of the job may be zeroed and
    /// part not: treat all of it as dirty.
    #[error("cannot fault in memory at {addr:#x} (+{len:#x} bytes): {source}; for hugetlb backing, reserve enough hugepages first")]
    Fault {
        /// Start of the chunk that failed.
        addr: usize,
        /// Its length.
        len: usize,
        /// The `madvise(MADV_POPULATE_WRITE)` error.
        source: std::io::Error,
    },
    /// A guest memory region the engine cannot write through a host pointer.
    #[error("guest memory region at {guest_addr:#x} has no host mapping to zero ({reason}); use mmap-backed guest memory")]
    NoHostMapping {
        /// Guest-physical start of the region.
        guest_addr: u64,
        /// Why vm-memory gave no host address.
        reason: String,
    },
}

impl Error {
    pub(crate) fn unavailable(backend: Backend) -> Error {
        Error::Unavailable {
            backend,
            available: available_backends()
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Zeroes exactly `[ptr, ptr + len)` with one backend on the calling thread.
///
/// Returns [`Error::Unavailable`] (and touches nothing) when the CPU lacks
/// the backend. Weakly ordered stores are fenced before returning.
///
/// # Safety
/// `[ptr, ptr + len)` must be valid for writes and not concurrently
/// accessed through references.
pub unsafe fn zero_with(backend: Backend, ptr: *mut u8, len: usize) -> Result<(), Error> {
    if !backend.is_available() {
        return Err(Error::unavailable(backend));
    }
    kernels::zero(backend, ptr, len);
    Ok(())
}
