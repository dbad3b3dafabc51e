//! Faulting memory in before storing to it, so that memory the kernel
//! cannot supply is an error, not a SIGBUS.
//!
//! A store to a page the kernel cannot provide (an exhausted hugetlb pool
//! under `MAP_NORESERVE`, a file mapping past end of file, a memory cgroup
//! at its limit) kills the process with SIGBUS. `MADV_POPULATE_WRITE`
//! (Linux 5.14) performs the same write faults but reports the failure as
//! an error code (EFAULT, ENOMEM, EINVAL for a read-only range). Faulting in costs what the stores' own faults would have
//! cost, and changes no byte, so the engine can do it chunk by chunk in
//! the workers.

use std::sync::OnceLock;

use crate::Error;

/// `MADV_POPULATE_WRITE`; not in every libc release's constants.
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// Base page size for rounding (larger pages are faulted whole anyway).
const PAGE: usize = 4096;

/// Whether this kernel knows `MADV_POPULATE_WRITE`, probed once on a page
/// of our own (EINVAL there means the advice is unknown; EINVAL on a
/// caller's range means that range cannot be written, e.g. read-only).
fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // SAFETY: a fresh private page, advised, then unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return false;
            }
            let ok = libc::madvise(p, PAGE, MADV_POPULATE_WRITE) == 0;
            libc::munmap(p, PAGE);
            ok
        }
    })
}

/// Write-faults every page overlapping `[addr, addr + len)`.
///
/// Pages are rounded outward: faulting a page in for writing changes none
/// of its bytes. On a kernel without `MADV_POPULATE_WRITE` this is a no-op
/// and the stores fault as usual.
///
/// # Safety
/// The range must be mapped by the caller, who may write to it.
pub(crate) unsafe fn populate(addr: usize, len: usize) -> Result<(), Error> {
    if len == 0 || !supported() {
        return Ok(());
    }
    let start = addr & !(PAGE - 1);
    let end = (addr + len).next_multiple_of(PAGE);
    // SAFETY: advice on the caller's own mapping; changes no contents.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, MADV_POPULATE_WRITE) };
    if rc == 0 {
        return Ok(());
    }
    Err(Error::Fault {
        addr,
        len,
        source: std::io::Error::last_os_error(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_supports_it() {
        // Linux 5.14+; the development and CI machines run 6.x.
        assert!(supported());
    }

    #[test]
    fn read_only_memory_is_an_error() {
        // SAFETY: a fresh page of ours, made read-only.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert!(populate(p as usize + 10, 20).is_err());
            libc::munmap(p, PAGE);
        }
        // ... and later good ranges still work (no global give-up).
        let mut v = vec![1u8; 3 * PAGE];
        // SAFETY: our own buffer.
        assert!(unsafe { populate(v.as_mut_ptr() as usize + 1, 2 * PAGE) }.is_ok());
    }
}
