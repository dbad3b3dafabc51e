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

/// QEMU microvm: low RAM up to 3 GiB, the rest from 4 GiB
/// (`microvm_memory_init`, hw/i386/microvm.c, QEMU 10.0: `lowmem =
/// 0xc0000000`), whatever the size.
pub fn qemu_microvm(size: u64) -> Vec<RamRange> {
    split(size, 3 * GIB)
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
/// 10.0), on q35 (SeaBIOS and its linuxboot option ROM) and microvm
/// (qboot): the bzImage's protected-mode part at 1 MiB (at most the file's
/// size: `kernel_bytes`), the initrd where [`qemu_initrd`] puts it
/// (`initrd`: `(gpa, len)`), and the firmware's tables (SeaBIOS's ACPI,
/// SMBIOS and e820 tables, qboot's ACPI tables from QEMU's table loader)
/// below the top of low RAM (`low_end`): the top
/// [`QEMU_DIRECT_TOP_MARGIN`] plus the initrd's size rounded up to 2 MiB.
/// The command line (0x20000), the real-mode setup (0x10000) and the
/// firmware itself lie below 1 MiB. An ELF kernel's segments are the
/// caller's.
pub fn qemu_direct_writes(low_end: u64, kernel_bytes: u64, initrd: (u64, u64)) -> Vec<(u64, u64)> {
    let top = (QEMU_DIRECT_TOP_MARGIN + initrd.1.next_multiple_of(2 << 20)).min(low_end);
    let mut w = vec![(1 << 20, kernel_bytes), (low_end - top, top)];
    if initrd.1 > 0 {
        w.push(initrd);
    }
    w
}

/// Bytes QEMU keeps free for the firmware's ACPI data at the top of low
/// RAM on q35 and pc (`PC_FW_DATA`, hw/i386/pc.c); microvm keeps none.
pub const QEMU_PC_FW_DATA: u64 = 0x20000 + 0x8000;

/// What a direct-boot `-kernel` file is, from its first bytes: the two
/// formats whose load addresses the launcher knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFormat {
    /// A bzImage: x86 boot protocol setup header (`HdrS` at 0x202).
    BzImage,
    /// An ELF image (QEMU boots it through PVH, segment by segment).
    Elf,
}

/// The format of a kernel whose first bytes are `header`; `None` for
/// anything else (a multiboot image, say).
pub fn kernel_format(header: &[u8]) -> Option<KernelFormat> {
    if header.starts_with(b"\x7fELF") {
        Some(KernelFormat::Elf)
    } else if header.get(0x202..0x206) == Some(b"HdrS".as_slice()) {
        Some(KernelFormat::BzImage)
    } else {
        None
    }
}

/// Where QEMU puts an initrd of `initrd_bytes` on a direct kernel boot,
/// as `(gpa, len)`: `x86_load_linux` (hw/i386/x86-common.c, QEMU 10.0)
/// takes the highest address the kernel's setup header allows (`header`:
/// the file's first bytes; a 64-bit kernel's `XLF_CAN_BE_LOADED_ABOVE_4G`
/// lifts it to 4 GiB, else `initrd_addr_max`, else 0x37ffffff; an ELF
/// kernel booted through PVH has no limit), caps it below the top of low
/// RAM (`low_end`) less `fw_data` ([`QEMU_PC_FW_DATA`] or 0), and puts
/// the initrd page-aligned right under it. Why not just "the top of low
/// RAM": a kernel whose header says 2 GiB gets its initrd below 2 GiB,
/// which is the middle of low RAM on microvm (3 GiB) and q35 guests of
/// 2-2.75 GiB, where the top-of-RAM margin would not cover it.
pub fn qemu_initrd(header: &[u8], low_end: u64, fw_data: u64, initrd_bytes: u64) -> (u64, u64) {
    let u16_at = |o: usize| {
        header
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        header
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let format = kernel_format(header);
    let protocol = match format {
        Some(KernelFormat::BzImage) => u16_at(0x206).unwrap_or(0),
        _ => 0,
    };
    const XLF_CAN_BE_LOADED_ABOVE_4G: u16 = 1 << 1;
    let header_max: u64 = if format == Some(KernelFormat::Elf) {
        u64::MAX
    } else if protocol >= 0x20c && u16_at(0x236).unwrap_or(0) & XLF_CAN_BE_LOADED_ABOVE_4G != 0 {
        u32::MAX.into()
    } else if protocol >= 0x203 {
        u32_at(0x22c).unwrap_or(0).into()
    } else {
        0x37ff_ffff
    };
    let max = header_max.min(low_end.saturating_sub(fw_data).saturating_sub(1));
    let at = max.saturating_sub(initrd_bytes) & !0xfff;
    (at, initrd_bytes)
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

/// The first 0x240 bytes of a bzImage for tests: boot protocol
/// `protocol`, `xloadflags`, `initrd_addr_max`.
#[cfg(test)]
pub(crate) fn test_setup_header(protocol: u16, xloadflags: u16, initrd_addr_max: u32) -> Vec<u8> {
    let mut h = vec![0u8; 0x240];
    h[0x202..0x206].copy_from_slice(b"HdrS");
    h[0x206..0x208].copy_from_slice(&protocol.to_le_bytes());
    h[0x22c..0x230].copy_from_slice(&initrd_addr_max.to_le_bytes());
    h[0x236..0x238].copy_from_slice(&xloadflags.to_le_bytes());
    h
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

    /// `x86_load_linux`'s initrd placement, rule by rule.
    #[test]
    fn initrd_goes_where_qemu_puts_it() {
        let hdr = test_setup_header;
        let low = 3 * GIB;
        let top = |fw: u64| (low - fw - 1 - 3 * MIB) & !0xfff;
        // A 64-bit kernel: right under the top of low RAM less the ACPI data.
        let k64 = hdr(0x20f, 0x3, 0x7fff_ffff);
        assert_eq!(qemu_initrd(&k64, low, 0, 3 * MIB), (top(0), 3 * MIB));
        assert_eq!(
            qemu_initrd(&k64, low, QEMU_PC_FW_DATA, 3 * MIB).0,
            top(QEMU_PC_FW_DATA)
        );
        // The flag needs protocol 2.12: before it, initrd_addr_max rules.
        let at_2g = (0x7fff_ffff - 3 * MIB) & !0xfff;
        assert_eq!(
            qemu_initrd(&hdr(0x20b, 0x3, 0x7fff_ffff), low, 0, 3 * MIB).0,
            at_2g
        );
        assert_eq!(
            qemu_initrd(&hdr(0x20f, 0x1, 0x7fff_ffff), low, 0, 3 * MIB).0,
            at_2g
        );
        // ... but never above the top of low RAM.
        assert_eq!(
            qemu_initrd(&hdr(0x20f, 0x1, 0xffff_ffff), GIB, 0, 3 * MIB).0,
            (GIB - 1 - 3 * MIB) & !0xfff
        );
        // Protocol < 2.03 (or no setup header at all): 0x37ffffff.
        let old_at = (0x37ff_ffff - 3 * MIB) & !0xfff;
        assert_eq!(qemu_initrd(&hdr(0x202, 0, 0), low, 0, 3 * MIB).0, old_at);
        assert_eq!(qemu_initrd(&[0u8; 16], low, 0, 3 * MIB).0, old_at);
        // An ELF (PVH) kernel: the top.
        assert_eq!(qemu_initrd(b"\x7fELF\x02\x01", low, 0, 3 * MIB).0, top(0));
        // The writes leave the initrd out wherever it is.
        let w = qemu_direct_writes(low, 10 * MIB, (at_2g, 3 * MIB));
        let h = hint_ranges(&qemu_microvm(low), &w);
        for a in [
            at_2g,
            at_2g + 3 * MIB - 1,
            MIB,
            11 * MIB - 1,
            low - 1,
            low - 68 * MIB,
        ] {
            assert!(!covers(&h, a), "{a:#x} hinted");
        }
        assert!(covers(&h, at_2g + 3 * MIB + 4096) && covers(&h, at_2g - 1));
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
