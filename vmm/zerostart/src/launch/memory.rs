//! Guest RAM for an external VMM: a pool lease, or a memfd the launcher
//! prefaults (or leaves to be faulted in by the guest). Either way every
//! byte reads zero when the VMM starts: the pool scrubbed the region, or
//! the kernel zeroes each page on its first fault.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
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

impl Region {
    /// Leases or creates `size` bytes of zero memory; on host NUMA
    /// `node` if given (pool only: a pool with no clean region there
    /// refuses, it does not hand out far memory).
    pub fn acquire(
        source: &Source,
        size: u64,
        page: PageSize,
        threads: usize,
        node: Option<usize>,
    ) -> Result<Region, Error> {
        if let (Some(n), Source::Prefault | Source::None) = (node, source) {
            return Err(Error::BadMemory(format!(
                "guest RAM bound to host node {n} needs pool memory (source=pool), which is leased on that node"
            )));
        }
        match source {
            Source::Pool(socket) => {
                let lease = pool::client::lease_on_node(socket, size, page, node).map_err(|e| {
                    Error::Pool {
                        socket: socket.clone(),
                        err: e.to_string(),
                    }
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

    /// The pool lease (pool only): its connection carries the launch
    /// report.
    pub fn lease(&self) -> Option<&pool::client::Lease> {
        match self {
            Region::Lease(l) => Some(l),
            Region::Memfd { .. } => None,
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
        let mut m = self.map()?;
        // SAFETY: the VMM has not started: nothing else writes the memory.
        Ok(f(unsafe { m.as_mut_slice() }))
    }

    /// A shared mapping of the whole region.
    fn map(&self) -> Result<hostmem::Mapping, Error> {
        hostmem::Mapping::file(self.fd(), self.offset(), self.len() as usize)
            .map()
            .map_err(|e| {
                Error::Memory(format!("mapping the guest memory region: {}", e.os_error()))
            })
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
        let m = &self.map()?;
        let len = m.len();
        let per = len.div_ceil(threads).div_ceil(align) * align;
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .filter_map(|i| {
                    let start = i * per;
                    (start < len).then(|| {
                        let n = per.min(len - start);
                        s.spawn(move || {
                            m.populate_range(start, n).map_err(|e| {
                                Error::Memory(format!(
                                    "MADV_POPULATE_WRITE of {n} bytes (are enough hugepages reserved?): {e}"
                                ))
                            })
                        })
                    })
                })
                .collect();
            hs.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Memory("populate thread panicked".into())))
            })
        })
    }
}

/// Guest RAM as the VMM maps it: one region, or one per guest NUMA node
/// (a management tool's several `-numa node,memdev=` backends, each its
/// own lease: a lease's fd reaches its own memory only), in guest order.
/// Guest RAM is their bytes one after another, so the layout's file
/// offsets ([`super::layout::RamRange::file_offset`]) index this
/// concatenation.
#[derive(Debug)]
pub struct GuestRam {
    parts: Vec<Region>,
    /// Guest bytes of each part (a region may hold more).
    sizes: Vec<u64>,
}

impl GuestRam {
    /// Leases or creates one region of each of `sizes` (on the host node
    /// of `nodes` at the same index, if any), all or none: a part that
    /// cannot be had returns what was taken before it.
    pub fn acquire(
        source: &Source,
        sizes: &[u64],
        nodes: &[Option<usize>],
        page: PageSize,
        threads: usize,
    ) -> Result<GuestRam, Error> {
        let parts = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let node = nodes.get(i).copied().flatten();
                Region::acquire(source, n, page, threads, node)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GuestRam {
            parts,
            sizes: sizes.to_vec(),
        })
    }

    /// The regions in guest order.
    pub fn parts(&self) -> &[Region] {
        &self.parts
    }

    /// The first part's pool lease, whose connection carries the launch
    /// report (pool only).
    pub fn lease(&self) -> Option<&pool::client::Lease> {
        self.parts.first().and_then(Region::lease)
    }

    /// Lease ids for reports (`3` or `3+4`), pool only.
    pub fn lease_ids(&self) -> Option<String> {
        let ids: Vec<String> = self
            .parts
            .iter()
            .filter_map(Region::lease_id)
            .map(|i| i.to_string())
            .collect();
        (!ids.is_empty()).then(|| ids.join("+"))
    }

    /// Sets `len` bytes from guest RAM offset `at` to `byte`, across
    /// parts. Used only before the VMM starts: test plants and poisoning.
    pub fn fill(&self, mut at: u64, len: u64, byte: u8) -> Result<(), Error> {
        let end = at + len;
        let mut base = 0;
        for (r, &n) in self.parts.iter().zip(&self.sizes) {
            let (lo, hi) = (base, base + n);
            if at < hi && at < end {
                let stop = end.min(hi);
                r.with_map(|m| m[(at - lo) as usize..(stop - lo) as usize].fill(byte))?;
                at = stop;
            }
            base = hi;
        }
        if at < end {
            return Err(Error::Memory(format!(
                "guest RAM offset {at:#x} is past its {base:#x} bytes"
            )));
        }
        Ok(())
    }

    /// Runs `f` on each part's mapping with its guest RAM offset (tests).
    #[cfg(test)]
    pub fn each_map(&self, mut f: impl FnMut(u64, &mut [u8])) -> Result<(), Error> {
        let mut base = 0;
        for (r, &n) in self.parts.iter().zip(&self.sizes) {
            r.with_map(|m| f(base, &mut m[..n as usize]))?;
            base += n;
        }
        Ok(())
    }
}

fn memfd(page: PageSize, size: u64) -> Result<File, Error> {
    hostmem::memfd(c"zerostart-launch", size, page, hostmem::Sealing::Never).map_err(|e| {
        Error::Memory(format!(
            "creating the {size}-byte guest RAM memfd ({page} pages): {e}"
        ))
    })
}

/// The hint blob as a memfd to seal with [`seal`]: the VMM reads it
/// through `/proc/self/fd/N`; once sealed nobody, the launcher included,
/// can change or resize it (the freeze of an external VMM's hint).
pub fn hint_memfd(blob: &[u8]) -> Result<File, Error> {
    use std::io::Write;
    let mut f = hostmem::memfd(
        c"zerostart-hint",
        0,
        PageSize::Size4K,
        hostmem::Sealing::Later,
    )
    .map_err(|e| Error::Memory(format!("memfd_create for the hint: {e}")))?;
    f.write_all(blob)
        .map_err(|e| Error::Memory(format!("writing the hint memfd: {e}")))?;
    Ok(f)
}

/// Seals `f` against every change.
pub fn seal(f: &File) -> Result<(), Error> {
    hostmem::freeze(f).map_err(|e| Error::Memory(format!("sealing the hint memfd: {e}")))
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
