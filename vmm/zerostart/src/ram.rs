//! Guest RAM as the builder uses it: `guestmem::GuestRam` plus the
//! arch crate's [`arch::BootMemory`] door, the hint report, and the
//! test-only untracked write.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use vm_memory::{GuestAddress, GuestMemoryBackend};
use zerohint::Hint;

pub use guestmem::{Error, GuestRam, MemoryConfig};

/// Sizes from which a prefault on a terminal shows progress.
const PROGRESS_MIN_BYTES: u64 = 4 << 30;

/// Maps and (optionally) prefaults guest RAM laid out by
/// `arch::layout::ram_regions`; shows a progress line on a terminal for
/// large prefaults.
pub fn create(cfg: &MemoryConfig) -> Result<GuestRam, Error> {
    let regions = arch::layout::ram_regions(cfg.size);
    let show = cfg.prefault && cfg.size >= PROGRESS_MIN_BYTES && std::io::stderr().is_terminal();
    let last = AtomicU64::new(u64::MAX);
    let progress = move |done: u64, total: u64| {
        let pct = done * 100 / total.max(1);
        if last.swap(pct, Ordering::Relaxed) != pct {
            eprint!(
                "\rzerostart: prefault {:>5.1}/{:.1} GiB {pct:>3}%{}",
                done as f64 / (1u64 << 30) as f64,
                total as f64 / (1u64 << 30) as f64,
                if done >= total { "\n" } else { "" }
            );
        }
    };
    let progress = if show {
        Some(&progress as &(dyn Fn(u64, u64) + Sync))
    } else {
        None
    };
    match &cfg.backing {
        // The VMM leases pool memory and hands guestmem the file; the pool
        // reserved and populated it, so no host check applies.
        guestmem::Backing::Pool { socket, page } => {
            let leased = lease_from_pool(socket, *page, cfg.size)?;
            GuestRam::create_leased(cfg, &regions, progress, leased)
        }
        _ => {
            // A cgroup limit would fail the guest's faults later (SIGBUS,
            // OOM kill): refuse now.
            hostmem::cgroup::check_limits(cfg.backing.hugepage().map(Into::into), cfg.size)?;
            GuestRam::create(cfg, &regions, progress)
        }
    }
}

/// Leases `size` bytes of known-zero memory from the pool at `socket`.
fn lease_from_pool(
    socket: &std::path::Path,
    page: Option<guestmem::HugePageSize>,
    size: u64,
) -> Result<guestmem::LeasedMemory, Error> {
    let pp = match page {
        None => pool::PageSize::Size4K,
        Some(guestmem::HugePageSize::Size2M) => pool::PageSize::Size2M,
        Some(guestmem::HugePageSize::Size1G) => pool::PageSize::Size1G,
    };
    let lease = pool::client::lease(socket, size, pp).map_err(|e| Error::Backing {
        what: format!("leasing {} MiB from the pool at {}", size >> 20, socket.display()),
        source: std::io::Error::other(e.to_string()),
        fix: "start it (zerostart pool serve) with --region-size >= size= and the same page size, or drop prezero=pool",
    })?;
    let fd = lease
        .fd()
        .try_clone_to_owned()
        .map_err(|source| Error::Backing {
            what: "dup of the pool lease fd".into(),
            source,
            fix: "raise the open-file limit (ulimit -n)",
        })?;
    Ok(guestmem::LeasedMemory {
        file: std::fs::File::from(fd),
        offset: lease.offset(),
        len: lease.len(),
        keep: Box::new(lease),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guestmem_and_the_pool_agree_on_the_default_socket() {
        assert_eq!(guestmem::DEFAULT_POOL_SOCKET, pool::cli::DEFAULT_SOCKET);
    }

    #[test]
    fn a_missing_pool_is_one_line_error() {
        let cfg = MemoryConfig::parse("size=32M,prezero=pool:/nonexistent/pool.sock").unwrap();
        let e = create(&cfg).unwrap_err().to_string();
        assert!(e.contains("zerostart pool serve"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// [`arch::BootMemory`] over [`GuestRam`]: every arch write is tracked.
pub struct Tracked<'a>(pub &'a mut GuestRam);

impl arch::BootMemory for Tracked<'_> {
    fn write_tracked(&mut self, data: &[u8], addr: GuestAddress) -> Result<(), arch::WriteError> {
        Ok(self.0.write_tracked(data, addr)?)
    }
}

/// Writes `data` at `addr` through a raw host pointer, so neither the
/// tracker nor vm-memory's dirty bitmap sees it. Only for the
/// `--test-corrupt-hint=dirty` self-test, which must simulate a VMM bug.
pub fn write_untracked(ram: &GuestRam, data: &[u8], addr: GuestAddress) -> Result<(), Error> {
    let err = |source| Error::GuestWrite {
        addr: addr.0,
        len: data.len() as u64,
        source,
    };
    let mem = ram.memory();
    let last = addr
        .0
        .checked_add(data.len().saturating_sub(1) as u64)
        .ok_or(err(vm_memory::GuestMemoryError::InvalidGuestAddress(addr)))?;
    // Both ends must be in the same region for one pointer to cover them.
    let host = mem.get_host_address(addr).map_err(err)?;
    let host_last = mem.get_host_address(GuestAddress(last)).map_err(err)?;
    if host_last as usize - host as usize != data.len().saturating_sub(1) {
        return Err(err(vm_memory::GuestMemoryError::InvalidGuestAddress(
            GuestAddress(last),
        )));
    }
    // SAFETY: `[host, host + len)` lies inside one live mapping of guest
    // RAM (checked above) and no vCPU runs yet.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), host, data.len()) };
    Ok(())
}

/// The `prezero` object of the timeline JSON.
#[derive(Debug, Serialize)]
pub struct Report {
    /// From guestmem: mode, backend, method, backing, bytes, ms, gib_per_s,
    /// threads.
    #[serde(flatten)]
    pub ram: guestmem::PrezeroReport,
    /// Entries in the hint passed to the guest.
    pub hint_ranges: usize,
    /// Bytes the hint claims zero.
    pub hint_bytes: u64,
    /// Bytes re-read by `--verify-hint` (0 when not asked).
    pub verified_bytes: u64,
}

impl Report {
    /// Report for `ram` and the hint it produced.
    pub fn new(ram: &GuestRam, hint: Option<&Hint>, verified_bytes: u64) -> Self {
        Report {
            ram: ram.report(),
            hint_ranges: hint.map_or(0, |h| h.entries.len()),
            hint_bytes: hint.map_or(0, |h| h.total_bytes()),
            verified_bytes,
        }
    }
}
