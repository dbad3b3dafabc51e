//! 64-bit entry state: identity page tables, GDT/IDT, special and general
//! registers, FPU.

use kvm_bindings::{kvm_fpu, kvm_regs, kvm_sregs};
use kvm_ioctls::VcpuFd;
use vm_memory::GuestAddress;

use crate::gdt::{load_boot_segments, BOOT_GDT};
use crate::layout::{
    BOOT_STACK_POINTER, PDE_PAGES, PDE_START, PDPTE_START, PML4_START, ZERO_PAGE_START,
};
use crate::memory::BootMemory;

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
const X86_CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
/// Present | writable.
const PTE_PW: u64 = 0x3;
/// Present | writable | page size (2 MiB).
const PDE_2M: u64 = 0x83;

/// Errors setting up vCPU registers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing page tables or the GDT into guest memory failed.
    #[error("writing boot page tables/GDT: {0}")]
    Memory(#[from] crate::memory::MemoryError),
    /// A vCPU register ioctl failed.
    #[error("{what} failed: {err}")]
    Kvm {
        /// Which ioctl.
        what: &'static str,
        /// errno.
        err: kvm_ioctls::Error,
    },
}

/// The identity page tables as `(address, page contents)`: PML4 → one PDPT →
/// [`PDE_PAGES`] page directories of 2 MiB pages, mapping
/// `[0, PDE_PAGES GiB)` one to one.
pub fn page_tables() -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pml4 = vec![0u8; 4096];
    pml4[..8].copy_from_slice(&(PDPTE_START | PTE_PW).to_le_bytes());
    out.push((PML4_START, pml4));
    let mut pdpt = vec![0u8; 4096];
    for i in 0..PDE_PAGES {
        let e = (PDE_START + i * 4096) | PTE_PW;
        pdpt[i as usize * 8..][..8].copy_from_slice(&e.to_le_bytes());
    }
    out.push((PDPTE_START, pdpt));
    for i in 0..PDE_PAGES {
        let mut pd = vec![0u8; 4096];
        for j in 0..512u64 {
            let e = (((i << 9) + j) << 21) | PDE_2M;
            pd[j as usize * 8..][..8].copy_from_slice(&e.to_le_bytes());
        }
        out.push((PDE_START + i * 4096, pd));
    }
    out
}

/// Writes the GDT, IDT and page tables and returns the special registers for
/// 64-bit long mode (paging on, CR3 = PML4), starting from `base`.
pub fn long_mode_sregs<M: BootMemory>(
    mem: &mut M,
    mut base: kvm_sregs,
) -> Result<kvm_sregs, Error> {
    load_boot_segments(mem, &BOOT_GDT, &mut base)?;
    for (addr, page) in page_tables() {
        mem.write_tracked(&page, GuestAddress(addr))
            .map_err(crate::memory::MemoryError)?;
    }
    base.cr0 |= X86_CR0_PE | X86_CR0_ET | X86_CR0_PG;
    base.cr3 = PML4_START;
    base.cr4 |= X86_CR4_PAE;
    base.efer |= EFER_LME | EFER_LMA;
    Ok(base)
}

/// General registers at the 64-bit entry point: RIP = `entry`, RSI =
/// `boot_params`, interrupts off.
pub fn boot_regs(entry: GuestAddress) -> kvm_regs {
    kvm_regs {
        rflags: 0x2,
        rip: entry.0,
        rsp: BOOT_STACK_POINTER,
        rbp: BOOT_STACK_POINTER,
        rsi: ZERO_PAGE_START,
        ..Default::default()
    }
}

/// The FPU state after reset (x87 control word 0x37f, MXCSR 0x1f80).
pub fn boot_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

/// Applies the boot state to a vCPU. Only the boot vCPU runs from here;
/// the others wait for INIT/SIPI from the guest, so their registers are left
/// at reset values (KVM handles that with the in-kernel LAPIC).
pub fn setup_boot_vcpu<M: BootMemory>(
    vcpu: &VcpuFd,
    mem: &mut M,
    entry: GuestAddress,
) -> Result<(), Error> {
    let kvm = |what| move |err| Error::Kvm { what, err };
    let sregs = vcpu.get_sregs().map_err(kvm("KVM_GET_SREGS"))?;
    let sregs = long_mode_sregs(mem, sregs)?;
    vcpu.set_sregs(&sregs).map_err(kvm("KVM_SET_SREGS"))?;
    vcpu.set_regs(&boot_regs(entry))
        .map_err(kvm("KVM_SET_REGS"))?;
    vcpu.set_fpu(&boot_fpu()).map_err(kvm("KVM_SET_FPU"))?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::layout::{BOOT_GDT_START, BOOT_IDT_START};
    use crate::memory::RecordingMemory;
    use vm_memory::{Bytes, GuestMemoryMmap};

    /// A segment as KVM takes it: present, DPL 0, usable.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn seg(
        limit: u32,
        selector: u16,
        type_: u8,
        s: u8,
        db: u8,
        l: u8,
        g: u8,
    ) -> kvm_bindings::kvm_segment {
        kvm_bindings::kvm_segment {
            base: 0,
            limit,
            selector,
            type_,
            present: 1,
            dpl: 0,
            db,
            s,
            l,
            g,
            avl: 0,
            unusable: 0,
            padding: 0,
        }
    }

    /// KVM's state after vCPU creation, roughly: reset CR0 (ET, CD, NW), an
    /// APIC base, an LDT; whatever the boot state does not set must survive.
    pub(crate) fn reset_sregs() -> kvm_sregs {
        let mut s = kvm_sregs {
            cr0: 0x6000_0010,
            cr4: 0x40,
            efer: 0x1,
            apic_base: 0xfee0_0900,
            ..Default::default()
        };
        s.ldt.limit = 0xffff;
        s.ldt.type_ = 2;
        s
    }

    /// Pins every register the 64-bit boot path produces, so a refactor of
    /// the segment setup cannot change what the guest starts with.
    #[test]
    fn long_mode_sregs_exact_values() {
        let mut m = RecordingMemory::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap(),
        );
        let base = reset_sregs();
        let got = long_mode_sregs(&mut m, base).unwrap();
        let code = seg(0xffff_ffff, 0x08, 0xb, 1, 0, 1, 1);
        let data = seg(0xffff_ffff, 0x10, 0x3, 1, 1, 0, 1);
        let mut want = base;
        want.cs = code;
        (want.ds, want.es, want.fs, want.gs, want.ss) = (data, data, data, data, data);
        want.tr = seg(0xffff_ffff, 0x18, 0xb, 0, 0, 0, 1);
        (want.gdt.base, want.gdt.limit) = (0x500, 31);
        (want.idt.base, want.idt.limit) = (0x520, 7);
        want.cr0 = 0x6000_0010 | 0x8000_0011;
        want.cr3 = 0x9000;
        want.cr4 = 0x40 | 0x20;
        want.efer = 0x1 | 0x500;
        assert_eq!(got, want);
        let gdt: [u64; 4] = m.mem.read_obj(GuestAddress(0x500)).unwrap();
        assert_eq!(
            gdt,
            [
                0,
                0x00af_9b00_0000_ffff,
                0x00cf_9300_0000_ffff,
                0x008f_8b00_0000_ffff
            ]
        );
        assert_eq!(m.mem.read_obj::<u64>(GuestAddress(0x520)).unwrap(), 0);
    }

    fn translate(m: &GuestMemoryMmap, cr3: u64, va: u64) -> Option<u64> {
        let pml4e: u64 = m
            .read_obj(GuestAddress(cr3 + ((va >> 39) & 511) * 8))
            .ok()?;
        if pml4e & 1 == 0 {
            return None;
        }
        let pdpte: u64 = m
            .read_obj(GuestAddress((pml4e & !0xfff) + ((va >> 30) & 511) * 8))
            .ok()?;
        if pdpte & 1 == 0 {
            return None;
        }
        let pde: u64 = m
            .read_obj(GuestAddress((pdpte & !0xfff) + ((va >> 21) & 511) * 8))
            .ok()?;
        if pde & 0x81 != 0x81 {
            return None;
        }
        Some((pde & !0x1f_ffff) + (va & 0x1f_ffff))
    }

    #[test]
    fn identity_maps_first_4g() {
        let mut m = RecordingMemory::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap(),
        );
        let s = long_mode_sregs(&mut m, kvm_sregs::default()).unwrap();
        assert_eq!(s.cr3, PML4_START);
        for va in [
            0u64,
            0x7000,
            0x10_0200,
            0x3fff_ffff,
            0xbfff_f000,
            0xffff_ffff,
        ] {
            assert_eq!(translate(&m.mem, s.cr3, va), Some(va), "va {va:#x}");
        }
        assert_eq!(translate(&m.mem, s.cr3, 1 << 32), None);
        // Every page-table page and the GDT were recorded as written.
        for a in [
            PML4_START,
            PDPTE_START,
            PDE_START + PDE_PAGES * 4096 - 1,
            BOOT_GDT_START + 31,
            BOOT_IDT_START,
        ] {
            assert!(m.was_written(a), "{a:#x}");
        }
    }

    #[test]
    fn long_mode_bits() {
        let mut m = RecordingMemory::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap(),
        );
        let s = long_mode_sregs(&mut m, kvm_sregs::default()).unwrap();
        assert_eq!(s.cr0 & (X86_CR0_PE | X86_CR0_PG), X86_CR0_PE | X86_CR0_PG);
        assert_ne!(s.cr4 & X86_CR4_PAE, 0);
        assert_eq!(s.efer & (EFER_LME | EFER_LMA), EFER_LME | EFER_LMA);
        assert_eq!((s.cs.selector, s.cs.l, s.ds.selector), (8, 1, 0x10));
        assert_eq!((s.gdt.base, s.gdt.limit), (BOOT_GDT_START, 31));
        let r = boot_regs(GuestAddress(0x10_0200));
        assert_eq!((r.rip, r.rsi, r.rflags), (0x10_0200, ZERO_PAGE_START, 2));
    }
}
