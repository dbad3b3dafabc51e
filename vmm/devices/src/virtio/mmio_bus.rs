//! Guest-physical MMIO dispatch for the virtio-mmio windows: a vCPU's
//! MMIO exit at an address inside a window goes to that device with the
//! offset into it; anything else is open bus.
//!
//! The address map is rust-vmm's `vm-device` `Bus` (range checks,
//! overlap, lookup). Its `IoManager`/`DeviceMmio` layer is not used: its
//! `Mutex` blanket implementation unwraps the lock, so a device poisoned
//! by a panicking thread would panic the vCPU too, where this bus answers
//! on; and neither it nor `Bus` can list the devices, which teardown needs
//! to stop each one with a deadline (so the bus keeps that list itself).

use std::sync::{Arc, Mutex};

use vm_device::bus::{BusRange, MmioAddress};
use vm_memory::GuestMemory;

use super::{MmioTransport, VirtioDevice};

/// A device on the MMIO bus.
pub trait MmioDevice: Send {
    /// A guest read of `data.len()` bytes at `offset` into the window.
    fn read(&mut self, offset: u64, data: &mut [u8]);
    /// A guest write at `offset` into the window.
    fn write(&mut self, offset: u64, data: &[u8]);
    /// Stops the device's own use of guest memory (teardown); false if a
    /// thread of the device still holds it (the bus retries until its
    /// deadline).
    fn stop(&mut self) -> bool {
        true
    }
}

impl<M: GuestMemory + Send + Sync, D: VirtioDevice<M>> MmioDevice for MmioTransport<M, D> {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        MmioTransport::read(self, offset, data)
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        MmioTransport::write(self, offset, data)
    }
    fn stop(&mut self) -> bool {
        MmioTransport::stop(self)
    }
}

/// A window that cannot go on the bus.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("MMIO window {base:#x}+{len:#x} is empty, wraps or overlaps another; give each device its own window")]
pub struct MmioBusError {
    /// Base of the rejected window.
    pub base: u64,
    /// Its length.
    pub len: u64,
}

type Dev = Arc<Mutex<dyn MmioDevice>>;

/// Non-overlapping MMIO windows `[base, base + len)`.
#[derive(Default)]
pub struct MmioBus {
    map: vm_device::bus::MmioBus<Dev>,
    /// Every device, for teardown (`Bus` cannot be iterated).
    devices: Vec<Dev>,
}

impl MmioBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `dev` at `[base, base + len)`.
    pub fn insert(&mut self, base: u64, len: u64, dev: Dev) -> Result<(), MmioBusError> {
        let err = MmioBusError { base, len };
        let range = BusRange::new(MmioAddress(base), len).map_err(|_| err)?;
        self.map.register(range, dev.clone()).map_err(|_| err)?;
        self.devices.push(dev);
        Ok(())
    }

    /// The device whose window holds all of `[addr, addr + n)`, with the
    /// offset into it.
    fn find(&self, addr: u64, n: usize) -> Option<(u64, &Dev)> {
        let (range, dev) = self.map.check_access(MmioAddress(addr), n).ok()?;
        Some((addr - range.base().0, dev))
    }

    /// Stops every device's own use of guest memory (a vhost backend)
    /// before the VMM unmaps it; a device whose lock a stuck vCPU still
    /// holds (or whose I/O thread did not end) is retried until
    /// `timeout`, then counted as left.
    pub fn stop_devices(&self, timeout: std::time::Duration) -> usize {
        let deadline = std::time::Instant::now() + timeout;
        let mut left = 0;
        for dev in &self.devices {
            loop {
                let stopped = match dev.try_lock() {
                    Ok(mut d) => d.stop(),
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().stop(),
                    Err(std::sync::TryLockError::WouldBlock) => false,
                };
                if stopped {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    left += 1;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        left
    }

    /// A guest read; false if no device claims `[addr, addr + len)`.
    pub fn read(&self, addr: u64, data: &mut [u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((off, dev)) => {
                // A device poisoned by a panicking thread still answers:
                // its state is plain registers, and the VM is ending.
                let mut d = dev.lock().unwrap_or_else(|e| e.into_inner());
                d.read(off, data);
                true
            }
            None => false,
        }
    }

    /// A guest write; false if no device claims `[addr, addr + len)`.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        match self.find(addr, data.len()) {
            Some((off, dev)) => {
                let mut d = dev.lock().unwrap_or_else(|e| e.into_inner());
                d.write(off, data);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Regs([u8; 16]);
    impl MmioDevice for Regs {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            let o = offset as usize;
            data.copy_from_slice(&self.0[o..o + data.len()]);
        }
        fn write(&mut self, offset: u64, data: &[u8]) {
            let o = offset as usize;
            self.0[o..o + data.len()].copy_from_slice(data);
        }
    }

    #[test]
    fn dispatch_and_overlap() {
        let mut bus = MmioBus::new();
        bus.insert(0x1000, 16, Arc::new(Mutex::new(Regs([0; 16]))))
            .unwrap();
        bus.insert(0x2000, 16, Arc::new(Mutex::new(Regs([0; 16]))))
            .unwrap();
        for (b, l) in [(0x1008, 16), (0xff8, 16), (0x1000, 0), (u64::MAX - 4, 16)] {
            assert!(bus
                .insert(b, l, Arc::new(Mutex::new(Regs([0; 16]))))
                .is_err());
        }
        assert!(bus.write(0x100c, &[1, 2, 3, 4]));
        let mut d = [0u8; 4];
        assert!(bus.read(0x100c, &mut d));
        assert_eq!(d, [1, 2, 3, 4]);
        // Straddling the end of a window, between windows, wrapping: open bus.
        assert!(!bus.read(0x100e, &mut d));
        assert!(!bus.write(0x1800, &d));
        assert!(!bus.read(u64::MAX - 1, &mut d));
        assert!(bus.read(0x2000, &mut d));
        assert_eq!(d, [0; 4]);
        // A window may end at the very top of the address space; an
        // access that would wrap past it is still open bus.
        bus.insert(u64::MAX - 15, 16, Arc::new(Mutex::new(Regs([7; 16]))))
            .unwrap();
        assert!(bus.read(u64::MAX - 3, &mut d));
        assert_eq!(d, [7; 4]);
        assert!(!bus.read(u64::MAX - 1, &mut d));
        assert_eq!(bus.stop_devices(std::time::Duration::from_millis(10)), 0);
    }
}
