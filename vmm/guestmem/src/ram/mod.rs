//! Mapping guest RAM and tracking what the VMM wrote into it.
//!
//! [`GuestRam`] is built here (host checks, backing, mapping, optional
//! prefault); its parts live beside it: `backing` creates the memory
//! behind it (memfd, hugetlbfs file, or a pool lease), `map` maps one
//! region with vm-memory's dirty bitmap, `prepare` prefaults and reports
//! what that cost, `tracking` records VMM writes, and `hint` turns what
//! is left into the zero hint and re-reads it.

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vm_memory::GuestAddress;
use zerohint::PAGE_SIZE;

use crate::track::Tracker;
use crate::{
    check_backing_hugepages, check_mem_available, Backing, Error, GuestMemory, MemoryConfig,
    Prezero,
};

mod backing;
mod hint;
mod map;
mod prepare;
mod tracking;

pub(crate) use backing::check_hugetlbfs;
pub use backing::{LeasedMemory, LeasedPiece};
pub use prepare::{PrefaultStats, PrepMethod};

use backing::{hugetlbfs_file, memfd};
use hint::hint_page_shift;
use map::{map_pieces, map_region};

/// Guest RAM: the mappings, the vm-memory view of them, and the record of
/// every VMM write that decides what the zero hint may claim.
pub struct GuestRam {
    memory: GuestMemory,
    cfg: MemoryConfig,
    tracker: Mutex<Tracker>,
    stats: PrefaultStats,
    /// Keeps the hugetlbfs file and its `flock` for the VM's lifetime.
    file: Option<Arc<File>>,
    /// A named hugetlbfs file, truncated to 0 when the RAM is dropped so it
    /// keeps no tenant data after the VM.
    scrub_file_on_drop: bool,
    /// The host ranges of RAM made of several leased files ([`map_pieces`]):
    /// declared after `memory` (whose regions point into them) and before
    /// `_lease`.
    _pieces: Vec<hostmem::Mapping>,
    /// A pool lease: declared after `memory`, so the mappings are gone
    /// before the pool learns the lease ended (a mapping still alive then
    /// would make the pool retire the region).
    _lease: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Drop for GuestRam {
    /// A named hugetlbfs file outlives the VM: truncating it (while still
    /// holding its `flock`) frees every page that held the guest's RAM, so
    /// nothing that opens the file afterwards reads this tenant's memory,
    /// and the pages go back to the pool to be cleared on their next fault.
    /// A VMM killed before this runs leaves the data; the next zerostart on
    /// the file truncates it before use.
    fn drop(&mut self) {
        if let (true, Some(f)) = (self.scrub_file_on_drop, &self.file) {
            if let Err(e) = f.set_len(0) {
                eprintln!(
                    "zerostart: warning: could not truncate the guest RAM file after the VM: {e}; \
                     it may still hold the guest's memory"
                );
            }
        }
    }
}

impl std::fmt::Debug for GuestRam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestRam")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn check_regions(cfg: &MemoryConfig, regions: &[(GuestAddress, u64)]) -> Result<(), Error> {
    let bad = |m: String| Err(Error::BadRegions(m));
    if regions.is_empty() {
        return bad("no RAM regions".into());
    }
    let align = cfg.backing.page_bytes().max(PAGE_SIZE);
    let mut end = 0u64;
    let mut sum = 0u64;
    for (i, &(GuestAddress(s), l)) in regions.iter().enumerate() {
        if l == 0 || s % align != 0 || l % align != 0 {
            return bad(format!(
                "region {s:#x}+{l:#x} is empty or not aligned to {align:#x}"
            ));
        }
        if i > 0 && s < end {
            return bad(format!("region {s:#x} overlaps or precedes the one before"));
        }
        end = match s.checked_add(l) {
            Some(e) => e,
            None => return bad(format!("region {s:#x}+{l:#x} overflows")),
        };
        sum += l;
    }
    if sum != cfg.size {
        return bad(format!(
            "regions add up to {sum:#x}, size= is {:#x}",
            cfg.size
        ));
    }
    Ok(())
}

impl GuestRam {
    /// Maps guest RAM for `regions` (from the arch crate: RAM below the
    /// 32-bit MMIO hole and above 4 GiB), after checking the host can back
    /// it, then prefaults it if asked. `progress` gets `(done, total)` bytes
    /// during the prefault.
    pub fn create(
        cfg: &MemoryConfig,
        regions: &[(GuestAddress, u64)],
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<GuestRam, Error> {
        Self::create_inner(cfg, regions, progress, None)
    }

    /// [`GuestRam::create`] for `prezero=pool`: maps the memory the VMM
    /// leased (`leased`) instead of creating any. Pool memory exists
    /// already (the pool reserved and populated it), so no host check runs.
    pub fn create_leased(
        cfg: &MemoryConfig,
        regions: &[(GuestAddress, u64)],
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
        leased: LeasedMemory,
    ) -> Result<GuestRam, Error> {
        Self::create_inner(cfg, regions, progress, Some(leased))
    }

    fn create_inner(
        cfg: &MemoryConfig,
        regions: &[(GuestAddress, u64)],
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
        leased: Option<LeasedMemory>,
    ) -> Result<GuestRam, Error> {
        cfg.backing.check()?;
        check_regions(cfg, regions)?;
        let pool = matches!(cfg.backing, Backing::Pool { .. });
        if pool != leased.is_some() {
            return Err(Error::Backing {
                what: "guest RAM from the pool".into(),
                source: io::Error::other(if pool {
                    "prezero=pool without leased memory"
                } else {
                    "leased memory without prezero=pool"
                }),
                fix: "the VMM leases pool memory and passes it to GuestRam::create_leased; other backings use GuestRam::create",
            });
        }
        if let Some(l) = &leased {
            if l.len() < cfg.size {
                return Err(Error::Backing {
                    what: format!("pool lease of {} bytes", l.len()),
                    source: io::Error::other("shorter than size="),
                    fix: "use a pool with --region-size >= size=",
                });
            }
        } else {
            match cfg.backing.hugepage() {
                Some(_) => check_backing_hugepages(&cfg.backing, cfg.size)?,
                None => check_mem_available(cfg.size)?,
            }
        }
        let mut mapped = Vec::with_capacity(regions.len());
        let mut reserved = Vec::new();
        let mut kept_file = None;
        let mut scrub_file_on_drop = false;
        let lease = match leased {
            // Several files: each RAM range one host range over its pieces.
            Some(l) if l.pieces.len() > 1 => {
                let files: Vec<(File, u64, u64)> = l
                    .pieces
                    .into_iter()
                    .map(|p| (p.file, p.offset, p.len))
                    .collect();
                let mut cursor = (0usize, 0u64); // (piece, bytes of it used)
                for &(gpa, len) in regions {
                    let mut parts = Vec::new();
                    let mut left = len;
                    while left > 0 {
                        let Some((f, off, plen)) = files.get(cursor.0) else {
                            return Err(Error::BadRegions(format!(
                                "the leased pieces end before the region at {:#x}",
                                gpa.0
                            )));
                        };
                        let n = left.min(plen - cursor.1);
                        parts.push((f, off + cursor.1, n));
                        left -= n;
                        cursor.1 += n;
                        if cursor.1 == *plen {
                            cursor = (cursor.0 + 1, 0);
                        }
                    }
                    let (region, map) = map_pieces(cfg, gpa, len, &parts)?;
                    mapped.push(region);
                    reserved.push(map);
                }
                Some(l.keep)
            }
            leased => {
                let mut off = leased.as_ref().map_or(0, |l| l.pieces[0].offset);
                let (file, lease) = match leased {
                    Some(mut l) => (Some(Arc::new(l.pieces.remove(0).file)), Some(l.keep)),
                    None => (None, None),
                };
                let (file, scrub) = match (&cfg.backing, file) {
                    (_, Some(f)) => (Some(f), false),
                    (Backing::Anonymous { .. }, None) | (Backing::Pool { .. }, None) => {
                        (None, false)
                    }
                    (Backing::MemfdHugetlb(p), None) => {
                        (Some(Arc::new(memfd(*p, cfg.size)?)), false)
                    }
                    (Backing::HugetlbfsFile { path, page }, None) => {
                        let (f, named) = hugetlbfs_file(path, *page, cfg.size)?;
                        (Some(Arc::new(f)), named)
                    }
                };
                for &(gpa, len) in regions {
                    mapped.push(map_region(cfg, gpa, len, file.as_ref().map(|f| (f, off)))?);
                    off += len;
                }
                kept_file = file;
                scrub_file_on_drop = scrub;
                lease
            }
        };
        let memory =
            GuestMemory::from_regions(mapped).map_err(|e| Error::BadRegions(e.to_string()))?;
        let ram: Vec<(u64, u64)> = regions.iter().map(|&(g, l)| (g.0, l)).collect();
        let mut gr = GuestRam {
            memory,
            cfg: cfg.clone(),
            tracker: Mutex::new(Tracker::new(ram, hint_page_shift(&cfg.backing))),
            stats: PrefaultStats {
                method: match (&cfg.backing, cfg.prezero) {
                    (Backing::Pool { .. }, _) => PrepMethod::PoolLease,
                    (_, Prezero::Off) => PrepMethod::Nothing,
                    (_, Prezero::Engine(_)) => PrepMethod::KernelFaultOnDemand,
                },
                backend: None,
                backing: cfg.backing.kind(),
                bytes: 0,
                duration: Duration::ZERO,
                threads: 0,
            },
            file: kept_file,
            scrub_file_on_drop,
            _pieces: reserved,
            _lease: lease,
        };
        if cfg.prefault {
            gr.prefault(progress)?;
        }
        Ok(gr)
    }

    /// The guest memory, for KVM region setup and loaders. Writes through it
    /// are recorded by its dirty bitmap and excluded from the hint; prefer
    /// [`GuestRam::write_tracked`] anyway.
    pub fn memory(&self) -> &GuestMemory {
        &self.memory
    }

    /// The configuration this RAM was built from.
    pub fn config(&self) -> &MemoryConfig {
        &self.cfg
    }
}

/// Shared by the tests of each part: 32 MiB of guest RAM in two regions
/// around a hole.
#[cfg(test)]
pub(crate) mod test_support {
    use vm_memory::GuestAddress;
    use zerohint::Hint;

    use super::GuestRam;
    use crate::MemoryConfig;

    pub(crate) const M: u64 = 1 << 20;

    /// Two regions with a hole, like RAM split around the MMIO gap.
    pub(crate) fn regions() -> Vec<(GuestAddress, u64)> {
        vec![(GuestAddress(0), 24 * M), (GuestAddress(64 * M), 8 * M)]
    }

    /// 32 MiB of the default configuration, changed by `set`.
    pub(crate) fn cfg(set: impl FnOnce(&mut MemoryConfig)) -> MemoryConfig {
        let mut cfg = MemoryConfig {
            size: 32 * M,
            ..Default::default()
        };
        set(&mut cfg);
        cfg
    }

    pub(crate) fn ram(set: impl FnOnce(&mut MemoryConfig)) -> GuestRam {
        GuestRam::create(&cfg(set), &regions(), None).unwrap()
    }

    pub(crate) fn covered(h: &Hint, a: u64) -> bool {
        h.entries.iter().any(|e| a >= e.start && a < e.end())
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::test_support::*;
    use super::*;
    use crate::{Backing, Error, MemoryConfig, PageSize};

    /// A verifying in-process pool on 4K pages (`size` bytes in regions of
    /// `region`), clean, and a guest config that leases from it.
    fn test_pool(
        tag: &str,
        size: u64,
        region: u64,
    ) -> (
        std::path::PathBuf,
        std::path::PathBuf,
        pool::daemon::Daemon,
        MemoryConfig,
    ) {
        let dir = std::env::temp_dir().join(format!("guestmem-{tag}-{}", std::process::id()));
        let socket = dir.join("pool.sock");
        let d = pool::daemon::Daemon::start(pool::daemon::Config {
            verify: true,
            ..pool::daemon::Config::memfds(socket.clone(), size, region, pool::PageSize::Size4K)
        })
        .unwrap();
        assert!(d.wait_all_clean(std::time::Duration::from_secs(60)));
        let cfg = cfg(|c| {
            c.backing = Backing::Pool {
                socket: socket.clone(),
                page: PageSize::Size4K,
            }
        });
        (dir, socket, d, cfg)
    }

    /// Guest RAM leased from a (4K, in-process) pool: all hinted, all zero,
    /// and when the VM goes the region comes back dirty, is scrubbed, and
    /// is not retired (the mappings were gone before the lease ended).
    #[test]
    fn pool_ram_is_hinted_zero_and_goes_back_dirty() {
        let (dir, socket, d, cfg) = test_pool("pool", 64 * M, 32 * M);
        for round in 0..3 {
            // What the VMM does: lease, hand guestmem the file.
            let lease = pool::client::lease(&socket, 32 * M, pool::PageSize::Size4K).unwrap();
            let leased = LeasedMemory {
                pieces: vec![LeasedPiece {
                    file: File::from(lease.fd().try_clone_to_owned().unwrap()),
                    offset: lease.offset(),
                    len: lease.len(),
                }],
                keep: Box::new(lease),
            };
            let mut r = GuestRam::create_leased(&cfg, &regions(), None, leased).unwrap();
            assert_eq!(r.prefault_stats().method, PrepMethod::PoolLease);
            let h = r.zero_hint().unwrap().unwrap();
            assert_eq!(h.total_bytes(), 32 * M);
            assert_eq!(r.verify_zero(&h).unwrap(), 32 * M, "round {round}");
            // Dirty it everywhere the VMM may, like a guest would.
            for &(g, l) in &regions() {
                r.write_tracked(&vec![0xa5; l as usize], g).unwrap();
            }
            drop(r);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while d.status().leases_total <= round || d.status().leased_bytes > 0 {
                assert!(std::time::Instant::now() < deadline);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(d.wait_all_clean(std::time::Duration::from_secs(60)));
        }
        let s = d.status();
        assert_eq!(
            (s.leases_total, s.retired_total, s.scrub_failures),
            (3, 0, 0)
        );
        drop(d);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Guest RAM larger than a pool region, leased as several regions
    /// (docs/pool.md "Leases of any size"): each RAM range is one host
    /// range (one vm-memory region, as with one file) made of the pieces in
    /// order, all hinted and zero; the guest's bytes land in the pieces'
    /// files in guest order; when the VM goes every region comes back and
    /// is replaced, none retired, and the next lease reads zero.
    #[test]
    fn ram_over_several_pool_regions_is_one_range_per_ram_range() {
        use std::os::unix::fs::FileExt;
        let (dir, socket, d, cfg) = test_pool("pieces", 32 * M, 8 * M);
        let lease =
            pool::client::lease_pieces(&socket, 32 * M, pool::PageSize::Size4K, None, 8).unwrap();
        let files: Vec<File> = lease
            .pieces()
            .iter()
            .map(|(fd, _)| File::from(fd.try_clone_to_owned().unwrap()))
            .collect();
        assert_eq!(files.len(), 4);
        let leased = LeasedMemory {
            pieces: lease
                .pieces()
                .iter()
                .map(|(fd, p)| LeasedPiece {
                    file: File::from(fd.try_clone_to_owned().unwrap()),
                    offset: 0,
                    len: p.len,
                })
                .collect(),
            keep: Box::new(lease),
        };
        let mut r = GuestRam::create_leased(&cfg, &regions(), None, leased).unwrap();
        assert_eq!(
            vm_memory::GuestMemoryBackend::num_regions(r.memory()),
            2,
            "one region per RAM range"
        );
        let h = r.zero_hint().unwrap().unwrap();
        assert_eq!(h.total_bytes(), 32 * M);
        assert_eq!(r.verify_zero(&h).unwrap(), 32 * M);
        // Each guest MiB gets its own byte; piece k holds guest bytes
        // [8k, 8k + 8) MiB of RAM in guest order (24 MiB low, 8 MiB high).
        for &(g, l) in &regions() {
            for mib in 0..l / M {
                let b = (g.0 / M + mib) as u8 | 0x80;
                r.write_tracked(&vec![b; M as usize], GuestAddress(g.0 + mib * M))
                    .unwrap();
            }
        }
        let mut at = 0u64;
        for &(g, l) in &regions() {
            for mib in 0..l / M {
                let (k, off) = ((at / (8 * M)) as usize, at % (8 * M));
                let mut got = [0u8; 2];
                files[k].read_exact_at(&mut got[..1], off).unwrap();
                files[k].read_exact_at(&mut got[1..], off + M - 1).unwrap();
                let want = (g.0 / M + mib) as u8 | 0x80;
                assert_eq!(
                    got,
                    [want, want],
                    "guest MiB {} in piece {k}",
                    g.0 / M + mib
                );
                at += M;
            }
        }
        drop(files);
        drop(r);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while d.status().leased_bytes > 0 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(d.wait_all_clean(std::time::Duration::from_secs(60)));
        let s = d.status();
        assert_eq!((s.leases_total, s.retired_total), (1, 0));
        let again =
            pool::client::lease_pieces(&socket, 32 * M, pool::PageSize::Size4K, None, 8).unwrap();
        let m = again.map(false).unwrap();
        assert!(
            m.as_slice().iter().all(|&b| b == 0),
            "the next lease saw the guest's data"
        );
        drop(m);
        drop(again);
        drop(d);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A hugetlb backing with 4K pages cannot be mapped: hand-built (the
    /// option parser never builds one), it is refused with the one-line
    /// error before any memory is touched, and so is the pool check.
    #[test]
    fn hugetlb_backing_refuses_4k_pages() {
        for b in [
            Backing::MemfdHugetlb(PageSize::Size4K),
            Backing::HugetlbfsFile {
                path: "/dev/hugepages".into(),
                page: PageSize::Size4K,
            },
        ] {
            assert!(matches!(b.check(), Err(Error::NotHugePage { page: "4K" })));
            let e = GuestRam::create(&cfg(|c| c.backing = b), &regions(), None)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("cannot use 4K pages") && e.contains("; use hugepage_size=2M"),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(matches!(
            crate::check_hugepages(PageSize::Size4K, 4096),
            Err(Error::NotHugePage { .. })
        ));
        assert!(Backing::MemfdHugetlb(PageSize::Size2M).check().is_ok());
    }

    #[test]
    fn pool_backing_needs_leased_memory() {
        // Leasing is the VMM's (zerostart's ram::create, where the
        // missing-pool error is tested): guestmem refuses to guess.
        let cfg = cfg(|c| {
            c.backing = Backing::Pool {
                socket: "/nonexistent/pool.sock".into(),
                page: PageSize::Size4K,
            }
        });
        let e = GuestRam::create(&cfg, &regions(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("create_leased"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn guest_ram_can_be_shared_with_vcpu_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<GuestRam>();
    }

    #[test]
    fn bad_layouts_are_errors() {
        let cfg = cfg(|_| {});
        for regs in [
            vec![],
            vec![(GuestAddress(0), 16 * M)],
            vec![(GuestAddress(0), 24 * M), (GuestAddress(8 * M), 8 * M)],
            vec![(GuestAddress(0x800), 32 * M)],
            vec![(GuestAddress(u64::MAX - 4095), 32 * M)],
        ] {
            let e = GuestRam::create(&cfg, &regs, None).unwrap_err();
            assert!(matches!(e, Error::BadRegions(_)), "{regs:?}: {e}");
        }
    }

    #[test]
    fn too_much_memory_is_a_clear_error() {
        let avail = crate::mem_available().unwrap();
        let size = (avail + (64 << 30)) & !(4096 - 1);
        let cfg = MemoryConfig {
            size,
            ..MemoryConfig::default()
        };
        let e = GuestRam::create(&cfg, &[(GuestAddress(0), size)], None).unwrap_err();
        assert!(matches!(e, Error::NotEnoughMemory { .. }), "{e}");
    }
}
