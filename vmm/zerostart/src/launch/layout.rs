//! Guest-physical layout of an external VMM's RAM and the hint it allows.
//!
//! The launcher cannot watch what QEMU or cloud-hypervisor write into guest
//! RAM, so the hint is derived from facts about them (docs/launch.md,
//! /work/shared/reference): which guest-physical ranges are RAM and where
//! each lies in the backing file, and which bytes the VMM or its firmware
//! may write before the guest's first instruction. Everything below
//! [`HINT_FLOOR`] is left out (the VMMs' boot structures, tables and
//! firmware work areas all lie there, and ZeroStartPkg never publishes it
//! anyway), the 32-bit MMIO hole is not RAM, and each VMM subtracts what
//! else it loads (cloud-hypervisor: the firmware ELF's segments).

/// Lowest guest-physical address ever hinted for an external VMM: 32 MiB,
/// the floor below which ZeroStartPkg never publishes (SEC page tables,
/// temporary RAM, the decompressed PEI/DXE volumes) and above every fixed
/// structure both VMMs write (all below 1 MiB; cloud-hypervisor's firmware
/// at 1–5 MiB).
pub const HINT_FLOOR: u64 = 32 << 20;
const GIB: u64 = 1 << 30;
/// RAM above the 32-bit hole starts here on both VMMs.
pub const HIGH_RAM_START: u64 = 4 * GIB;

/// One contiguous piece of guest RAM and where it is in the backing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RamRange {
    /// Guest-physical start.
    pub gpa: u64,
    /// Bytes.
    pub len: u64,
    /// Offset of `gpa` in the memory file.
    pub file_offset: u64,
}

/// Guest RAM of `size` bytes: low RAM up to `low_end`, the rest from 4 GiB.
fn split(size: u64, low_end: u64) -> Vec<RamRange> {
    let low = size.min(low_end);
    let mut v = vec![RamRange {
        gpa: 0,
        len: low,
        file_offset: 0,
    }];
    if size > low {
        v.push(RamRange {
            gpa: HIGH_RAM_START,
            len: size - low,
            file_offset: low,
        });
    }
    v
}

/// QEMU q35: low RAM ends at 2 GiB when the guest has at least 2.75 GiB,
/// else at 2.75 GiB (`pc_q35_init`: `lowmem = ram_size >= 0xb0000000 ?
/// 0x80000000 : 0xb0000000`); the rest is mapped from 4 GiB.
pub fn qemu_q35(size: u64) -> Vec<RamRange> {
    let low_end = if size >= 0xb000_0000 {
        0x8000_0000
    } else {
        0xb000_0000
    };
    split(size, low_end)
}

/// cloud-hypervisor x86_64: RAM below the 32-bit device hole [3 GiB,
/// 4 GiB), the rest from 4 GiB (its `arch/src/x86_64/layout.rs`).
pub fn cloud_hypervisor(size: u64) -> Vec<RamRange> {
    split(size, 3 * GIB)
}

/// Room left at the top of low RAM on a QEMU direct kernel boot, above
/// the initrd's own size: SeaBIOS's ACPI, SMBIOS and e820 tables and its
/// temporary allocations grow down from there (guest-kernel-patches/
/// memmap.md found SeaBIOS data ~16 MiB below the top). The launch tests'
/// poisoned-memory experiment checks it with the guest's verify mode.
pub const QEMU_DIRECT_TOP_MARGIN: u64 = 64 << 20;

/// What QEMU writes into guest RAM above [`HINT_FLOOR`]'s start before a
/// direct-boot kernel runs (`x86_load_linux`, hw/i386/x86-common.c, QEMU
/// 10.0): the bzImage's protected-mode part at 1 MiB (at most the file's
/// size: `kernel_bytes`), and the initrd at `below_4g_mem_size -
/// acpi_data_size - initrd_size`, page aligned, with SeaBIOS's tables
/// below the top of low RAM (`low_end`): the top
/// [`QEMU_DIRECT_TOP_MARGIN`] plus the initrd rounded up to 2 MiB. The
/// command line (0x20000), the real-mode setup (0x10000) and SeaBIOS
/// itself lie below 1 MiB. An ELF kernel's segments are the caller's.
pub fn qemu_direct_writes(low_end: u64, kernel_bytes: u64, initrd_bytes: u64) -> Vec<(u64, u64)> {
    let top = (QEMU_DIRECT_TOP_MARGIN + initrd_bytes.next_multiple_of(2 << 20)).min(low_end);
    vec![(1 << 20, kernel_bytes), (low_end - top, top)]
}

/// What cloud-hypervisor writes above 1 MiB on a direct kernel boot
/// besides the kernel's own segments: the initramfs at the top of the
/// first RAM region (`low_end`), page-aligned down from its end (shared
/// reference), left out with its size rounded up to 2 MiB plus 2 MiB.
pub fn chv_direct_writes(low_end: u64, initramfs_bytes: u64) -> Vec<(u64, u64)> {
    if initramfs_bytes == 0 {
        return vec![];
    }
    let top = (initramfs_bytes.next_multiple_of(2 << 20) + (2 << 20)).min(low_end);
    vec![(low_end - top, top)]
}

/// RAM minus `[0, HINT_FLOOR)` minus every `exclude` range (rounded out
/// to 4 KiB pages), as sorted `(start, len)` guest-physical ranges.
pub fn hint_ranges(ram: &[RamRange], exclude: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = ram
        .iter()
        .filter_map(|r| {
            let s = r.gpa.max(HINT_FLOOR);
            let e = r.gpa + r.len;
            (s < e).then_some((s, e))
        })
        .collect();
    for &(xs, xl) in exclude {
        let xs_p = xs & !0xfff;
        let xe = (xs.saturating_add(xl).saturating_add(0xfff)) & !0xfff;
        out = out
            .into_iter()
            .flat_map(|(s, e)| {
                let mut pieces = Vec::new();
                if xe <= s || xs_p >= e {
                    pieces.push((s, e));
                } else {
                    if s < xs_p {
                        pieces.push((s, xs_p));
                    }
                    if xe < e {
                        pieces.push((xe, e));
                    }
                }
                pieces
            })
            .collect();
    }
    out.into_iter()
        .filter(|(s, e)| e > s)
        .map(|(s, e)| (s, e - s))
        .collect()
}

/// The file offset of guest-physical `gpa`, if it is RAM.
pub fn file_offset(ram: &[RamRange], gpa: u64) -> Option<u64> {
    ram.iter()
        .find(|r| gpa >= r.gpa && gpa < r.gpa + r.len)
        .map(|r| r.file_offset + (gpa - r.gpa))
}

/// `[start, end)` guest-physical of every `PT_LOAD` segment of an ELF64
/// image (cloud-hypervisor loads the firmware's segments at their physical
/// addresses). `None` when it is not a little-endian ELF64.
pub fn elf_load_segments(image: &[u8]) -> Option<Vec<(u64, u64)>> {
    if image.len() < 64 || &image[..4] != b"\x7fELF" || image[4] != 2 || image[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(image.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(image.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(image.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(32)?).ok()?;
    let phentsize = usize::from(u16_at(54)?);
    let phnum = usize::from(u16_at(56)?);
    if phentsize < 56 {
        return None;
    }
    let mut v = Vec::new();
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(at)? != 1 {
            continue; // not PT_LOAD
        }
        let paddr = u64_at(at + 24)?;
        let memsz = u64_at(at + 40)?;
        let filesz = u64_at(at + 32)?;
        let len = memsz.max(filesz);
        if len > 0 {
            v.push((paddr, paddr.checked_add(len)?));
        }
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn covers(ranges: &[(u64, u64)], addr: u64) -> bool {
        ranges.iter().any(|&(s, l)| addr >= s && addr < s + l)
    }

    #[test]
    fn q35_low_memory_split() {
        // Below 2.75 GiB everything is low RAM.
        assert_eq!(qemu_q35(GIB).len(), 1);
        assert_eq!(qemu_q35(0xb000_0000 - MIB)[0].len, 0xb000_0000 - MIB);
        // From 2.75 GiB on, low RAM ends at 2 GiB and the rest is at 4 GiB.
        let r = qemu_q35(3 * GIB);
        assert_eq!(r[0].len, 2 * GIB);
        assert_eq!(
            r[1],
            RamRange {
                gpa: 4 * GIB,
                len: GIB,
                file_offset: 2 * GIB
            }
        );
        assert_eq!(file_offset(&r, 4 * GIB + 5), Some(2 * GIB + 5));
        assert_eq!(file_offset(&r, 3 * GIB), None);
    }

    /// The shared reference's cloud-hypervisor facts: boot GDT 0x500, IDT
    /// 0x520, PVH start info 0x6000, module list 0x6040, memory map 0x7000,
    /// boot stack 0x8000-0x8ff0, page tables 0x9000-0xcfff, command line
    /// 0x20000 (64 KiB), MP table 0x9fc00, ACPI from 0xa0000, SMBIOS from
    /// 0xf0000, firmware segments (CloudHv: 1-5 MiB), the hole [3, 4) GiB.
    #[test]
    fn cloud_hypervisor_hint_avoids_every_written_byte() {
        let written = [
            0x500,
            0x520,
            0x6000,
            0x6040,
            0x7000,
            0x8000,
            0x8ff0,
            0x9000,
            0xcfff,
            0x20000,
            0x2ffff,
            0x9fc00,
            0xa0000,
            0xf0000,
            0xfffff,
            MIB,
            5 * MIB - 1,
        ];
        // A firmware image with a segment reaching above the floor must be
        // cut out too.
        let fw = [(MIB, 4 * MIB), (40 * MIB, 40 * MIB + 4096 + 1)];
        for size in [GIB, 3 * GIB, 5 * GIB] {
            let ram = cloud_hypervisor(size);
            let h = hint_ranges(&ram, &fw.map(|(s, e)| (s, e - s)));
            for a in written {
                assert!(!covers(&h, a), "{a:#x} hinted at {size}");
            }
            for a in [40 * MIB, 40 * MIB + 4096, 40 * MIB + 8191] {
                assert!(!covers(&h, a), "firmware segment byte {a:#x} hinted");
            }
            assert!(covers(&h, 40 * MIB + 8192));
            for a in [3 * GIB, 4 * GIB - 1] {
                assert!(!covers(&h, a), "hole {a:#x} hinted");
            }
            assert!(covers(&h, HINT_FLOOR));
            assert!(!covers(&h, HINT_FLOOR - 1));
            let total: u64 = h.iter().map(|r| r.1).sum();
            // Everything else is hinted: RAM - floor - the 2-page segment.
            assert_eq!(total, size - HINT_FLOOR - 2 * 4096);
            if size > 3 * GIB {
                assert!(covers(&h, 4 * GIB));
                assert!(covers(&h, 4 * GIB + (size - 3 * GIB) - 1));
                assert!(!covers(&h, 4 * GIB + (size - 3 * GIB)));
            } else {
                assert!(!covers(&h, size));
            }
        }
    }

    #[test]
    fn elf_segments() {
        let mut b = vec![0u8; 64 + 2 * 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        // PT_LOAD at 1 MiB, filesz 0x1000, memsz 0x3000; PT_NOTE ignored.
        b[64..68].copy_from_slice(&1u32.to_le_bytes());
        b[64 + 24..64 + 32].copy_from_slice(&MIB.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&0x1000u64.to_le_bytes());
        b[64 + 40..64 + 48].copy_from_slice(&0x3000u64.to_le_bytes());
        b[120..124].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(elf_load_segments(&b), Some(vec![(MIB, MIB + 0x3000)]));
        assert_eq!(elf_load_segments(b"MZ not an elf"), None);
        b.truncate(100);
        assert_eq!(elf_load_segments(&b), None);
    }
}
