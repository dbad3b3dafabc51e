//! The e820 memory map from `boot_params`, checked the way a careful kernel
//! would want a VMM to produce it: 1..=128 entries, sorted, non-empty,
//! non-overlapping, with some usable RAM.

use crate::bootparams::{le32, le64};
use crate::bootparams::{BootParams, OFF_E820_ENTRIES, OFF_E820_TABLE};
use crate::verdict::Failure;

/// Most entries `boot_params.e820_table` holds.
pub const MAX_ENTRIES: usize = 128;
/// Size of one `struct boot_e820_entry`.
pub const ENTRY_SIZE: usize = 20;
/// Type of usable RAM (`E820_TYPE_RAM`).
pub const TYPE_RAM: u32 = 1;

/// One e820 entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// E820 type (1 = usable RAM).
    pub kind: u32,
}

impl Entry {
    /// Exclusive end (a checked table never overflows).
    pub fn end(&self) -> u64 {
        self.addr.saturating_add(self.size)
    }
}

/// A checked e820 table (fixed capacity: the probe has no heap).
#[derive(Debug, Clone)]
pub struct Table {
    entries: [Entry; MAX_ENTRIES],
    len: usize,
}

impl Table {
    /// Reads and checks the table of `bp`.
    pub fn parse(bp: &BootParams<'_>) -> Result<Table, Failure> {
        let b = bp.bytes();
        let len = usize::from(b[OFF_E820_ENTRIES]);
        if len == 0 || len > MAX_ENTRIES {
            return Err(Failure::E820Count { count: len });
        }
        let mut entries = [Entry::default(); MAX_ENTRIES];
        for (i, e) in entries.iter_mut().take(len).enumerate() {
            let off = OFF_E820_TABLE + i * ENTRY_SIZE;
            *e = Entry {
                addr: le64(b, off),
                size: le64(b, off + 8),
                kind: le32(b, off + 16),
            };
        }
        Table::check(&entries[..len])?;
        Ok(Table { entries, len })
    }

    /// The rules a table must meet, in the order they are reported.
    pub fn check(entries: &[Entry]) -> Result<(), Failure> {
        let mut prev_end = 0u64;
        for (index, e) in entries.iter().enumerate() {
            if e.size == 0 {
                return Err(Failure::E820EmptyEntry { index });
            }
            let Some(end) = e.addr.checked_add(e.size) else {
                return Err(Failure::E820Overflow { index });
            };
            if index > 0 {
                if e.addr < entries[index - 1].addr {
                    return Err(Failure::E820Unsorted { index });
                }
                if e.addr < prev_end {
                    return Err(Failure::E820Overlap { index });
                }
            }
            prev_end = end;
        }
        if !entries.iter().any(|e| e.kind == TYPE_RAM) {
            return Err(Failure::E820NoRam);
        }
        Ok(())
    }

    /// The entries, sorted.
    pub fn entries(&self) -> &[Entry] {
        &self.entries[..self.len]
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true for a checked table; here for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Usable RAM as `(start, length)` pairs, the form
    /// `zerohint::check_in_ram` takes. Fills `out` and returns how many.
    pub fn usable(&self, out: &mut [(u64, u64); MAX_ENTRIES]) -> usize {
        let mut n = 0;
        for e in self.entries().iter().filter(|e| e.kind == TYPE_RAM) {
            out[n] = (e.addr, e.size);
            n += 1;
        }
        n
    }

    /// Total usable RAM in bytes.
    pub fn usable_bytes(&self) -> u64 {
        self.entries()
            .iter()
            .filter(|e| e.kind == TYPE_RAM)
            .map(|e| e.size)
            .sum()
    }

    /// End of the highest usable RAM entry.
    pub fn ram_end(&self) -> u64 {
        self.entries()
            .iter()
            .filter(|e| e.kind == TYPE_RAM)
            .map(Entry::end)
            .max()
            .unwrap_or(0)
    }

    /// End of the highest entry of any type.
    pub fn end(&self) -> u64 {
        self.entries().iter().map(Entry::end).max().unwrap_or(0)
    }

    /// Whether `[start, start+len)` (non-empty) lies inside the union of the
    /// entries `pick` selects and below `limit`. Entries are sorted and disjoint, so
    /// a span can only continue into the next entry if they are adjacent.
    fn covers(&self, start: u64, len: u64, limit: u64, pick: impl Fn(&Entry) -> bool) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        if len == 0 || end > limit {
            return false;
        }
        let mut cur = start;
        for e in self.entries().iter().filter(|e| pick(e)) {
            if e.end() <= cur {
                continue;
            }
            if e.addr > cur {
                return false;
            }
            cur = e.end();
            if cur >= end {
                return true;
            }
        }
        false
    }

    /// End of the run of adjacent entries (any type) that contains `addr`,
    /// or `None` if no entry contains it.
    pub fn contiguous_end(&self, addr: u64) -> Option<u64> {
        let mut end: Option<u64> = None;
        for e in self.entries() {
            match end {
                None if e.addr <= addr && addr < e.end() => end = Some(e.end()),
                Some(x) if e.addr == x => end = Some(e.end()),
                Some(_) => break,
                None => {}
            }
        }
        end
    }

    /// Whether the span is inside e820-described memory of any type below
    /// `limit` (where the VMM may put boot data: boot_params, command line,
    /// setup_data).
    pub fn covers_any(&self, start: u64, len: u64, limit: u64) -> bool {
        self.covers(start, len, limit, |_| true)
    }

    /// Whether the span is inside usable RAM below `limit`.
    pub fn covers_ram(&self, start: u64, len: u64, limit: u64) -> bool {
        self.covers(start, len, limit, |e| e.kind == TYPE_RAM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(addr: u64, size: u64, kind: u32) -> Entry {
        Entry { addr, size, kind }
    }

    fn table(v: &[Entry]) -> Table {
        Table::check(v).unwrap();
        let mut entries = [Entry::default(); MAX_ENTRIES];
        entries[..v.len()].copy_from_slice(v);
        Table {
            entries,
            len: v.len(),
        }
    }

    fn typical() -> Vec<Entry> {
        vec![
            e(0, 0x9fc00, 1),
            e(0x9fc00, 0x400, 2),
            e(0xf0000, 0x10000, 2),
            e(0x10_0000, 0x1ff0_0000, 1),
        ]
    }

    #[test]
    fn typical_map_passes() {
        let t = table(&typical());
        assert_eq!(t.usable_bytes(), 0x9fc00 + 0x1ff0_0000);
        assert_eq!(t.ram_end(), 0x2000_0000);
        let mut out = [(0, 0); MAX_ENTRIES];
        assert_eq!(t.usable(&mut out), 2);
        assert_eq!(out[1], (0x10_0000, 0x1ff0_0000));
    }

    #[test]
    fn each_rule_is_reported_with_its_index() {
        let mut v = typical();
        v[2].size = 0;
        assert_eq!(Table::check(&v), Err(Failure::E820EmptyEntry { index: 2 }));

        let mut v = typical();
        v.swap(1, 2);
        assert_eq!(Table::check(&v), Err(Failure::E820Unsorted { index: 2 }));

        let mut v = typical();
        v[0].size = 0xa0000;
        assert_eq!(Table::check(&v), Err(Failure::E820Overlap { index: 1 }));

        let v = vec![e(0, 0x1000, 1), e(u64::MAX - 10, 100, 2)];
        assert_eq!(Table::check(&v), Err(Failure::E820Overflow { index: 1 }));

        let v = vec![e(0, 0x1000, 2), e(0x1000, 0x1000, 3)];
        assert_eq!(Table::check(&v), Err(Failure::E820NoRam));
    }

    #[test]
    fn adjacent_entries_are_allowed() {
        Table::check(&[e(0, 0x1000, 1), e(0x1000, 0x1000, 1)]).unwrap();
    }

    #[test]
    fn covers_spans_adjacent_entries_but_not_holes() {
        let t = table(&typical());
        let lim = u64::MAX;
        assert!(t.covers_ram(0x1000, 0x1000, lim));
        assert!(!t.covers_ram(0x9f000, 0x1000, lim), "crosses into reserved");
        assert!(
            t.covers_any(0x9f000, 0x1000, lim),
            "RAM then reserved, adjacent"
        );
        assert!(!t.covers_any(0x9f000, 0x2000, lim), "then into the hole");
        assert!(!t.covers_any(0xa0000, 0x1000, lim), "hole");
        assert!(!t.covers_ram(0x1fff_f000, 0x2000, lim), "past the end");
        assert!(t.covers_ram(0x1fff_f000, 0x1000, lim));
        assert!(
            !t.covers_ram(0x1fff_f000, 0x1000, 0x1fff_f800),
            "above limit"
        );
        assert!(!t.covers_ram(u64::MAX, 2, lim), "overflow");
    }

    #[test]
    fn contiguous_end_follows_adjacent_entries() {
        let t = table(&typical());
        assert_eq!(t.contiguous_end(0x1000), Some(0xa0000));
        assert_eq!(t.contiguous_end(0x9fc00), Some(0xa0000));
        assert_eq!(t.contiguous_end(0xa0000), None);
        assert_eq!(t.contiguous_end(0xf8000), Some(0x2000_0000));
        assert_eq!(t.contiguous_end(0x2000_0000), None);
    }

    #[test]
    fn parse_reads_boot_params_layout() {
        let mut p = vec![0u8; crate::bootparams::SIZE];
        p[0x202..0x206].copy_from_slice(b"HdrS");
        p[0x206..0x208].copy_from_slice(&0x020cu16.to_le_bytes());
        for (i, en) in typical().iter().enumerate() {
            let off = OFF_E820_TABLE + i * ENTRY_SIZE;
            p[off..off + 8].copy_from_slice(&en.addr.to_le_bytes());
            p[off + 8..off + 16].copy_from_slice(&en.size.to_le_bytes());
            p[off + 16..off + 20].copy_from_slice(&en.kind.to_le_bytes());
        }
        let bp = BootParams::new(&p).unwrap();
        assert_eq!(
            Table::parse(&bp).unwrap_err(),
            Failure::E820Count { count: 0 }
        );
        p[OFF_E820_ENTRIES] = 4;
        let bp = BootParams::new(&p).unwrap();
        assert_eq!(Table::parse(&bp).unwrap().entries(), &typical()[..]);
        p[OFF_E820_ENTRIES] = 129;
        let bp = BootParams::new(&p).unwrap();
        assert_eq!(
            Table::parse(&bp).unwrap_err(),
            Failure::E820Count { count: 129 }
        );
    }
}
