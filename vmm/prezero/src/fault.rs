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

/// Base page size for rounding (larger pages are faulted whole anyway).
const PAGE: usize = 4096;

/// Whether this kernel knows `MADV_POPULATE_WRITE`, probed once on a page
/// of our own (EINVAL there means the advice is unknown; EINVAL on a
/// caller's range means that range cannot be written, e.g. read-only).
fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        hostmem::Mapping::anonymous(PAGE)
            .map()
            .is_ok_and(|m| m.populate().is_ok())
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
    unsafe { hostmem::populate_write(start as *mut u8, end - start) }
        .map_err(|source| Error::Fault { addr, len, source })
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
        let m = hostmem::Mapping::anonymous(PAGE)
            .prot(hostmem::Prot::Read)
            .map()
            .unwrap();
        // SAFETY: inside the read-only page above.
        assert!(unsafe { populate(m.as_ptr() as usize + 10, 20) }.is_err());
        drop(m);
        // ... and later good ranges still work (no global give-up).
        let mut v = vec![1u8; 3 * PAGE];
        // SAFETY: our own buffer.
        assert!(unsafe { populate(v.as_mut_ptr() as usize + 1, 2 * PAGE) }.is_ok());
    }
}
