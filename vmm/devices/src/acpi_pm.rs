//! The ACPI sleep control / reset register at `arch::acpi::PM_PORT`: the
//! guest's `poweroff` (S5) and ACPI reset end the VM.

use crate::{ExitRequest, PioDevice};
use arch::acpi::{POWEROFF_VALUE, RESET_VALUE};

/// The hardware-reduced ACPI power-management register.
#[derive(Debug, Default)]
pub struct AcpiPm;

impl PioDevice for AcpiPm {
    fn read(&mut self, _base: u16, _offset: u16, data: &mut [u8]) {
        // Sleep status: never "woken".
        data.fill(0);
    }

    fn write(&mut self, _base: u16, _offset: u16, data: &[u8]) -> Option<ExitRequest> {
        match data.first().copied() {
            Some(POWEROFF_VALUE) => Some(ExitRequest::Poweroff),
            Some(RESET_VALUE) => Some(ExitRequest::Reset("acpi reset")),
            // Other sleep states (S1..S4) are not supported and clearing
            // WAK_STS (0x80) needs nothing: ignore them.
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arch::acpi::SLP_EN;

    #[test]
    fn s5_powers_off_and_reset_resets() {
        let mut d = AcpiPm;
        assert_eq!(d.write(0x600, 0, &[0x34]), Some(ExitRequest::Poweroff));
        assert_eq!(
            d.write(0x600, 0, &[1]),
            Some(ExitRequest::Reset("acpi reset"))
        );
        assert_eq!(d.write(0x600, 0, &[0x80]), None);
        assert_eq!(d.write(0x600, 0, &[(3 << 2) | SLP_EN]), None);
        let mut b = [0xff];
        d.read(0x600, 0, &mut b);
        assert_eq!(b, [0]);
    }
}
