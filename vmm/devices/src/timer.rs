//! The zerostart boot-timer port: guests `outl` milestones to it and the VMM
//! timestamps them at the vCPU exit (see `docs/hint-abi.md`).

use std::time::Instant;

use crate::{ExitRequest, PioDevice};

pub use boottimer::{TIMER_MAGIC, TIMER_PORT};

/// One boot milestone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The low 16 bits of the value the guest wrote.
    pub id: u16,
    /// `kernel_started`, `init_started`, `test_done` or `custom_<id hex>`
    /// (names from `boottimer::marker`, shared with the guest side).
    pub name: String,
    /// When the vCPU exit for the write was handled (CLOCK_MONOTONIC).
    pub at: Instant,
}

/// Records boot markers written to [`TIMER_PORT`].
#[derive(Debug, Default)]
pub struct BootTimer {
    markers: Vec<Marker>,
    ignored: u64,
}

/// Markers kept at most; a guest looping on the port must not grow the VMM
/// without bound.
const MAX_MARKERS: usize = 4096;

impl BootTimer {
    /// A timer with no markers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one write; `at` is the exit time.
    pub fn record(&mut self, offset: u16, data: &[u8], at: Instant) {
        let value = match (offset, <[u8; 4]>::try_from(data)) {
            (0, Ok(b)) => u32::from_le_bytes(b),
            _ => {
                self.ignored += 1;
                return;
            }
        };
        match boottimer::marker::from_port_value(value).and_then(boottimer::marker::label) {
            Some(label) if self.markers.len() < MAX_MARKERS => self.markers.push(Marker {
                id: value as u16,
                name: label.to_string(),
                at,
            }),
            _ => self.ignored += 1,
        }
    }

    /// A copy of the markers so far, in the order written.
    pub fn markers(&self) -> Vec<Marker> {
        self.markers.clone()
    }

    /// Writes that were not valid markers (wrong width, offset, magic or a
    /// reserved id).
    pub fn ignored(&self) -> u64 {
        self.ignored
    }
}

impl PioDevice for BootTimer {
    fn read(&mut self, _base: u16, _offset: u16, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&mut self, _base: u16, offset: u16, data: &[u8]) -> Option<ExitRequest> {
        self.record(offset, data, Instant::now());
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(t: &mut BootTimer, v: u32) {
        t.write(TIMER_PORT, 0, &v.to_le_bytes());
    }

    #[test]
    fn decodes_markers_in_order() {
        let mut t = BootTimer::new();
        let before = Instant::now();
        out(&mut t, 0x5a53_0001);
        out(&mut t, 0x5a53_0002);
        out(&mut t, 0x5a53_0003);
        out(&mut t, 0x5a53_0100);
        out(&mut t, 0x5a53_ffff);
        let m = t.markers();
        let names: Vec<_> = m.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kernel_started",
                "init_started",
                "test_done",
                "custom_100",
                "custom_ffff"
            ]
        );
        assert_eq!(m[3].id, 0x100);
        assert!(m[0].at >= before && m.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(t.ignored(), 0);
    }

    #[test]
    fn bad_values_are_counted_not_recorded() {
        let mut t = BootTimer::new();
        out(&mut t, 0x5a53_0000); // reserved id 0
        out(&mut t, 0x5a53_0004); // reserved
        out(&mut t, 0x5a53_00ff); // reserved
        out(&mut t, 0x5a54_0001); // wrong magic
        out(&mut t, 0x0000_0001);
        t.write(TIMER_PORT, 0, &[1]); // outb
        t.write(TIMER_PORT, 0, &[1, 0]); // outw
        t.write(TIMER_PORT, 0, &[]);
        t.write(TIMER_PORT, 1, &0x5a53_0001u32.to_le_bytes()); // wrong offset
        assert!(t.markers().is_empty());
        assert_eq!(t.ignored(), 9);
        let mut r = [0xffu8; 4];
        t.read(TIMER_PORT, 0, &mut r);
        assert_eq!(r, [0; 4]);
    }

    #[test]
    fn marker_storage_is_bounded() {
        let mut t = BootTimer::new();
        for _ in 0..MAX_MARKERS + 10 {
            out(&mut t, 0x5a53_0001);
        }
        assert_eq!(t.markers().len(), MAX_MARKERS);
        assert_eq!(t.ignored(), 10);
    }
}
