//! The PVH boot protocol for ELF kernels (`vmlinux` built with
//! `CONFIG_PVH`): 32-bit protected mode, paging off, EBX = `hvm_start_info`.
//!
//! PVH has no setup_data, so a PVH boot carries no zero hint: Linux builds
//! its own `boot_params` from `hvm_start_info` and never sees one.

use kvm_bindings::{kvm_regs, kvm_sregs};
use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info,
};
use vm_memory::{ByteValued, GuestAddress};

use crate::boot::e820_map;
use crate::gdt::{gdt_entry, load_boot_segments};
use crate::layout::{RamLayout, CMDLINE_START};
use crate::memory::{BootMemory, MemoryError};

/// `hvm_start_info.magic`.
pub const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
/// `hvm_start_info` address.
pub const PVH_INFO_START: u64 = 0x6000;
/// Module list (the initramfs) address.
pub const MODLIST_START: u64 = 0x6040;
/// Memory map address.
pub const MEMMAP_START: u64 = 0x7000;

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;

/// The PVH GDT: null, flat 32-bit code, flat data, TSS.
pub const PVH_GDT: [u64; 4] = [
    gdt_entry(0, 0, 0),
    gdt_entry(0xc09b, 0, 0xfffff),
    gdt_entry(0xc093, 0, 0xfffff),
    gdt_entry(0x008b, 0, 0x67),
];

/// Errors building PVH boot state.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing into guest memory failed.
    #[error("writing PVH boot data: {0}")]
    Memory(#[from] MemoryError),
}

/// Writes `hvm_start_info`, its memory map (the e820 map of
/// [`crate::boot::e820_map`]) and module list, and returns its address for
/// EBX. The command line must already be at [`CMDLINE_START`].
pub fn write_start_info<M: BootMemory>(
    mem: &mut M,
    layout: &RamLayout,
    initrd: Option<(GuestAddress, u64)>,
) -> Result<GuestAddress, Error> {
    let map = e820_map(layout);
    let mut memmap = Vec::new();
    for e in &map {
        let entry = hvm_memmap_table_entry {
            addr: e.addr,
            size: e.size,
            type_: e.kind,
            reserved: 0,
        };
        memmap.extend_from_slice(entry.as_slice());
    }
    mem.write_tracked(&memmap, GuestAddress(MEMMAP_START))
        .map_err(MemoryError)?;
    let mut info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: 1,
        cmdline_paddr: CMDLINE_START,
        memmap_paddr: MEMMAP_START,
        memmap_entries: map.len() as u32,
        ..Default::default()
    };
    if let Some((addr, size)) = initrd {
        let m = hvm_modlist_entry {
            paddr: addr.0,
            size,
            ..Default::default()
        };
        mem.write_tracked(m.as_slice(), GuestAddress(MODLIST_START))
            .map_err(MemoryError)?;
        info.nr_modules = 1;
        info.modlist_paddr = MODLIST_START;
    }
    mem.write_tracked(info.as_slice(), GuestAddress(PVH_INFO_START))
        .map_err(MemoryError)?;
    Ok(GuestAddress(PVH_INFO_START))
}

/// Writes the PVH GDT and returns special registers for 32-bit protected
/// mode with paging off, starting from `base` (KVM's, for the APIC base).
pub fn pvh_sregs<M: BootMemory>(mem: &mut M, mut base: kvm_sregs) -> Result<kvm_sregs, Error> {
    load_boot_segments(mem, &PVH_GDT, &mut base)?;
    base.cr0 = X86_CR0_PE | X86_CR0_ET;
    base.cr3 = 0;
    base.cr4 = 0;
    base.efer = 0;
    Ok(base)
}

/// General registers at the PVH entry: EIP = entry, EBX = start info.
pub fn pvh_regs(entry: GuestAddress, start_info: GuestAddress) -> kvm_regs {
    kvm_regs {
        rflags: 0x2,
        rip: entry.0,
        rbx: start_info.0,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RecordingMemory;
    use vm_memory::{Bytes, GuestMemoryMmap};

    /// Pins every register the PVH boot path produces (32-bit protected
    /// mode, paging off), so a refactor of the segment setup cannot change
    /// what the guest starts with.
    #[test]
    fn pvh_sregs_exact_values() {
        use crate::regs::tests::{reset_sregs, seg};
        let mut m = RecordingMemory::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap(),
        );
        let base = reset_sregs();
        let got = pvh_sregs(&mut m, base).unwrap();
        let code = seg(0xffff_ffff, 0x08, 0xb, 1, 1, 0, 1);
        let data = seg(0xffff_ffff, 0x10, 0x3, 1, 1, 0, 1);
        let mut want = base;
        want.cs = code;
        (want.ds, want.es, want.fs, want.gs, want.ss) = (data, data, data, data, data);
        want.tr = seg(0x67, 0x18, 0xb, 0, 0, 0, 0);
        (want.gdt.base, want.gdt.limit) = (0x500, 31);
        (want.idt.base, want.idt.limit) = (0x520, 7);
        (want.cr0, want.cr3, want.cr4, want.efer) = (0x11, 0, 0, 0);
        assert_eq!(got, want);
        let gdt: [u64; 4] = m.mem.read_obj(GuestAddress(0x500)).unwrap();
        assert_eq!(
            gdt,
            [
                0,
                0x00cf_9b00_0000_ffff,
                0x00cf_9300_0000_ffff,
                0x0000_8b00_0000_0067
            ]
        );
        assert_eq!(m.mem.read_obj::<u64>(GuestAddress(0x520)).unwrap(), 0);
        assert!(m.was_written(0x500) && m.was_written(0x51f) && m.was_written(0x520));
    }

    #[test]
    fn start_info_and_memmap() {
        let mut m = RecordingMemory::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap(),
        );
        let at = write_start_info(
            &mut m,
            &RamLayout::new(4 << 30),
            Some((GuestAddress(0x3000_0000), 1234)),
        )
        .unwrap();
        let info: hvm_start_info = m.mem.read_obj(at).unwrap();
        assert_eq!(
            (info.magic, info.version, info.nr_modules),
            (XEN_HVM_START_MAGIC, 1, 1)
        );
        assert_eq!(info.cmdline_paddr, CMDLINE_START);
        assert_eq!(info.memmap_entries, 4);
        let last: hvm_memmap_table_entry =
            m.mem.read_obj(GuestAddress(MEMMAP_START + 3 * 24)).unwrap();
        assert_eq!((last.addr, last.size, last.type_), (4 << 30, 1 << 30, 1));
        let module: hvm_modlist_entry = m.mem.read_obj(GuestAddress(MODLIST_START)).unwrap();
        assert_eq!((module.paddr, module.size), (0x3000_0000, 1234));
        assert!(m.was_written(PVH_INFO_START) && m.was_written(MEMMAP_START + 95));
    }

    #[test]
    fn protected_mode_without_paging() {
        let mut m = RecordingMemory::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap(),
        );
        let s = pvh_sregs(&mut m, kvm_sregs::default()).unwrap();
        assert_eq!(
            (s.cr0, s.cr4, s.efer, s.cr3),
            (X86_CR0_PE | X86_CR0_ET, 0, 0, 0)
        );
        assert_eq!(
            (s.cs.db, s.cs.l, s.cs.selector, s.cs.limit),
            (1, 0, 8, 0xffff_ffff)
        );
        assert_eq!(
            (s.ds.selector, s.tr.selector, s.tr.type_),
            (0x10, 0x18, 0xb)
        );
        let r = pvh_regs(GuestAddress(0x100_0000), GuestAddress(PVH_INFO_START));
        assert_eq!((r.rip, r.rbx), (0x100_0000, PVH_INFO_START));
    }
}
