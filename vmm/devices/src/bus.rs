//! Port-I/O dispatch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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

    /// Dispatches a guest `in`. Returns false (and fills `data` with 0xff,
    /// what an unclaimed ISA port reads as) when no device claims `port`.
    pub fn read(&self, port: u16, data: &mut [u8]) -> bool {
        match self.lookup(port) {
            Some((base, e)) => match e.dev.lock() {
                Ok(mut d) => {
                    d.read(base, port - base, data);
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

    /// Dispatches a guest `out`.
    pub fn write(&self, port: u16, data: &[u8]) -> Result<Option<ExitRequest>, Error> {
        let (base, e) = self.lookup(port).ok_or(Error::Unmapped { port })?;
        let mut d = e.dev.lock().map_err(|_| Error::Poisoned { base })?;
        Ok(d.write(base, port - base, data))
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
        b.lock().unwrap().exit = Some(ExitRequest::Reset);
        bus.insert(0x60, 1, a.clone()).unwrap();
        bus.insert(0x64, 1, a.clone()).unwrap();
        bus.insert(0x3f8, 8, b.clone()).unwrap();

        assert_eq!(bus.write(0x64, &[0xfe]), Ok(None));
        assert_eq!(a.lock().unwrap().last, Some((0x64, 0, vec![0xfe])));
        assert_eq!(bus.write(0x3fd, &[1, 2]), Ok(Some(ExitRequest::Reset)));
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
}
