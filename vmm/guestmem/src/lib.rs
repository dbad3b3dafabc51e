//! Guest RAM for the zerostart VMM, and the bookkeeping that makes its
//! pre-zeroed hint safe.
//!
//! This crate has one concept: *which bytes of guest RAM are provably zero
//! when the guest starts*. It maps guest RAM (anonymous, THP, or hugetlb via
//! memfd or a hugetlbfs file), checks host resources first so a shortage is a
//! clear error and never a SIGBUS, optionally prefaults it in parallel, and
//! records every byte the VMM writes, so [`GuestRam::zero_hint`] can claim
//! zero exactly the RAM nobody has touched.
//!
//! # Why the claim holds
//! * Fresh anonymous and memfd memory reads as zero: the kernel clears every
//!   page before first mapping it into a process, prefaulted or not.
//! * A hugetlbfs file may hold an earlier tenant's data, so a named file is
//!   truncated to 0 and grown back (freeing its pages; new ones are cleared
//!   by the kernel on fault) and `flock`ed for the VM's lifetime.
//! * Every VMM write is subtracted, rounded outward to 4 KiB: the explicit
//!   [`GuestRam::mark_written`] / [`GuestRam::write_tracked`] calls, **and**
//!   the dirty bitmap vm-memory keeps for every write through its API
//!   ([`GuestMemory`] is a `GuestMemoryMmap<AtomicBitmap>`), so a loader
//!   that writes through [`GuestRam::memory`] and forgets to mark is still
//!   caught. Only writes through raw host pointers bypass the bitmap; those
//!   must be marked.
//! * [`GuestRam::finalize_hint`], called right before the first `KVM_RUN`,
//!   re-checks that the hint handed out is still true and freezes it; later
//!   tracked writes into hinted pages are rejected.
//! * [`GuestRam::verify_zero`] re-reads every hinted byte (the VMM's
//!   `verify` mode and the tests).
#![deny(missing_docs)]

mod config;
mod host;
mod prefault;
mod ram;
mod track;
mod verify;

use std::path::PathBuf;

pub use config::{check_huge, Backing, BackingKind, MemoryConfig, PrefaultMethod, Prezero};
pub use host::{check_backing_hugepages, check_hugepages, check_mem_available, mem_available};
/// The one page-size type (`hostmem`'s), re-exported so users of
/// [`Backing`] need not depend on `hostmem`.
pub use hostmem::PageSize;
pub use prefault::PREFAULT_TABLE;
pub use ram::{GuestRam, LeasedMemory, LeasedPiece, PrefaultStats, PrepMethod};

/// Guest memory as this crate builds it: vm-memory's mmap backend with a
/// per-4K-page dirty bitmap, so every write through vm-memory is recorded.
pub type GuestMemory = vm_memory::GuestMemoryMmap<vm_memory::bitmap::AtomicBitmap>;
/// One region of [`GuestMemory`].
pub type GuestRegion = vm_memory::GuestRegionMmap<vm_memory::bitmap::AtomicBitmap>;

/// Everything that can go wrong setting up or tracking guest RAM. Each
/// message is one line naming the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad `--memory` key or value.
    #[error("memory option {key}={value:?} is invalid; valid: {valid}")]
    BadConfig {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What would be accepted.
        valid: String,
    },
    /// A size or address that must be a multiple of the hugepage size.
    #[error("{what} {value:#x} is not a multiple of the {page} hugepage size; use {what}= a multiple of {page} (e.g. round up) or hugepage_size= a smaller page")]
    NotHugeAligned {
        /// What is misaligned (`size`, a region).
        what: String,
        /// Its value.
        value: u64,
        /// The page size name.
        page: &'static str,
    },
    /// Not enough free hugepages.
    #[error("guest RAM needs {needed} free {page} hugepages but only {free} are free{} (total {total}, {reserved} reserved); fix: echo {fix_total} | sudo tee {fix_path}", file_pages_note(*.file_pages))]
    NotEnoughHugepages {
        /// Page size name.
        page: &'static str,
        /// Pages needed.
        needed: u64,
        /// Free and unreserved pages.
        free: u64,
        /// Pages reserved by other mappings.
        reserved: u64,
        /// Current pool size.
        total: u64,
        /// Pages the named RAM file holds now and frees when it is
        /// truncated before use (counted as free).
        file_pages: u64,
        /// Pool size that would be enough.
        fix_total: u64,
        /// The sysfs/procfs file to write.
        fix_path: String,
    },
    /// A hugetlb backing was given a page size that is not huge (4K).
    #[error("hugetlb guest RAM cannot use {page} pages (hugetlb pages are 2M or 1G); use hugepage_size=2M or 1G, or hugepages=off for 4K pages")]
    NotHugePage {
        /// Page size name.
        page: &'static str,
    },
    /// The host does not have this hugepage size at all.
    #[error("host has no {page} hugepage pool ({path}: {source}); use hugepage_size=2M, or boot the host with hugepagesz={page}")]
    NoHugepagePool {
        /// Page size name.
        page: &'static str,
        /// The sysfs path read.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },
    /// Guest RAM larger than what the host can give.
    #[error("guest RAM of {size_mib} MiB exceeds the host's MemAvailable of {available_mib} MiB; use a smaller size= or free host memory")]
    NotEnoughMemory {
        /// Requested MiB.
        size_mib: u64,
        /// MemAvailable MiB.
        available_mib: u64,
    },
    /// A cgroup limit would stop guest RAM from being faulted in (hugetlb:
    /// SIGBUS at fault; memory: OOM kill). The check is the VMM's
    /// (`hostmem::cgroup`); the variant carries its answer through the
    /// VMM's guest-RAM step.
    #[error(transparent)]
    CgroupLimit(#[from] hostmem::cgroup::LimitError),
    /// Reading a host file (meminfo, sysfs) failed.
    #[error("cannot read {path}: {source}")]
    HostFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The RAM regions handed in are unusable.
    #[error("bad guest RAM layout: {0}; this is a VMM bug (the arch crate's RamLayout must give sorted, non-overlapping, 4K-aligned regions adding up to size=)")]
    BadRegions(String),
    /// Creating or preparing the backing file failed.
    #[error("cannot prepare guest RAM backing {what}: {source}; {fix}")]
    Backing {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
        /// How to fix it.
        fix: &'static str,
    },
    /// A named backing file another user could read or write.
    #[error("guest RAM file {path} {why}: another user could read the guest's memory or write into it behind the zero hint; fix: {fix}, or pass a hugetlbfs directory (file=DIR) for a private unlinked file")]
    UnsafeBackingFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
        /// The command that fixes it.
        fix: String,
    },
    /// mmap failed.
    #[error("cannot map {size_mib} MiB of guest RAM ({backing}): {source}; check free memory/hugepages and ulimit -v")]
    Mmap {
        /// Backing description.
        backing: String,
        /// Size in MiB.
        size_mib: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// Prefault failed (e.g. `MADV_POPULATE_WRITE` returned ENOMEM).
    #[error("prefaulting guest RAM at GPA {gpa:#x} failed: {source}; free host memory/hugepages or use prefault=off")]
    Prefault {
        /// First guest-physical address of the failing chunk.
        gpa: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// A write or mark outside guest RAM.
    #[error("VMM write of {len:#x} bytes at GPA {addr:#x} is outside guest RAM: {source}")]
    GuestWrite {
        /// Guest-physical start.
        addr: u64,
        /// Length.
        len: u64,
        /// vm-memory's error.
        source: vm_memory::GuestMemoryError,
    },
    /// A tracked write after [`GuestRam::finalize_hint`] into a page the hint
    /// claims zero.
    #[error("VMM write of {len:#x} bytes at GPA {addr:#x} after the zero hint was finalized hits hinted page {page:#x}; write boot data before finalize_hint()")]
    WriteAfterFinalize {
        /// Guest-physical start.
        addr: u64,
        /// Length.
        len: u64,
        /// First hinted page hit.
        page: u64,
    },
    /// The hint given out earlier no longer holds (something wrote into a
    /// hinted page after [`GuestRam::zero_hint`]).
    #[error("zero hint invalidated: page {page:#x} was written after the hint was built; write everything (incl. the hint blob's location) before calling zero_hint()")]
    HintInvalidated {
        /// First page of the issued hint that is now dirty.
        page: u64,
    },
    /// Verification found a non-zero byte in a hinted range.
    #[error("hinted-zero guest memory is not zero: GPA {gpa:#x} reads {value:#04x}")]
    NotZero {
        /// Guest-physical address of the first non-zero byte.
        gpa: u64,
        /// Its value.
        value: u8,
    },
    /// A hint range not inside guest RAM.
    #[error("hint range {start:#x}+{len:#x} is not inside guest RAM")]
    HintOutOfRam {
        /// Range start.
        start: u64,
        /// Range length.
        len: u64,
    },
    /// Building or encoding the hint failed.
    #[error("zero hint: {0}")]
    Hint(#[from] zerohint::Error),
    /// The zeroing engine refused (e.g. a backend this CPU lacks).
    #[error(transparent)]
    Engine(#[from] prezero::Error),
}

/// The part of [`Error::NotEnoughHugepages`] that names pages a reused RAM
/// file will free (empty when none).
fn file_pages_note(pages: u64) -> String {
    if pages == 0 {
        String::new()
    } else {
        format!(" plus {pages} more that the RAM file frees when it is truncated")
    }
}
