//! One region's memory: a sealed memfd (hugetlb or, in test mode, shmem)
//! or a file on hugetlbfs, mapped shared into the daemon for scrubbing.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::pace::Pacer;
use crate::{Error, PageSize};

/// What backs a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A fresh anonymous memfd (nothing survives the daemon).
    Memfd,
    /// A named file on a hugetlbfs mount, created by this daemon (a file
    /// left by an earlier one is unlinked, never reused).
    Hugetlbfs(PathBuf),
}

/// A region's file and the daemon's shared mapping of it.
#[derive(Debug)]
pub struct RegionMemory {
    fd: OwnedFd,
    map: hostmem::Mapping,
    len: usize,
    dev: u64,
    ino: u64,
    source: Source,
    page: PageSize,
}

// Send and Sync as the mapping is: who may touch the memory when is
// decided by the region state machine (only the scrubber, while the region
// is `scrubbing`); `&RegionMemory` only hands out raw access under its
// rules.

/// What one scrub did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScrubStats {
    /// Bytes scrubbed.
    pub bytes: u64,
    /// Populate + zero + verify.
    pub elapsed: Duration,
    /// Whether every byte was read back.
    pub verified: bool,
    /// Zeroing backend that ran.
    pub backend: &'static str,
    /// CPU time of helper threads (the parallel verify), on top of the
    /// calling thread's own.
    pub helper_cpu: Duration,
}

/// Test hook: what the scrubber does on the scrub after `after` completed
/// ones (set by `ZEROSTART_POOL_FAULT`, for the kill and holder tests; the
/// daemon refuses it unless `ZEROSTART_TEST_SWITCHES=1`, see
/// [`Fault::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Do not start the scrub (the region stays `dirty`).
    StallBeforeScrub {
        /// Completed scrubs before the fault fires.
        after: u64,
    },
    /// Stop half way through making the region clean (after populating
    /// half of its new memory); the region stays `scrubbing`.
    StallMidScrub {
        /// Completed scrubs before the fault fires.
        after: u64,
    },
    /// Skip the zeroing (a broken engine) and keep the old pages:
    /// `--verify` must catch it, and without it the kill tests' scans must
    /// see the old pattern.
    SkipZero {
        /// Completed scrubs before the fault fires.
        after: u64,
    },
    /// Zero a returned region in place and lease the same file and pages
    /// again (what the pool did before it replaced them after every lease):
    /// the negative control of the holder tests, whose attacks must then
    /// read the next tenant's data.
    ScrubInPlace {
        /// Completed scrubs before the fault fires.
        after: u64,
    },
}

/// What a scrub is told to do wrong (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubFault {
    /// Nothing: a real scrub.
    None,
    /// Zero half, then park forever.
    StallMidScrub,
    /// Do not zero at all.
    SkipZero,
}

/// Environment variable of the fault-injection hook (tests only).
pub const FAULT_ENV: &str = "ZEROSTART_POOL_FAULT";

/// Environment variable that unlocks test-only switches (the same one the
/// VMM's `--test-corrupt-hint` needs).
pub const TEST_SWITCH_ENV: &str = "ZEROSTART_TEST_SWITCHES";

/// Whether `ZEROSTART_TEST_SWITCHES=1` is in the environment.
pub fn test_switches_unlocked() -> bool {
    std::env::var_os(TEST_SWITCH_ENV).is_some_and(|v| v == "1")
}

impl Fault {
    /// The fault named by `ZEROSTART_POOL_FAULT`, if any. A fault makes the
    /// pool hand out memory that is not zero (or reuse pages a former
    /// lessee can still reach), so it is refused unless
    /// `ZEROSTART_TEST_SWITCHES=1` says this is a test run: a stray
    /// variable in a production environment must stop the daemon, not
    /// weaken it.
    pub fn from_env() -> Result<Option<Fault>, Error> {
        match std::env::var(FAULT_ENV) {
            Ok(v) if !v.is_empty() => {
                if !test_switches_unlocked() {
                    return Err(Error::TestSwitchLocked(v));
                }
                Ok(Some(Fault::parse(&v)?))
            }
            _ => Ok(None),
        }
    }

    /// Parses `stall-before-scrub:N`, `stall-mid-scrub:N`, `skip-zero:N`
    /// or `scrub-in-place:N`.
    pub fn parse(s: &str) -> Result<Fault, Error> {
        let bad = || {
            Error::BadValue {
            key: "ZEROSTART_POOL_FAULT",
            value: s.to_string(),
            fix: "use stall-before-scrub:N, stall-mid-scrub:N, skip-zero:N or scrub-in-place:N (N completed scrubs first)".into(),
        }
        };
        let (kind, n) = s.split_once(':').ok_or_else(bad)?;
        let after = n.parse().map_err(|_| bad())?;
        match kind {
            "stall-before-scrub" => Ok(Fault::StallBeforeScrub { after }),
            "stall-mid-scrub" => Ok(Fault::StallMidScrub { after }),
            "skip-zero" => Ok(Fault::SkipZero { after }),
            "scrub-in-place" => Ok(Fault::ScrubInPlace { after }),
            _ => Err(bad()),
        }
    }
}

/// `DIR/zerostart-pool-<index>`: region `index`'s file with `--hugetlbfs`.
pub fn region_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("zerostart-pool-{index}"))
}

/// Name of the lock file a daemon holds in its `--hugetlbfs` directory.
pub const LOCK_FILE: &str = "zerostart-pool.lock";

/// Checks the `--hugetlbfs` directory before anything is created in it: on
/// hugetlbfs with `page` pages, owned by us or root, writable by nobody
/// else. Then takes its lock file (so a second daemon on the same
/// directory is one clear refusal) and returns it; the daemon keeps it
/// open for its lifetime. The lock is on a file never sent to clients, so
/// it dies with the daemon (a region file's open description lives on in
/// every client that received it).
pub fn check_dir(dir: &Path, page: PageSize) -> Result<OwnedFd, Error> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refuse = |path: &Path, why: String, fix: String| Error::UnsafeHugetlbfs {
        path: path.to_path_buf(),
        why,
        fix,
    };
    crate::hugetlbfs::check_path(dir, page.bytes()).map_err(|e| {
        refuse(
            dir,
            format!("is not a hugetlbfs mount with {page} pages ({e})"),
            format!(
                "mount one there: mount -t hugetlbfs -o pagesize={page},mode=0700 none {}",
                dir.display()
            ),
        )
    })?;
    let md = std::fs::metadata(dir).map_err(|e| Error::io(format!("stat {}", dir.display()), e))?;
    if let Some((why, fix)) = crate::hugetlbfs::dir_not_private(md.uid(), md.mode(), dir) {
        return Err(refuse(dir, why, fix));
    }
    let lock = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&lock)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refuse(
                    &lock,
                    "is a symlink".into(),
                    format!("remove it (rm {})", lock.display()),
                )
            } else {
                Error::io(format!("opening {}", lock.display()), e)
            }
        })?;
    let md = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", lock.display()), e))?;
    if !md.file_type().is_file() {
        return Err(refuse(
            &lock,
            "is not a regular file".into(),
            format!("remove it (rm -r {})", lock.display()),
        ));
    }
    if let Some((why, fix)) = crate::hugetlbfs::file_not_private(md.uid(), md.mode(), &lock) {
        return Err(refuse(&lock, why, fix));
    }
    // SAFETY: valid fd.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(refuse(
            &lock,
            "is locked: another pool daemon serves this directory".into(),
            "stop it, or give this daemon its own --hugetlbfs directory".into(),
        ));
    }
    Ok(file.into())
}

/// What [`clear_leftover`] found at a region's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing.
    None,
    /// A region file an earlier daemon of this user left (it was killed):
    /// unlinked; `holders` are the pids that still hold it (a VM leased
    /// it), which keep their memory. Its pages are never leased again.
    Removed {
        /// Pids still holding the old file.
        holders: Vec<i32>,
    },
}

/// Before a daemon creates region `index`'s file: a regular file of ours
/// with mode 0600 at that path was left by an earlier daemon (killed
/// before it could clean up) and is unlinked, never reused: a VM may still
/// map it, and its contents are unknown. Anything else there (a symlink,
/// another user's file, a file open to others, a directory) is a refusal
/// naming it: the pool did not make it.
pub fn clear_leftover(dir: &Path, index: usize) -> Result<Leftover, Error> {
    use std::os::unix::fs::MetadataExt;
    let path = region_path(dir, index);
    let md = match std::fs::symlink_metadata(&path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Leftover::None),
        Err(e) => return Err(Error::io(format!("stat {}", path.display()), e)),
    };
    let refuse = |why: String| Error::UnsafeHugetlbfs {
        path: path.clone(),
        why: format!("{why}, which the pool did not create"),
        fix: format!(
            "remove it (rm {}); the pool creates its region files itself",
            path.display()
        ),
    };
    let ft = md.file_type();
    if ft.is_symlink() {
        return Err(refuse("is a symlink".into()));
    }
    if !ft.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    if let Some((why, _)) = crate::hugetlbfs::file_not_private(md.uid(), md.mode(), &path) {
        return Err(refuse(why));
    }
    let holders = crate::holders::other_holders(md.dev(), md.ino());
    std::fs::remove_file(&path)
        .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    Ok(Leftover::Removed { holders })
}

/// Free hugepages of `page` size now (0 if unknown).
pub fn free_hugepages(page: PageSize) -> u64 {
    hostmem::hugepages::free(page)
}

/// Configured hugepages of `page` size (0 if unknown).
pub fn total_hugepages(page: PageSize) -> u64 {
    hostmem::hugepages::total(page)
}

impl RegionMemory {
    /// A fresh memfd of `len` bytes, sealed against resizing (a client
    /// cannot shrink it under the daemon's mapping), mapped shared.
    pub fn memfd(name: &str, len: u64, page: PageSize) -> Result<Self, Error> {
        let cname = CString::new(name).expect("region names have no NUL");
        // Sealed against resizing: a client cannot shrink it under the
        // daemon's mapping.
        let f = hostmem::memfd(&cname, len, page, hostmem::Sealing::Size).map_err(|e| {
            Error::io(
                format!("memfd_create({name}, {page} pages) (is hugetlb enabled in this kernel?)"),
                e,
            )
        })?;
        let fd = OwnedFd::from(f);
        Self::map(fd, len, page, Source::Memfd)
    }

    /// A new file `DIR/zerostart-pool-<index>` on hugetlbfs, created
    /// exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), so the pool
    /// never adopts a file somebody else made, nor follows a symlink
    /// planted in its place: anything already at that path is a refusal
    /// (the daemon's start-up removes only its own predecessors' files, see
    /// [`clear_leftover`]). The directory itself is checked once at start
    /// ([`check_dir`]).
    pub fn hugetlbfs(dir: &Path, index: usize, len: u64, page: PageSize) -> Result<Self, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = region_path(dir, index);
        let unsafe_file = |why: String, fix: String| Error::UnsafeHugetlbfs {
            path: path.clone(),
            why,
            fix,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => unsafe_file(
                    "exists already (a file or symlink the pool did not create)".into(),
                    format!(
                        "remove it (rm {}); the pool creates its region files itself",
                        path.display()
                    ),
                ),
                _ => Error::io(format!("creating {}", path.display()), e),
            })?;
        let fd: OwnedFd = file.into();
        crate::hugetlbfs::check_fd(fd.as_fd(), page.bytes()).map_err(|e| {
            unsafe_file(
                format!("is not on hugetlbfs with {page} pages ({e})"),
                format!(
                    "mount -t hugetlbfs -o pagesize={page},mode=0700 none {}",
                    dir.display()
                ),
            )
        })?;
        // SAFETY: valid fd and a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::last_os(format!("stat {}", path.display())));
        }
        if let Some((why, fix)) = crate::hugetlbfs::file_not_private(st.st_uid, st.st_mode, &path) {
            return Err(unsafe_file(why, fix));
        }
        // SAFETY: valid fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::last_os(format!(
                "sizing {} to {len} bytes",
                path.display()
            )));
        }
        Self::map(fd, len, page, Source::Hugetlbfs(path))
    }

    fn map(fd: OwnedFd, len: u64, page: PageSize, source: Source) -> Result<Self, Error> {
        // Shared: hugetlb reserves the pages here, so a shortage fails now
        // instead of SIGBUS later.
        let map = hostmem::Mapping::file(fd.as_fd(), 0, len as usize)
            .map()
            .map_err(|e| {
                let e = std::io::Error::from(e);
                if page.is_huge() {
                    let free = free_hugepages(page);
                    return Error::Hugepages {
                        bytes: len,
                        page,
                        free,
                        suggest: total_hugepages(page) + (len / page.bytes()).saturating_sub(free),
                        kb: page.bytes() >> 10,
                        source: e,
                    };
                }
                Error::io(format!("mapping a {len}-byte region"), e)
            })?;
        // SAFETY: valid fd and a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            // Unmapped as `map` drops.
            return Err(Error::last_os("stat of a region"));
        }
        crate::holders::DAEMON_MAPPINGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(map.as_ptr() as usize);
        Ok(RegionMemory {
            fd,
            map,
            len: len as usize,
            dev: st.st_dev,
            ino: st.st_ino,
            source,
            page,
        })
    }

    /// Bytes per page of the region's memory.
    pub fn page_bytes(&self) -> u64 {
        self.page.bytes()
    }

    /// Binds the region's file to NUMA `node` (its pages are allocated
    /// there from now on); call before preparing it.
    pub fn bind_node(&self, node: usize) -> Result<(), Error> {
        // SAFETY: our own mapping, whole length.
        unsafe { crate::numa::bind(self.map.as_ptr(), self.len, node) }
            .map_err(|e| Error::io(format!("binding a region to NUMA node {node} (mbind)"), e))
    }

    /// The region's file.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Bytes.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Whether the region is empty (never: regions have at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `(st_dev, st_ino)` of the file, to find other holders.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// The backing.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Faults every page in through the kernel (`MADV_POPULATE_WRITE`), so
    /// a page a client punched out, or a hugetlb shortage, is an error here
    /// instead of a SIGBUS in the zeroing loop.
    /// `MADV_POPULATE_WRITE` of the whole region through the daemon's
    /// mapping: how fresh memory was allocated before the idle-priority
    /// worker switched to `fallocate` (kept for `examples/first_fill.rs`,
    /// which compares the two).
    pub fn populate_mapped(&self) -> Result<(), Error> {
        self.populate()
    }

    fn populate(&self) -> Result<(), Error> {
        self.populate_range(0, self.len)?;
        self.check_size()
    }

    /// `MADV_POPULATE_WRITE` of `[off, off + len)`: the kernel allocates
    /// (and zeroes) every missing page; a shortage is an error, not a
    /// SIGBUS later.
    fn populate_range(&self, off: usize, len: usize) -> Result<(), Error> {
        self.map
            .populate_range(off, len)
            .map_err(|e| Error::io("populating a region before its scrub", e))
    }

    /// `fallocate` of `[off, off + len)` of the region's file: the kernel
    /// allocates every missing page (hugetlb pages are zeroed here; shmem
    /// pages are zeroed by the kernel before anyone can read them), and a
    /// shortage is an error (`ENOSPC`), not a SIGBUS later. Unlike
    /// `MADV_POPULATE_WRITE` through the daemon's mapping it takes no lock
    /// of the daemon's mm, so an idle-priority thread that is preempted
    /// half way holds up nobody else in the daemon.
    fn allocate_range(&self, off: usize, len: usize) -> Result<(), Error> {
        debug_assert!(off + len <= self.len);
        // SAFETY: plain syscall on our fd, inside the file's size (the
        // seals forbid growing it).
        let r = unsafe { libc::fallocate(self.fd.as_raw_fd(), 0, off as i64, len as i64) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if self.page.is_huge() && e.raw_os_error() == Some(libc::ENOSPC) {
                let free = free_hugepages(self.page);
                return Err(Error::Hugepages {
                    bytes: len as u64,
                    page: self.page,
                    free,
                    suggest: total_hugepages(self.page)
                        + (len as u64 / self.page.bytes()).saturating_sub(free),
                    kb: self.page.bytes() >> 10,
                    source: e,
                });
            }
            return Err(Error::io("allocating a region's pages (fallocate)", e));
        }
        Ok(())
    }

    fn check_size(&self) -> Result<(), Error> {
        // A hugetlbfs file somebody resized would make the mapping run past
        // its end; memfds are sealed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, zeroed buffer.
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0
            || (st.st_size as u64) != self.len as u64
        {
            return Err(Error::Protocol("a region file changed size".into()));
        }
        Ok(())
    }

    /// Frees every page of the file now (`fallocate(PUNCH_HOLE)`), even
    /// while some other holder keeps the file open: the pages leave the
    /// file, so nothing faulted through it later can be one of them. Pages
    /// a holder pinned (io_uring fixed buffers, vmsplice'd pipe buffers,
    /// O_DIRECT in flight) stay with that holder and go back to the kernel
    /// when it lets go; the pool never sees them again.
    pub fn punch(&self) -> Result<(), Error> {
        // SAFETY: valid fd; the range is the whole file.
        let r = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                self.len as libc::off_t,
            )
        };
        if r != 0 {
            return Err(Error::last_os(
                "punching the pages out of a returned region",
            ));
        }
        Ok(())
    }

    /// Makes memory this daemon has just created ready to lease: populates
    /// every page (`MADV_POPULATE_WRITE`; the kernel allocates and zeroes
    /// each one, shmem and hugetlb alike) and, with `verify`, reads every
    /// byte back. No zeroing pass of our own: the file is new, its fd is
    /// this daemon's alone (close-on-exec, never sent), so its pages are
    /// untouched since the kernel cleared them. `stall_half` (fault
    /// injection) stops after populating half of it.
    pub fn prepare_fresh(
        &self,
        verify: bool,
        threads: usize,
        stall_half: bool,
    ) -> Result<ScrubStats, Error> {
        self.prepare_fresh_paced(verify, threads, stall_half, &mut Pacer::none())
    }

    /// [`RegionMemory::prepare_fresh`], populating (and verifying) in
    /// chunks paced by `pacer` (bandwidth cap, progress). The kernel's
    /// zeroing of each new page is the only zeroing: nothing writes the
    /// memory a second time.
    pub fn prepare_fresh_paced(
        &self,
        verify: bool,
        threads: usize,
        stall_half: bool,
        pacer: &mut Pacer<'_>,
    ) -> Result<ScrubStats, Error> {
        let start = Instant::now();
        if stall_half {
            let _ = self.map.populate_range(0, self.len / 2);
            stall("half way through preparing fresh memory")
        }
        let chunk = pacer.chunk(self.page_bytes()) as usize;
        let mut off = 0;
        while off < self.len {
            if pacer.stopped() {
                return Err(Error::Stopped);
            }
            let n = chunk.min(self.len - off);
            self.allocate_range(off, n)?;
            pacer.account(n as u64);
            off += n;
        }
        self.check_size()?;
        // SAFETY: our mapping; nobody else has the file.
        let buf = unsafe { self.map.as_slice() };
        let mut helper_cpu = Duration::ZERO;
        if verify {
            // Reads are paced like the writes (same cap, no progress).
            let mut vp = Pacer::new(pacer.bandwidth(), None);
            let vchunk = if pacer.bandwidth().is_some() {
                vp.chunk(self.page_bytes()) as usize
            } else {
                // Uncapped: large chunks so the parallel scan uses every
                // thread.
                vp.chunk(self.page_bytes()).max(1 << 30) as usize
            };
            for (i, c) in buf.chunks(vchunk).enumerate() {
                let (bad, cpu) = first_nonzero_timed(c, threads);
                helper_cpu += cpu;
                if let Some(o) = bad {
                    let off = i * vchunk + o;
                    return Err(Error::ScrubVerify {
                        offset: off as u64,
                        value: buf[off],
                    });
                }
                vp.account(c.len() as u64);
            }
        }
        Ok(ScrubStats {
            bytes: self.len as u64,
            elapsed: start.elapsed(),
            verified: verify,
            backend: FRESH_BACKEND,
            helper_cpu,
        })
    }

    /// Writes zeros over the whole region (after populating it) and, with
    /// `verify`, reads every byte back. Returns an error, never a false
    /// "clean", if anything goes wrong.
    ///
    /// # Safety
    /// The caller guarantees nobody else writes the region meanwhile (the
    /// region is in the `scrubbing` state).
    pub unsafe fn scrub(
        &self,
        zeroer: &prezero::Zeroer,
        verify: bool,
        threads: usize,
        fault: ScrubFault,
    ) -> Result<ScrubStats, Error> {
        let start = Instant::now();
        self.populate()?;
        // SAFETY: our mapping, exclusive by the caller's guarantee.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.len) };
        if fault == ScrubFault::StallMidScrub {
            zeroer.zero_slice(&mut buf[..self.len / 2]);
            stall("half way through a scrub")
        }
        let z = if fault == ScrubFault::SkipZero {
            eprintln!(
                "zerostart pool: fault injection (ZEROSTART_POOL_FAULT): scrub skipped the zeroing"
            );
            zeroer.zero_slice(&mut buf[..0])
        } else {
            zeroer.zero_slice(buf)
        };
        let mut helper_cpu = Duration::ZERO;
        if verify {
            let (bad, cpu) = first_nonzero_timed(buf, threads);
            helper_cpu = cpu;
            if let Some(off) = bad {
                return Err(Error::ScrubVerify {
                    offset: off as u64,
                    value: buf[off],
                });
            }
        }
        Ok(ScrubStats {
            bytes: self.len as u64,
            elapsed: start.elapsed(),
            verified: verify,
            backend: z.backend.name(),
            helper_cpu,
        })
    }
}

/// What `status` reports as the zeroing backend once regions are made
/// clean by replacing their pages (the kernel zeroes them).
pub const FRESH_BACKEND: &str = "kernel (fresh pages)";

/// Parks the calling thread forever (fault injection: the tests SIGKILL
/// the daemon meanwhile).
pub(crate) fn stall(when: &str) -> ! {
    eprintln!("zerostart pool: fault injection (ZEROSTART_POOL_FAULT): scrubber stalled {when}");
    loop {
        std::thread::park();
    }
}

impl Drop for RegionMemory {
    fn drop(&mut self) {
        // Forget the address first: once unmapped it may be reused by a
        // client mapping, which must not be mistaken for the daemon's.
        crate::holders::DAEMON_MAPPINGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.map.as_ptr() as usize));
        // `map` unmaps as it drops, after this.
    }
}

/// Offset of the first non-zero byte of `buf`, scanning with `threads`
/// threads (0 = all CPUs).
pub fn first_nonzero(buf: &[u8], threads: usize) -> Option<usize> {
    first_nonzero_timed(buf, threads).0
}

/// [`first_nonzero`], and the CPU time its threads spent (for the
/// daemon's `scrub_cpu_seconds`: verification is part of what preparing
/// memory costs).
pub fn first_nonzero_timed(buf: &[u8], threads: usize) -> (Option<usize>, Duration) {
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    const MIN_CHUNK: usize = 64 << 20;
    let chunk = buf.len().div_ceil(threads).max(MIN_CHUNK);
    if buf.len() <= chunk {
        let cpu0 = crate::metrics::thread_cpu();
        let r = scan(buf);
        return (r, crate::metrics::thread_cpu().saturating_sub(cpu0));
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(chunk)
            .enumerate()
            .map(|(i, c)| {
                s.spawn(move || {
                    // A new thread: its whole CPU time is this scan's.
                    let r = scan(c).map(|o| i * chunk + o);
                    (r, crate::metrics::thread_cpu())
                })
            })
            .collect();
        let mut first = None::<usize>;
        let mut cpu = Duration::ZERO;
        for h in handles {
            let (r, c) = h.join().expect("scan threads do not panic");
            cpu += c;
            if let Some(o) = r {
                first = Some(first.map_or(o, |f| f.min(o)));
            }
        }
        (first, cpu)
    })
}

/// The zero-scan (`hostmem::first_nonzero`).
fn scan(buf: &[u8]) -> Option<usize> {
    hostmem::first_nonzero(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_nonzero_finds_the_first() {
        let mut v = vec![0u8; (130 << 20) + 3];
        assert_eq!(first_nonzero(&v, 2), None);
        let last = v.len() - 1;
        v[last] = 1;
        assert_eq!(first_nonzero(&v, 2), Some(last));
        v[(70 << 20) + 5] = 9;
        assert_eq!(first_nonzero(&v, 2), Some((70 << 20) + 5));
        v[1] = 2;
        assert_eq!(first_nonzero(&v, 1), Some(1));
    }

    #[test]
    fn scrub_zeroes_and_verifies_a_4k_memfd() {
        let m = RegionMemory::memfd("t", 8 << 20, PageSize::Size4K).unwrap();
        // SAFETY: test owns the mapping.
        let buf = unsafe { std::slice::from_raw_parts_mut(m.map.as_ptr(), m.len) };
        buf.fill(0xa5);
        let z = prezero::Zeroer::new(prezero::Choice::Auto).unwrap();
        // SAFETY: nobody else touches it.
        let st = unsafe { m.scrub(&z, true, 0, ScrubFault::None) }.unwrap();
        assert!(st.verified);
        assert_eq!(first_nonzero(buf, 0), None);
    }

    #[test]
    fn memfd_is_sealed_against_resizing() {
        let m = RegionMemory::memfd("t", 1 << 20, PageSize::Size4K).unwrap();
        // SAFETY: valid fd.
        let r = unsafe { libc::ftruncate(m.fd().as_raw_fd(), 4096) };
        assert_eq!(r, -1);
        // SAFETY: valid fd.
        let r = unsafe { libc::ftruncate(m.fd().as_raw_fd(), 2 << 20) };
        assert_eq!(r, -1);
    }

    #[test]
    fn faults_parse() {
        assert_eq!(
            Fault::parse("stall-mid-scrub:2").unwrap(),
            Fault::StallMidScrub { after: 2 }
        );
        assert_eq!(
            Fault::parse("scrub-in-place:1").unwrap(),
            Fault::ScrubInPlace { after: 1 }
        );
        assert!(Fault::parse("stall:x").is_err());
    }

    /// Pages punched out of a file are gone from it even for a holder that
    /// keeps the file: what it faults in afterwards is new and zero, while
    /// a reference it took before (here a pipe) keeps the old page.
    #[test]
    fn punch_replaces_the_pages_behind_a_kept_fd() {
        let m = RegionMemory::memfd("t", 1 << 20, PageSize::Size4K).unwrap();
        // SAFETY: test owns the mapping.
        let buf = unsafe { std::slice::from_raw_parts_mut(m.map.as_ptr(), m.len) };
        buf.fill(0x5c);
        let mut fds = [0; 2];
        // SAFETY: pipe fills two fds.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: 4096,
        };
        // SAFETY: the iovec is in our mapping.
        assert_eq!(unsafe { libc::vmsplice(fds[1], &iov, 1, 0) }, 4096);
        m.punch().unwrap();
        assert_eq!(first_nonzero(buf, 1), None, "punched pages read zero");
        buf.fill(0x77);
        let mut got = [0u8; 4096];
        // SAFETY: reading into a local buffer.
        assert_eq!(
            unsafe { libc::read(fds[0], got.as_mut_ptr().cast(), 4096) },
            4096
        );
        assert!(got.iter().all(|&b| b == 0x5c), "the pipe kept the old page");
        // SAFETY: closing our fds.
        unsafe { (libc::close(fds[0]), libc::close(fds[1])) };
    }

    /// A symlink (or any file) where a region file goes is never followed
    /// or adopted: creation is exclusive, and the start-up clean-up
    /// refuses what the pool did not make. (Here on the test's temp
    /// directory: some kernels' hugetlbfs refuses symlinks altogether.)
    #[test]
    fn a_planted_symlink_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, region_path(dir.path(), 0)).unwrap();
        let e = clear_leftover(dir.path(), 0).unwrap_err().to_string();
        assert!(
            e.contains("zerostart-pool-0 is a symlink, which the pool did not create")
                && e.contains("rm "),
            "{e}"
        );
        let e = RegionMemory::hugetlbfs(dir.path(), 0, 2 << 20, PageSize::Size2M)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exists already"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(region_path(dir.path(), 0).is_symlink());
        // A file of ours, 0600: an earlier daemon's; removed.
        let own = region_path(dir.path(), 1);
        std::fs::write(&own, b"").unwrap();
        std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        assert_eq!(
            clear_leftover(dir.path(), 1).unwrap(),
            Leftover::Removed { holders: vec![] }
        );
        assert!(!own.exists());
        assert_eq!(clear_leftover(dir.path(), 1).unwrap(), Leftover::None);
    }

    #[test]
    fn fresh_memory_is_ready_without_a_zeroing_pass() {
        let m = RegionMemory::memfd("t", 4 << 20, PageSize::Size4K).unwrap();
        let st = m.prepare_fresh(true, 0, false).unwrap();
        assert!(st.verified);
        assert_eq!(st.backend, FRESH_BACKEND);
    }

    #[test]
    fn a_paced_fill_reports_progress_up_to_the_whole_region() {
        let m = RegionMemory::memfd("t", 8 << 20, PageSize::Size4K).unwrap();
        let seen = std::sync::Mutex::new(Vec::new());
        let cb = |done: u64| seen.lock().unwrap().push(done);
        // A 20 MiB/s cap: 2 MiB chunks, so several reports.
        let mut pacer = Pacer::new(Some(20 << 20), Some(&cb));
        let st = m.prepare_fresh_paced(true, 0, false, &mut pacer).unwrap();
        assert_eq!(st.backend, FRESH_BACKEND);
        let seen = seen.into_inner().unwrap();
        assert!(seen.len() >= 4, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(*seen.last().unwrap(), 8 << 20);
        assert!(st.elapsed >= Duration::from_millis(350), "{:?}", st.elapsed);
    }
}
