//! The one owner of a host mapping: `mmap` on the way in, `munmap` on
//! drop.
//!
//! Why a type of its own: every crate of the workspace mapped memory by
//! hand (anonymous buffers for the engine's calibration and benchmarks,
//! the pool's regions and leases, the launcher's memfd, the tests' views
//! of hugetlbfs files), each with its own `MAP_FAILED` check and its own
//! `Drop` that had to remember the length it mapped. One type makes the
//! flags readable at the call site (`.hugetlb(2M).noreserve()`), unmaps
//! exactly once, and turns a failed `mmap` into an error that says what
//! was asked for and what to do.
//!
//! Guest RAM itself is not mapped here: vm-memory's `MmapRegion` owns
//! those mappings (its bitmap and its `GuestMemory` traits need them to),
//! and guestmem builds them through vm-memory's builder.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::PageSize;

/// What the mapping may be used for (`PROT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prot {
    /// `PROT_NONE`: reserved address space (or a test of a range that
    /// cannot be faulted in).
    None,
    /// `PROT_READ`.
    Read,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
}

impl Prot {
    fn bits(self) -> libc::c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// A failed `mmap`: what was asked for, the kernel's error and a fix.
/// `io::Error::from` gives back the kernel's error unchanged (its errno
/// included), for callers that report it in their own terms.
#[derive(Debug, thiserror::Error)]
#[error("cannot map {len} bytes of {what}: {source}; {fix}")]
pub struct MapError {
    what: String,
    len: usize,
    #[source]
    source: io::Error,
    fix: &'static str,
}

impl MapError {
    /// The kernel's error.
    pub fn os_error(&self) -> &io::Error {
        &self.source
    }
}

impl From<MapError> for io::Error {
    fn from(e: MapError) -> io::Error {
        e.source
    }
}

/// How to make a [`Mapping`]: start from [`Mapping::anonymous`] or
/// [`Mapping::file`], add flags, then [`MapBuilder::map`].
#[derive(Debug, Clone)]
#[must_use = "a MapBuilder maps nothing until .map()"]
pub struct MapBuilder<'fd> {
    len: usize,
    file: Option<(BorrowedFd<'fd>, u64)>,
    prot: Prot,
    shared: bool,
    huge: PageSize,
    noreserve: bool,
    populate: bool,
    align: usize,
}

impl MapBuilder<'_> {
    /// `PROT_*` of the mapping (default: read-write).
    pub fn prot(mut self, prot: Prot) -> Self {
        self.prot = prot;
        self
    }

    /// `MAP_SHARED` (the default for a file): stores reach the file and
    /// every other mapping of it.
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// `MAP_PRIVATE` (the default for anonymous memory).
    pub fn private(mut self) -> Self {
        self.shared = false;
        self
    }

    /// `MAP_HUGETLB` of `page`'s size for anonymous memory (nothing for
    /// 4K). Without [`MapBuilder::noreserve`] the kernel reserves the
    /// hugepages at `mmap`, so a pool too small fails here, not as a
    /// SIGBUS on the first store. A file on hugetlbfs (or a hugetlb memfd)
    /// needs no flag: its pages are the file's.
    pub fn hugetlb(mut self, page: PageSize) -> Self {
        self.huge = page;
        self
    }

    /// `MAP_NORESERVE`: no swap (or hugepage) reservation at `mmap`;
    /// memory the kernel cannot supply later is a SIGBUS on store unless
    /// faulted in first with [`Mapping::populate`].
    pub fn noreserve(mut self) -> Self {
        self.noreserve = true;
        self
    }

    /// `MAP_POPULATE`: fault every page in at `mmap` (for memory that is
    /// already there, e.g. a leased file: page tables only). A page the
    /// kernel cannot supply is skipped silently; use
    /// [`Mapping::populate`] where that must be an error.
    pub fn populate(mut self) -> Self {
        self.populate = true;
        self
    }

    /// Starts the mapping on an `align`-byte boundary (a power of two;
    /// anonymous memory only): maps `len + align` bytes and unmaps the
    /// ends, so transparent hugepages can back every `align` (2 MiB) of
    /// it.
    pub fn align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    fn what(&self) -> String {
        let mut w = match self.file {
            Some((fd, off)) => format!("fd {} at offset {off}", fd.as_raw_fd()),
            None => "anonymous memory".to_string(),
        };
        if self.huge.is_huge() && self.file.is_none() {
            w += &format!(" in {} hugepages", self.huge);
        }
        w
    }

    fn error(&self, source: io::Error) -> MapError {
        let fix = match source.raw_os_error() {
            Some(libc::ENOMEM) if self.huge.is_huge() => {
                "reserve more hugepages of that size (/sys/kernel/mm/hugepages) or map less"
            }
            Some(libc::ENOMEM) => {
                "free memory, or raise the limit that refused it (ulimit -v, vm.max_map_count, vm.overcommit_memory)"
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                "open the file with the access the mapping asks for"
            }
            Some(libc::EINVAL) => {
                "check the length, the offset (page aligned) and the page size (hugetlb lengths are whole hugepages)"
            }
            Some(libc::ENODEV) => "map a regular file, memfd or hugetlbfs file",
            _ => "check the file and the mapping's size",
        };
        MapError {
            what: self.what(),
            len: self.len,
            source,
            fix,
        }
    }

    /// Maps it. A zero length, an offset past `off_t` or a bad `align` is
    /// an `EINVAL` error, never a panic.
    pub fn map(self) -> Result<Mapping, MapError> {
        let inval = || io::Error::from_raw_os_error(libc::EINVAL);
        let aligned = self.align > 1 && self.file.is_none();
        if self.len == 0 || (aligned && !self.align.is_power_of_two()) {
            return Err(self.error(inval()));
        }
        let total = if aligned {
            self.len
                .checked_add(self.align)
                .ok_or_else(|| self.error(inval()))?
        } else {
            self.len
        };
        let mut flags = if self.shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        if self.noreserve {
            flags |= libc::MAP_NORESERVE;
        }
        if self.populate {
            flags |= libc::MAP_POPULATE;
        }
        let (fd, off) = match self.file {
            Some((fd, off)) => (
                fd.as_raw_fd(),
                libc::off_t::try_from(off).map_err(|_| self.error(inval()))?,
            ),
            None => {
                flags |= libc::MAP_ANONYMOUS | self.huge.map_flags();
                (-1, 0)
            }
        };
        // SAFETY: a new mapping at an address the kernel picks, so no
        // existing memory is replaced; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                self.prot.bits(),
                flags,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(self.error(io::Error::last_os_error()));
        }
        let mut start = p as usize;
        if aligned {
            let base = start;
            start = base.next_multiple_of(self.align);
            let end = start + self.len;
            // SAFETY: the unused head and tail of the mapping just made.
            unsafe {
                if start > base {
                    libc::munmap(p, start - base);
                }
                if base + total > end {
                    libc::munmap(end as *mut libc::c_void, base + total - end);
                }
            }
        }
        Ok(Mapping {
            ptr: NonNull::new(start as *mut u8).ok_or_else(|| self.error(inval()))?,
            len: self.len,
        })
    }
}

/// A host mapping this value owns: unmapped when it is dropped (or kept
/// until the process exits, with [`Mapping::leak`]).
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory; who writes which part when is decided by the
// owner (every write goes through an `unsafe` slice or the raw pointer).
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` hands out reads only through the `unsafe`
// `as_slice` and advice that changes no content.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` bytes of private, read-write anonymous memory (the kernel
    /// zeroes each page on its first fault).
    pub fn anonymous(len: usize) -> MapBuilder<'static> {
        MapBuilder {
            len,
            file: None,
            prot: Prot::ReadWrite,
            shared: false,
            huge: PageSize::Size4K,
            noreserve: false,
            populate: false,
            align: 1,
        }
    }

    /// `len` bytes of the file `fd` from `offset` (a multiple of its page
    /// size), shared and read-write. The mapping keeps the file alive
    /// itself: `fd` may be closed once mapped.
    pub fn file(fd: BorrowedFd<'_>, offset: u64, len: usize) -> MapBuilder<'_> {
        MapBuilder {
            len,
            file: Some((fd, offset)),
            prot: Prot::ReadWrite,
            shared: true,
            huge: PageSize::Size4K,
            noreserve: false,
            populate: false,
            align: 1,
        }
    }

    /// The first byte. Writing through it, like any access to a shared
    /// mapping another process can write, is the caller's `unsafe`
    /// business (vm-memory's `MmapRegion::as_ptr` alike).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory as bytes.
    ///
    /// # Safety
    /// The mapping is readable, and while the slice lives nothing writes
    /// the memory: no raw pointer of this process, no other mapping of the
    /// same file (here or in another process), and no part of a file
    /// mapping lies past the file's end (a read there is a SIGBUS).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` mapped bytes, alive while `self` is; the rest is
        // the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The memory as writable bytes.
    ///
    /// # Safety
    /// As [`Mapping::as_slice`], and the mapping is writable.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// `madvise(advice)` over the whole mapping (`MADV_HUGEPAGE`,
    /// `MADV_NOHUGEPAGE`, ...). Advice that frees pages
    /// (`MADV_DONTNEED`, `MADV_REMOVE`, `MADV_FREE`) changes what the
    /// memory reads and is refused (`EINVAL`): those belong to whoever
    /// decides the memory may be zero.
    pub fn advise(&self, advice: libc::c_int) -> io::Result<()> {
        if matches!(
            advice,
            libc::MADV_DONTNEED | libc::MADV_REMOVE | libc::MADV_FREE
        ) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: advice on our own mapping that changes no content.
        if unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Faults every page in writable ([`crate::populate_write`]): memory
    /// the kernel cannot supply is an error now (ENOMEM, EFAULT; EINVAL on
    /// a kernel before 5.14 or a mapping that is not writable), not a
    /// SIGBUS on a later store. Changes no byte.
    pub fn populate(&self) -> io::Result<()> {
        self.populate_range(0, self.len)
    }

    /// [`Mapping::populate`] of `[off, off + len)` (for callers that
    /// populate in parallel chunks); a range outside the mapping is
    /// `EINVAL`.
    pub fn populate_range(&self, off: usize, len: usize) -> io::Result<()> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: inside our own mapping; populating changes no content.
        unsafe { crate::populate_write(self.ptr.as_ptr().add(off), len) }
    }

    /// Maps `len` bytes of the file `fd` from `offset`, shared and
    /// read-write, over `[at, at + len)` of this mapping (`MAP_FIXED`),
    /// optionally populating the page tables: an address range reserved
    /// with [`Prot::None`] becomes one contiguous view of several files (a
    /// pool lease of several regions). The part is unmapped with this
    /// mapping. A part outside the mapping, an empty one or an offset past
    /// `off_t` is `EINVAL`; hugetlb files need `at` aligned to their page
    /// (reserve with [`MapBuilder::align`]).
    pub fn map_file_over(
        &mut self,
        at: usize,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        populate: bool,
    ) -> Result<(), MapError> {
        let mut b = Mapping::file(fd, offset, len);
        if populate {
            b = b.populate();
        }
        let inval = || io::Error::from_raw_os_error(libc::EINVAL);
        if len == 0 || at.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(b.error(inval()));
        }
        let off = libc::off_t::try_from(offset).map_err(|_| b.error(inval()))?;
        let mut flags = libc::MAP_SHARED | libc::MAP_FIXED;
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: `[at, at + len)` lies inside this mapping, which `self`
        // owns and borrows exclusively here, so MAP_FIXED replaces none of
        // anyone else's memory and no slice of it is alive.
        let p = unsafe {
            libc::mmap(
                self.ptr.as_ptr().add(at).cast(),
                len,
                Prot::ReadWrite.bits(),
                flags,
                fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(b.error(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Gives the mapping up without unmapping it: it lives until the
    /// process exits (a test standing for guest RAM another thread still
    /// uses, or memory whose unmapping must wait for the kernel's own at
    /// exit). Returns its address.
    pub fn leak(self) -> *mut u8 {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Whether `/proc/self/maps` lists a mapping that starts at `addr`.
    /// Whether `addr` lies inside any mapping of this process. Inside, not
    /// at the start of a line: the kernel merges an anonymous mapping with
    /// a neighbour of the same flags (another test thread's), so its VMA
    /// may start below `addr`.
    fn listed(addr: usize) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let mut ends = range
                .split('-')
                .map(|s| usize::from_str_radix(s, 16).unwrap_or(0));
            let (start, end) = (ends.next().unwrap_or(0), ends.next().unwrap_or(0));
            (start..end).contains(&addr)
        })
    }

    #[test]
    fn anonymous_maps_writes_reads_and_unmaps_on_drop() {
        let mut m = Mapping::anonymous(3 << 20).map().unwrap();
        assert_eq!(m.len(), 3 << 20);
        assert!(!m.is_empty());
        // SAFETY: our own private mapping, nothing else writes it.
        unsafe {
            assert!(
                m.as_slice().iter().all(|&b| b == 0),
                "fresh memory reads zero"
            );
            m.as_mut_slice()[4097] = 0x5a;
            assert_eq!(m.as_slice()[4097], 0x5a);
        }
        m.advise(libc::MADV_HUGEPAGE).ok(); // THP may be compiled out
        m.advise(libc::MADV_NOHUGEPAGE).ok();
        assert!(m.advise(libc::MADV_DONTNEED).is_err(), "would zero memory");
        m.populate().unwrap();
        m.populate_range(4096, 8192).unwrap();
        assert!(m.populate_range(3 << 20, 1).is_err());
        assert!(m.populate_range(usize::MAX, 2).is_err());
        let addr = m.as_ptr() as usize;
        assert!(listed(addr));
        drop(m);
        assert!(!listed(addr), "dropping it unmaps it");
    }

    #[test]
    fn aligned_mappings_start_on_the_boundary_and_keep_no_ends() {
        let m = Mapping::anonymous(4 << 20)
            .noreserve()
            .align(2 << 20)
            .map()
            .unwrap();
        assert_eq!(m.as_ptr() as usize % (2 << 20), 0);
        assert_eq!(m.len(), 4 << 20);
        m.populate().unwrap();
        let e = Mapping::anonymous(4096).align(3).map().unwrap_err();
        assert_eq!(e.os_error().raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn bad_requests_are_errors_that_say_what_and_how() {
        let e = Mapping::anonymous(0).map().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("cannot map 0 bytes of anonymous memory: ") && msg.contains("; "),
            "{msg}"
        );
        assert_eq!(io::Error::from(e).raw_os_error(), Some(libc::EINVAL));
        let f = tempfile::tempfile().unwrap();
        let e = Mapping::file(f.as_fd(), u64::MAX, 4096).map().unwrap_err();
        assert!(e.to_string().contains("at offset"), "{e}");
    }

    #[test]
    fn populate_is_an_error_not_a_signal() {
        let m = Mapping::anonymous(1 << 20).prot(Prot::None).map().unwrap();
        assert!(m.populate().is_err());
        let r = Mapping::anonymous(4096).prot(Prot::Read).map().unwrap();
        assert!(r.populate().is_err(), "read-only memory cannot be written");
    }

    #[test]
    fn a_memfd_maps_shared_and_the_mapping_outlives_the_fd() {
        let f = crate::memfd(
            c"hostmem-map",
            2 << 20,
            PageSize::Size4K,
            crate::Sealing::Never,
        )
        .unwrap();
        let mut w = Mapping::file(f.as_fd(), 1 << 20, 1 << 20)
            .populate()
            .map()
            .unwrap();
        let r = Mapping::file(f.as_fd(), 0, 2 << 20)
            .prot(Prot::Read)
            .map()
            .unwrap();
        drop(f);
        // SAFETY: the test's own memfd; the writer and reader take turns.
        unsafe {
            w.as_mut_slice()[7] = 0xa5;
            assert_eq!(r.as_slice()[(1 << 20) + 7], 0xa5, "shared with the file");
        }
        // A private mapping of it copies on write.
        let g = crate::memfd(
            c"hostmem-map",
            4096,
            PageSize::Size4K,
            crate::Sealing::Never,
        )
        .unwrap();
        let mut p = Mapping::file(g.as_fd(), 0, 4096).private().map().unwrap();
        let s = Mapping::file(g.as_fd(), 0, 4096).map().unwrap();
        // SAFETY: as above.
        unsafe {
            p.as_mut_slice()[0] = 1;
            assert_eq!(s.as_slice()[0], 0, "private stores stay private");
        }
    }

    #[test]
    fn a_leaked_mapping_stays_mapped() {
        let p = Mapping::anonymous(4096).map().unwrap().leak();
        assert!(listed(p as usize));
        // SAFETY: the leaked page, unmapped by the test itself.
        unsafe { libc::munmap(p.cast(), 4096) };
    }

    #[test]
    fn hugetlb_anonymous_mappings_reserve_at_mmap() {
        let page = PageSize::Size2M;
        let free = crate::hugepages::counters(page).map_or(0, |c| c.unclaimed());
        if free < 2 {
            testsupport::skip(
                "HUGEPAGES",
                format!("{free} unclaimed 2M hugepages, 2 needed (scripts/with-hugepages.sh)"),
            );
            return;
        }
        let mut m = Mapping::anonymous(2 << 20).hugetlb(page).map().unwrap();
        m.populate().unwrap();
        // SAFETY: our own private mapping.
        unsafe {
            m.as_mut_slice()[(2 << 20) - 1] = 1;
            assert_eq!(m.as_slice()[0], 0);
        }
        let addr = m.as_ptr() as usize;
        assert_eq!(addr % (2 << 20), 0);
        drop(m);
        assert!(!listed(addr));
        // More than the pool has: refused at mmap, with the fix.
        let e = Mapping::anonymous(1 << 62).hugetlb(page).map().unwrap_err();
        assert!(e.to_string().contains("2M hugepages"), "{e}");
    }

    /// Two files mapped over a reserved range read as one: each part
    /// shows its file's bytes, writes reach the files, and a part outside
    /// the range is refused.
    #[test]
    fn files_mapped_over_a_reservation_read_as_one_range() {
        use std::os::unix::fs::FileExt;
        let a = tempfile::tempfile().unwrap();
        let b = tempfile::tempfile().unwrap();
        a.set_len(8192).unwrap();
        b.set_len(4096).unwrap();
        a.write_all_at(&[0xaa; 8192], 0).unwrap();
        b.write_all_at(&[0xbb; 4096], 0).unwrap();
        let mut m = Mapping::anonymous(8192)
            .prot(Prot::None)
            .noreserve()
            .map()
            .unwrap();
        // The second page of `a`, then all of `b`.
        m.map_file_over(0, a.as_fd(), 4096, 4096, false).unwrap();
        m.map_file_over(4096, b.as_fd(), 0, 4096, true).unwrap();
        // SAFETY: both pages are mapped read-write; nothing else writes.
        let s = unsafe { m.as_mut_slice() };
        assert!(s[..4096].iter().all(|&x| x == 0xaa));
        assert!(s[4096..].iter().all(|&x| x == 0xbb));
        s[0] = 1;
        s[4096] = 2;
        let mut got = [0u8; 1];
        a.read_exact_at(&mut got, 4096).unwrap();
        assert_eq!(got, [1]);
        b.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(got, [2]);
        for (at, len) in [(4096, 8192), (0, 0), (usize::MAX, 4096)] {
            let e = m.map_file_over(at, a.as_fd(), 0, len, false).unwrap_err();
            assert_eq!(
                e.os_error().raw_os_error(),
                Some(libc::EINVAL),
                "{at} {len}"
            );
        }
    }

    /// The workspace's other crates (src, tests, examples, benches) map
    /// memory only through [`Mapping`] (or vm-memory, for guest RAM).
    #[test]
    fn no_other_crate_calls_mmap() {
        fn walk(dir: &std::path::Path, hits: &mut Vec<String>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                let name = e.file_name();
                if p.is_dir() {
                    if name != "target" && name != "hostmem" && name != ".git" {
                        walk(&p, hits);
                    }
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    for bad in [
                        "libc::mmap",
                        "libc::munmap",
                        "libc::mremap",
                        "mman::mmap",
                        "mman::munmap",
                    ] {
                        if text.contains(bad) {
                            hits.push(format!("{}: {bad}", p.display()));
                        }
                    }
                }
            }
        }
        let vmm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut hits = Vec::new();
        walk(&vmm, &mut hits);
        assert!(
            hits.is_empty(),
            "map through hostmem::Mapping instead: {hits:?}"
        );
    }
}
