//! The zero hint: all RAM minus what the VMM wrote, frozen before the
//! first `KVM_RUN`, and re-read byte by byte on request.

use zerohint::{Hint, PAGE_SIZE};

use super::GuestRam;
use crate::prefault::{self, Span};
use crate::{Backing, Error, Prezero};

/// The hint's (informational) page shift: the backing's, except that THP
/// switched off host-wide (`enabled` = `[never]`) means 4 KiB pages whatever
/// `MADV_HUGEPAGE` asked for.
pub(super) fn hint_page_shift(b: &Backing) -> u8 {
    if let Backing::Anonymous { thp: true } = b {
        let en = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !en.contains("[always]") && !en.contains("[madvise]") {
            return 12;
        }
    }
    b.page_shift()
}

impl GuestRam {
    /// The zero hint for the guest: all RAM minus every written page
    /// (rounded outward to 4 KiB), with the backing's page shift; `None`
    /// when `prezero=off`. Mark the hint blob's own location written before
    /// calling this, then write the blob; [`GuestRam::finalize_hint`]
    /// checks that this hint is still true. After the freeze it returns the
    /// frozen hint, or [`Error::HintInvalidated`] once a write through
    /// [`GuestRam::memory`] has touched it.
    pub fn zero_hint(&self) -> Result<Option<Hint>, Error> {
        if self.cfg.prezero == Prezero::Off {
            return Ok(None);
        }
        let dirty = self.dirty_ranges();
        self.tracker().issue(&dirty).map(Some)
    }

    /// Call right before the first `KVM_RUN`: checks that nothing was written
    /// into the last hint handed out since [`GuestRam::zero_hint`] built it
    /// (else [`Error::HintInvalidated`]), then freezes it. From now on
    /// tracked writes into hinted pages fail. Returns the final hint (`None`
    /// for `prezero=off`). May be called again (e.g. right before the first
    /// `KVM_RUN` after an earlier freeze): it returns the same hint, or
    /// [`Error::HintInvalidated`] if a write through [`GuestRam::memory`]
    /// has touched a hinted page since.
    pub fn finalize_hint(&mut self) -> Result<Option<Hint>, Error> {
        if self.cfg.prezero == Prezero::Off {
            return Ok(None);
        }
        let dirty = self.dirty_ranges();
        self.tracker().finalize(&dirty).map(Some)
    }

    /// Whether [`GuestRam::finalize_hint`] has run.
    pub fn is_finalized(&self) -> bool {
        self.tracker().is_frozen()
    }

    /// Reads every byte `hint` claims zero, in parallel on the configured
    /// threads; errors with the lowest non-zero guest-physical address, or if
    /// a range is not RAM. Returns the bytes checked. Call it while no vCPU
    /// runs.
    pub fn verify_zero(&self, hint: &Hint) -> Result<u64, Error> {
        let regions = self.spans();
        let mut spans = Vec::new();
        for e in &hint.entries {
            let mut covered = 0u64;
            for r in &regions {
                let s = e.start.max(r.gpa);
                let end = e.end().min(r.gpa + r.len as u64);
                if s < end {
                    spans.push(Span {
                        gpa: s,
                        host: r.host + (s - r.gpa) as usize,
                        len: (end - s) as usize,
                    });
                    covered += end - s;
                }
            }
            if covered != e.length || e.start % PAGE_SIZE != 0 || e.length % PAGE_SIZE != 0 {
                return Err(Error::HintOutOfRam {
                    start: e.start,
                    len: e.length,
                });
            }
        }
        // SAFETY: spans are 4K-aligned pieces of our live mappings; the
        // caller runs this while no vCPU writes guest memory.
        unsafe { crate::verify::verify_spans(&spans, prefault::worker_count(self.cfg.threads)) }
    }
}

#[cfg(test)]
mod tests {
    use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

    use super::super::test_support::*;
    use super::*;
    use crate::{Backing, Error, MemoryConfig, PrefaultMethod, PrepMethod, Prezero};

    #[test]
    fn fresh_ram_is_all_hinted_and_verifies() {
        type Set = fn(&mut MemoryConfig);
        for (opts, set) in [
            (
                "thp=off",
                (|c| c.backing = Backing::Anonymous { thp: false }) as Set,
            ),
            ("thp=on", |c| c.backing = Backing::Anonymous { thp: true }),
            ("prefault=on,prefault_method=populate", |c| {
                c.prefault = true;
                c.prefault_method = PrefaultMethod::Populate;
            }),
            ("prefault=on,prefault_method=nt,thp=off", |c| {
                c.prefault = true;
                c.prefault_method = PrefaultMethod::Nt;
                c.backing = Backing::Anonymous { thp: false };
            }),
        ] {
            let r = ram(set);
            let h = r.zero_hint().unwrap().unwrap();
            assert_eq!(h.total_bytes(), 32 * M, "{opts}");
            assert_eq!(r.verify_zero(&h).unwrap(), 32 * M, "{opts}");
        }
    }

    #[test]
    fn page_shift_follows_backing_and_host_thp() {
        let shift = |thp: bool| {
            ram(|c| c.backing = Backing::Anonymous { thp })
                .zero_hint()
                .unwrap()
                .unwrap()
                .entries[0]
                .page_shift
        };
        assert_eq!(shift(false), 12);
        let en = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        let thp_on = en.contains("[always]") || en.contains("[madvise]");
        assert_eq!(shift(true), if thp_on { 21 } else { 12 });
    }

    #[test]
    fn prezero_off_gives_no_hint() {
        let mut r = ram(|c| {
            c.prezero = Prezero::Off;
            c.prefault = true;
        });
        assert_eq!(r.zero_hint().unwrap(), None);
        assert_eq!(r.finalize_hint().unwrap(), None);
        assert_eq!(r.config().prezero, Prezero::Off);
        assert_eq!(r.prefault_stats().method, PrepMethod::PopulateWrite);
    }

    #[test]
    fn write_after_issue_fails_finalize_and_after_finalize_is_refused() {
        let mut r = ram(|_| {});
        let blob = GuestAddress(0x30000);
        r.mark_written(blob, 4096).unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        r.write_tracked(&h.encode().unwrap(), blob).unwrap();
        // A sneaky untracked write after the hint was built.
        r.memory()
            .write_slice(&[1], GuestAddress(0x200000))
            .unwrap();
        assert!(matches!(
            r.finalize_hint(),
            Err(Error::HintInvalidated { page: 0x200000 })
        ));
        // Rebuild and rewrite the blob: now it finalizes.
        let h = r.zero_hint().unwrap().unwrap();
        r.write_tracked(&h.encode().unwrap(), blob).unwrap();
        assert_eq!(r.finalize_hint().unwrap(), Some(h.clone()));
        assert!(r.is_finalized());
        r.verify_zero(&h).unwrap();
        // Into the blob page: allowed. Into hinted memory: refused, and
        // the memory is not written.
        r.write_tracked(&[2], blob).unwrap();
        assert!(matches!(
            r.write_tracked(&[3], GuestAddress(0x400000)),
            Err(Error::WriteAfterFinalize { page: 0x400000, .. })
        ));
        assert!(r.mark_written(GuestAddress(0x400000), 1).is_err());
        r.verify_zero(&h).unwrap();
    }

    #[test]
    fn verify_finds_single_byte_at_start_middle_and_end() {
        for gpa in [0, 12 * M + 777, 24 * M - 1, 64 * M, 72 * M - 1] {
            let r = ram(|_| {});
            let h = r.zero_hint().unwrap().unwrap();
            // Poke through the host mapping, bypassing all tracking, as a
            // stale page from another tenant would look.
            let host = r.memory().get_host_address(GuestAddress(gpa)).unwrap();
            // SAFETY: inside our own mapping; no vCPU runs.
            unsafe { host.write_volatile(0x5a) };
            match r.verify_zero(&h) {
                Err(Error::NotZero {
                    gpa: g,
                    value: 0x5a,
                }) => assert_eq!(g, gpa),
                other => panic!("{gpa:#x}: {other:?}"),
            }
        }
    }

    #[test]
    fn verify_reports_lowest_of_several() {
        let r = ram(|c| c.threads = 2);
        let h = r.zero_hint().unwrap().unwrap();
        for gpa in [70 * M, 3 * M + 5, 20 * M] {
            let host = r.memory().get_host_address(GuestAddress(gpa)).unwrap();
            // SAFETY: inside our own mapping.
            unsafe { host.write_volatile(1) };
        }
        assert!(matches!(r.verify_zero(&h), Err(Error::NotZero { gpa, .. }) if gpa == 3 * M + 5));
    }

    #[test]
    fn verify_rejects_hint_outside_ram() {
        let r = ram(|_| {});
        let h = Hint::zeroed_from_ranges(&[(24 * M, 4096)], 12).unwrap();
        assert!(matches!(r.verify_zero(&h), Err(Error::HintOutOfRam { .. })));
        let h = Hint::zeroed_from_ranges(&[(60 * M, 8 * M)], 12).unwrap();
        assert!(matches!(r.verify_zero(&h), Err(Error::HintOutOfRam { .. })));
    }
}
