//! Model-specific registers at boot (Firecracker's boot MSR list).

use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;

const MSR_IA32_SYSENTER_CS: u32 = 0x174;
const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const MSR_IA32_TSC: u32 = 0x10;
const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
/// IA32_MISC_ENABLE: fast string operations.
const MISC_ENABLE_FAST_STRING: u64 = 1;
/// MTRRdefType: MTRRs enabled, default type write-back. Without it some
/// guests map all RAM uncached.
const MTRR_ENABLE_WB: u64 = (1 << 11) | 6;

/// Errors setting MSRs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The MSR list could not be built.
    #[error("building the boot MSR list")]
    Build,
    /// KVM_SET_MSRS failed.
    #[error("KVM_SET_MSRS failed: {0}")]
    Set(kvm_ioctls::Error),
    /// KVM accepted fewer MSRs than requested.
    #[error("KVM_SET_MSRS set only {set} of {want} boot MSRs")]
    Partial {
        /// Set.
        set: usize,
        /// Requested.
        want: usize,
    },
}

/// The boot MSRs as `(index, value)`.
pub fn boot_msr_entries() -> Vec<(u32, u64)> {
    vec![
        (MSR_IA32_SYSENTER_CS, 0),
        (MSR_IA32_SYSENTER_ESP, 0),
        (MSR_IA32_SYSENTER_EIP, 0),
        (MSR_STAR, 0),
        (MSR_CSTAR, 0),
        (MSR_KERNEL_GS_BASE, 0),
        (MSR_SYSCALL_MASK, 0),
        (MSR_LSTAR, 0),
        (MSR_IA32_TSC, 0),
        (MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING),
        (MSR_MTRR_DEF_TYPE, MTRR_ENABLE_WB),
    ]
}

/// Sets the boot MSRs that KVM supports (`supported` is
/// `Kvm::get_msr_index_list`); unsupported ones are skipped rather than
/// failing the whole call.
pub fn setup_msrs(vcpu: &VcpuFd, supported: &[u32]) -> Result<(), Error> {
    let entries: Vec<kvm_msr_entry> = boot_msr_entries()
        .into_iter()
        .filter(|(i, _)| supported.is_empty() || supported.contains(i))
        .map(|(index, data)| kvm_msr_entry {
            index,
            data,
            ..Default::default()
        })
        .collect();
    let msrs = Msrs::from_entries(&entries).map_err(|_| Error::Build)?;
    let set = vcpu.set_msrs(&msrs).map_err(Error::Set)?;
    if set != entries.len() {
        return Err(Error::Partial {
            set,
            want: entries.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_has_mtrr_and_misc_enable() {
        let l = boot_msr_entries();
        assert!(l.contains(&(MSR_MTRR_DEF_TYPE, 0x806)));
        assert!(l.contains(&(MSR_IA32_MISC_ENABLE, 1)));
        let mut idx: Vec<u32> = l.iter().map(|e| e.0).collect();
        idx.sort();
        idx.dedup();
        assert_eq!(idx.len(), l.len());
    }
}
