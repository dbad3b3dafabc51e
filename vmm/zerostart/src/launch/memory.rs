//! Guest RAM for an external VMM: a pool lease, or a memfd the launcher
//! prefaults (or leaves to be faulted in by the guest). Either way every
//! byte reads zero when the VMM starts: the pool scrubbed the region, or
//! the kernel zeroes each page on its first fault.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::path::PathBuf;

use hostmem::PageSize;

use super::Error;

/// Where guest RAM comes from (`--memory source=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Leased from `zerostart pool` at this socket.
    Pool(PathBuf),
    /// A fresh memfd the launcher populates (`MADV_POPULATE_WRITE`) before
    /// the VMM starts: the kernel zeroes every page as it faults in.
    Prefault,
    /// A fresh memfd left unpopulated: the guest faults (and the host
    /// kernel zeroes) each page on first touch.
    None,
}

impl Source {
    /// Name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Pool(_) => "pool",
            Source::Prefault => "prefault",
            Source::None => "none",
        }
    }
}

/// The memory the VMM maps.
#[derive(Debug)]
pub enum Region {
    /// A pool lease (the connection and the region's fd).
    Lease(pool::client::Lease),
    /// A memfd of this launcher.
    Memfd {
        /// The file.
        file: File,
        /// Bytes.
        len: u64,
        /// Page size (4K: shmem).
        page: PageSize,
    },
}

fn os_err(what: impl Into<String>) -> Error {
    Error::Memory(format!(
        "{}: {}",
        what.into(),
        std::io::Error::last_os_error()
    ))
}

impl Region {
    /// Leases or creates `size` bytes of zero memory.
    pub fn acquire(
        source: &Source,
        size: u64,
        page: PageSize,
        threads: usize,
    ) -> Result<Region, Error> {
        match source {
            Source::Pool(socket) => {
                let lease = pool::client::lease(socket, size, page).map_err(|e| Error::Pool {
                    socket: socket.clone(),
                    err: e.to_string(),
                })?;
                if lease.len() < size {
                    return Err(Error::RegionTooSmall {
                        region: lease.len(),
                        size,
                    });
                }
                Ok(Region::Lease(lease))
            }
            Source::Prefault | Source::None => {
                if page.is_huge() {
                    guestmem::check_hugepages(page, size)
                        .map_err(|e| Error::Memory(e.to_string()))?;
                }
                let file = memfd(page, size)?;
                let r = Region::Memfd {
                    file,
                    len: size,
                    page,
                };
                if *source == Source::Prefault {
                    r.populate(threads)?;
                }
                Ok(r)
            }
        }
    }

    /// The file the VMM maps.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Region::Lease(l) => l.fd(),
            Region::Memfd { file, .. } => file.as_fd(),
        }
    }

    /// The pool connection the lease lives on (pool only).
    pub fn connection(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Region::Lease(l) => Some(l.connection()),
            Region::Memfd { .. } => None,
        }
    }

    /// Offset of guest RAM in the file.
    pub fn offset(&self) -> u64 {
        match self {
            Region::Lease(l) => l.offset(),
            Region::Memfd { .. } => 0,
        }
    }

    /// Bytes available from [`Region::offset`].
    pub fn len(&self) -> u64 {
        match self {
            Region::Lease(l) => l.len(),
            Region::Memfd { len, .. } => *len,
        }
    }

    /// Hugepage size in bytes (`None`: 4 KiB shmem).
    pub fn hugepage_bytes(&self) -> Option<u64> {
        match self {
            Region::Lease(l) => l.page().is_huge().then(|| l.page().bytes()),
            Region::Memfd { page, .. } => page.is_huge().then(|| page.bytes()),
        }
    }

    /// Lease id for reports.
    pub fn lease_id(&self) -> Option<u64> {
        match self {
            Region::Lease(l) => Some(l.id()),
            Region::Memfd { .. } => None,
        }
    }

    /// Maps the region shared, runs `f` on it, unmaps. Used only before
    /// the VMM starts: test plants and poisoning.
    pub fn with_map<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, Error> {
        let len = self.len() as usize;
        // SAFETY: a new shared mapping of a file we hold, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd().as_raw_fd(),
                self.offset() as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mapping the guest memory region"));
        }
        // SAFETY: our mapping of `len` bytes, alive until munmap below.
        let out = f(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) });
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(p, len) };
        Ok(out)
    }

    /// `MADV_POPULATE_WRITE` over the memfd in `threads` parallel chunks
    /// (0 = all CPUs): the kernel allocates and zeroes every page now
    /// instead of on the guest's first touch.
    fn populate(&self, threads: usize) -> Result<(), Error> {
        let align = self.hugepage_bytes().unwrap_or(4096) as usize;
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        self.with_map(|m| {
            let len = m.len();
            let per = len.div_ceil(threads).div_ceil(align) * align;
            let base = m.as_mut_ptr() as usize;
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads)
                    .filter_map(|i| {
                        let start = i * per;
                        (start < len).then(|| {
                            let n = per.min(len - start);
                            s.spawn(move || {
                                // SAFETY: a disjoint chunk of the live mapping.
                                let r = unsafe {
                                    libc::madvise(
                                        (base + start) as *mut libc::c_void,
                                        n,
                                        libc::MADV_POPULATE_WRITE,
                                    )
                                };
                                if r == 0 {
                                    Ok(())
                                } else {
                                    Err(os_err(format!(
                                        "MADV_POPULATE_WRITE of {n} bytes (are enough hugepages reserved?)"
                                    )))
                                }
                            })
                        })
                    })
                    .collect();
                hs.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(Error::Memory("populate thread panicked".into()))))
            })
        })?
    }
}

fn memfd(page: PageSize, size: u64) -> Result<File, Error> {
    let flags = libc::MFD_CLOEXEC | page.mfd_flags();
    // SAFETY: a NUL-terminated name and flags.
    let fd = unsafe { libc::memfd_create(c"zerostart-launch".as_ptr(), flags) };
    if fd < 0 {
        return Err(os_err("memfd_create for guest RAM"));
    }
    // SAFETY: we own the new descriptor.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)
        .map_err(|e| Error::Memory(format!("sizing the guest RAM memfd to {size} bytes: {e}")))?;
    Ok(file)
}

/// The hint blob as a sealed memfd: the VMM reads it through
/// `/proc/self/fd/N`; once sealed nobody, the launcher included, can
/// change or resize it (the freeze of an external VMM's hint).
pub fn hint_memfd(blob: &[u8]) -> Result<File, Error> {
    use std::io::Write;
    // SAFETY: a NUL-terminated name and flags.
    let fd = unsafe {
        libc::memfd_create(
            c"zerostart-hint".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(os_err("memfd_create for the hint"));
    }
    // SAFETY: we own the new descriptor.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(blob)
        .map_err(|e| Error::Memory(format!("writing the hint memfd: {e}")))?;
    Ok(f)
}

/// Seals `f` against every change.
pub fn seal(f: &File) -> Result<(), Error> {
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on an fd we own.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(os_err("sealing the hint memfd"));
    }
    Ok(())
}

/// Clears `FD_CLOEXEC` on `fd` (in the child, between fork and exec).
pub fn inherit(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number; errors are reported.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, fl & !libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
