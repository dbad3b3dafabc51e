//! Boot-timer marker ids: guests `outl(TIMER_MAGIC | id, TIMER_PORT)`, the
//! VMM timestamps each one. Shared so guest and VMM agree on names.

use core::fmt;

use crate::TIMER_MAGIC;

/// The kernel's first instruction ran.
pub const KERNEL_STARTED: u16 = 1;
/// `/init` (or PID 1) started.
pub const INIT_STARTED: u16 = 2;
/// The boot test finished: the VMM may stop the VM.
pub const TEST_DONE: u16 = 3;
/// First custom id; `CUSTOM_FIRST..=0xffff` are reported as `custom_<hex>`.
pub const CUSTOM_FIRST: u16 = 0x100;

/// The fixed name of `id` (`"kernel_started"` …); `None` for custom and
/// unassigned ids.
pub fn name(id: u16) -> Option<&'static str> {
    match id {
        KERNEL_STARTED => Some("kernel_started"),
        INIT_STARTED => Some("init_started"),
        TEST_DONE => Some("test_done"),
        _ => None,
    }
}

/// Whether `id` is a marker (fixed or custom). Ids 0 and 4..0x100 are
/// unassigned; the VMM ignores and counts them.
pub fn is_valid(id: u16) -> bool {
    name(id).is_some() || id >= CUSTOM_FIRST
}

/// The `outl` value that reports `id`.
pub const fn port_value(id: u16) -> u32 {
    TIMER_MAGIC | id as u32
}

/// The marker id carried by a 32-bit value written to the timer port, or
/// `None` if the value is not a marker (wrong magic or unassigned id).
pub fn from_port_value(value: u32) -> Option<u16> {
    if value & 0xffff_0000 != TIMER_MAGIC {
        return None;
    }
    let id = (value & 0xffff) as u16;
    is_valid(id).then_some(id)
}

/// The printable name of a marker: the fixed name, or `custom_<id hex>`
/// (lower-case hex, no padding, e.g. `custom_1a0`). `None` for an
/// unassigned id.
pub fn label(id: u16) -> Option<Label> {
    is_valid(id).then_some(Label(id))
}

/// Formats a valid marker id as its name (see [`label`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label(u16);

impl Label {
    /// The marker id.
    pub fn id(&self) -> u16 {
        self.0
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match name(self.0) {
            Some(n) => f.write_str(n),
            None => write!(f, "custom_{:x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate alloc;
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn names_and_values() {
        assert_eq!(name(KERNEL_STARTED), Some("kernel_started"));
        assert_eq!(name(INIT_STARTED), Some("init_started"));
        assert_eq!(name(TEST_DONE), Some("test_done"));
        assert_eq!(name(0x100), None);
        assert_eq!(label(1).unwrap().to_string(), "kernel_started");
        assert_eq!(label(0x1a0).unwrap().to_string(), "custom_1a0");
        assert_eq!(label(0xffff).unwrap().to_string(), "custom_ffff");
        assert!(label(0).is_none());
        assert!(label(4).is_none());
        assert!(label(0xff).is_none());
        assert_eq!(port_value(TEST_DONE), 0x5a53_0003);
        assert_eq!(from_port_value(0x5a53_0001), Some(1));
        assert_eq!(from_port_value(0x5a53_0100), Some(0x100));
        assert_eq!(from_port_value(0x5a53_0000), None);
        assert_eq!(from_port_value(0x5a53_0050), None);
        assert_eq!(from_port_value(0x5a54_0001), None);
        assert_eq!(from_port_value(1), None);
    }
}
