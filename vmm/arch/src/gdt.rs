//! Global descriptor table entries and their KVM segment form.

use kvm_bindings::{kvm_segment, kvm_sregs};
use vm_memory::GuestAddress;

use crate::layout::{BOOT_GDT_START, BOOT_IDT_START};
use crate::memory::{BootMemory, MemoryError};

/// Packs a segment descriptor from flags (access byte in bits 0..7, flags
/// nibble in bits 12..15 — the usual `0xa09b` notation), base and limit.
pub const fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << (56 - 24))
        | ((flags as u64 & 0x0000_f0ff) << 40)
        | ((limit as u64 & 0x000f_0000) << (48 - 16))
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
}

fn base(entry: u64) -> u64 {
    ((entry & 0xff00_0000_0000_0000) >> 32)
        | ((entry & 0x0000_00ff_0000_0000) >> 16)
        | ((entry & 0x0000_0000_ffff_0000) >> 16)
}

fn limit(entry: u64) -> u32 {
    let raw = (((entry & 0x000f_0000_0000_0000) >> 32) | (entry & 0xffff)) as u32;
    // With the granularity bit, the limit counts 4 KiB pages.
    if (entry >> 55) & 1 == 1 {
        (raw << 12) | 0xfff
    } else {
        raw
    }
}

/// The KVM segment for GDT entry `entry` at index `index`.
pub fn kvm_segment_from_gdt(entry: u64, index: u8) -> kvm_segment {
    kvm_segment {
        base: base(entry),
        limit: limit(entry),
        selector: u16::from(index) * 8,
        type_: ((entry >> 40) & 0xf) as u8,
        present: ((entry >> 47) & 1) as u8,
        dpl: ((entry >> 45) & 3) as u8,
        db: ((entry >> 54) & 1) as u8,
        s: ((entry >> 44) & 1) as u8,
        l: ((entry >> 53) & 1) as u8,
        g: ((entry >> 55) & 1) as u8,
        avl: ((entry >> 52) & 1) as u8,
        padding: 0,
        unusable: u8::from((entry >> 47) & 1 == 0),
    }
}

/// The boot GDT: null, 64-bit code, data, TSS (the selectors Firecracker and
/// cloud-hypervisor use; the kernel loads its own GDT right away).
pub const BOOT_GDT: [u64; 4] = [
    gdt_entry(0, 0, 0),
    gdt_entry(0xa09b, 0, 0xfffff),
    gdt_entry(0xc093, 0, 0xfffff),
    gdt_entry(0x808b, 0, 0xfffff),
];

/// Writes `table` at [`BOOT_GDT_START`] and an empty IDT at
/// [`BOOT_IDT_START`] (interrupts stay off until the kernel installs its
/// own), and loads `sregs` from them: GDTR/IDTR, CS = entry 1, DS/ES/FS/GS/SS
/// = entry 2, TR = entry 3. Both boot paths (64-bit and PVH) use this
/// selector layout; they differ only in the table and in the control
/// registers, which the caller sets.
pub fn load_boot_segments<M: BootMemory>(
    mem: &mut M,
    table: &[u64; 4],
    sregs: &mut kvm_sregs,
) -> Result<(), MemoryError> {
    let gdt: Vec<u8> = table.iter().flat_map(|e| e.to_le_bytes()).collect();
    mem.write_tracked(&gdt, GuestAddress(BOOT_GDT_START))
        .map_err(MemoryError)?;
    mem.write_tracked(&0u64.to_le_bytes(), GuestAddress(BOOT_IDT_START))
        .map_err(MemoryError)?;
    let code = kvm_segment_from_gdt(table[1], 1);
    let data = kvm_segment_from_gdt(table[2], 2);
    sregs.gdt.base = BOOT_GDT_START;
    sregs.gdt.limit = (gdt.len() - 1) as u16;
    sregs.idt.base = BOOT_IDT_START;
    sregs.idt.limit = 7;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = kvm_segment_from_gdt(table[3], 3);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_segment_is_64bit() {
        let s = kvm_segment_from_gdt(BOOT_GDT[1], 1);
        assert_eq!(BOOT_GDT[1], 0x00af_9b00_0000_ffff);
        assert_eq!(
            (s.selector, s.l, s.db, s.present, s.s, s.type_),
            (8, 1, 0, 1, 1, 0xb)
        );
        assert_eq!((s.base, s.limit, s.g, s.unusable), (0, 0xffff_ffff, 1, 0));
    }

    #[test]
    fn data_and_tss() {
        let d = kvm_segment_from_gdt(BOOT_GDT[2], 2);
        assert_eq!(BOOT_GDT[2], 0x00cf_9300_0000_ffff);
        assert_eq!(
            (d.selector, d.db, d.l, d.type_, d.limit),
            (0x10, 1, 0, 3, 0xffff_ffff)
        );
        let t = kvm_segment_from_gdt(BOOT_GDT[3], 3);
        assert_eq!((t.selector, t.type_, t.s, t.g), (0x18, 0xb, 0, 1));
        let n = kvm_segment_from_gdt(BOOT_GDT[0], 0);
        assert_eq!(n.unusable, 1);
    }

    #[test]
    fn base_roundtrip() {
        let e = gdt_entry(0x93, 0x1234_5678, 0xabcde);
        let s = kvm_segment_from_gdt(e, 5);
        assert_eq!((s.base, s.limit, s.g), (0x1234_5678, 0xabcde, 0));
    }
}
