//! What every boot path of zerostart's own VMM shares: the inputs that go
//! into guest memory and the boot vCPU's entry state. Its own module so
//! that the direct-boot builder and the firmware boot depend on it, not on
//! each other.

use std::path::Path;

use arch::layout::RamLayout;
use kvm_bindings::{kvm_regs, kvm_sregs};
use zerohint::Hint;

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
