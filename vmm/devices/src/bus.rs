//! Port-I/O dispatch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use crate::{ExitRequest, PioDevice};

/// Errors from the port-I/O bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A device range would overlap one already on the bus.
    #[error("port range {base:#x}+{len:#x} overlaps the device at {other_base:#x}+{other_len:#x}; give each device its own ports")]
    Overlap {
        /// Base of the rejected range.
        base: u16,
        /// Length of the rejected range.
        len: u16,
        /// Base of the device already there.
        other_base: u16,
        /// Length of the device already there.
        other_len: u16,
    },
    /// A range that is empty or runs past port 0xffff.
    #[error("port range {base:#x}+{len:#x} is empty or runs past port 0xffff")]
    BadRange {
        /// Base of the rejected range.
        base: u16,
        /// Length of the rejected range.
        len: u16,
    },
    /// No device claims the port (guests probe such ports routinely; the
    /// VMM usually ignores this).
    #[error("no device at port {port:#x}")]
    Unmapped {
        /// The accessed port.
        port: u16,
    },
    /// A device's lock was poisoned by a panic in another thread.
    #[error("device at port {base:#x} is unusable: a thread panicked while holding it")]
    Poisoned {
        /// Base of the device.
        base: u16,
    },
}

struct Entry {
    len: u16,
    dev: Arc<Mutex<dyn PioDevice>>,
}

/// Maps port ranges to devices.
///
/// Ranges are half-open `[base, base + len)` and never overlap, so a lookup
/// is one ordered-map probe.
#[derive(Default)]
pub struct PioBus {
    devices: BTreeMap<u16, Entry>,
}

impl std::fmt::Debug for PioBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.devices.iter().map(|(b, e)| (*b, e.len)))
            .finish()
    }
}

impl PioBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `dev` at ports `[base, base + len)`.
    pub fn insert(
        &mut self,
        base: u16,
        len: u16,
        dev: Arc<Mutex<dyn PioDevice>>,
    ) -> Result<(), Error> {
        let end = u32::from(base) + u32::from(len);
        if len == 0 || end > 0x1_0000 {
            return Err(Error::BadRange { base, len });
        }
        // The only candidates for overlap are the last range starting at or
        // before `base` and the first one starting after it.
        let before = self.devices.range(..=base).next_back();
        let after = self.devices.range(base..).next();
        for (&ob, e) in before.into_iter().chain(after) {
            let oend = u32::from(ob) + u32::from(e.len);
            if u32::from(base) < oend && u32::from(ob) < end {
                return Err(Error::Overlap {
                    base,
                    len,
                    other_base: ob,
                    other_len: e.len,
                });
            }
        }
        self.devices.insert(base, Entry { len, dev });
        Ok(())
    }

    fn lookup(&self, port: u16) -> Option<(u16, &Entry)> {
        let (&base, e) = self.devices.range(..=port).next_back()?;
        (u32::from(port) < u32::from(base) + u32::from(e.len)).then_some((base, e))
    }

    /// Dispatches a guest `in` (one access of `data.len()` bytes). Returns
    /// false (and fills `data` with 0xff, what an unclaimed ISA port reads
    /// as) when no device claims `port`.
    pub fn read(&self, port: u16, data: &mut [u8]) -> bool {
        self.read_string(port, data.len(), data)
    }

    /// Dispatches a guest `out`.
    pub fn write(&self, port: u16, data: &[u8]) -> Result<Option<ExitRequest>, Error> {
        self.write_string(port, data.len(), data)
    }

    /// Dispatches a port-I/O exit that may come from a string instruction:
    /// `data` holds `data.len() / size` elements of `size` bytes, and each
    /// element is one access to the device. `rep insb` with a count of N
    /// exits once with N bytes (KVM reads ahead); handing the device all N
    /// at once would be one N-byte-wide access, which a UART answers with
    /// one received byte and `0xff` for the rest. Returns false (and fills
    /// `data` with 0xff) when no device claims `port`.
    ///
    /// A `size` of 0 or one that does not divide `data.len()` (KVM never
    /// reports either) makes the whole of `data` one access.
    pub fn read_string(&self, port: u16, size: usize, data: &mut [u8]) -> bool {
        let size = element_size(size, data.len());
        match self.lookup(port) {
            Some((base, e)) => match e.dev.lock() {
                Ok(mut d) => {
                    data.chunks_mut(size)
                        .for_each(|el| d.read(base, port - base, el));
                    true
                }
                Err(_) => {
                    data.fill(0xff);
                    false
                }
            },
            None => {
                data.fill(0xff);
                false
            }
        }
    }

    /// The `out` counterpart of [`PioBus::read_string`]: one device write
    /// per `size`-byte element of `data`, in order. The first element that
    /// asks to end the VM ends the string (the VM is going away; the rest
    /// would only act on a dead machine).
    pub fn write_string(
        &self,
        port: u16,
        size: usize,
        data: &[u8],
    ) -> Result<Option<ExitRequest>, Error> {
        let size = element_size(size, data.len());
        let (base, e) = self.lookup(port).ok_or(Error::Unmapped { port })?;
        let mut d = e.dev.lock().map_err(|_| Error::Poisoned { base })?;
        for el in data.chunks(size) {
            if let Some(req) = d.write(base, port - base, el) {
                return Ok(Some(req));
            }
        }
        Ok(None)
    }
}

impl PioBus {
    /// Stops every device's own work ([`PioDevice::stop`]: fw_cfg's DMA
    /// worker) before the VMM unmaps guest memory. A device whose lock a
    /// thread still holds (a vCPU that did not stop) is retried until
    /// `timeout`, then left alone; returns how many were left.
    pub fn stop_devices(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut left = 0;
        for e in self.devices.values() {
            loop {
                match e.dev.try_lock() {
                    Ok(mut d) => d.stop(),
                    // The device's state may be half-updated, but stopping
                    // its worker is still what teardown needs.
                    Err(TryLockError::Poisoned(p)) => p.into_inner().stop(),
                    Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    Err(TryLockError::WouldBlock) => left += 1,
                }
                break;
            }
        }
        left
    }
}

/// The element size to split a `len`-byte port access into (see
/// [`PioBus::read_string`]).
fn element_size(size: usize, len: usize) -> usize {
    if size == 0 || !len.is_multiple_of(size) {
        len.max(1)
    } else {
        size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the last access so dispatch can be checked.
    #[derive(Default)]
    struct Probe {
        last: Option<(u16, u16, Vec<u8>)>,
        exit: Option<ExitRequest>,
    }
    impl PioDevice for Probe {
        fn read(&mut self, base: u16, offset: u16, data: &mut [u8]) {
            data.fill((base as u8).wrapping_add(offset as u8));
        }
        fn write(&mut self, base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
            self.last = Some((base, offset, data.to_vec()));
            self.exit
        }
    }

    fn probe() -> Arc<Mutex<Probe>> {
        Arc::new(Mutex::new(Probe::default()))
    }

    #[test]
    fn overlap_rejected_adjacent_allowed() {
        let mut bus = PioBus::new();
        bus.insert(0x3f8, 8, probe()).unwrap();
        // Adjacent on both sides is fine.
        bus.insert(0x3f0, 8, probe()).unwrap();
        bus.insert(0x400, 1, probe()).unwrap();
        for (b, l) in [
            (0x3f7, 2),
            (0x3ff, 1),
            (0x3fa, 1),
            (0x3e0, 0x40),
            (0x3f8, 8),
        ] {
            assert!(
                matches!(bus.insert(b, l, probe()), Err(Error::Overlap { .. })),
                "{b:#x}+{l}"
            );
        }
        assert_eq!(
            bus.insert(0x10, 0, probe()),
            Err(Error::BadRange { base: 0x10, len: 0 })
        );
        assert!(matches!(
            bus.insert(0xfffe, 3, probe()),
            Err(Error::BadRange { .. })
        ));
        bus.insert(0xfffe, 2, probe()).unwrap();
    }

    #[test]
    fn dispatch_by_base_and_offset() {
        let mut bus = PioBus::new();
        let a = probe();
        let b = probe();
        b.lock().unwrap().exit = Some(ExitRequest::Reset("test"));
        bus.insert(0x60, 1, a.clone()).unwrap();
        bus.insert(0x64, 1, a.clone()).unwrap();
        bus.insert(0x3f8, 8, b.clone()).unwrap();

        assert_eq!(bus.write(0x64, &[0xfe]), Ok(None));
        assert_eq!(a.lock().unwrap().last, Some((0x64, 0, vec![0xfe])));
        assert_eq!(
            bus.write(0x3fd, &[1, 2]),
            Ok(Some(ExitRequest::Reset("test")))
        );
        assert_eq!(b.lock().unwrap().last, Some((0x3f8, 5, vec![1, 2])));

        let mut d = [0u8; 2];
        assert!(bus.read(0x3ff, &mut d));
        assert_eq!(d, [0xf8u8.wrapping_add(7); 2]);

        // Holes between and after devices are unmapped.
        for port in [0x61, 0x63, 0x65, 0x3f7, 0x400, 0, 0xffff] {
            assert_eq!(bus.write(port, &[0]), Err(Error::Unmapped { port }));
            let mut d = [0u8; 4];
            assert!(!bus.read(port, &mut d));
            assert_eq!(d, [0xff; 4]);
        }
    }

    #[test]
    fn poisoned_device_is_an_error_not_a_panic() {
        let mut bus = PioBus::new();
        let a = probe();
        bus.insert(0x80, 1, a.clone()).unwrap();
        let _ = std::thread::spawn(move || {
            let _g = a.lock().unwrap();
            panic!("device thread dies");
        })
        .join();
        assert_eq!(bus.write(0x80, &[1]), Err(Error::Poisoned { base: 0x80 }));
        let mut d = [0u8; 1];
        assert!(!bus.read(0x80, &mut d));
    }

    /// `rep insb` from COM1's data register with 5 bytes queued: one exit
    /// of count 5 must read the receive buffer 5 times (5 real bytes), not
    /// once as a 5-byte access (1 byte, then 0xff, the rest left queued).
    #[test]
    fn string_in_reads_the_serial_fifo_element_by_element() {
        let mut bus = PioBus::new();
        let uart = Arc::new(Mutex::new(
            crate::SerialDevice::new(crate::SerialOutput::Sink).unwrap(),
        ));
        bus.insert(crate::COM1_BASE, crate::COM1_LEN, uart.clone())
            .unwrap();
        assert_eq!(uart.lock().unwrap().enqueue_input(b"hello!"), 6);
        let mut d = [0u8; 5];
        assert!(bus.read_string(crate::COM1_BASE, 1, &mut d));
        assert_eq!(&d, b"hello");
        // The sixth byte is still there for the next `in`, then the FIFO is
        // empty (line status DR clear).
        let mut b = [0u8];
        assert!(bus.read_string(crate::COM1_BASE, 1, &mut b));
        assert_eq!(&b, b"!");
        let mut lsr = [0u8];
        bus.read(crate::COM1_BASE + 5, &mut lsr);
        assert_eq!(lsr[0] & 1, 0, "receive buffer empty");
    }

    /// `rep insb` from the CMOS data port and the i8042 data port: every
    /// element is a real register read, not one real byte then zeros.
    #[test]
    fn string_in_repeats_register_reads() {
        let mut bus = PioBus::new();
        bus.insert(
            crate::CMOS_PORT,
            crate::CMOS_LEN,
            Arc::new(Mutex::new(crate::Cmos::new())),
        )
        .unwrap();
        let kbd = Arc::new(Mutex::new(crate::I8042Device::new()));
        bus.insert(crate::I8042_DATA_PORT, 1, kbd.clone()).unwrap();
        bus.insert(crate::I8042_COMMAND_PORT, 1, kbd).unwrap();
        // CMOS register 0x0b (status B: 24-hour mode, BCD) is constant.
        bus.write(crate::CMOS_PORT, &[0x0b]).unwrap();
        let mut one = [0u8];
        bus.read(crate::CMOS_PORT + 1, &mut one);
        assert_ne!(one[0], 0, "status B is not zero, so zeros would show");
        let mut d = [0u8; 16];
        assert!(bus.read_string(crate::CMOS_PORT + 1, 1, &mut d));
        assert_eq!(d, [one[0]; 16]);
        // Keyboard "get ID" queues ACK, 0xab, 0x83; two controller
        // self-tests sent with one `rep outsb` queue 0x55 twice.
        bus.write(crate::I8042_DATA_PORT, &[0xf2]).unwrap();
        bus.write_string(crate::I8042_COMMAND_PORT, 1, &[0xaa, 0xaa])
            .unwrap();
        let mut d = [0u8; 5];
        assert!(bus.read_string(crate::I8042_DATA_PORT, 1, &mut d));
        assert_eq!(d, [0xfa, 0xab, 0x83, 0x55, 0x55]);
    }

    /// `rep outsb` to COM1 sends every byte, and `rep outsw` (size 2)
    /// splits into 2-byte writes.
    #[test]
    fn string_out_writes_every_element() {
        use crate::test_util::Shared;
        let out = Shared::default();
        let mut bus = PioBus::new();
        let uart =
            crate::SerialDevice::new(crate::SerialOutput::Writer(Box::new(out.clone()))).unwrap();
        bus.insert(
            crate::COM1_BASE,
            crate::COM1_LEN,
            Arc::new(Mutex::new(uart)),
        )
        .unwrap();
        assert_eq!(
            bus.write_string(crate::COM1_BASE, 1, b"string I/O\n"),
            Ok(None)
        );
        assert_eq!(&out.0.lock().unwrap()[..], b"string I/O\n");

        /// Records every write it gets.
        #[derive(Default)]
        struct Log(Vec<Vec<u8>>);
        impl PioDevice for Log {
            fn read(&mut self, _: u16, _: u16, data: &mut [u8]) {
                data.fill(0);
            }
            fn write(&mut self, _: u16, _: u16, data: &[u8]) -> Option<ExitRequest> {
                self.0.push(data.to_vec());
                (data == [0xfe, 0xfe]).then_some(ExitRequest::Reset("test"))
            }
        }
        let log = Arc::new(Mutex::new(Log::default()));
        bus.insert(0x80, 2, log.clone()).unwrap();
        assert_eq!(bus.write_string(0x80, 2, &[1, 2, 3, 4, 5, 6]), Ok(None));
        assert_eq!(log.lock().unwrap().0, [vec![1, 2], vec![3, 4], vec![5, 6]]);
        // A request to end the VM ends the string; later elements are not
        // delivered.
        log.lock().unwrap().0.clear();
        assert_eq!(
            bus.write_string(0x80, 2, &[7, 7, 0xfe, 0xfe, 9, 9]),
            Ok(Some(ExitRequest::Reset("test")))
        );
        assert_eq!(log.lock().unwrap().0.len(), 2);
        // A size that does not divide the data is one access (never a
        // panic); so is size 0.
        log.lock().unwrap().0.clear();
        bus.write_string(0x80, 4, &[1, 2, 3]).unwrap();
        bus.write_string(0x80, 0, &[1, 2]).unwrap();
        assert_eq!(log.lock().unwrap().0, [vec![1, 2, 3], vec![1, 2]]);
        let mut d = [0u8; 3];
        assert!(bus.read_string(0x80, 0, &mut d));
        // Unmapped string I/O: 0xff for every element, an error for writes.
        let mut d = [0u8; 6];
        assert!(!bus.read_string(0x2000, 2, &mut d));
        assert_eq!(d, [0xff; 6]);
        assert_eq!(
            bus.write_string(0x2000, 1, &[1, 2]),
            Err(Error::Unmapped { port: 0x2000 })
        );
    }

    /// `stop_devices` calls every device's `stop` once per range, waits a
    /// bounded time for a lock another thread holds, and reports that
    /// device as left instead of blocking teardown.
    #[test]
    fn stop_devices_is_bounded_by_a_held_lock() {
        #[derive(Default)]
        struct Stoppable(u32);
        impl PioDevice for Stoppable {
            fn read(&mut self, _: u16, _: u16, data: &mut [u8]) {
                data.fill(0);
            }
            fn write(&mut self, _: u16, _: u16, _: &[u8]) -> Option<ExitRequest> {
                None
            }
            fn stop(&mut self) {
                self.0 += 1;
            }
        }
        let mut bus = PioBus::new();
        let a = Arc::new(Mutex::new(Stoppable::default()));
        let b = Arc::new(Mutex::new(Stoppable::default()));
        bus.insert(0x10, 1, a.clone()).unwrap();
        bus.insert(0x20, 1, a.clone()).unwrap();
        bus.insert(0x30, 1, b.clone()).unwrap();
        assert_eq!(bus.stop_devices(Duration::from_millis(100)), 0);
        assert_eq!((a.lock().unwrap().0, b.lock().unwrap().0), (2, 1));
        let held = b.lock().unwrap();
        let t0 = Instant::now();
        assert_eq!(bus.stop_devices(Duration::from_millis(100)), 1);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_secs(2),
            "{took:?}"
        );
        drop(held);
        assert_eq!(a.lock().unwrap().0, 4);
    }
}
