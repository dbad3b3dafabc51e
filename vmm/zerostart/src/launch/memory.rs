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
    /// refuses, it does not hand out far memory). `max_pieces` above 1:
    /// the VMM maps several files one after another, so a pool lease may
    /// take that many whole regions (docs/pool.md "Leases of any size").
    pub fn acquire(
        source: &Source,
        size: u64,
        page: PageSize,
        threads: usize,
        node: Option<usize>,
        max_pieces: usize,
    ) -> Result<Region, Error> {
        if let (Some(n), Source::Prefault | Source::None) = (node, source) {
            return Err(Error::BadMemory(format!(
                "guest RAM bound to host node {n} needs pool memory (source=pool), which is leased on that node"
            )));
        }
        match source {
            Source::Pool(socket) => {
                // One piece asks as before (no `pieces` field), so an
                // older daemon serves it unchanged.
                let lease = match max_pieces {
                    0 | 1 => pool::client::lease_on_node(socket, size, page, node),
                    n => pool::client::lease_pieces(socket, size, page, node, n),
                }
                .map_err(|e| Error::Pool {
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

    /// The files of this region in guest order, each with the offset of
    /// guest RAM in it and the bytes it may hold: one, or one per piece of
    /// a pool lease of several regions ([`pool::client::Lease::piece_offset`]).
    pub fn files(&self) -> Vec<(BorrowedFd<'_>, u64, u64)> {
        match self {
            Region::Lease(l) => l
                .pieces()
                .into_iter()
                .map(|(fd, p)| (fd, l.piece_offset(), p.len))
                .collect(),
            Region::Memfd { file, len, .. } => vec![(file.as_fd(), 0, *len)],
        }
    }

    /// The pool connection the lease lives on (pool only).
    pub fn connection(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Region::Lease(l) => Some(l.connection()),
            Region::Memfd { .. } => None,
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

    /// Bytes of pool memory held (a lease's regions whole, see
    /// [`pool::client::Lease::held_bytes`]); `None` for a memfd.
    pub fn held_bytes(&self) -> Option<u64> {
        match self {
            Region::Lease(l) => Some(l.held_bytes()),
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

    /// A shared mapping of the region's first file (all of a memfd, the
    /// one region [`Region::populate`] maps).
    fn map(&self) -> Result<hostmem::Mapping, Error> {
        let (fd, offset, len) = self.files()[0];
        map_file(fd, offset, len)
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

/// One file of guest RAM as the VMM maps it.
#[derive(Debug, Clone, Copy)]
pub struct RamFile<'a> {
    /// The file (the VMM opens `/proc/self/fd/N` of it).
    pub fd: BorrowedFd<'a>,
    /// Where guest RAM starts in it.
    pub offset: u64,
    /// Bytes of guest RAM in it.
    pub len: u64,
}

/// Guest RAM as the VMM maps it: one region, one per guest NUMA node (a
/// management tool's several `-numa node,memdev=` backends, each its own
/// lease: a lease's fd reaches its own memory only), or a pool lease of
/// several whole regions for a VMM that maps several files one after
/// another (cloud-hypervisor's memory zones). Guest RAM is the bytes of
/// [`GuestRam::files`] one after another, so the layout's file offsets
/// ([`super::layout::RamRange::file_offset`]) index this concatenation.
#[derive(Debug)]
pub struct GuestRam {
    parts: Vec<Region>,
    /// Guest bytes of each part (a region may hold more).
    sizes: Vec<u64>,
}

impl GuestRam {
    /// Leases or creates one region of each of `sizes` (on the host node
    /// of `nodes` at the same index, if any; of up to `max_pieces` pool
    /// regions each), all or none: a part that cannot be had returns what
    /// was taken before it.
    pub fn acquire(
        source: &Source,
        sizes: &[u64],
        nodes: &[Option<usize>],
        page: PageSize,
        threads: usize,
        max_pieces: usize,
    ) -> Result<GuestRam, Error> {
        let parts = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let node = nodes.get(i).copied().flatten();
                Region::acquire(source, n, page, threads, node, max_pieces)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GuestRam {
            parts,
            sizes: sizes.to_vec(),
        })
    }

    /// The regions in guest order (what holds the memory: leases, memfds).
    pub fn parts(&self) -> &[Region] {
        &self.parts
    }

    /// The files the VMM maps, in guest order, each with the guest bytes
    /// it holds (a part's last piece may hold less than its region).
    pub fn files(&self) -> Vec<RamFile<'_>> {
        let mut out = Vec::new();
        for (r, &size) in self.parts.iter().zip(&self.sizes) {
            let mut left = size;
            for (fd, offset, len) in r.files() {
                if left == 0 {
                    break;
                }
                let len = len.min(left);
                out.push(RamFile { fd, offset, len });
                left -= len;
            }
        }
        out
    }

    /// The first part's pool lease, whose connection carries the launch
    /// report (pool only).
    pub fn lease(&self) -> Option<&pool::client::Lease> {
        self.parts.first().and_then(Region::lease)
    }

    /// Bytes of pool memory the leases hold (0: no part is a lease).
    pub fn held_bytes(&self) -> u64 {
        self.parts.iter().filter_map(Region::held_bytes).sum()
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
    /// files. Used only before the VMM starts: test plants and poisoning.
    pub fn fill(&self, mut at: u64, len: u64, byte: u8) -> Result<(), Error> {
        let end = at + len;
        let mut base = 0;
        for f in self.files() {
            let (lo, hi) = (base, base + f.len);
            if at < hi && at < end {
                let stop = end.min(hi);
                let mut m = map_file(f.fd, f.offset, f.len)?;
                // SAFETY: the VMM has not started: nothing else writes the memory.
                let bytes = unsafe { m.as_mut_slice() };
                bytes[(at - lo) as usize..(stop - lo) as usize].fill(byte);
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

    /// Runs `f` on each file's mapping with its guest RAM offset (tests).
    #[cfg(test)]
    pub fn each_map(&self, mut f: impl FnMut(u64, &mut [u8])) -> Result<(), Error> {
        let mut base = 0;
        for file in self.files() {
            let mut m = map_file(file.fd, file.offset, file.len)?;
            // SAFETY: test only, before any VMM maps it.
            f(base, unsafe { m.as_mut_slice() });
            base += file.len;
        }
        Ok(())
    }
}

/// A shared mapping of `len` bytes of `fd` from `offset`.
fn map_file(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<hostmem::Mapping, Error> {
    hostmem::Mapping::file(fd, offset, len as usize)
        .map()
        .map_err(|e| Error::Memory(format!("mapping the guest memory region: {}", e.os_error())))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt, MetadataExt};

    const M: u64 = 1 << 20;

    /// An in-process pool of `size` bytes in `region`-byte regions of 4K
    /// shmem, all clean.
    fn test_pool(
        dir: &std::path::Path,
        size: u64,
        region: u64,
    ) -> (std::path::PathBuf, pool::daemon::Daemon) {
        let socket = dir.join("pool.sock");
        let d = pool::daemon::Daemon::start(pool::daemon::Config {
            verify: true,
            ..pool::daemon::Config::memfds(socket.clone(), size, region, PageSize::Size4K)
        })
        .unwrap();
        assert!(d.wait_all_clean(std::time::Duration::from_secs(60)));
        (socket, d)
    }

    fn file_of(f: &RamFile<'_>) -> File {
        File::from(f.fd.try_clone_to_owned().unwrap())
    }

    /// cloud-hypervisor's memory zones: a guest larger than a region leases
    /// as many whole regions as it needs (one lease, all or none), each its
    /// own file in guest order, the last holding the rest; fill writes
    /// across their boundaries into the right file; the pool counts every
    /// region held and gets them all back when the guest's RAM goes.
    #[test]
    fn a_guest_larger_than_a_region_leases_several_whole_regions() {
        let dir = tempfile::tempdir().unwrap();
        let (socket, d) = test_pool(dir.path(), 32 * M, 8 * M);
        let src = Source::Pool(socket.clone());
        let ram = GuestRam::acquire(&src, &[28 * M], &[], PageSize::Size4K, 1, 64).unwrap();
        let files = ram.files();
        assert_eq!(
            files.iter().map(|f| (f.offset, f.len)).collect::<Vec<_>>(),
            vec![(0, 8 * M), (0, 8 * M), (0, 8 * M), (0, 4 * M)]
        );
        let inodes: std::collections::BTreeSet<u64> = files
            .iter()
            .map(|f| file_of(f).metadata().unwrap().ino())
            .collect();
        assert_eq!(inodes.len(), 4, "every piece its own file");
        assert_eq!(ram.lease_ids().unwrap().split('+').count(), 1, "one lease");
        let st = pool::client::status(&socket).unwrap();
        assert_eq!(st.leased_bytes, 32 * M, "four whole regions held");
        // Two bytes either side of the first boundary and of the last.
        ram.fill(8 * M - 2, 4, 0xa5).unwrap();
        ram.fill(24 * M - 1, 2, 0x5a).unwrap();
        let byte = |k: usize, at: u64| {
            let mut b = [0u8; 1];
            file_of(&files[k]).read_exact_at(&mut b, at).unwrap();
            b[0]
        };
        assert_eq!(
            [byte(0, 8 * M - 3), byte(0, 8 * M - 2), byte(0, 8 * M - 1)],
            [0, 0xa5, 0xa5]
        );
        assert_eq!([byte(1, 0), byte(1, 1), byte(1, 2)], [0xa5, 0xa5, 0]);
        assert_eq!(
            [byte(2, 8 * M - 1), byte(3, 0), byte(3, 1)],
            [0x5a, 0x5a, 0]
        );
        let e = ram.fill(28 * M - 1, 2, 1).unwrap_err().to_string();
        assert!(e.contains("past its"), "{e}");
        drop(files);
        drop(ram);
        assert!(
            d.wait_all_clean(std::time::Duration::from_secs(60)),
            "every region back and scrubbed: {:?}",
            d.status()
        );
        // Negative control: a VMM that maps one file cannot take it (the
        // pool refuses a lease larger than a region without pieces).
        let e = GuestRam::acquire(&src, &[28 * M], &[], PageSize::Size4K, 1, 1).unwrap_err();
        assert!(e.pool_unavailable(), "{e}");
        // More regions than the VMM maps: refused, nothing taken.
        let e = GuestRam::acquire(&src, &[28 * M], &[], PageSize::Size4K, 1, 3).unwrap_err();
        assert!(e.pool_unavailable(), "{e}");
        assert_eq!(pool::client::status(&socket).unwrap().leased_bytes, 0);
    }
}
