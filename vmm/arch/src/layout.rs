//! Guest-physical memory layout for x86_64 direct kernel boot.
//!
//! Everything the VMM places below 1 MiB lives at a fixed address so that the
//! boot state is easy to audit; the whole first MiB is excluded from the zero
//! hint (see [`LOW_MEMORY_END`]).

use vm_memory::GuestAddress;

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

/// Splits `size` bytes of guest RAM around the MMIO hole.
///
/// Returns one region `[0, size)` when it fits below 3 GiB, otherwise
/// `[0, 3 GiB)` and `[4 GiB, 4 GiB + size - 3 GiB)`.
pub fn ram_regions(size: u64) -> Vec<(GuestAddress, u64)> {
    if size <= MMIO_GAP_START {
        vec![(GuestAddress(0), size)]
    } else {
        vec![
            (GuestAddress(0), MMIO_GAP_START),
            (GuestAddress(MMIO_GAP_END), size - MMIO_GAP_START),
        ]
    }
}

/// The highest guest-physical address + 1 of RAM of `size` bytes.
pub fn ram_end(size: u64) -> u64 {
    ram_regions(size).last().map(|(a, l)| a.0 + l).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ram_is_one_region() {
        assert_eq!(ram_regions(512 << 20), vec![(GuestAddress(0), 512 << 20)]);
        assert_eq!(
            ram_regions(MMIO_GAP_START),
            vec![(GuestAddress(0), MMIO_GAP_START)]
        );
    }

    #[test]
    fn large_ram_skips_the_hole() {
        let r = ram_regions(4 << 30);
        assert_eq!(
            r,
            vec![(GuestAddress(0), 3 << 30), (GuestAddress(4 << 30), 1 << 30)]
        );
        assert_eq!(r.iter().map(|x| x.1).sum::<u64>(), 4 << 30);
        assert_eq!(ram_end(4 << 30), 5 << 30);
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
