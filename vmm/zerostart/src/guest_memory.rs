//! Guest memory on the VMM's side: creating `guestmem::GuestRam` by the
//! arch crate's layout rule, reading the layout back once ([`layout`]),
//! the [`arch::BootMemory`] door, the timeline's prezero report
//! ([`prezero_report`]), the hint report, and the test-only untracked
//! write (its KVM memory slots are `vstate::vm`'s). (Named apart from guestmem's `ram.rs`, which is the RAM itself,
//! and from `launch/memory.rs`, an external VMM's memory.)

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};

use arch::layout::RamLayout;
use guestmem::{PrefaultStats, PrepMethod, Prezero};
use vm_memory::{GuestAddress, GuestMemoryBackend};
use zerohint::Hint;

pub use guestmem::{Error, GuestRam, MemoryConfig};

/// Sizes from which a prefault on a terminal shows progress.
const PROGRESS_MIN_BYTES: u64 = 4 << 30;

/// Maps and (optionally) prefaults guest RAM laid out by
/// [`RamLayout::new`] (the write tracker gets the same regions); shows a
/// progress line on a terminal for large prefaults. Everything after this
/// takes the layout from the mapped memory: [`layout`].
pub fn create(cfg: &MemoryConfig) -> Result<GuestRam, Error> {
    let planned = RamLayout::new(cfg.size);
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
            GuestRam::create_leased(cfg, planned.regions(), progress, leased)
        }
        _ => {
            // A cgroup limit would fail the guest's faults later (SIGBUS,
            // OOM kill): refuse now.
            hostmem::cgroup::check_limits(cfg.backing.hugepage(), cfg.size)?;
            GuestRam::create(cfg, planned.regions(), progress)
        }
    }
}

/// Leases `size` bytes of known-zero memory from the pool at `socket`: one
/// region, or as many whole regions as the guest needs (guestmem maps them
/// as one host range per guest RAM range; docs/pool.md "Leases of any
/// size").
fn lease_from_pool(
    socket: &std::path::Path,
    page: hostmem::PageSize,
    size: u64,
) -> Result<guestmem::LeasedMemory, Error> {
    let lease = pool::client::lease_pieces(socket, size, page, None, pool::proto::MAX_PIECES)
        .map_err(|e| Error::Backing {
            what: format!("leasing {} MiB from the pool at {}", size >> 20, socket.display()),
            source: std::io::Error::other(e.to_string()),
            fix: "start it (zerostart pool serve) with the same page size and 64 regions of at least size=/64 bytes, or drop prezero=pool",
        })?;
    let mut pieces = Vec::new();
    for (fd, piece) in lease.pieces() {
        let fd = fd.try_clone_to_owned().map_err(|source| Error::Backing {
            what: "dup of the pool lease fd".into(),
            source,
            fix: "raise the open-file limit (ulimit -n)",
        })?;
        pieces.push(guestmem::LeasedPiece {
            file: std::fs::File::from(fd),
            offset: lease.piece_offset(),
            len: piece.len,
        });
    }
    Ok(guestmem::LeasedMemory {
        pieces,
        keep: Box::new(lease),
    })
}

/// The layout of mapped guest RAM, read from the memory object (as
/// Firecracker's `configure_system` does from `guest_mem`): computed once
/// by the builder and passed to e820, the PVH memory map, fw_cfg and the
/// KVM memory slots.
pub fn layout(ram: &GuestRam) -> RamLayout {
    RamLayout::from_memory(ram.memory())
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

/// The timeline's `prezero` object for `ram` and the hint it produced,
/// built from guestmem's plain facts ([`PrefaultStats`]): the names and
/// units are the timeline's (`timeline::PrezeroReport`).
pub fn prezero_report(
    ram: &GuestRam,
    hint: Option<&Hint>,
    verified_bytes: u64,
) -> timeline::PrezeroReport {
    prezero_report_of(
        ram.config().prezero,
        ram.prefault_stats(),
        hint,
        verified_bytes,
    )
}

fn prezero_report_of(
    prezero: Prezero,
    st: &PrefaultStats,
    hint: Option<&Hint>,
    verified_bytes: u64,
) -> timeline::PrezeroReport {
    timeline::PrezeroReport {
        backend: st.backend.map(str::to_string),
        backing: st.backing.name().to_string(),
        bytes: st.bytes,
        gib_per_s: st.gib_per_s(),
        hint_bytes: hint.map_or(0, |h| h.total_bytes()),
        hint_ranges: hint.map_or(0, |h| h.entries.len()),
        method: match st.method {
            PrepMethod::PoolLease => "pool_lease",
            PrepMethod::Nothing => "none",
            PrepMethod::KernelFaultOnDemand => "kernel_fault_on_demand",
            PrepMethod::PopulateWrite => "populate_write",
            PrepMethod::NtEngine => "nt_engine",
        }
        .to_string(),
        mode: match prezero {
            Prezero::Off => "off",
            Prezero::Engine(_) => "engine",
        }
        .to_string(),
        ms: st.duration.as_secs_f64() * 1e3,
        threads: st.threads,
        verified_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The JSON the timeline file gets (names, units, `null` backend, keys
    /// sorted as they always were in the file), byte for byte.
    #[test]
    fn prezero_report_json_is_unchanged() {
        let st = PrefaultStats {
            method: PrepMethod::PopulateWrite,
            backend: None,
            backing: guestmem::BackingKind::Hugetlb2M,
            bytes: 1 << 30,
            duration: Duration::from_millis(250),
            threads: 2,
        };
        let r = prezero_report_of(MemoryConfig::default().prezero, &st, None, 0);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"backend":null,"backing":"hugetlb_2m","bytes":1073741824,"gib_per_s":4.0,"hint_bytes":0,"hint_ranges":0,"method":"populate_write","mode":"engine","ms":250.0,"threads":2,"verified_bytes":0}"#
        );
        let st = PrefaultStats {
            method: PrepMethod::Nothing,
            backend: None,
            backing: guestmem::BackingKind::Anon4K,
            bytes: 0,
            duration: Duration::ZERO,
            threads: 0,
        };
        let r = prezero_report_of(Prezero::Off, &st, None, 0);
        assert_eq!(
            (r.mode.as_str(), r.method.as_str(), r.backing.as_str()),
            ("off", "none", "anon_4k")
        );
        assert_eq!((r.ms, r.gib_per_s), (0.0, 0.0));
    }

    /// Real guest RAM prefaulted by the engine: the report names it
    /// (moved from guestmem's `report_names_method`).
    #[test]
    fn prezero_report_of_real_ram() {
        let cfg = MemoryConfig {
            size: 32 << 20,
            prefault: true,
            prefault_method: guestmem::PrefaultMethod::Nt,
            ..Default::default()
        };
        let ram = GuestRam::create(&cfg, &[(GuestAddress(0), 32 << 20)], None).unwrap();
        let r = prezero_report(&ram, None, 0);
        assert_eq!(r.method, "nt_engine");
        assert_eq!(r.backing, "anon_thp");
        assert!(r.backend.is_some());
        assert!(r.gib_per_s > 0.0);
    }
}
