//! Mapping guest RAM and tracking what the VMM wrote into it.

use std::fs::{File, OpenOptions};
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vm_memory::bitmap::AtomicBitmap;
use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryRegion, MmapRegion,
};
use zerohint::{Hint, PAGE_SIZE};

use crate::prefault::{self, Span};
use crate::track::Tracker;
use crate::{
    check_backing_hugepages, check_mem_available, Backing, BackingKind, Error, GuestMemory,
    GuestRegion, MemoryConfig, PageSize, PrefaultMethod, Prezero,
};

/// How guest RAM came to be zero (or whether it is promised to be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepMethod {
    /// Leased from a pool that zeroed and populated it beforehand.
    PoolLease,
    /// No prefault and no hint: nothing is promised.
    Nothing,
    /// No prefault, hint on: the kernel clears each page as the guest
    /// first touches it.
    KernelFaultOnDemand,
    /// Prefaulted with `MADV_POPULATE_WRITE` (the kernel cleared every page).
    PopulateWrite,
    /// Prefaulted by writing zeros with the `prezero` engine.
    NtEngine,
}

/// What preparing guest RAM did and cost: plain facts, no report format.
/// The VMM turns them into its boot timeline (zerostart's
/// `timeline::PrezeroReport`); guestmem knows nothing of that JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefaultStats {
    /// How the memory was made ready.
    pub method: PrepMethod,
    /// The zeroing engine's backend when it ran ([`PrepMethod::NtEngine`]).
    pub backend: Option<&'static str>,
    /// The backing class.
    pub backing: BackingKind,
    /// Bytes prefaulted (0 without prefault).
    pub bytes: u64,
    /// Wall time of the prefault (zero without prefault).
    pub duration: Duration,
    /// Worker threads used for the prefault (0 without prefault).
    pub threads: usize,
}

impl PrefaultStats {
    /// Prefault throughput in GiB/s (0 when nothing was timed).
    pub fn gib_per_s(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.bytes as f64 / (1u64 << 30) as f64 / secs
        } else {
            0.0
        }
    }
}

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

fn memfd(page: PageSize, size: u64) -> Result<File, Error> {
    hostmem::memfd(c"zerostart-guest-ram", size, page, hostmem::Sealing::Never).map_err(|source| {
        // memfd_create fails on a kernel without the size; ftruncate on a
        // size that is not a multiple of it.
        if source.raw_os_error() == Some(libc::EINVAL) && size.checked_rem(page.bytes()) != Some(0)
        {
            Error::Backing {
                what: "ftruncate of the hugetlb memfd".into(),
                source,
                fix: "size= must be a multiple of the hugepage size",
            }
        } else {
            Error::Backing {
                what: format!("memfd_create(MFD_HUGETLB {})", page.name()),
                source,
                fix: "the host kernel needs hugetlb support for this page size",
            }
        }
    })
}

// The hugetlbfs and privacy checks are `hostmem::hugetlbfs` (the pool's too), so
// guest RAM files and pool region files refuse the same things.
pub(crate) fn check_hugetlbfs(dir: &Path, page: PageSize) -> io::Result<()> {
    hostmem::hugetlbfs::check_path(dir, page.bytes())
}

fn check_hugetlbfs_fd(file: &File, page: PageSize) -> io::Result<()> {
    use std::os::fd::AsFd;
    hostmem::hugetlbfs::check_fd(file.as_fd(), page.bytes())
}

/// Opens (or creates) the hugetlbfs file and makes its content zero: a
/// directory gets a new file that is unlinked at once (nobody else can open
/// it); a named file is `flock`ed exclusively, truncated to 0 (freeing every
/// page of an earlier user) and re-grown (new pages are cleared by the kernel
/// when first faulted). A named file must be this user's and closed to
/// group and others: whoever else can write it could change hinted guest
/// memory behind the hint's back (and read the live guest), which `flock`
/// cannot stop. Returns the file and whether it is named (not a fresh
/// unlinked one).
fn hugetlbfs_file(path: &Path, page: PageSize, size: u64) -> Result<(File, bool), Error> {
    let fix_mount = "put the file on a hugetlbfs mount with that page size, e.g. mount -t hugetlbfs -o pagesize=2M none /dev/hugepages";
    let err = |what: String, source: io::Error, fix| Error::Backing { what, source, fix };
    // Check the filesystem before creating anything, so a wrong path leaves
    // no stray file behind.
    let dir = if path.is_dir() {
        path
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    check_hugetlbfs(dir, page).map_err(|source| {
        err(
            format!(
                "{} is not on a hugetlbfs mount with {} pages",
                path.display(),
                page.name()
            ),
            source,
            fix_mount,
        )
    })?;
    let file = if path.is_dir() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = path.join(format!("zerostart-{}-{nanos}", std::process::id()));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&name)
            .map_err(|e| err(format!("create {}", name.display()), e, fix_mount))?;
        std::fs::remove_file(&name)
            .map_err(|e| err(format!("unlink {}", name.display()), e, fix_mount))?;
        f
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| err(format!("open {}", path.display()), e, fix_mount))?
    };
    // The file itself, in case `path` is a symlink to another filesystem.
    check_hugetlbfs_fd(&file, page).map_err(|source| {
        err(
            format!(
                "{} is not a hugetlbfs file with {} pages",
                path.display(),
                page.name()
            ),
            source,
            fix_mount,
        )
    })?;
    let named = !path.is_dir();
    if named {
        private_file(&file, path)?;
    }
    // SAFETY: flock on a valid fd.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(err(
            format!("lock {}", path.display()),
            io::Error::last_os_error(),
            "another VM uses this file; give each VM its own file=",
        ));
    }
    file.set_len(0)
        .and_then(|_| file.set_len(size))
        .map_err(|e| err(format!("truncate {}", path.display()), e, fix_mount))?;
    Ok((file, named))
}

/// Refuses a named backing file that another user could open: not owned by
/// this process's effective uid, or with any group/other permission bit.
fn private_file(file: &File, path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let md = file.metadata().map_err(|source| Error::Backing {
        what: format!("stat {}", path.display()),
        source,
        fix: "check the file= path",
    })?;
    match hostmem::hugetlbfs::file_not_private(md.uid(), md.mode(), path) {
        None => Ok(()),
        Some((why, fix)) => Err(Error::UnsafeBackingFile {
            path: path.to_path_buf(),
            why,
            fix,
        }),
    }
}

fn map_region(
    cfg: &MemoryConfig,
    gpa: GuestAddress,
    len: u64,
    file: Option<(&Arc<File>, u64)>,
) -> Result<GuestRegion, Error> {
    let size = usize::try_from(len).map_err(|_| Error::BadRegions("region too large".into()))?;
    let bitmap = AtomicBitmap::new(
        size,
        NonZeroUsize::new(PAGE_SIZE as usize).unwrap_or(NonZeroUsize::MIN),
    );
    let mut b = MmapRegionBuilder::new_with_bitmap(size, bitmap)
        .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE);
    b = match file {
        // Shared and *without* MAP_NORESERVE: hugetlb pages are reserved at
        // mmap time, so a shortage fails here, not as a SIGBUS on fault.
        Some((f, off)) => b
            .with_mmap_flags(libc::MAP_SHARED)
            .with_file_offset(FileOffset::from_arc(f.clone(), off))
            .with_hugetlbfs(cfg.backing.page_bytes() > PAGE_SIZE),
        None => b.with_mmap_flags(libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE),
    };
    let region: MmapRegion<AtomicBitmap> = b.build().map_err(|e| Error::Mmap {
        backing: format!("{:?}", cfg.backing),
        size_mib: len >> 20,
        source: match e {
            vm_memory::mmap::MmapRegionError::Mmap(io) => io,
            other => io::Error::other(other.to_string()),
        },
    })?;
    if let Backing::Anonymous { thp } = cfg.backing {
        let advice = if thp {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on our own fresh mapping; it changes no content.
        // Failure (THP compiled out) only costs speed, so it is not fatal.
        unsafe { libc::madvise(region.as_ptr().cast(), size, advice) };
    }
    GuestRegion::new(region, gpa)
        .ok_or_else(|| Error::BadRegions(format!("region {:#x}+{len:#x} overflows", gpa.0)))
}

/// Memory the VMM leased for guest RAM (`prezero=pool`): guestmem maps
/// it and keeps `keep` (the lease) alive until the mappings are gone, so
/// the pool learns the lease ended only after the guest's RAM is unmapped
/// (a mapping still alive then would make it retire the region). Leasing
/// is the VMM's business: guestmem does not talk to the pool.
pub struct LeasedMemory {
    /// The leased memory file (hugetlb or shmem), already known zero.
    pub file: File,
    /// Where the lease starts in `file`.
    pub offset: u64,
    /// Bytes leased (at least the guest's RAM size).
    pub len: u64,
    /// Dropped after the mappings (ends the lease).
    pub keep: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for LeasedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedMemory")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// The hint's (informational) page shift: the backing's, except that THP
/// switched off host-wide (`enabled` = `[never]`) means 4 KiB pages whatever
/// `MADV_HUGEPAGE` asked for.
fn hint_page_shift(b: &Backing) -> u8 {
    if let Backing::Anonymous { thp: true } = b {
        let en = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !en.contains("[always]") && !en.contains("[madvise]") {
            return 12;
        }
    }
    b.page_shift()
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
            if l.len < cfg.size {
                return Err(Error::Backing {
                    what: format!("pool lease of {} bytes", l.len),
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
        let mut off = leased.as_ref().map_or(0, |l| l.offset);
        let (file, scrub_file_on_drop, lease) = match (&cfg.backing, leased) {
            (_, Some(l)) => (Some(Arc::new(l.file)), false, Some(l.keep)),
            (Backing::Anonymous { .. }, None) | (Backing::Pool { .. }, None) => (None, false, None),
            (Backing::MemfdHugetlb(p), None) => (Some(Arc::new(memfd(*p, cfg.size)?)), false, None),
            (Backing::HugetlbfsFile { path, page }, None) => {
                let (f, named) = hugetlbfs_file(path, *page, cfg.size)?;
                (Some(Arc::new(f)), named, None)
            }
        };
        let mut mapped = Vec::with_capacity(regions.len());
        for &(gpa, len) in regions {
            mapped.push(map_region(cfg, gpa, len, file.as_ref().map(|f| (f, off)))?);
            off += len;
        }
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
            file,
            scrub_file_on_drop,
            _lease: lease,
        };
        if cfg.prefault {
            gr.prefault(progress)?;
        }
        Ok(gr)
    }

    fn spans(&self) -> Vec<Span> {
        self.memory
            .iter()
            .map(|r| Span {
                gpa: r.start_addr().0,
                host: r.as_ptr() as usize,
                len: r.len() as usize,
            })
            .collect()
    }

    fn prefault(&mut self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Result<(), Error> {
        let method = prefault::resolve(self.cfg.backing.kind(), self.cfg.prefault_method);
        let threads = prefault::worker_count(self.cfg.threads);
        let align = 1usize << self.cfg.backing.page_shift();
        let spans = self.spans();
        let t0 = Instant::now();
        let (used_threads, backend) = match method {
            PrefaultMethod::Nt => {
                let choice = match self.cfg.prezero {
                    Prezero::Engine(c) => c,
                    Prezero::Off => prezero::Choice::Auto,
                };
                let granule = hostmem::PageSize::from_shift(self.cfg.backing.page_shift())
                    .unwrap_or(hostmem::PageSize::Size4K);
                let z = prezero::Zeroer::new(choice)?
                    .threads(threads)
                    .granule(granule);
                let ranges: Vec<(*mut u8, usize)> =
                    spans.iter().map(|s| (s.host as *mut u8, s.len)).collect();
                let total = self.cfg.size;
                let p = progress.map(|p| move |d: u64| p(d, total));
                // SAFETY: the ranges are our own live mappings and nothing
                // else runs in guest memory yet (no vCPU exists). The `try_`
                // form faults each chunk in first, so memory the kernel
                // cannot supply (a hugetlb cgroup limit hit at fault time,
                // say) is an error here, never a SIGBUS in a worker.
                let st = unsafe {
                    z.try_zero_ranges(&ranges, p.as_ref().map(|f| f as &(dyn Fn(u64) + Sync)))?
                };
                (st.threads, Some(st.backend.name()))
            }
            _ => {
                let chunks = prefault::chunks(&spans, align, 64 << 20);
                prefault::parallel(&chunks, threads, progress, prefault::populate_write)?;
                (threads.min(chunks.len()), None)
            }
        };
        let s = &mut self.stats;
        s.duration = t0.elapsed();
        s.method = match method {
            PrefaultMethod::Nt => PrepMethod::NtEngine,
            _ => PrepMethod::PopulateWrite,
        };
        s.backend = backend;
        s.bytes = self.cfg.size;
        s.threads = used_threads;
        Ok(())
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

    fn tracker(&self) -> MutexGuard<'_, Tracker> {
        // A panic while holding the lock leaves the data consistent (every
        // mutation is a single push or assignment).
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the VMM wrote (or will write) `[addr, addr + len)`: the
    /// kernel, initramfs, boot_params, command line, setup_data including
    /// the hint blob, page tables, GDT, MP/ACPI tables, firmware. After
    /// [`GuestRam::finalize_hint`], a range touching a hinted page is an
    /// error.
    pub fn mark_written(&mut self, addr: GuestAddress, len: u64) -> Result<(), Error> {
        self.tracker().mark(addr.0, len)
    }

    /// Writes `data` at `addr` and records it (record first, so a failed
    /// partial write is still excluded).
    pub fn write_tracked(&mut self, data: &[u8], addr: GuestAddress) -> Result<(), Error> {
        let len = data.len() as u64;
        self.tracker().mark(addr.0, len)?;
        self.memory
            .write_slice(data, addr)
            .map_err(|source| Error::GuestWrite {
                addr: addr.0,
                len,
                source,
            })
    }

    /// Writes `data` at `addr` behind every tracker's back (no mark, no
    /// dirty bit, allowed after finalize). Exists only so the VMM's
    /// `--test-corrupt-hint` self-test can plant a byte the hint wrongly
    /// claims zero and show that guest-side verification catches it; never
    /// use it for real boot data.
    pub fn write_untracked_for_selftest(
        &self,
        data: &[u8],
        addr: GuestAddress,
    ) -> Result<(), Error> {
        let len = data.len() as u64;
        let err = |source| Error::GuestWrite {
            addr: addr.0,
            len,
            source,
        };
        let r = self
            .memory
            .find_region(addr)
            .ok_or(vm_memory::GuestMemoryError::InvalidGuestAddress(addr))
            .map_err(err)?;
        let off = addr.0 - r.start_addr().0;
        if off.checked_add(len).is_none_or(|e| e > r.len()) {
            return Err(err(vm_memory::GuestMemoryError::InvalidGuestAddress(addr)));
        }
        // SAFETY: bounds checked against the region's live mapping above.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), r.as_ptr().add(off as usize), data.len())
        };
        Ok(())
    }

    /// Pages written through vm-memory's API, from the dirty bitmaps, as
    /// guest-physical `(start, len)` runs.
    fn dirty_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for r in self.memory.iter() {
            let base = r.start_addr().0;
            // A snapshot of the words; the original keeps its bits.
            let words = MmapRegion::bitmap(r).clone().get_and_reset();
            for (wi, mut w) in words.into_iter().enumerate() {
                while w != 0 {
                    let bit = w.trailing_zeros() as u64;
                    w &= w - 1;
                    let gpa = base + (wi as u64 * 64 + bit) * PAGE_SIZE;
                    match out.last_mut() {
                        Some(last) if last.0 + last.1 == gpa => last.1 += PAGE_SIZE,
                        _ => out.push((gpa, PAGE_SIZE)),
                    }
                }
            }
        }
        out
    }

    /// The zero hint for the guest: all RAM minus every written page
    /// (rounded outward to 4 KiB), with the backing's page shift; `None`
    /// when `prezero=off`. Mark the hint blob's own location written before
    /// calling this, then write the blob; [`GuestRam::finalize_hint`]
    /// checks that this hint is still true. After the freeze it returns the
    /// frozen hint, or [`Error::HintInvalidated`] once a write through
    /// [`GuestRam::memory`] has touched it.
    pub fn zero_hint(&self) -> Result<Option<Hint>, Error> {
        if self.cfg.prezero == Prezero::Off {
            return Ok(None);
        }
        let dirty = self.dirty_ranges();
        self.tracker().issue(&dirty).map(Some)
    }

    /// Call right before the first `KVM_RUN`: checks that nothing was written
    /// into the last hint handed out since [`GuestRam::zero_hint`] built it
    /// (else [`Error::HintInvalidated`]), then freezes it. From now on
    /// tracked writes into hinted pages fail. Returns the final hint (`None`
    /// for `prezero=off`). May be called again (e.g. right before the first
    /// `KVM_RUN` after an earlier freeze): it returns the same hint, or
    /// [`Error::HintInvalidated`] if a write through [`GuestRam::memory`]
    /// has touched a hinted page since.
    pub fn finalize_hint(&mut self) -> Result<Option<Hint>, Error> {
        if self.cfg.prezero == Prezero::Off {
            return Ok(None);
        }
        let dirty = self.dirty_ranges();
        self.tracker().finalize(&dirty).map(Some)
    }

    /// Whether [`GuestRam::finalize_hint`] has run.
    pub fn is_finalized(&self) -> bool {
        self.tracker().is_frozen()
    }

    /// What preparing guest RAM did and cost.
    pub fn prefault_stats(&self) -> &PrefaultStats {
        &self.stats
    }

    /// Reads every byte `hint` claims zero, in parallel on the configured
    /// threads; errors with the lowest non-zero guest-physical address, or if
    /// a range is not RAM. Returns the bytes checked. Call it while no vCPU
    /// runs.
    pub fn verify_zero(&self, hint: &Hint) -> Result<u64, Error> {
        let regions = self.spans();
        let mut spans = Vec::new();
        for e in &hint.entries {
            let mut covered = 0u64;
            for r in &regions {
                let s = e.start.max(r.gpa);
                let end = e.end().min(r.gpa + r.len as u64);
                if s < end {
                    spans.push(Span {
                        gpa: s,
                        host: r.host + (s - r.gpa) as usize,
                        len: (end - s) as usize,
                    });
                    covered += end - s;
                }
            }
            if covered != e.length || e.start % PAGE_SIZE != 0 || e.length % PAGE_SIZE != 0 {
                return Err(Error::HintOutOfRam {
                    start: e.start,
                    len: e.length,
                });
            }
        }
        // SAFETY: spans are 4K-aligned pieces of our live mappings; the
        // caller runs this while no vCPU writes guest memory.
        unsafe { crate::verify::verify_spans(&spans, prefault::worker_count(self.cfg.threads)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    /// Two regions with a hole, like RAM split around the MMIO gap.
    fn regions() -> Vec<(GuestAddress, u64)> {
        vec![(GuestAddress(0), 24 * M), (GuestAddress(64 * M), 8 * M)]
    }

    /// 32 MiB of the default configuration, changed by `set`.
    fn cfg(set: impl FnOnce(&mut MemoryConfig)) -> MemoryConfig {
        let mut cfg = MemoryConfig {
            size: 32 * M,
            ..Default::default()
        };
        set(&mut cfg);
        cfg
    }

    fn ram(set: impl FnOnce(&mut MemoryConfig)) -> GuestRam {
        GuestRam::create(&cfg(set), &regions(), None).unwrap()
    }

    fn covered(h: &Hint, a: u64) -> bool {
        h.entries.iter().any(|e| a >= e.start && a < e.end())
    }

    #[test]
    fn fresh_ram_is_all_hinted_and_verifies() {
        type Set = fn(&mut MemoryConfig);
        for (opts, set) in [
            (
                "thp=off",
                (|c| c.backing = Backing::Anonymous { thp: false }) as Set,
            ),
            ("thp=on", |c| c.backing = Backing::Anonymous { thp: true }),
            ("prefault=on,prefault_method=populate", |c| {
                c.prefault = true;
                c.prefault_method = PrefaultMethod::Populate;
            }),
            ("prefault=on,prefault_method=nt,thp=off", |c| {
                c.prefault = true;
                c.prefault_method = PrefaultMethod::Nt;
                c.backing = Backing::Anonymous { thp: false };
            }),
        ] {
            let r = ram(set);
            let h = r.zero_hint().unwrap().unwrap();
            assert_eq!(h.total_bytes(), 32 * M, "{opts}");
            assert_eq!(r.verify_zero(&h).unwrap(), 32 * M, "{opts}");
        }
    }

    /// Guest RAM leased from a (4K, in-process) pool: all hinted, all zero,
    /// and when the VM goes the region comes back dirty, is scrubbed, and
    /// is not retired (the mappings were gone before the lease ended).
    #[test]
    fn pool_ram_is_hinted_zero_and_goes_back_dirty() {
        let dir = std::env::temp_dir().join(format!("guestmem-pool-{}", std::process::id()));
        let socket = dir.join("pool.sock");
        let d = pool::daemon::Daemon::start(pool::daemon::Config {
            socket: socket.clone(),
            size: 64 * M,
            region_bytes: 32 * M,
            page: pool::PageSize::Size4K,
            hugetlbfs: None,
            verify: true,
            threads: 0,
            backend: prezero::Choice::Auto,
            fault: None,
        })
        .unwrap();
        assert!(d.wait_all_clean(std::time::Duration::from_secs(60)));
        let cfg = cfg(|c| {
            c.backing = Backing::Pool {
                socket: socket.clone(),
                page: PageSize::Size4K,
            }
        });
        for round in 0..3 {
            // What the VMM does: lease, hand guestmem the file.
            let lease = pool::client::lease(&socket, 32 * M, pool::PageSize::Size4K).unwrap();
            let leased = LeasedMemory {
                file: File::from(lease.fd().try_clone_to_owned().unwrap()),
                offset: lease.offset(),
                len: lease.len(),
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
    fn page_shift_follows_backing_and_host_thp() {
        let shift = |thp: bool| {
            ram(|c| c.backing = Backing::Anonymous { thp })
                .zero_hint()
                .unwrap()
                .unwrap()
                .entries[0]
                .page_shift
        };
        assert_eq!(shift(false), 12);
        let en = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        let thp_on = en.contains("[always]") || en.contains("[madvise]");
        assert_eq!(shift(true), if thp_on { 21 } else { 12 });
    }

    #[test]
    fn prezero_off_gives_no_hint() {
        let mut r = ram(|c| {
            c.prezero = Prezero::Off;
            c.prefault = true;
        });
        assert_eq!(r.zero_hint().unwrap(), None);
        assert_eq!(r.finalize_hint().unwrap(), None);
        assert_eq!(r.config().prezero, Prezero::Off);
        assert_eq!(r.prefault_stats().method, PrepMethod::PopulateWrite);
    }

    #[test]
    fn stats_name_method() {
        assert_eq!(
            ram(|_| {}).prefault_stats().method,
            PrepMethod::KernelFaultOnDemand
        );
        let r = ram(|c| {
            c.prefault = true;
            c.prefault_method = PrefaultMethod::Nt;
        });
        let st = r.prefault_stats();
        assert_eq!(st.method, PrepMethod::NtEngine);
        assert!(st.backend.is_some() && st.bytes == 32 * M && st.threads >= 1);
        // The timeline's JSON of these facts is zerostart's (its
        // timeline::PrezeroReport test checks `method`, `backing`, rate).
        assert_eq!(st.backing, BackingKind::AnonThp);
        assert!(st.gib_per_s() > 0.0);
        let r = ram(|c| {
            c.prefault = true;
            c.prefault_method = PrefaultMethod::Populate;
        });
        assert_eq!(r.prefault_stats().method, PrepMethod::PopulateWrite);
        assert_eq!(r.prefault_stats().backend, None);
    }

    #[test]
    fn prefault_progress_reaches_total() {
        let cfg = cfg(|c| {
            c.prefault = true;
            c.threads = 2;
        });
        let last = std::sync::Mutex::new((0u64, 0u64));
        let p = |d: u64, t: u64| *last.lock().unwrap() = (d, t);
        GuestRam::create(&cfg, &regions(), Some(&p)).unwrap();
        assert_eq!(*last.lock().unwrap(), (32 * M, 32 * M));
    }

    #[test]
    fn tracked_writes_are_excluded_and_data_lands() {
        let mut r = ram(|_| {});
        r.write_tracked(b"kernel", GuestAddress(0x100000)).unwrap();
        r.write_tracked(&[1; 10], GuestAddress(64 * M + 4095))
            .unwrap();
        r.mark_written(GuestAddress(0x7000), 1).unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        for a in [0x100000, 0x100fff, 64 * M, 64 * M + 8191, 0x7000] {
            assert!(!covered(&h, a), "{a:#x}");
        }
        assert!(covered(&h, 0x101000) && covered(&h, 64 * M + 8192));
        r.verify_zero(&h).unwrap();
        let mut b = [0u8; 6];
        r.memory()
            .read_slice(&mut b, GuestAddress(0x100000))
            .unwrap();
        assert_eq!(&b, b"kernel");
        // Outside RAM: an error, and nothing leaks.
        assert!(matches!(
            r.write_tracked(b"x", GuestAddress(40 * M)),
            Err(Error::GuestWrite { .. })
        ));
    }

    #[test]
    fn forgotten_mark_is_caught_by_the_dirty_bitmap() {
        let r = ram(|_| {});
        // A loader writing straight through vm-memory, never calling mark.
        r.memory()
            .write_slice(&[0xaa; 3], GuestAddress(5 * M + 4094))
            .unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        assert!(!covered(&h, 5 * M + 4094) && !covered(&h, 5 * M + 4096));
        assert_eq!(h.total_bytes(), 32 * M - 2 * 4096);
        assert_eq!(r.verify_zero(&h).unwrap(), h.total_bytes());
    }

    #[test]
    fn loader_style_reads_into_guest_memory_are_caught_too() {
        // linux-loader copies the kernel file with read_exact_volatile_from.
        let r = ram(|_| {});
        let image = vec![0x90u8; 3 * 4096 + 10];
        r.memory()
            .read_exact_volatile_from(GuestAddress(2 * M), &mut &image[..], image.len())
            .unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        for a in [2 * M, 2 * M + 3 * 4096 + 9] {
            assert!(!covered(&h, a), "{a:#x}");
        }
        assert!(covered(&h, 2 * M + 4 * 4096) && covered(&h, 2 * M - 1));
        r.verify_zero(&h).unwrap();
    }

    #[test]
    fn guest_ram_can_be_shared_with_vcpu_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<GuestRam>();
    }

    #[test]
    fn write_after_issue_fails_finalize_and_after_finalize_is_refused() {
        let mut r = ram(|_| {});
        let blob = GuestAddress(0x30000);
        r.mark_written(blob, 4096).unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        r.write_tracked(&h.encode().unwrap(), blob).unwrap();
        // A sneaky untracked write after the hint was built.
        r.memory()
            .write_slice(&[1], GuestAddress(0x200000))
            .unwrap();
        assert!(matches!(
            r.finalize_hint(),
            Err(Error::HintInvalidated { page: 0x200000 })
        ));
        // Rebuild and rewrite the blob: now it finalizes.
        let h = r.zero_hint().unwrap().unwrap();
        r.write_tracked(&h.encode().unwrap(), blob).unwrap();
        assert_eq!(r.finalize_hint().unwrap(), Some(h.clone()));
        assert!(r.is_finalized());
        r.verify_zero(&h).unwrap();
        // Into the blob page: allowed. Into hinted memory: refused, and
        // the memory is not written.
        r.write_tracked(&[2], blob).unwrap();
        assert!(matches!(
            r.write_tracked(&[3], GuestAddress(0x400000)),
            Err(Error::WriteAfterFinalize { page: 0x400000, .. })
        ));
        assert!(r.mark_written(GuestAddress(0x400000), 1).is_err());
        r.verify_zero(&h).unwrap();
    }

    #[test]
    fn selftest_corruption_bypasses_tracking_and_verify_catches_it() {
        let mut r = ram(|_| {});
        let h = r.zero_hint().unwrap().unwrap();
        r.write_untracked_for_selftest(&[0xa5], GuestAddress(9 * M + 123))
            .unwrap();
        // Invisible to the tracker (that is the point of the self-test)...
        assert_eq!(r.finalize_hint().unwrap(), Some(h.clone()));
        // ...but not to verification.
        assert!(
            matches!(r.verify_zero(&h), Err(Error::NotZero { gpa, value: 0xa5 }) if gpa == 9 * M + 123)
        );
        assert!(r
            .write_untracked_for_selftest(&[1, 2], GuestAddress(24 * M - 1))
            .is_err());
    }

    #[test]
    fn verify_finds_single_byte_at_start_middle_and_end() {
        for gpa in [0, 12 * M + 777, 24 * M - 1, 64 * M, 72 * M - 1] {
            let r = ram(|_| {});
            let h = r.zero_hint().unwrap().unwrap();
            // Poke through the host mapping, bypassing all tracking, as a
            // stale page from another tenant would look.
            let host = r.memory().get_host_address(GuestAddress(gpa)).unwrap();
            // SAFETY: inside our own mapping; no vCPU runs.
            unsafe { host.write_volatile(0x5a) };
            match r.verify_zero(&h) {
                Err(Error::NotZero {
                    gpa: g,
                    value: 0x5a,
                }) => assert_eq!(g, gpa),
                other => panic!("{gpa:#x}: {other:?}"),
            }
        }
    }

    #[test]
    fn verify_reports_lowest_of_several() {
        let r = ram(|c| c.threads = 2);
        let h = r.zero_hint().unwrap().unwrap();
        for gpa in [70 * M, 3 * M + 5, 20 * M] {
            let host = r.memory().get_host_address(GuestAddress(gpa)).unwrap();
            // SAFETY: inside our own mapping.
            unsafe { host.write_volatile(1) };
        }
        assert!(matches!(r.verify_zero(&h), Err(Error::NotZero { gpa, .. }) if gpa == 3 * M + 5));
    }

    #[test]
    fn verify_rejects_hint_outside_ram() {
        let r = ram(|_| {});
        let h = Hint::zeroed_from_ranges(&[(24 * M, 4096)], 12).unwrap();
        assert!(matches!(r.verify_zero(&h), Err(Error::HintOutOfRam { .. })));
        let h = Hint::zeroed_from_ranges(&[(60 * M, 8 * M)], 12).unwrap();
        assert!(matches!(r.verify_zero(&h), Err(Error::HintOutOfRam { .. })));
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
