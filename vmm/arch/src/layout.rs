//! Guest-physical memory layout for x86_64 direct kernel boot.
//!
//! Everything the VMM places below 1 MiB lives at a fixed address so that the
//! boot state is easy to audit; the whole first MiB is excluded from the zero
//! hint (see [`LOW_MEMORY_END`]).

use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

/// GDT location (4 entries of 8 bytes), as in Firecracker.
pub const BOOT_GDT_START: u64 = 0x500;
/// IDT location (one zero entry: the guest installs its own before enabling
/// interrupts).
pub const BOOT_IDT_START: u64 = 0x520;
/// `boot_params` ("zero page") address; RSI points here at entry.
pub const ZERO_PAGE_START: u64 = 0x7000;
/// Initial stack pointer. The boot protocol does not require a stack, but a
/// valid one makes early faults debuggable.
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// PML4 page.
pub const PML4_START: u64 = 0x9000;
/// PDPT page (covers 512 GiB).
pub const PDPTE_START: u64 = 0xa000;
/// First of [`PDE_PAGES`] page-directory pages, each covering 1 GiB with
/// 2 MiB pages.
pub const PDE_START: u64 = 0xb000;
/// Number of page-directory pages: the identity map covers 4 GiB, enough for
/// the kernel, boot_params, command line, initramfs (kept below 4 GiB) and
/// setup_data. Linux builds its own tables before touching anything else.
pub const PDE_PAGES: u64 = 4;
/// Kernel command line address.
pub const CMDLINE_START: u64 = 0x20000;
/// Largest command line we place (bytes, including the NUL). The kernel's
/// own limit (`cmdline_size` in the setup header) is applied on top.
pub const CMDLINE_MAX_SIZE: usize = 0x10000;
/// setup_data chain area (after the command line, below the EBDA).
pub const SETUP_DATA_START: u64 = 0x30000;
/// End of the setup_data area.
pub const SETUP_DATA_END: u64 = 0x9f000;
/// Start of the Extended BIOS Data Area: the MP table goes here (Linux scans
/// the first KiB of the EBDA for the MP floating pointer).
pub const EBDA_START: u64 = 0x9fc00;
/// MP table address.
pub const MPTABLE_START: u64 = EBDA_START;
/// First byte above the legacy low-memory area. The kernel is loaded here.
pub const HIMEM_START: u64 = 0x10_0000;
/// Everything below this address is excluded from the zero hint, written or
/// not: it holds BIOS-era structures, the boot state above, and legacy holes
/// that are not usable RAM in e820.
pub const LOW_MEMORY_END: u64 = HIMEM_START;
/// Start of the 32-bit MMIO hole (3 GiB). No RAM is mapped in
/// `[MMIO_GAP_START, MMIO_GAP_END)`.
pub const MMIO_GAP_START: u64 = 0xC000_0000;
/// End of the 32-bit MMIO hole (4 GiB): RAM continues here.
pub const MMIO_GAP_END: u64 = 0x1_0000_0000;
/// Local APIC MMIO base.
pub const APIC_START: u64 = 0xfee0_0000;
/// I/O APIC MMIO base.
pub const IOAPIC_START: u64 = 0xfec0_0000;

/// Where guest RAM lies in guest-physical space: the value every consumer
/// of the layout takes (e820 and `boot_params`, the PVH memory map, fw_cfg,
/// the write tracker, KVM memory slots), so that none of them recomputes it
/// from a bare size and they cannot disagree.
///
/// [`RamLayout::new`] is the rule the VMM maps memory by (RAM split around
/// the 3..4 GiB MMIO hole); [`RamLayout::from_memory`] reads it back from
/// the mapped memory object, as Firecracker's `configure_system` does from
/// `guest_mem`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamLayout {
    regions: Vec<(GuestAddress, u64)>,
}

impl RamLayout {
    /// Splits `size` bytes of guest RAM around the MMIO hole.
    ///
    /// One region `[0, size)` when it fits below 3 GiB, otherwise
    /// `[0, 3 GiB)` and `[4 GiB, 4 GiB + size - 3 GiB)`.
    pub fn new(size: u64) -> Self {
        let regions = if size <= MMIO_GAP_START {
            vec![(GuestAddress(0), size)]
        } else {
            vec![
                (GuestAddress(0), MMIO_GAP_START),
                (GuestAddress(MMIO_GAP_END), size - MMIO_GAP_START),
            ]
        };
        RamLayout { regions }
    }

    /// The layout of memory already mapped: its regions in address order.
    pub fn from_memory<M: GuestMemoryBackend>(mem: &M) -> Self {
        let mut regions: Vec<_> = mem.iter().map(|r| (r.start_addr(), r.len())).collect();
        regions.sort_by_key(|&(a, _)| a);
        RamLayout { regions }
    }

    /// `(start, length)` of each RAM region, in address order.
    pub fn regions(&self) -> &[(GuestAddress, u64)] {
        &self.regions
    }

    /// Total bytes of RAM.
    pub fn size(&self) -> u64 {
        self.regions.iter().map(|&(_, l)| l).sum()
    }

    /// The highest guest-physical address + 1 of RAM.
    pub fn end(&self) -> u64 {
        self.regions.last().map(|(a, l)| a.0 + l).unwrap_or(0)
    }

    /// End of the RAM below the MMIO hole (where 32-bit boot data such as
    /// the initramfs must go).
    pub fn low_end(&self) -> u64 {
        self.regions
            .iter()
            .filter(|&&(a, _)| a.0 < MMIO_GAP_START)
            .map(|&(a, l)| (a.0 + l).min(MMIO_GAP_START))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ram_is_one_region() {
        assert_eq!(
            RamLayout::new(512 << 20).regions(),
            [(GuestAddress(0), 512 << 20)]
        );
        assert_eq!(
            RamLayout::new(MMIO_GAP_START).regions(),
            [(GuestAddress(0), MMIO_GAP_START)]
        );
        assert_eq!(RamLayout::new(512 << 20).low_end(), 512 << 20);
    }

    #[test]
    fn large_ram_skips_the_hole() {
        let l = RamLayout::new(4 << 30);
        let r = l.regions();
        assert_eq!(
            r,
            [(GuestAddress(0), 3 << 30), (GuestAddress(4 << 30), 1 << 30)]
        );
        assert_eq!(r.iter().map(|x| x.1).sum::<u64>(), 4 << 30);
        assert_eq!(l.size(), 4 << 30);
        assert_eq!(l.end(), 5 << 30);
        assert_eq!(l.low_end(), MMIO_GAP_START);
    }

    /// The layout read back from mapped memory is the one it was mapped by.
    #[test]
    fn layout_from_memory_round_trips() {
        let l = RamLayout::new(64 << 20);
        let ranges: Vec<(GuestAddress, usize)> =
            l.regions().iter().map(|&(a, n)| (a, n as usize)).collect();
        let mem = vm_memory::GuestMemoryMmap::<()>::from_ranges(&ranges).unwrap();
        assert_eq!(RamLayout::from_memory(&mem), l);
    }

    #[test]
    fn fixed_structures_do_not_overlap() {
        let mut v = [
            (BOOT_GDT_START, 32),
            (BOOT_IDT_START, 8),
            (ZERO_PAGE_START, 4096),
            (PML4_START, 4096),
            (PDPTE_START, 4096),
            (PDE_START, 4096 * PDE_PAGES),
            (CMDLINE_START, CMDLINE_MAX_SIZE as u64),
            (SETUP_DATA_START, SETUP_DATA_END - SETUP_DATA_START),
            (MPTABLE_START, 0x400),
        ];
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[0].0 + w[0].1 <= w[1].0,
                "{:x?} overlaps {:x?}",
                w[0],
                w[1]
            );
        }
    }

    // Compile-time layout checks.
    const _: () = assert!(MPTABLE_START + 0x400 <= HIMEM_START);
    const _: () =
        assert!(BOOT_STACK_POINTER > ZERO_PAGE_START + 4096 && BOOT_STACK_POINTER < PML4_START);
}
