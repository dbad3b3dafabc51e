//! The KVM device and the VM: opening `/dev/kvm`, `KVM_CREATE_VM`, the
//! in-kernel interrupt controllers and the guest RAM's memory slots.

use std::fs::{File, OpenOptions};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use arch::layout::RamLayout;
use kvm_bindings::{kvm_pit_config, kvm_userspace_memory_region, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::GuestMemoryBackend;

use super::{kvm_err, vcpu, Error};
use crate::guest_memory::GuestRam;

/// Where KVM puts the TSS (3 pages below the BIOS area, as in Firecracker).
const KVM_TSS_ADDRESS: usize = 0xfffb_d000;

/// The KVM device and one VM made on it. Keeps the VM (irqchip, memory
/// slots, irqfds) alive until dropped, which the builder's `Vm` does only
/// after the vCPUs are gone.
pub struct Vm {
    kvm: Kvm,
    fd: VmFd,
}

impl Vm {
    /// Opens the KVM device at `kvm_path` ([`open_kvm`]) and creates a VM
    /// on it.
    pub fn create(kvm_path: &Path) -> Result<Self, Error> {
        let kvm = open_kvm(kvm_path)?;
        let fd = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
        Ok(Vm { kvm, fd })
    }

    /// The VM's descriptor, for the devices' irqfds and ioeventfds.
    pub fn fd(&self) -> &VmFd {
        &self.fd
    }

    /// The TSS, the in-kernel irqchip (PIC, IOAPIC, LAPICs) and the PIT.
    pub fn setup_irqchip(&self) -> Result<(), Error> {
        self.fd
            .set_tss_address(KVM_TSS_ADDRESS)
            .map_err(kvm_err("KVM_SET_TSS_ADDR"))?;
        self.fd
            .create_irq_chip()
            .map_err(kvm_err("KVM_CREATE_IRQCHIP"))?;
        self.fd
            .create_pit2(kvm_pit_config {
                flags: KVM_PIT_SPEAKER_DUMMY,
                ..Default::default()
            })
            .map_err(kvm_err("KVM_CREATE_PIT2"))?;
        Ok(())
    }

    /// Registers every region of `layout` (from `guest_memory::layout`)
    /// as a KVM memory slot, slot `i` for region `i`.
    ///
    /// # Safety contract
    ///
    /// `ram` must stay mapped as long as this VM can run vCPUs: the
    /// builder's `Vm` owns both and drops the RAM only after the vCPUs
    /// have stopped.
    pub fn register_memory(&self, ram: &GuestRam, layout: &RamLayout) -> Result<(), Error> {
        for (slot, &(start, len)) in layout.regions().iter().enumerate() {
            let slot = slot as u32;
            let host = ram
                .memory()
                .get_host_address(start)
                .map_err(|err| SlotError::Unmapped { addr: start.0, err })?;
            let r = kvm_userspace_memory_region {
                slot,
                flags: 0,
                guest_phys_addr: start.0,
                memory_size: len,
                userspace_addr: host as u64,
            };
            // SAFETY: the region stays mapped as long as `ram`, which the
            // builder's Vm owns and drops after the vCPUs have stopped
            // (see above).
            unsafe { self.fd.set_user_memory_region(r) }
                .map_err(|err| SlotError::Kvm { slot, err })?;
        }
        Ok(())
    }

    /// `n` vCPUs set up for boot ([`vcpu::create_all`]); index = APIC id.
    pub fn create_vcpus(&self, n: u8) -> Result<Vec<VcpuFd>, Error> {
        vcpu::create_all(&self.kvm, &self.fd, n)
    }
}

/// Opens the KVM device at `path` and checks it speaks the KVM API.
pub fn open_kvm(path: &Path) -> Result<Kvm, Error> {
    let f: File = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => Error::KvmMissing(path.to_path_buf()),
            std::io::ErrorKind::PermissionDenied => Error::KvmDenied(path.to_path_buf()),
            _ => Error::KvmOpen {
                path: path.to_path_buf(),
                err,
            },
        })?;
    // SAFETY: we own the freshly opened descriptor.
    let kvm = unsafe { Kvm::from_raw_fd(f.into_raw_fd()) };
    match kvm.get_api_version() {
        12 => Ok(kvm),
        v if v < 0 => Err(Error::NotKvm {
            path: path.to_path_buf(),
            err: std::io::Error::from_raw_os_error(-v).to_string(),
        }),
        v => Err(Error::NotKvm {
            path: path.to_path_buf(),
            err: format!("unsupported API version {v}"),
        }),
    }
}

/// Why a KVM memory slot could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The region has no host mapping (a VMM bug).
    #[error("guest RAM region at {addr:#x} has no host mapping: {err}; this is a VMM bug")]
    Unmapped {
        /// Region start.
        addr: u64,
        /// Cause.
        err: vm_memory::GuestMemoryError,
    },
    /// The ioctl failed.
    #[error("KVM_SET_USER_MEMORY_REGION (slot {slot}) failed: {err}")]
    Kvm {
        /// Slot number.
        slot: u32,
        /// errno.
        err: kvm_ioctls::Error,
    },
}
