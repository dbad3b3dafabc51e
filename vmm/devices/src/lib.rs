//! Minimal legacy port-I/O devices for the zerostart VMM.
//!
//! zerostart boots Linux directly (or through EDK2) on a machine model with as
//! few devices as a Linux guest needs to print, reset and report boot
//! milestones: a COM1 16550 UART ([`SerialDevice`]), an i8042 controller that
//! only exists so the guest can reset and so Linux's probe finishes quickly
//! ([`I8042Device`]), and the zerostart boot-timer port ([`BootTimer`], see
//! `docs/hint-abi.md`), a CMOS RTC ([`Cmos`]) and the ACPI power-management
//! register ([`AcpiPm`]) so Linux's RTC probe and ACPI `poweroff` finish
//! quickly. For firmware boot, QEMU's fw_cfg device ([`FwCfg`])
//! hands the firmware its kernel, command line and the hint file, the
//! [`fw_platform`] registers (PCI host bridge ID, ACPI PM timer) let EDK2's
//! CloudHv build run, and the Bochs debug console ([`Debugcon`]) takes its
//! log. The
//! [`PioBus`] dispatches vCPU port-I/O exits to them.
//!
//! [`virtio`] has the virtio-mmio transport and the virtio-blk device
//! (docs/vmm.md, "virtio devices").
//!
//! Devices never panic on guest input: a guest can write any value of any
//! width to any port.

mod acpi_pm;
mod bus;
mod cmos;
mod debugcon;
pub mod fw_cfg;
pub mod fw_platform;
mod i8042;
mod serial;
#[cfg(test)]
mod test_util;
mod timer;
pub mod virtio;

pub use acpi_pm::AcpiPm;
pub use bus::{Error, PioBus};
pub use cmos::{Cmos, CMOS_LEN, CMOS_PORT};
pub use debugcon::{Debugcon, DEBUGCON_PORT};
pub use fw_cfg::FwCfg;
pub use i8042::{I8042Device, COMMAND_PORT as I8042_COMMAND_PORT, DATA_PORT as I8042_DATA_PORT};
pub use serial::{SerialDevice, SerialOutput, COM1_BASE, COM1_GSI, COM1_LEN};
pub use timer::{BootTimer, Marker, TIMER_MAGIC, TIMER_PORT};

/// What a device asks the VMM to do to the whole VM after a guest access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitRequest {
    /// The guest asked for a CPU/system reset; the string names the
    /// mechanism for the timeline (`"i8042 reset"`, `"acpi reset"`).
    /// zerostart does not reboot a VM: the VMM treats this as the end of the
    /// run, like Firecracker does.
    Reset(&'static str),
    /// The guest asked to power off.
    Poweroff,
}

/// A device on the port-I/O bus.
///
/// `base` is the first port of the device's range and `offset` the accessed
/// port minus `base`, so one device type can live at several bases.
pub trait PioDevice: Send {
    /// Handles a guest `in`: fill all of `data` (1, 2 or 4 bytes).
    fn read(&mut self, base: u16, offset: u16, data: &mut [u8]);
    /// Handles a guest `out`; may ask the VMM to stop the VM.
    fn write(&mut self, base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest>;
    /// The VM is ending: stop any work the device does on its own threads
    /// (and that may touch guest memory) and wait for it, so guest memory
    /// can be unmapped safely afterwards. Guest accesses after this may be
    /// refused. Most devices have nothing to stop.
    fn stop(&mut self) {}
}
