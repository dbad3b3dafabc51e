//! Memory the VMM or the probe wrote before the scan, which no zero range
//! may touch: the VMM must exclude what it wrote (hint ABI, "Producers must
//! exclude …") and the probe's own image, bss and stack lie inside the
//! `init_size` window a boot loader must leave to the kernel.

use core::fmt;

/// What a written area holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The probe's loaded image plus bss and stack (`init_size`).
    Probe,
    /// The `boot_params` page.
    BootParams,
    /// The command line, NUL included.
    Cmdline,
    /// A `setup_data` node, header included (the hint's own node too).
    SetupData,
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Written::Probe => "probe_image",
            Written::BootParams => "boot_params",
            Written::Cmdline => "cmdline",
            Written::SetupData => "setup_data",
        })
    }
}

/// One written area, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    /// What it is.
    pub what: Written,
    /// First byte.
    pub start: u64,
    /// Exclusive end.
    pub end: u64,
}

/// Most written areas tracked: probe, boot_params, cmdline and up to 64
/// `setup_data` nodes.
pub const MAX_AREAS: usize = 3 + crate::setup_data::MAX_NODES;

/// A fixed-capacity list of written areas (the probe has no heap).
#[derive(Debug, Clone)]
pub struct Areas {
    areas: [Area; MAX_AREAS],
    len: usize,
}

impl Default for Areas {
    fn default() -> Self {
        Areas {
            areas: [Area {
                what: Written::Probe,
                start: 0,
                end: 0,
            }; MAX_AREAS],
            len: 0,
        }
    }
}

impl Areas {
    /// Adds `[start, start+len)`, saturating at 2^64 - 1. Returns false when
    /// full (callers bound the node count first, so this does not happen).
    pub fn push(&mut self, what: Written, start: u64, len: u64) -> bool {
        if self.len == MAX_AREAS {
            return false;
        }
        self.areas[self.len] = Area {
            what,
            start,
            end: start.saturating_add(len),
        };
        self.len += 1;
        true
    }

    /// The areas added so far.
    pub fn as_slice(&self) -> &[Area] {
        &self.areas[..self.len]
    }

    /// The first area `[start, end)` overlaps.
    pub fn overlapping(&self, start: u64, end: u64) -> Option<Area> {
        self.as_slice()
            .iter()
            .copied()
            .find(|a| a.start < end && start < a.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_half_open() {
        let mut a = Areas::default();
        assert!(a.push(Written::BootParams, 0x7000, 0x1000));
        assert!(a.push(Written::Cmdline, 0x20000, 10));
        assert_eq!(a.overlapping(0x6000, 0x7000), None, "adjacent below");
        assert_eq!(a.overlapping(0x8000, 0x9000), None, "adjacent above");
        assert_eq!(
            a.overlapping(0x7fff, 0x8000).unwrap().what,
            Written::BootParams
        );
        assert_eq!(
            a.overlapping(0x1000, 0x10_0000).unwrap().what,
            Written::BootParams
        );
        assert_eq!(
            a.overlapping(0x20009, 0x2000a).unwrap().what,
            Written::Cmdline
        );
        assert_eq!(a.overlapping(0x2000a, 0x3000a), None);
    }

    #[test]
    fn capacity_is_bounded() {
        let mut a = Areas::default();
        for i in 0..MAX_AREAS {
            assert!(a.push(Written::SetupData, i as u64 * 0x100, 0x10));
        }
        assert!(!a.push(Written::SetupData, 0, 1));
        assert_eq!(a.as_slice().len(), MAX_AREAS);
    }
}
