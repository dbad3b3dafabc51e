//! Host memory, once: what `guestmem` (guest RAM), `pool` (the pre-zeroed
//! region daemon), `prezero` (the zeroing engine) and `zerobench` (its
//! benchmark) each need to know about, and do to, the host's memory.
//!
//! Why a crate of its own: these helpers were written three times (the
//! sysfs NUMA walk twice, four size parsers, three page-size enums,
//! three readers of the hugepage counters, three `memfd_create`
//! wrappers), and their copies had begun to disagree (one size parser
//! took `4GiB`, another refused it; one hugepage check counted reserved
//! pages as free). Each has one concern that is neither "zeroing" nor
//! "guest RAM" nor "the pool": a fact about the host or a thin, checked
//! syscall wrapper. Nothing here decides whether memory may be called
//! zero: that stays with the callers that own the memory.
//!
//! * [`PageSize`]: the one page-size type (4K, 2M, 1G).
//! * [`parse_size`]: the one size grammar (`4G`, `512M`, `4096`, `4GiB`).
//! * [`hugepages`]: the sysfs counters of a hugetlb pool and a guard that
//!   grows it for a while and gives the pages back.
//! * [`Mapping`]: the one owner of a host mapping (`mmap` with readable
//!   flags, advice, populate, `munmap` on drop); no other crate calls
//!   `mmap` itself.
//! * [`memfd`]: `memfd_create` of a page size, sized (and sealed as
//!   asked: now against resizing, or later against every change with
//!   [`freeze`]).
//! * [`hugetlbfs`]: is a path or fd on hugetlbfs of a page size, and is a
//!   memory file (or its directory) private to this process.
//! * [`populate_write`]: `MADV_POPULATE_WRITE` as an error, never a signal.
//! * [`first_nonzero`]: the zero-scan (word-wise, then the exact byte).
//! * [`parallel`]: the chunked parallel driver (workers take chunks in
//!   address order; the first error stops them).
//! * [`cgroup`]: would a cgroup limit (v1/v2, own or ancestor) stop
//!   memory from being faulted in.
//! * [`numa`]: the host topology (sysfs node walk, cpulists, CPU pinning,
//!   `move_pages` query, `mbind`).

#![deny(missing_docs)]

pub mod cgroup;
pub mod hugepages;
pub mod hugetlbfs;
mod mapping;
pub mod numa;
mod page;
mod parallel;
mod size;

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

pub use mapping::{MapBuilder, MapError, Mapping, Prot};
pub use page::{PageSize, PageSizeError};
pub use parallel::{parallel, Chunk};
pub use size::{human, parse_size, SizeError};

/// Whether, and when, a [`memfd`] is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealing {
    /// Never: the file may be resized by whoever holds it (memory only
    /// this process maps).
    Never,
    /// Against growing and shrinking now (and against further seals), so
    /// whoever it is passed to cannot resize it under the creator's
    /// mapping.
    Size,
    /// Not yet: the creator writes it, then seals it against every change
    /// with [`freeze`].
    Later,
}

/// A `memfd_create` file of `len` bytes backed by `page`-sized pages
/// (4K: shmem; 2M/1G: hugetlb, which fails with the kernel's error when
/// the kernel lacks that size), close-on-exec, sealed as `sealing` says.
pub fn memfd(name: &CStr, len: u64, page: PageSize, sealing: Sealing) -> io::Result<File> {
    let mut flags = libc::MFD_CLOEXEC | page.mfd_flags();
    if sealing != Sealing::Never {
        flags |= libc::MFD_ALLOW_SEALING;
    }
    // SAFETY: plain syscall with a valid C string.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let f = unsafe { File::from_raw_fd(raw) };
    f.set_len(len)?;
    if sealing == Sealing::Size {
        add_seals(
            &f,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )?;
    }
    Ok(f)
}

/// Seals a [`Sealing::Later`] memfd against every change: no write (not
/// even through a mapping made later), no resize, no further seal. Fails
/// (`EBUSY`) while a writable shared mapping of it exists.
pub fn freeze(f: &File) -> io::Result<()> {
    add_seals(
        f,
        libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
    )
}

fn add_seals(f: &File, seals: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a valid fd.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `madvise(MADV_POPULATE_WRITE)` over `[ptr, ptr + len)`: faults every
/// page in writable (the kernel zeroes fresh ones). A page the kernel
/// cannot supply (an exhausted hugetlb pool, a cgroup limit) is an
/// error (ENOMEM, EFAULT), not the SIGBUS a store would raise or the
/// silent skip of `MAP_POPULATE`. EINVAL means a kernel before 5.14.
///
/// # Safety
/// The range must lie inside a mapping the caller owns; populating does
/// not change the content of pages already present.
pub unsafe fn populate_write(ptr: *mut u8, len: usize) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the caller's mapping.
    let r = unsafe { libc::madvise(ptr.cast(), len, libc::MADV_POPULATE_WRITE) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Offset of the first non-zero byte of `buf`, or `None` if it is all
/// zero: an OR over 4 KiB blocks of `u64` words (vectorised by the
/// compiler), then a byte search inside the first dirty block.
pub fn first_nonzero(buf: &[u8]) -> Option<usize> {
    const BLOCK: usize = 4096;
    for (bi, block) in buf.chunks(BLOCK).enumerate() {
        // SAFETY: any bit pattern is a valid u64.
        let (head, words, tail) = unsafe { block.align_to::<u64>() };
        let dirty = head.iter().any(|&b| b != 0)
            || words.iter().fold(0u64, |a, &w| a | w) != 0
            || tail.iter().any(|&b| b != 0);
        if dirty {
            let off = block.iter().position(|&b| b != 0)?;
            return Some(bi * BLOCK + off);
        }
    }
    None
}

/// The host's `MemAvailable` in bytes (`None` if `/proc/meminfo` does not
/// say).
pub fn mem_available() -> Option<u64> {
    meminfo_kib(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable",
    )
    .map(|k| k * 1024)
}

/// A `Key: N kB` (or `Key: N`) field of a `/proc/meminfo` text.
pub fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_the_first_byte_anywhere() {
        let mut v = vec![0u8; 3 * 4096 + 17];
        assert_eq!(first_nonzero(&v), None);
        assert_eq!(first_nonzero(&[]), None);
        // Unaligned start, every position of a block edge.
        for at in [0, 1, 7, 4095, 4096, 8191, 3 * 4096 + 16] {
            v[at] = 0x80;
            assert_eq!(first_nonzero(&v), Some(at));
            assert_eq!(first_nonzero(&v[1..]), at.checked_sub(1).filter(|_| at > 0));
            v[at] = 0;
        }
        v[5000] = 1;
        v[9000] = 1;
        assert_eq!(first_nonzero(&v), Some(5000));
    }

    #[test]
    fn memfd_sizes_and_seals() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let f = memfd(c"hostmem-test", 1 << 20, PageSize::Size4K, Sealing::Size).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 1 << 20);
        assert!(f.set_len(2 << 20).is_err(), "sealed against growing");
        // SAFETY: valid fd.
        let seals = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GET_SEALS) };
        assert_ne!(seals & libc::F_SEAL_SHRINK, 0);
        assert!(freeze(&f).is_err(), "F_SEAL_SEAL: no more seals");
        let g = memfd(c"hostmem-test", 1 << 20, PageSize::Size4K, Sealing::Never).unwrap();
        g.set_len(2 << 20).unwrap();
        assert!(freeze(&g).is_err(), "not sealable");
        let mut h = memfd(c"hostmem-test", 0, PageSize::Size4K, Sealing::Later).unwrap();
        h.write_all(b"hint").unwrap();
        freeze(&h).unwrap();
        assert!(h.write_all(b"x").is_err() && h.set_len(1).is_err());
        assert_eq!(
            std::fs::read(format!("/proc/self/fd/{}", h.as_raw_fd())).unwrap(),
            b"hint"
        );
    }

    #[test]
    fn populate_is_an_error_not_a_signal() {
        let m = Mapping::anonymous(1 << 20).prot(Prot::None).map().unwrap();
        // SAFETY: inside the mapping above.
        unsafe {
            assert!(populate_write(m.as_ptr(), 1 << 20).is_err());
            libc::mprotect(
                m.as_ptr().cast(),
                1 << 20,
                libc::PROT_READ | libc::PROT_WRITE,
            );
            populate_write(m.as_ptr(), 1 << 20).unwrap();
            populate_write(m.as_ptr(), 0).unwrap();
        }
        assert!(mem_available().unwrap() > 0);
    }
}
