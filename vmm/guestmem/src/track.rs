//! Written-range bookkeeping: the part of guest RAM the hint may claim zero
//! is RAM minus everything written, and once frozen it must stay that way.
//!
//! Kept free of any memory so the rules can be tested exhaustively.

use zerohint::{Hint, MAX_ENTRIES, PAGE_SIZE};

use crate::Error;

/// `[start, start + len)` rounded outward to 4 KiB pages, as a u128 span
/// (the end may be 2^64).
fn pages(start: u64, len: u64) -> (u128, u128) {
    let s = u128::from(start & !(PAGE_SIZE - 1));
    let e = (u128::from(start) + u128::from(len)).div_ceil(u128::from(PAGE_SIZE))
        * u128::from(PAGE_SIZE);
    (s, e)
}

/// First hinted page that `[start, start + len)` (rounded outward) touches.
pub(crate) fn first_overlap(hint: &Hint, start: u64, len: u64) -> Option<u64> {
    if len == 0 {
        return None;
    }
    let (s, e) = pages(start, len);
    hint.entries.iter().find_map(|en| {
        let (es, ee) = (u128::from(en.start), u128::from(en.end()));
        (es < e && s < ee).then(|| s.max(es) as u64)
    })
}

/// Where the hint is in its life.
#[derive(Debug)]
pub(crate) struct Tracker {
    /// Guest RAM `(gpa, len)`.
    ram: Vec<(u64, u64)>,
    page_shift: u8,
    /// Every explicitly marked write, as given.
    written: Vec<(u64, u64)>,
    /// The last hint handed out (what the VMM put in guest memory).
    issued: Option<Hint>,
    /// Set by `finalize`: the hint the guest sees; writes into it are
    /// refused from then on.
    frozen: Option<Hint>,
}

impl Tracker {
    pub(crate) fn new(ram: Vec<(u64, u64)>, page_shift: u8) -> Self {
        Tracker {
            ram,
            page_shift,
            written: Vec::new(),
            issued: None,
            frozen: None,
        }
    }

    /// Records a write; after `finalize` refuses writes into hinted pages.
    pub(crate) fn mark(&mut self, start: u64, len: u64) -> Result<(), Error> {
        self.check_write(start, len)?;
        if len > 0 {
            self.written.push((start, len));
        }
        Ok(())
    }

    /// Whether a write may happen now (does not record it).
    pub(crate) fn check_write(&self, start: u64, len: u64) -> Result<(), Error> {
        if let Some(page) = self
            .frozen
            .as_ref()
            .and_then(|h| first_overlap(h, start, len))
        {
            return Err(Error::WriteAfterFinalize {
                addr: start,
                len,
                page,
            });
        }
        Ok(())
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen.is_some()
    }

    /// RAM minus explicit writes minus `dirty` (pages vm-memory saw written),
    /// trimmed to the ABI's entry limit by dropping the smallest ranges.
    pub(crate) fn compute(&self, dirty: &[(u64, u64)]) -> Result<Hint, Error> {
        let mut h = Hint::zeroed_from_ranges(&self.ram, self.page_shift)?;
        for &(s, l) in self.written.iter().chain(dirty) {
            h.subtract(s, l);
        }
        h.keep_largest(MAX_ENTRIES);
        Ok(h)
    }

    /// The hint to give the guest now; remembered so `finalize` can check it
    /// is still true. After `finalize`, the frozen hint, if still true.
    pub(crate) fn issue(&mut self, dirty: &[(u64, u64)]) -> Result<Hint, Error> {
        if let Some(f) = &self.frozen {
            return Self::still_true(f, dirty);
        }
        let h = self.compute(dirty)?;
        self.issued = Some(h.clone());
        Ok(h)
    }

    /// `frozen`, unless a page in `dirty` lies in it.
    fn still_true(frozen: &Hint, dirty: &[(u64, u64)]) -> Result<Hint, Error> {
        match dirty.iter().find_map(|&(s, l)| first_overlap(frozen, s, l)) {
            Some(page) => Err(Error::HintInvalidated { page }),
            None => Ok(frozen.clone()),
        }
    }

    /// Freezes the hint: the one last issued, after checking nothing written
    /// since (explicitly or per `dirty`) lies in it; or, if none was issued,
    /// a fresh one. Called again, returns the frozen hint after checking
    /// that still nothing in `dirty` lies in it: explicit marks into it are
    /// refused after the freeze, but a write through vm-memory is only
    /// seen by its dirty bitmap, so a later call (right before the first
    /// `KVM_RUN`) must not vouch for a hint such a write broke.
    pub(crate) fn finalize(&mut self, dirty: &[(u64, u64)]) -> Result<Hint, Error> {
        if let Some(f) = &self.frozen {
            return Self::still_true(f, dirty);
        }
        let h = match self.issued.take() {
            Some(h) => {
                for &(s, l) in self.written.iter().chain(dirty) {
                    if let Some(page) = first_overlap(&h, s, l) {
                        self.issued = Some(h);
                        return Err(Error::HintInvalidated { page });
                    }
                }
                h
            }
            None => self.compute(dirty)?,
        };
        self.frozen = Some(h.clone());
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const G: u64 = 1 << 30;
    /// RAM below a 1 GiB-wide hole at 3 GiB and 1 GiB above 4 GiB.
    fn ram() -> Vec<(u64, u64)> {
        vec![(0, 3 * G), (4 * G, G)]
    }

    fn covered(h: &Hint, addr: u64) -> bool {
        h.entries.iter().any(|e| addr >= e.start && addr < e.end())
    }

    #[test]
    fn rounding_is_outward() {
        let mut t = Tracker::new(ram(), 21);
        t.mark(0x1001, 1).unwrap(); // one byte dirties page 0x1000
        t.mark(0x5fff, 2).unwrap(); // straddles 0x5000 and 0x6000
        let h = t.compute(&[]).unwrap();
        for a in [0x1000, 0x1fff, 0x5000, 0x6fff] {
            assert!(!covered(&h, a), "{a:#x}");
        }
        for a in [0x0, 0xfff, 0x2000, 0x4fff, 0x7000] {
            assert!(covered(&h, a), "{a:#x}");
        }
        assert!(h.entries.iter().all(|e| e.page_shift == 21));
    }

    #[test]
    fn hole_is_never_claimed_and_writes_across_it_split_both_sides() {
        let mut t = Tracker::new(ram(), 12);
        t.mark(3 * G - 10, G + 20).unwrap(); // spans the hole
        let h = t.compute(&[]).unwrap();
        assert!(!covered(&h, 3 * G - 1));
        assert!(!covered(&h, 3 * G - 4096));
        assert!(!covered(&h, 3 * G + 5));
        assert!(!covered(&h, 4 * G));
        assert!(covered(&h, 3 * G - 8192));
        assert!(covered(&h, 4 * G + 4096));
        assert!(!covered(&h, 5 * G));
        assert_eq!(h.total_bytes(), 4 * G - 2 * 4096);
    }

    #[test]
    fn dirty_pages_are_excluded_too() {
        let t = Tracker::new(ram(), 12);
        let h = t.compute(&[(0x100000, 0x1000)]).unwrap();
        assert!(!covered(&h, 0x100000) && covered(&h, 0xff000) && covered(&h, 0x101000));
    }

    #[test]
    fn hint_blob_location_is_excluded() {
        // The VMM marks where the blob goes, builds the hint, writes the blob.
        let mut t = Tracker::new(ram(), 12);
        let blob = 0x30000u64;
        t.mark(blob, zerohint::encoded_size(MAX_ENTRIES) as u64)
            .unwrap();
        let h = t.issue(&[]).unwrap();
        let bytes = h.encode().unwrap();
        t.mark(blob, bytes.len() as u64).unwrap();
        for off in [0, bytes.len() as u64 - 1] {
            assert!(!covered(&h, blob + off));
        }
        assert_eq!(t.finalize(&[(blob, bytes.len() as u64)]).unwrap(), h);
    }

    #[test]
    fn write_after_issue_invalidates() {
        let mut t = Tracker::new(ram(), 12);
        t.issue(&[]).unwrap();
        t.mark(0x200000, 8).unwrap();
        let e = t.finalize(&[]).unwrap_err();
        assert!(
            matches!(e, Error::HintInvalidated { page: 0x200000 }),
            "{e}"
        );
        // Same through the dirty bitmap alone.
        let mut t = Tracker::new(ram(), 12);
        t.issue(&[]).unwrap();
        assert!(matches!(
            t.finalize(&[(4 * G + 5, 1)]),
            Err(Error::HintInvalidated { page }) if page == 4 * G
        ));
        // Re-issuing after the write fixes it.
        let mut t = Tracker::new(ram(), 12);
        t.issue(&[]).unwrap();
        t.mark(0x200000, 8).unwrap();
        let h = t.issue(&[]).unwrap();
        assert_eq!(t.finalize(&[]).unwrap(), h);
    }

    #[test]
    fn writes_after_finalize_only_outside_the_hint() {
        let mut t = Tracker::new(ram(), 12);
        t.mark(0x7000, 0x1000).unwrap();
        let h = t.finalize(&[]).unwrap();
        assert!(t.is_frozen());
        // Into the excluded page: fine.
        t.mark(0x7000, 0x1000).unwrap();
        t.mark(0x7ff0, 0x10).unwrap();
        // One byte into a hinted page: refused.
        assert!(matches!(
            t.mark(0x7ff0, 0x11),
            Err(Error::WriteAfterFinalize { page: 0x8000, .. })
        ));
        assert!(t.mark(0x6fff, 1).is_err());
        assert!(t.mark(0x6fff, 0).is_ok());
        // The hint stays what it was...
        assert_eq!(t.issue(&[(0x7000, 1)]).unwrap(), h);
        assert_eq!(t.finalize(&[(0x7000, 1)]).unwrap(), h);
        // ...and neither a later issue nor finalize vouches for it once a
        // dirty page (a write that bypassed the tracker) lies in it.
        for r in [t.issue(&[(0x100000, 1)]), t.finalize(&[(0x100000, 1)])] {
            assert!(matches!(r, Err(Error::HintInvalidated { page: 0x100000 })));
        }
    }

    #[test]
    fn too_many_writes_keep_hint_valid() {
        let mut t = Tracker::new(vec![(0, 64 << 20)], 12);
        // 2000 holes → 2001 ranges; the hint keeps the 512 largest.
        for i in 0..2000u64 {
            t.mark(i * 8192 + (i % 7) * 4096, 1).unwrap();
        }
        let h = t.compute(&[]).unwrap();
        assert!(h.entries.len() <= MAX_ENTRIES);
        h.encode().unwrap();
        for i in 0..2000u64 {
            assert!(!covered(&h, i * 8192 + (i % 7) * 4096));
        }
    }

    #[test]
    fn overflowing_write_is_handled() {
        let mut t = Tracker::new(vec![(u64::MAX - 0xf_ffff, 0x10_0000 - 0xfff)], 12);
        t.mark(u64::MAX - 10, 100).unwrap();
        let h = t.compute(&[]).unwrap();
        assert!(!covered(&h, u64::MAX - 10));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// No written byte (explicit or dirty) is ever inside the hint, and
        /// every hinted byte is RAM; untouched pages far from writes stay
        /// hinted.
        #[test]
        fn random_writes_never_leak(
            writes in proptest::collection::vec((0u64..6 * G, 1u64..3 * 1024 * 1024), 0..40),
            dirty in proptest::collection::vec((0u64..6 * G, 1u64..100_000), 0..10),
            probes in proptest::collection::vec(0u64..6 * G, 64),
        ) {
            let mut t = Tracker::new(ram(), 12);
            for &(s, l) in &writes {
                t.mark(s, l).unwrap();
            }
            let h = t.compute(&dirty).unwrap();
            for &(s, l) in writes.iter().chain(&dirty) {
                for a in [s, s + l / 2, s + l - 1] {
                    prop_assert!(!covered(&h, a), "written byte {:#x} hinted", a);
                }
                prop_assert!(first_overlap(&h, s, l).is_none());
            }
            for e in &h.entries {
                prop_assert!(e.start % 4096 == 0 && e.length % 4096 == 0 && e.length > 0);
                prop_assert!(ram().iter().any(|&(rs, rl)| e.start >= rs && e.end() <= rs + rl));
            }
            for &p in &probes {
                let in_ram = ram().iter().any(|&(rs, rl)| p >= rs && p < rs + rl);
                let page = p & !4095;
                let touched = writes.iter().chain(&dirty).any(|&(s, l)| {
                    page < s.saturating_add(l) && s < page + 4096
                });
                prop_assert_eq!(covered(&h, p), in_ram && !touched, "probe {:#x}", p);
            }
        }
    }
}
