//! zerostart pool: keep hugepage memory populated and zeroed in the
//! background, and lease it to VMs over a Unix socket.
//!
//! This crate has one purpose: make "guest RAM that is known zero" cost a
//! socket round trip instead of a pass over every byte at VM launch. A
//! daemon ([`daemon::Daemon`]) owns N GiB split into regions, each region a
//! separate `memfd` (so a lease's file descriptor grants access to that
//! region only). A region moves through a strict state machine
//! ([`region::State`]): `dirty → scrubbing → clean → leased → dirty`. Only
//! `clean` regions are leased, and a region becomes `clean` only with
//! memory this daemon has just created and nobody else has touched: new
//! pages, which the kernel zeroes when it allocates them (and, with
//! `--verify`, every byte has been read back as zero).
//!
//! Clients ([`client::lease`]) get the region's fd by `SCM_RIGHTS` and keep
//! the connection open for the life of the lease. When the connection
//! closes (the VM process exits, is killed, or drops the [`client::Lease`])
//! the region comes back `dirty`, and its memory is never used again: the
//! daemon punches the pages out of the file, drops the file and creates a
//! new one. Whatever the former lessee kept (an fd, even one in flight in a
//! Unix socket; vmsplice'd pipe pages; io_uring fixed buffers; pinned
//! pages; a process the daemon cannot see) reaches only the old file and
//! pages, which no other lessee ever gets. Zeroing the same pages in place
//! would not be enough: those references would read the next tenant's data
//! (`tests/holders.rs` shows it with the `scrub-in-place` test fault).
//!
//! Nothing is persisted: a daemon that was killed and restarted creates
//! fresh memfds, and `--hugetlbfs` files left by an earlier daemon are
//! unlinked and created anew (never reused).
//!
//! * [`proto`]: the versioned, length-framed JSON protocol.
//! * [`region`]: the per-region state machine (pure, unit-tested).
//! * [`memory`]: one region's memory: memfd/hugetlbfs, scrub, verify.
//! * [`fit`]: which regions a lease takes (regions of several sizes).
//! * [`cli`]: `zerostart pool serve|status|lease`.
//! * [`metrics`]: the Prometheus endpoint (`serve --metrics HOST:PORT`).

#![deny(missing_docs)]

pub mod cli;
pub mod client;
pub mod daemon;
pub mod fit;
mod holders;
/// The hugetlbfs and privacy checks (`hostmem::hugetlbfs`, shared with
/// guest RAM files).
pub use hostmem::hugetlbfs;
pub mod memory;
pub mod metrics;
pub mod numa;
pub mod pace;
pub mod proto;
pub mod region;

use std::path::PathBuf;

/// The page size of pool memory: `4K` (shmem, a test/fallback mode:
/// populating and zeroing it is far slower than hugetlb, and THP is not
/// used), `2M` (hugetlb, the default) or `1G`. The one page-size type of
/// the workspace (`hostmem`).
pub use hostmem::PageSize;

impl From<hostmem::PageSizeError> for Error {
    fn from(e: hostmem::PageSizeError) -> Error {
        Error::BadValue {
            key: "page",
            value: e.0,
            fix: "use 2M (default), 1G, or 4K (test mode)".into(),
        }
    }
}

/// Everything that can go wrong in the pool daemon or client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option value that is not valid.
    #[error("--{key} {value}: {fix}")]
    BadValue {
        /// The option.
        key: &'static str,
        /// What was given.
        value: String,
        /// What to do instead.
        fix: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not enough hugepages for the pool.
    #[error("cannot reserve {bytes} bytes of {page} hugepages for the pool ({source}); free {page} pages: {free}; reserve more with e.g. `echo {suggest} > /sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages`, or shrink --size")]
    Hugepages {
        /// Bytes that could not be reserved.
        bytes: u64,
        /// Page size.
        page: PageSize,
        /// Free pages of that size now.
        free: u64,
        /// An `nr_hugepages` that would fit.
        suggest: u64,
        /// Page size in KiB (sysfs directory name).
        kb: u64,
        /// The mmap error.
        source: std::io::Error,
    },
    /// The daemon socket cannot be reached.
    #[error("cannot connect to the pool at {socket}: {source}; start it with `zerostart pool serve --socket {socket}`")]
    Connect {
        /// Socket path.
        socket: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another daemon already serves this socket.
    #[error("a pool daemon already listens on {0}; stop it first or use another --socket")]
    AlreadyServing(PathBuf),
    /// The peer broke the protocol.
    #[error("pool protocol error: {0}")]
    Protocol(String),
    /// `pool status --wait-clean` ran out of time.
    #[error("the pool at {socket} was not clean after {secs} s ({last}); see the daemon's log for why, or raise --timeout")]
    NotClean {
        /// Socket path.
        socket: PathBuf,
        /// The --timeout.
        secs: u64,
        /// The last status (or connection error) seen.
        last: String,
    },
    /// The daemon that granted a lease does not take launch reports.
    #[error("this pool daemon takes no launch reports (an older release); the launch is not counted on its metrics; upgrade the pool to count launches")]
    NoReports,
    /// The daemon refused a request (its message says why and what to do).
    #[error("the pool refused: {0}")]
    Refused(String),
    /// A lease check found memory that is not zero: a pool bug.
    #[error("lease {lease}: byte at offset {offset:#x} is {value:#04x}, not zero; the pool handed out memory that is not known zero (report this bug)")]
    NotZero {
        /// Lease id.
        lease: u64,
        /// Offset in the lease.
        offset: u64,
        /// The byte.
        value: u8,
    },
    /// `--verify` found a byte the scrub did not clear: the region stays
    /// dirty and gets fresh memory.
    #[error("scrub verify: byte at offset {offset:#x} is {value:#04x} after zeroing")]
    ScrubVerify {
        /// Offset in the region.
        offset: u64,
        /// The byte.
        value: u8,
    },
    /// `ZEROSTART_POOL_FAULT` without the test-switch unlock.
    #[error("ZEROSTART_POOL_FAULT={0} is a test-only switch that makes the pool hand out memory that is not known zero; unset it, or set ZEROSTART_TEST_SWITCHES=1 in the environment of a test run")]
    TestSwitchLocked(String),
    /// `ZEROSTART_POOL_NODES_SYSFS` without the test-switch unlock.
    #[error("ZEROSTART_POOL_NODES_SYSFS={0} is a test-only fake NUMA topology (regions would be placed by it); unset it, or set ZEROSTART_TEST_SWITCHES=1 in the environment of a test run")]
    FakeTopologyLocked(String),
    /// A `--hugetlbfs` directory or region file the pool must not use.
    #[error("--hugetlbfs: {path} {why}; {fix}")]
    UnsafeHugetlbfs {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// What to do.
        fix: String,
    },
    /// The daemon is stopping; a preparation was abandoned (its region is
    /// never leased).
    #[error("the pool daemon is stopping")]
    Stopped,
    /// The zeroing engine could not be set up.
    #[error("zeroing engine: {0}")]
    Engine(#[from] prezero::Error),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        Error::io(what, std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_parse() {
        assert_eq!("2m".parse::<PageSize>().unwrap(), PageSize::Size2M);
        assert_eq!("1G".parse::<PageSize>().unwrap(), PageSize::Size1G);
        assert_eq!("4K".parse::<PageSize>().unwrap(), PageSize::Size4K);
        assert!("3M"
            .parse::<PageSize>()
            .unwrap_err()
            .to_string()
            .contains("2M"));
    }
}
