//! Bochs/QEMU debug console at port 0x402 (`--debugcon PATH`): EDK2's
//! DEBUG builds (OVMF, CloudHv `PlatformDebugLibIoPort`) print their log
//! there, byte by byte, after checking that reading the port returns 0xE9.
//! Without the device the firmware's log is silently dropped.

use std::io::Write;

use crate::{ExitRequest, PioDevice};

/// The port EDK2's `PcdDebugIoPort` defaults to.
pub const DEBUGCON_PORT: u16 = 0x402;
/// What a present debug console reads as.
const PRESENT: u8 = 0xe9;

/// Appends every byte written to the port to `out`; output errors are
/// counted, never fatal to the guest.
pub struct Debugcon {
    out: Box<dyn Write + Send>,
    errors: u64,
}

impl Debugcon {
    /// A console writing to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Debugcon { out, errors: 0 }
    }
}

impl PioDevice for Debugcon {
    fn read(&mut self, _base: u16, _offset: u16, data: &mut [u8]) {
        data.fill(PRESENT);
    }

    fn write(&mut self, _base: u16, _offset: u16, data: &[u8]) -> Option<ExitRequest> {
        // Unbuffered: the log must survive a VM that is killed.
        if self
            .out
            .write_all(data)
            .and_then(|_| self.out.flush())
            .is_err()
        {
            self.errors += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_util::Shared;

    #[test]
    fn detect_and_log() {
        let s = Shared::default();
        let mut d = Debugcon::new(Box::new(s.clone()));
        let mut b = [0u8];
        d.read(DEBUGCON_PORT, 0, &mut b);
        assert_eq!(b, [0xe9]);
        for c in b"PEI\n" {
            assert_eq!(d.write(DEBUGCON_PORT, 0, &[*c]), None);
        }
        assert_eq!(&s.0.lock().unwrap()[..], b"PEI\n");
    }
}
