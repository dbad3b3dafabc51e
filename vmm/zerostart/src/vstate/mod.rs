//! The KVM objects of one VM and their setup (Firecracker's `vstate`):
//! the KVM device and the VM ([`vm`]: interrupt controllers, memory
//! slots) and the vCPUs ([`vcpu`]: CPUID, MSRs, LAPIC, entry registers,
//! and the run loop). The builder's recipe calls these; nothing else
//! issues a KVM ioctl on the VM while it is built.

pub mod vcpu;
pub mod vm;

use std::path::PathBuf;

pub use vm::Vm;

/// Everything KVM can refuse while a VM is set up; every message names
/// the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// KVM device missing.
    #[error("{0} does not exist, so KVM is unavailable; load the kvm_intel or kvm_amd module (modprobe) or enable virtualization for this machine")]
    KvmMissing(PathBuf),
    /// KVM device not accessible.
    #[error("permission denied opening {0}; run as root or add this user to the kvm group (usermod -aG kvm $USER)")]
    KvmDenied(PathBuf),
    /// KVM device failed otherwise.
    #[error("cannot open {path}: {err}; check that it is the KVM device")]
    KvmOpen {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// Not a KVM device.
    #[error("{path} is not a KVM device (KVM_GET_API_VERSION: {err}); point it at /dev/kvm")]
    NotKvm {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: String,
    },
    /// A KVM ioctl failed.
    #[error("{what} failed: {err}")]
    Kvm {
        /// Which call.
        what: &'static str,
        /// errno.
        err: kvm_ioctls::Error,
    },
    /// KVM memory slots.
    #[error(transparent)]
    Slot(#[from] vm::SlotError),
    /// CPUID.
    #[error(transparent)]
    Cpuid(#[from] arch::cpuid::Error),
    /// MSRs.
    #[error(transparent)]
    Msr(#[from] arch::msr::Error),
    /// LAPIC.
    #[error(transparent)]
    Lapic(#[from] arch::interrupts::Error),
}

/// Maps a failed KVM ioctl to [`Error::Kvm`] naming the call `what`.
pub fn kvm_err(what: &'static str) -> impl Fn(kvm_ioctls::Error) -> Error {
    move |err| Error::Kvm { what, err }
}
