//! What every boot path of zerostart's own VMM shares: the inputs that go
//! into guest memory, the platform sequence they all write ([`write_platform`])
//! and the boot vCPU's entry state. Its own module so that the
//! direct-boot builder and the firmware boot depend on it, not on each
//! other.

use std::mem::offset_of;
use std::path::Path;

use arch::layout::{RamLayout, LOW_MEMORY_END};
use kvm_bindings::{kvm_regs, kvm_sregs};
use linux_loader::loader::elf::start_info::hvm_start_info;
use vm_memory::GuestAddress;
use zerohint::Hint;

use crate::guest_memory::{GuestRam, Tracked};
use crate::hint::CorruptHint;
use crate::kernel::Format;

/// What goes into guest memory besides the kernel.
#[derive(Debug, Clone, Copy)]
pub struct GuestInputs<'a> {
    /// initramfs file.
    pub initramfs: Option<&'a Path>,
    /// Kernel command line.
    pub cmdline: &'a str,
    /// Where guest RAM lies (from the mapped memory, `guest_memory::layout`).
    pub layout: &'a RamLayout,
    /// vCPUs (for the MP table).
    pub cpus: u8,
    /// Test-only hint corruption.
    pub corrupt: Option<CorruptHint>,
    /// Write ACPI tables (poweroff support).
    pub acpi: bool,
    /// virtio-mmio devices for the DSDT (with `acpi`).
    pub virtio: &'a [arch::acpi::VirtioMmio],
}

/// The boot vCPU's entry state and the hint, from `builder::prepare_guest`
/// or `firmware::prepare`.
#[derive(Debug)]
pub struct PreparedGuest {
    /// General registers at the entry point.
    pub regs: kvm_regs,
    /// How the kernel is entered (PVH carries no hint).
    pub format: Format,
    /// Special registers for long mode.
    pub sregs: kvm_sregs,
    /// The zero hint passed to the guest (before test corruption), if any;
    /// `None` for a scrub request.
    pub hint: Option<Hint>,
}

/// Why the platform tables or the boot state could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// MP table.
    #[error(transparent)]
    Mptable(#[from] arch::mptable::Error),
    /// ACPI tables.
    #[error(transparent)]
    Acpi(#[from] arch::acpi::Error),
    /// PVH boot data.
    #[error(transparent)]
    Pvh(#[from] arch::pvh::Error),
    /// Long-mode page tables and GDT.
    #[error(transparent)]
    Regs(#[from] arch::regs::Error),
    /// Marking the first MiB written.
    #[error(transparent)]
    Ram(#[from] guestmem::Error),
}

/// How the boot vCPU enters the guest at `entry`.
#[derive(Debug, Clone, Copy)]
pub enum Entry {
    /// The 64-bit Linux boot protocol (a bzImage): long-mode page tables
    /// and GDT; the caller writes `boot_params`.
    LongMode {
        /// The kernel's 64-bit entry point.
        entry: GuestAddress,
    },
    /// PVH (an ELF kernel, or the firmware): an `hvm_start_info` with the
    /// memory map and `initrd`, and 32-bit flat segments.
    Pvh {
        /// The PVH entry point.
        entry: GuestAddress,
        /// initramfs already in guest RAM (address, length).
        initrd: Option<(GuestAddress, u64)>,
        /// Also put the ACPI RSDP in `hvm_start_info.rsdp_paddr`:
        /// CloudHv's ACPI platform driver finds the tables that way.
        rsdp_in_start_info: bool,
    },
}

/// What [`write_platform`] leaves for the boot vCPU.
#[derive(Debug)]
pub struct EntryState {
    /// General registers at the entry point.
    pub regs: kvm_regs,
    /// Special registers for the entry mode.
    pub sregs: kvm_sregs,
    /// Where the ACPI RSDP is, with `inputs.acpi`.
    pub rsdp: Option<u64>,
}

/// The platform sequence every boot path writes, in this order: the MP
/// table, the ACPI tables (with `inputs.acpi`), the boot state `entry`
/// needs, then the legacy first MiB marked written (never hinted, written
/// or not; a bzImage's setup_data and `boot_params` go there after). All
/// writes are tracked.
pub fn write_platform(
    ram: &mut GuestRam,
    inputs: &GuestInputs<'_>,
    entry: Entry,
    base_sregs: kvm_sregs,
) -> Result<EntryState, PlatformError> {
    let mut mem = Tracked(ram);
    arch::mptable::setup_mptable(&mut mem, inputs.cpus)?;
    let rsdp = if inputs.acpi {
        Some(arch::acpi::setup_acpi(&mut mem, inputs.cpus, inputs.virtio)?.0)
    } else {
        None
    };
    let (regs, sregs) = match entry {
        Entry::LongMode { entry } => (
            arch::regs::boot_regs(entry),
            arch::regs::long_mode_sregs(&mut mem, base_sregs)?,
        ),
        Entry::Pvh {
            entry,
            initrd,
            rsdp_in_start_info,
        } => {
            let start = arch::pvh::write_start_info(&mut mem, inputs.layout, initrd)?;
            if let Some(rsdp) = rsdp.filter(|_| rsdp_in_start_info) {
                let at = GuestAddress(start.0 + offset_of!(hvm_start_info, rsdp_paddr) as u64);
                arch::BootMemory::write_tracked(&mut mem, &rsdp.to_le_bytes(), at)
                    .map_err(arch::MemoryError)
                    .map_err(arch::pvh::Error::Memory)?;
            }
            (
                arch::pvh::pvh_regs(entry, start),
                arch::pvh::pvh_sregs(&mut mem, base_sregs)?,
            )
        }
    };
    ram.mark_written(GuestAddress(0), LOW_MEMORY_END)?;
    Ok(EntryState { regs, sregs, rsdp })
}
