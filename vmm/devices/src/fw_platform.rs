//! The two platform registers EDK2's CloudHv firmware needs besides fw_cfg
//! (only present with `--firmware`):
//!
//! * PCI configuration mechanism #1 (ports `0xcf8` address, `0xcfc..0xcff`
//!   data) with one device, the host bridge at 00:00.0 carrying
//!   cloud-hypervisor's device ID `0x0d57`: CloudHv's `AcpiTimerLib` reads
//!   that ID to pick its timer and asserts on anything else (0xffff without
//!   a bus). Every other function reads as absent (all ones); writes are
//!   ignored (the host bridge has no writable register we model).
//! * The ACPI PM timer at `0x608` (`CLOUDHV_ACPI_TIMER_IO_ADDRESS`): a
//!   24-bit counter at 3.579545 MHz, which EDK2's `MicroSecondDelay` polls.
//!   It counts from the host's monotonic clock.

use std::time::Instant;

use crate::{ExitRequest, PioDevice};

/// PCI configuration address register.
pub const PCI_CONFIG_ADDRESS: u16 = 0xcf8;
/// Ports from [`PCI_CONFIG_ADDRESS`]: address (4) and data (4).
pub const PCI_CONFIG_LEN: u16 = 8;
/// cloud-hypervisor's PCI host bridge device ID (EDK2 `CLOUDHV_DEVICE_ID`).
pub const CLOUDHV_DEVICE_ID: u16 = 0x0d57;
/// Vendor ID of that host bridge (Intel, as cloud-hypervisor reports).
const VENDOR_INTEL: u16 = 0x8086;
/// ACPI PM timer port (EDK2 `CLOUDHV_ACPI_TIMER_IO_ADDRESS`).
pub const PM_TIMER_PORT: u16 = 0x608;
/// PM timer frequency, Hz.
pub const PM_TIMER_HZ: u64 = 3_579_545;

/// The host bridge's first 16 bytes of configuration space: IDs, command
/// and status 0, class "host bridge" (06/00/00), header type 0.
fn host_bridge_config(offset: u8) -> u32 {
    match offset & 0xfc {
        0x00 => (u32::from(CLOUDHV_DEVICE_ID) << 16) | u32::from(VENDOR_INTEL),
        0x08 => 0x0600_0000,
        _ => 0,
    }
}

/// Configuration mechanism #1 with only the host bridge on it.
#[derive(Debug, Default)]
pub struct PciHostBridge {
    address: u32,
}

impl PciHostBridge {
    /// The 32-bit register the current address selects: all ones unless
    /// enabled and addressing bus 0, device 0, function 0.
    fn selected(&self) -> u32 {
        let enabled = self.address & 0x8000_0000 != 0;
        let bdf = (self.address >> 8) & 0xffff;
        if enabled && bdf == 0 {
            host_bridge_config(self.address as u8)
        } else {
            u32::MAX
        }
    }
}

impl PioDevice for PciHostBridge {
    fn read(&mut self, _base: u16, offset: u16, data: &mut [u8]) {
        let (value, shift) = if offset < 4 {
            (self.address, offset)
        } else {
            (self.selected(), offset - 4)
        };
        let bytes = value.to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = bytes.get(usize::from(shift) + i).copied().unwrap_or(0xff);
        }
    }

    fn write(&mut self, _base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
        if offset == 0 && data.len() == 4 {
            self.address = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) & 0x80ff_fffc;
        }
        None
    }
}

/// The ACPI PM timer.
#[derive(Debug)]
pub struct PmTimer {
    start: Instant,
}

impl PmTimer {
    /// A timer counting from now.
    pub fn new() -> Self {
        PmTimer {
            start: Instant::now(),
        }
    }

    fn ticks(&self) -> u32 {
        let ns = self.start.elapsed().as_nanos();
        ((ns * u128::from(PM_TIMER_HZ) / 1_000_000_000) & 0xff_ffff) as u32
    }
}

impl Default for PmTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl PioDevice for PmTimer {
    fn read(&mut self, _base: u16, offset: u16, data: &mut [u8]) {
        let bytes = self.ticks().to_le_bytes();
        for (i, b) in data.iter_mut().enumerate() {
            *b = bytes.get(usize::from(offset) + i).copied().unwrap_or(0);
        }
    }

    fn write(&mut self, _base: u16, _offset: u16, _data: &[u8]) -> Option<ExitRequest> {
        None
    }
}

/// Puts the host bridge and the PM timer on `bus`.
pub fn insert(bus: &mut crate::PioBus) -> Result<(), crate::Error> {
    use std::sync::{Arc, Mutex};
    bus.insert(
        PCI_CONFIG_ADDRESS,
        PCI_CONFIG_LEN,
        Arc::new(Mutex::new(PciHostBridge::default())),
    )?;
    bus.insert(PM_TIMER_PORT, 4, Arc::new(Mutex::new(PmTimer::new())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg_read(d: &mut PciHostBridge, bdf: u32, reg: u32) -> u32 {
        let a = 0x8000_0000 | (bdf << 8) | reg;
        d.write(PCI_CONFIG_ADDRESS, 0, &a.to_le_bytes());
        let mut b = [0u8; 4];
        d.read(PCI_CONFIG_ADDRESS, 4, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn only_the_host_bridge_answers() {
        let mut d = PciHostBridge::default();
        assert_eq!(cfg_read(&mut d, 0, 0), 0x0d57_8086);
        assert_eq!(cfg_read(&mut d, 0, 8) >> 8, 0x06_0000);
        assert_eq!(cfg_read(&mut d, 1 << 3, 0), u32::MAX, "device 1");
        assert_eq!(cfg_read(&mut d, 1, 0), u32::MAX, "function 1");
        assert_eq!(cfg_read(&mut d, 1 << 8, 0), u32::MAX, "bus 1");
        // PciRead16 of the device ID: a 2-byte read at 0xcfe.
        cfg_read(&mut d, 0, 0);
        let mut w = [0u8; 2];
        d.read(PCI_CONFIG_ADDRESS, 6, &mut w);
        assert_eq!(u16::from_le_bytes(w), CLOUDHV_DEVICE_ID);
        // Disabled address: absent.
        d.write(PCI_CONFIG_ADDRESS, 0, &0u32.to_le_bytes());
        let mut b = [0u8; 4];
        d.read(PCI_CONFIG_ADDRESS, 4, &mut b);
        assert_eq!(b, [0xff; 4]);
        // The address register reads back.
        d.write(PCI_CONFIG_ADDRESS, 0, &0x8000_0010u32.to_le_bytes());
        d.read(PCI_CONFIG_ADDRESS, 0, &mut b);
        assert_eq!(u32::from_le_bytes(b), 0x8000_0010);
    }

    #[test]
    fn pm_timer_counts_at_3_58_mhz() {
        let mut t = PmTimer::new();
        let read = |t: &mut PmTimer| {
            let mut b = [0u8; 4];
            t.read(PM_TIMER_PORT, 0, &mut b);
            u32::from_le_bytes(b)
        };
        let a = read(&mut t);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = read(&mut t);
        let d = b.wrapping_sub(a) & 0xff_ffff;
        // 20 ms = 71591 ticks; allow a loaded host to oversleep.
        assert!((71_000..3_579_545).contains(&d), "{d}");
        assert!(b <= 0xff_ffff);
    }
}
