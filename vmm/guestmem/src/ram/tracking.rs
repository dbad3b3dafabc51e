//! Recording what the VMM writes into guest RAM: explicit marks, tracked
//! writes, and vm-memory's dirty bitmap for writes nobody marked.

use std::sync::MutexGuard;

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion, MmapRegion};
use zerohint::PAGE_SIZE;

use super::GuestRam;
use crate::track::Tracker;
use crate::Error;

impl GuestRam {
    pub(super) fn tracker(&self) -> MutexGuard<'_, Tracker> {
        // A panic while holding the lock leaves the data consistent (every
        // mutation is a single push or assignment).
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the VMM wrote (or will write) `[addr, addr + len)`: the
    /// kernel, initramfs, boot_params, command line, setup_data including
    /// the hint blob, page tables, GDT, MP/ACPI tables, firmware. After
    /// [`GuestRam::finalize_hint`], a range touching a hinted page is an
    /// error.
    pub fn mark_written(&mut self, addr: GuestAddress, len: u64) -> Result<(), Error> {
        self.tracker().mark(addr.0, len)
    }

    /// Writes `data` at `addr` and records it (record first, so a failed
    /// partial write is still excluded).
    pub fn write_tracked(&mut self, data: &[u8], addr: GuestAddress) -> Result<(), Error> {
        let len = data.len() as u64;
        self.tracker().mark(addr.0, len)?;
        self.memory
            .write_slice(data, addr)
            .map_err(|source| Error::GuestWrite {
                addr: addr.0,
                len,
                source,
            })
    }

    /// Writes `data` at `addr` behind every tracker's back (no mark, no
    /// dirty bit, allowed after finalize). Exists only so the VMM's
    /// `--test-corrupt-hint` self-test can plant a byte the hint wrongly
    /// claims zero and show that guest-side verification catches it; never
    /// use it for real boot data.
    pub fn write_untracked_for_selftest(
        &self,
        data: &[u8],
        addr: GuestAddress,
    ) -> Result<(), Error> {
        let len = data.len() as u64;
        let err = |source| Error::GuestWrite {
            addr: addr.0,
            len,
            source,
        };
        let r = self
            .memory
            .find_region(addr)
            .ok_or(vm_memory::GuestMemoryError::InvalidGuestAddress(addr))
            .map_err(err)?;
        let off = addr.0 - r.start_addr().0;
        if off.checked_add(len).is_none_or(|e| e > r.len()) {
            return Err(err(vm_memory::GuestMemoryError::InvalidGuestAddress(addr)));
        }
        // SAFETY: bounds checked against the region's live mapping above.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), r.as_ptr().add(off as usize), data.len())
        };
        Ok(())
    }

    /// Pages written through vm-memory's API, from the dirty bitmaps, as
    /// guest-physical `(start, len)` runs.
    pub(super) fn dirty_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for r in self.memory.iter() {
            let base = r.start_addr().0;
            // A snapshot of the words; the original keeps its bits.
            let words = MmapRegion::bitmap(r).clone().get_and_reset();
            for (wi, mut w) in words.into_iter().enumerate() {
                while w != 0 {
                    let bit = w.trailing_zeros() as u64;
                    w &= w - 1;
                    let gpa = base + (wi as u64 * 64 + bit) * PAGE_SIZE;
                    match out.last_mut() {
                        Some(last) if last.0 + last.1 == gpa => last.1 += PAGE_SIZE,
                        _ => out.push((gpa, PAGE_SIZE)),
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use vm_memory::{Bytes, GuestAddress};

    use super::super::test_support::*;
    use crate::Error;

    #[test]
    fn tracked_writes_are_excluded_and_data_lands() {
        let mut r = ram(|_| {});
        r.write_tracked(b"kernel", GuestAddress(0x100000)).unwrap();
        r.write_tracked(&[1; 10], GuestAddress(64 * M + 4095))
            .unwrap();
        r.mark_written(GuestAddress(0x7000), 1).unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        for a in [0x100000, 0x100fff, 64 * M, 64 * M + 8191, 0x7000] {
            assert!(!covered(&h, a), "{a:#x}");
        }
        assert!(covered(&h, 0x101000) && covered(&h, 64 * M + 8192));
        r.verify_zero(&h).unwrap();
        let mut b = [0u8; 6];
        r.memory()
            .read_slice(&mut b, GuestAddress(0x100000))
            .unwrap();
        assert_eq!(&b, b"kernel");
        // Outside RAM: an error, and nothing leaks.
        assert!(matches!(
            r.write_tracked(b"x", GuestAddress(40 * M)),
            Err(Error::GuestWrite { .. })
        ));
    }

    #[test]
    fn forgotten_mark_is_caught_by_the_dirty_bitmap() {
        let r = ram(|_| {});
        // A loader writing straight through vm-memory, never calling mark.
        r.memory()
            .write_slice(&[0xaa; 3], GuestAddress(5 * M + 4094))
            .unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        assert!(!covered(&h, 5 * M + 4094) && !covered(&h, 5 * M + 4096));
        assert_eq!(h.total_bytes(), 32 * M - 2 * 4096);
        assert_eq!(r.verify_zero(&h).unwrap(), h.total_bytes());
    }

    #[test]
    fn loader_style_reads_into_guest_memory_are_caught_too() {
        // linux-loader copies the kernel file with read_exact_volatile_from.
        let r = ram(|_| {});
        let image = vec![0x90u8; 3 * 4096 + 10];
        r.memory()
            .read_exact_volatile_from(GuestAddress(2 * M), &mut &image[..], image.len())
            .unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        for a in [2 * M, 2 * M + 3 * 4096 + 9] {
            assert!(!covered(&h, a), "{a:#x}");
        }
        assert!(covered(&h, 2 * M + 4 * 4096) && covered(&h, 2 * M - 1));
        r.verify_zero(&h).unwrap();
    }

    #[test]
    fn selftest_corruption_bypasses_tracking_and_verify_catches_it() {
        let mut r = ram(|_| {});
        let h = r.zero_hint().unwrap().unwrap();
        r.write_untracked_for_selftest(&[0xa5], GuestAddress(9 * M + 123))
            .unwrap();
        // Invisible to the tracker (that is the point of the self-test)...
        assert_eq!(r.finalize_hint().unwrap(), Some(h.clone()));
        // ...but not to verification.
        assert!(
            matches!(r.verify_zero(&h), Err(Error::NotZero { gpa, value: 0xa5 }) if gpa == 9 * M + 123)
        );
        assert!(r
            .write_untracked_for_selftest(&[1, 2], GuestAddress(24 * M - 1))
            .is_err());
    }
}
