//! The owned hint a producer (the VMM, the firmware model in tests) builds,
//! trims and encodes. Every operation only ever shrinks what is claimed zero.

use alloc::vec;
use alloc::vec::Vec;

use crate::{
    encode_into, encoded_size, Entry, Error, HintView, ENTRY_FLAG_ZEROED, HDR_FLAG_SCRUB_REQUEST,
    MAX_ENTRIES, PAGE_SHIFTS, PAGE_SIZE,
};

/// An owned hint: header flags and entries. Build with
/// [`Hint::zeroed_from_ranges`], remove everything the producer wrote with
/// [`Hint::subtract`], then [`Hint::encode`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hint {
    /// Header flags: 0 (zero hint) or [`HDR_FLAG_SCRUB_REQUEST`].
    pub flags: u32,
    /// Sorted, non-overlapping, 4 KiB-aligned ranges.
    pub entries: Vec<Entry>,
}

const MASK: u64 = PAGE_SIZE - 1;

impl Hint {
    /// A zero hint for ranges known zero, given as `(start, length)` in any
    /// order. Sorts, merges overlapping and adjacent ranges, then *shrinks*
    /// each merged range inward to 4 KiB alignment (never grows it: a byte
    /// outside the input must never be claimed zero) and drops what becomes
    /// empty. All entries get `page_shift`.
    ///
    /// Errors: [`Error::BadPageShift`] (index 0) for a page shift other
    /// than 12/21/30; [`Error::Overflow`] with the input index for a range
    /// past 2^64; [`Error::TooManyEntries`] if more than 512 ranges remain.
    pub fn zeroed_from_ranges(ranges: &[(u64, u64)], page_shift: u8) -> Result<Hint, Error> {
        Self::from_ranges(ranges, page_shift, 0)
    }

    /// A scrub request (fw_cfg only) asking the firmware to zero `ranges`;
    /// normalised exactly like [`Hint::zeroed_from_ranges`] (so partial pages
    /// are left out of the request and stay dirty for the guest to clear).
    pub fn scrub_from_ranges(ranges: &[(u64, u64)], page_shift: u8) -> Result<Hint, Error> {
        Self::from_ranges(ranges, page_shift, HDR_FLAG_SCRUB_REQUEST)
    }

    fn from_ranges(ranges: &[(u64, u64)], page_shift: u8, flags: u32) -> Result<Hint, Error> {
        if !PAGE_SHIFTS.contains(&page_shift) {
            return Err(Error::BadPageShift { index: 0 });
        }
        let mut spans: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (index, &(start, len)) in ranges.iter().enumerate() {
            let end = start.checked_add(len).ok_or(Error::Overflow { index })?;
            if len != 0 {
                spans.push((start, end));
            }
        }
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let entry_flags = if flags & HDR_FLAG_SCRUB_REQUEST != 0 {
            0
        } else {
            ENTRY_FLAG_ZEROED
        };
        let entries: Vec<Entry> = merged
            .into_iter()
            .filter_map(|(s, e)| {
                let s = s.checked_add(MASK)? & !MASK;
                let e = e & !MASK;
                // Lazy: `e - s` must not be evaluated when the range is empty.
                (s < e).then(|| Entry {
                    start: s,
                    length: e - s,
                    flags: entry_flags,
                    page_shift,
                })
            })
            .collect();
        if entries.len() > MAX_ENTRIES {
            return Err(Error::TooManyEntries);
        }
        Ok(Hint { flags, entries })
    }

    /// Removes `[start, start+len)` rounded *outward* to 4 KiB (a partly
    /// written page is dirty), splitting ranges as needed. Producers call it
    /// for every byte they write into guest memory. A span running past 2^64
    /// removes everything from its start up. `len == 0` removes nothing.
    ///
    /// Splitting can push the entry count above 512; [`Hint::encode`] then
    /// fails and [`Hint::keep_largest`] trims it safely.
    pub fn subtract(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let cut_s = start & !MASK;
        // Exclusive end in u128: may be exactly 2^64.
        let cut_e = (u128::from(start) + u128::from(len)).div_ceil(u128::from(PAGE_SIZE))
            * u128::from(PAGE_SIZE);
        let mut out = Vec::with_capacity(self.entries.len() + 1);
        for e in self.entries.drain(..) {
            let (es, ee) = (e.start, e.end());
            if u128::from(ee) <= u128::from(cut_s) || u128::from(es) >= cut_e {
                out.push(e);
                continue;
            }
            if es < cut_s {
                out.push(Entry {
                    length: cut_s - es,
                    ..e
                });
            }
            if u128::from(ee) > cut_e {
                // cut_e < ee <= u64::MAX here, so it fits.
                let ns = cut_e as u64;
                out.push(Entry {
                    start: ns,
                    length: ee - ns,
                    ..e
                });
            }
        }
        self.entries = out;
    }

    /// Drops the smallest ranges until at most `max` remain (order kept).
    /// Dropping a zero range is always safe: it only costs clearing time.
    pub fn keep_largest(&mut self, max: usize) {
        if self.entries.len() <= max {
            return;
        }
        let mut by_size: Vec<(u64, usize)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.length, i))
            .collect();
        by_size.sort_unstable_by(|a, b| b.cmp(a));
        let mut keep = vec![false; self.entries.len()];
        for &(_, i) in by_size.iter().take(max) {
            keep[i] = true;
        }
        let mut i = 0;
        self.entries.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }

    /// Sum of all range lengths (saturating).
    pub fn total_bytes(&self) -> u64 {
        self.entries
            .iter()
            .fold(0u64, |acc, e| acc.saturating_add(e.length))
    }

    /// Whether this is a scrub request.
    pub fn is_scrub_request(&self) -> bool {
        self.flags & HDR_FLAG_SCRUB_REQUEST != 0
    }

    /// The encoded bytes; fails (with the error a consumer would report)
    /// instead of producing an invalid hint.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        if self.entries.len() > MAX_ENTRIES {
            return Err(Error::TooManyEntries);
        }
        let mut out = vec![0u8; encoded_size(self.entries.len())];
        encode_into(self.flags, &self.entries, &mut out)?;
        Ok(out)
    }
}

impl From<&HintView<'_>> for Hint {
    fn from(view: &HintView<'_>) -> Hint {
        Hint {
            flags: view.flags(),
            entries: view.entries().collect(),
        }
    }
}
