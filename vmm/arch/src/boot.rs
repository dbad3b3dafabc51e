//! The Linux x86 boot protocol's data: e820 map, `boot_params` (the "zero
//! page"), command line, initramfs placement and the setup_data chain.

use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use vm_memory::{ByteValued, GuestAddress};

use crate::layout::{
    RamLayout, CMDLINE_MAX_SIZE, CMDLINE_START, EBDA_START, HIMEM_START, SETUP_DATA_END,
    SETUP_DATA_START, ZERO_PAGE_START,
};
use crate::memory::BootMemory;

/// e820 type of usable RAM.
pub const E820_RAM: u32 = 1;
/// e820 type of reserved memory.
pub const E820_RESERVED: u32 = 2;
/// `boot_params.hdr.boot_flag` value.
const BOOT_FLAG: u16 = 0xaa55;
/// `HdrS`.
const HDRS_MAGIC: u32 = 0x5372_6448;
/// "Undefined" boot loader id (the protocol's value for loaders without an
/// assigned id).
const LOADER_TYPE_UNDEFINED: u8 = 0xff;
/// `loadflags` bit: kernel loaded high (0x100000).
const LOADED_HIGH: u8 = 0x01;
/// Size of a setup_data header: `next` (u64), `type` (u32), `len` (u32).
pub const SETUP_DATA_HEADER_SIZE: u64 = 16;

/// Errors building boot data.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line does not fit.
    #[error("kernel command line is {len} bytes but at most {max} fit (the kernel's cmdline_size); shorten --cmdline")]
    CmdlineTooLong {
        /// Bytes including the terminating NUL.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The command line contains a NUL byte.
    #[error("kernel command line contains a NUL byte; remove it from --cmdline")]
    CmdlineNul,
    /// The setup_data entries do not fit in their area.
    #[error("setup_data entries need {need} bytes but only {have} are reserved for them")]
    SetupDataTooLarge {
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// The initramfs does not fit in RAM below the kernel's limit.
    #[error("initramfs of {size} bytes does not fit in guest RAM below {limit:#x} above the kernel; give the VM more memory (--memory size=...)")]
    InitrdTooLarge {
        /// initramfs size.
        size: u64,
        /// Highest usable address + 1.
        limit: u64,
    },
    /// More e820 entries than the zero page holds.
    #[error("{0} e820 entries do not fit in boot_params")]
    TooManyE820(usize),
    /// Guest memory write failed.
    #[error("writing boot data into guest memory: {0}")]
    Memory(#[from] crate::memory::MemoryError),
}

/// One e820 entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E820Entry {
    /// Start address.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Type ([`E820_RAM`], [`E820_RESERVED`]).
    pub kind: u32,
}

/// The e820 map of guest RAM laid out as `layout`.
///
/// Low RAM stops at the EBDA (which holds the MP table, reported reserved);
/// `[0xa0000, 1 MiB)` is the legacy VGA/BIOS hole and is not listed, like on
/// Firecracker. RAM resumes at 1 MiB and continues above the 3..4 GiB hole.
pub fn e820_map(layout: &RamLayout) -> Vec<E820Entry> {
    let mut v = vec![
        E820Entry {
            addr: 0,
            size: EBDA_START,
            kind: E820_RAM,
        },
        E820Entry {
            addr: EBDA_START,
            size: 0xa0000 - EBDA_START,
            kind: E820_RESERVED,
        },
    ];
    for &(start, len) in layout.regions() {
        let (s, e) = (start.0.max(HIMEM_START), start.0 + len);
        if e > s {
            v.push(E820Entry {
                addr: s,
                size: e - s,
                kind: E820_RAM,
            });
        }
    }
    v
}

/// The working areas of a bzImage kernel loaded at `load_addr`: where its
/// decompressor runs and writes `init_size` bytes before the kernel can
/// read its memory map (or any pre-zeroed hint). The VMM must keep them out
/// of the zero hint in addition to `[load_addr, load_addr + init_size)`.
///
/// A relocatable kernel does not run where it was loaded: boot.rst
/// ("init_size") puts the runtime start at `align_up(max(load, pref_address),
/// kernel_alignment)`, and a non-relocatable one at `pref_address`. For a
/// stock x86 kernel loaded at 1 MiB that is 16 MiB (`LOAD_PHYSICAL_ADDR`),
/// so excluding only the load-address window would hint pages the guest
/// has already written. `head_64.S` computes the same address in the other
/// order (`max(align_up(load), pref)`); both are returned when they differ.
/// Empty for protocols before 2.10, which have no `init_size`.
pub fn kernel_runtime_windows(hdr: &setup_header, load_addr: u64) -> Vec<(u64, u64)> {
    if hdr.version < 0x20a || hdr.init_size == 0 {
        return Vec::new();
    }
    let len = u64::from(hdr.init_size);
    let pref = hdr.pref_address;
    let mut starts = if hdr.relocatable_kernel != 0 {
        // Mask arithmetic as the kernel does it (alignment is a power of
        // two); an alignment of 0 or 1 means no rounding.
        let mask = u64::from(hdr.kernel_alignment.max(1)) - 1;
        let up = |a: u64| a.saturating_add(mask) & !mask;
        vec![up(load_addr.max(pref)), up(load_addr).max(pref)]
    } else {
        vec![pref]
    };
    starts.dedup();
    starts.into_iter().map(|s| (s, len)).collect()
}

/// Where to put an initramfs of `size` bytes: the highest page-aligned
/// address that keeps it inside low RAM (below the MMIO hole), below the
/// kernel's `initrd_addr_max`, and above `kernel_end`.
pub fn initrd_addr(
    layout: &RamLayout,
    size: u64,
    initrd_addr_max: u32,
    kernel_end: u64,
) -> Result<GuestAddress, Error> {
    let low_end = layout.low_end();
    // initrd_addr_max is the highest address the initrd may *occupy*.
    let limit = low_end.min(u64::from(initrd_addr_max) + 1);
    let too_large = Error::InitrdTooLarge { size, limit };
    let start = limit.checked_sub(size).ok_or(too_large)? & !0xfff;
    if start < kernel_end.max(HIMEM_START) {
        return Err(Error::InitrdTooLarge { size, limit });
    }
    Ok(GuestAddress(start))
}

/// A setup_data payload to chain into `boot_params.hdr.setup_data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupData {
    /// setup_data `type`.
    pub kind: u32,
    /// Payload; `len` is exactly its length.
    pub data: Vec<u8>,
}

/// Writes the setup_data entries as a linked list starting at
/// [`SETUP_DATA_START`] (each header 8-byte aligned) and returns the address
/// of the first one (0 when there are none), for `hdr.setup_data`.
pub fn write_setup_data<M: BootMemory>(mem: &mut M, entries: &[SetupData]) -> Result<u64, Error> {
    let mut addrs = Vec::with_capacity(entries.len());
    let mut at = SETUP_DATA_START;
    for e in entries {
        addrs.push(at);
        at = (at + SETUP_DATA_HEADER_SIZE + e.data.len() as u64 + 7) & !7;
    }
    if at > SETUP_DATA_END {
        return Err(Error::SetupDataTooLarge {
            need: at - SETUP_DATA_START,
            have: SETUP_DATA_END - SETUP_DATA_START,
        });
    }
    for (i, e) in entries.iter().enumerate() {
        let next = addrs.get(i + 1).copied().unwrap_or(0);
        let mut buf = Vec::with_capacity(16 + e.data.len());
        buf.extend_from_slice(&next.to_le_bytes());
        buf.extend_from_slice(&e.kind.to_le_bytes());
        buf.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
        buf.extend_from_slice(&e.data);
        mem.write_tracked(&buf, GuestAddress(addrs[i]))
            .map_err(crate::memory::MemoryError)?;
    }
    Ok(addrs.first().copied().unwrap_or(0))
}

/// Writes the command line (NUL-terminated) at [`CMDLINE_START`] and returns
/// its length including the NUL. `kernel_max` is the kernel's
/// `cmdline_size` (0 = unknown: use 255, the protocol's pre-2.06 limit).
pub fn write_cmdline<M: BootMemory>(
    mem: &mut M,
    cmdline: &str,
    kernel_max: u32,
) -> Result<usize, Error> {
    if cmdline.as_bytes().contains(&0) {
        return Err(Error::CmdlineNul);
    }
    let kernel_max = if kernel_max == 0 {
        256
    } else {
        kernel_max as usize + 1
    };
    let max = CMDLINE_MAX_SIZE.min(kernel_max);
    let mut bytes = cmdline.as_bytes().to_vec();
    bytes.push(0);
    if bytes.len() > max {
        return Err(Error::CmdlineTooLong {
            len: bytes.len(),
            max,
        });
    }
    mem.write_tracked(&bytes, GuestAddress(CMDLINE_START))
        .map_err(crate::memory::MemoryError)?;
    Ok(bytes.len())
}

/// Inputs for [`build_boot_params`].
#[derive(Clone, Debug)]
pub struct BootParamsConfig<'a> {
    /// The kernel's setup header (from the bzImage), or `None` for an image
    /// without one.
    pub header: Option<setup_header>,
    /// Guest RAM (for the e820 table).
    pub layout: &'a RamLayout,
    /// Command line length including its NUL (from [`write_cmdline`]).
    pub cmdline_len: usize,
    /// initramfs `(address, size)`.
    pub initrd: Option<(GuestAddress, u64)>,
    /// First setup_data address (from [`write_setup_data`]), 0 for none.
    pub setup_data: u64,
    /// ACPI RSDP address, 0 for none (boot protocol 2.14 `acpi_rsdp_addr`;
    /// older kernels find it by scanning the BIOS area).
    pub acpi_rsdp: u64,
}

/// Builds `boot_params` for the 64-bit boot protocol.
pub fn build_boot_params(cfg: &BootParamsConfig<'_>) -> Result<boot_params, Error> {
    let mut p = boot_params::default();
    if let Some(h) = cfg.header {
        p.hdr = h;
    }
    p.hdr.boot_flag = BOOT_FLAG;
    p.hdr.header = HDRS_MAGIC;
    p.hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
    p.hdr.loadflags |= LOADED_HIGH;
    p.hdr.cmd_line_ptr = CMDLINE_START as u32;
    p.hdr.cmdline_size = cfg.cmdline_len.saturating_sub(1) as u32;
    if cfg.header.is_none() {
        p.hdr.kernel_alignment = 0x0100_0000;
    }
    if let Some((addr, size)) = cfg.initrd {
        p.hdr.ramdisk_image = addr.0 as u32;
        p.hdr.ramdisk_size = size as u32;
    }
    p.hdr.setup_data = cfg.setup_data;
    p.acpi_rsdp_addr = cfg.acpi_rsdp;
    let map = e820_map(cfg.layout);
    if map.len() > p.e820_table.len() {
        return Err(Error::TooManyE820(map.len()));
    }
    for (i, e) in map.iter().enumerate() {
        p.e820_table[i] = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind,
        };
    }
    p.e820_entries = map.len() as u8;
    Ok(p)
}

/// Writes `params` at [`ZERO_PAGE_START`].
pub fn write_boot_params<M: BootMemory>(mem: &mut M, params: &boot_params) -> Result<(), Error> {
    mem.write_tracked(params.as_slice(), GuestAddress(ZERO_PAGE_START))
        .map_err(crate::memory::MemoryError)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_header(reloc: bool, align: u32, pref: u64, init: u32) -> setup_header {
        setup_header {
            version: 0x20f,
            relocatable_kernel: u8::from(reloc),
            kernel_alignment: align,
            pref_address: pref,
            init_size: init,
            ..Default::default()
        }
    }

    #[test]
    fn runtime_window_of_a_stock_kernel_is_at_pref_address() {
        // Debian 6.12's vmlinuz: relocatable, 2 MiB, pref 16 MiB, loaded at 1 MiB.
        let h = kernel_header(true, 0x20_0000, 0x100_0000, 0x337_8000);
        assert_eq!(
            kernel_runtime_windows(&h, HIMEM_START),
            vec![(0x100_0000, 0x337_8000)]
        );
        // Loaded above pref: rounded up to the alignment.
        assert_eq!(
            kernel_runtime_windows(&h, 0x210_0000),
            vec![(0x220_0000, 0x337_8000)]
        );
        // Not relocatable: always pref_address.
        let h = kernel_header(false, 0x20_0000, 0x100_0000, 0x1000);
        assert_eq!(
            kernel_runtime_windows(&h, HIMEM_START),
            vec![(0x100_0000, 0x1000)]
        );
        // Unaligned pref: both orders of the rule are covered.
        let h = kernel_header(true, 0x20_0000, 0x30_0000, 0x1000);
        assert_eq!(
            kernel_runtime_windows(&h, HIMEM_START),
            vec![(0x40_0000, 0x1000), (0x30_0000, 0x1000)]
        );
    }

    #[test]
    fn runtime_window_edge_cases_do_not_panic() {
        let h = kernel_header(true, 0, u64::MAX, u32::MAX);
        assert_eq!(
            kernel_runtime_windows(&h, 0),
            vec![(u64::MAX, u64::from(u32::MAX))]
        );
        let h = kernel_header(true, 0x8000_0000, u64::MAX - 5, 1);
        assert!(!kernel_runtime_windows(&h, 0).is_empty());
        let mut old = kernel_header(true, 0x20_0000, 0x100_0000, 0x1000);
        old.version = 0x209;
        assert!(kernel_runtime_windows(&old, HIMEM_START).is_empty());
    }
    use crate::layout::MMIO_GAP_START;
    use crate::memory::RecordingMemory;
    use vm_memory::{Bytes, GuestMemoryMmap};

    fn mem(size: usize) -> RecordingMemory {
        RecordingMemory::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).unwrap())
    }

    #[test]
    fn e820_small() {
        let m = e820_map(&RamLayout::new(512 << 20));
        assert_eq!(
            m,
            vec![
                E820Entry {
                    addr: 0,
                    size: EBDA_START,
                    kind: E820_RAM
                },
                E820Entry {
                    addr: EBDA_START,
                    size: 0x400,
                    kind: E820_RESERVED
                },
                E820Entry {
                    addr: HIMEM_START,
                    size: (512 << 20) - HIMEM_START,
                    kind: E820_RAM
                },
            ]
        );
    }

    #[test]
    fn e820_crosses_hole_and_totals_ram() {
        let size = 4u64 << 30;
        let m = e820_map(&RamLayout::new(size));
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].addr + m[2].size, MMIO_GAP_START);
        assert_eq!(
            m[3],
            E820Entry {
                addr: 4 << 30,
                size: 1 << 30,
                kind: E820_RAM
            }
        );
        let ram: u64 = m
            .iter()
            .filter(|e| e.kind == E820_RAM)
            .map(|e| e.size)
            .sum();
        // Everything except the EBDA and the legacy hole is usable.
        assert_eq!(ram, size - (HIMEM_START - EBDA_START));
        for w in m.windows(2) {
            assert!(w[0].addr + w[0].size <= w[1].addr);
        }
    }

    #[test]
    fn boot_params_fields() {
        let h = setup_header {
            version: 0x20f,
            kernel_alignment: 0x20_0000,
            cmdline_size: 2047,
            ..Default::default()
        };
        let p = build_boot_params(&BootParamsConfig {
            header: Some(h),
            layout: &RamLayout::new(1 << 30),
            cmdline_len: 10,
            initrd: Some((GuestAddress(0x3000_0000), 0x1234)),
            setup_data: SETUP_DATA_START,
            acpi_rsdp: 0xe0000,
        })
        .unwrap();
        assert_eq!({ p.hdr.boot_flag }, 0xaa55);
        assert_eq!({ p.hdr.header }, HDRS_MAGIC);
        assert_eq!({ p.hdr.type_of_loader }, 0xff);
        assert_eq!({ p.hdr.cmd_line_ptr }, CMDLINE_START as u32);
        assert_eq!({ p.hdr.cmdline_size }, 9);
        assert_eq!({ p.hdr.kernel_alignment }, 0x20_0000);
        assert_eq!({ p.hdr.ramdisk_image }, 0x3000_0000);
        assert_eq!({ p.hdr.ramdisk_size }, 0x1234);
        assert_eq!({ p.hdr.setup_data }, SETUP_DATA_START);
        assert_eq!({ p.hdr.version }, 0x20f);
        assert_eq!({ p.acpi_rsdp_addr }, 0xe0000);
        assert_eq!(p.e820_entries, 3);
        assert_eq!({ p.e820_table[2].addr }, HIMEM_START);
        // Offsets from Documentation/arch/x86/zero-page.rst.
        let b = p.as_slice();
        assert_eq!(b[0x1e8], 3);
        assert_eq!(u16::from_le_bytes([b[0x1fe], b[0x1ff]]), 0xaa55);
        assert_eq!(
            u32::from_le_bytes(b[0x228..0x22c].try_into().unwrap()),
            CMDLINE_START as u32
        );
        assert_eq!(
            u64::from_le_bytes(b[0x250..0x258].try_into().unwrap()),
            SETUP_DATA_START
        );
        assert_eq!(
            u64::from_le_bytes(b[0x2d0 + 40..0x2d0 + 48].try_into().unwrap()),
            HIMEM_START
        );
    }

    #[test]
    fn setup_data_chain() {
        let mut m = mem(1 << 20);
        let first = write_setup_data(
            &mut m,
            &[
                SetupData {
                    kind: 0x5a48_0001,
                    data: vec![1, 2, 3],
                },
                SetupData {
                    kind: 7,
                    data: vec![9; 20],
                },
            ],
        )
        .unwrap();
        assert_eq!(first, SETUP_DATA_START);
        let next: u64 = m.mem.read_obj(GuestAddress(first)).unwrap();
        assert_eq!(next, SETUP_DATA_START + 24); // 16 + 3 rounded up to 8
        let kind: u32 = m.mem.read_obj(GuestAddress(first + 8)).unwrap();
        let len: u32 = m.mem.read_obj(GuestAddress(first + 12)).unwrap();
        assert_eq!((kind, len), (0x5a48_0001, 3));
        let n2: u64 = m.mem.read_obj(GuestAddress(next)).unwrap();
        let len2: u32 = m.mem.read_obj(GuestAddress(next + 12)).unwrap();
        assert_eq!((n2, len2), (0, 20));
        assert!(m.was_written(first) && m.was_written(next + 16 + 19));
        assert_eq!(write_setup_data(&mut m, &[]).unwrap(), 0);
    }

    #[test]
    fn setup_data_too_large() {
        let mut m = mem(1 << 20);
        let big = SetupData {
            kind: 1,
            data: vec![0; (SETUP_DATA_END - SETUP_DATA_START) as usize],
        };
        assert!(matches!(
            write_setup_data(&mut m, &[big]),
            Err(Error::SetupDataTooLarge { .. })
        ));
    }

    #[test]
    fn cmdline_limits() {
        let mut m = mem(1 << 20);
        assert_eq!(write_cmdline(&mut m, "console=ttyS0", 2047).unwrap(), 14);
        assert!(m.was_written(CMDLINE_START + 13));
        assert!(matches!(
            write_cmdline(&mut m, &"x".repeat(300), 0),
            Err(Error::CmdlineTooLong { .. })
        ));
        assert!(matches!(
            write_cmdline(&mut m, "a\0b", 2047),
            Err(Error::CmdlineNul)
        ));
    }

    #[test]
    fn initrd_placement() {
        let a = initrd_addr(&RamLayout::new(512 << 20), 0x1001, 0x7fff_ffff, 0x20_0000).unwrap();
        assert_eq!(a.0 & 0xfff, 0);
        assert!(a.0 + 0x1001 <= 512 << 20);
        // Above 3 GiB of RAM the initrd stays below the hole.
        let a = initrd_addr(&RamLayout::new(8 << 30), 1 << 20, 0xffff_ffff, 0x20_0000).unwrap();
        assert!(a.0 + (1 << 20) <= MMIO_GAP_START);
        // Respect initrd_addr_max.
        let a = initrd_addr(&RamLayout::new(2 << 30), 4096, 0x37ff_ffff, 0).unwrap();
        assert_eq!(a.0, 0x3800_0000 - 4096);
        assert!(initrd_addr(&RamLayout::new(16 << 20), 32 << 20, 0xffff_ffff, 0).is_err());
        assert!(initrd_addr(&RamLayout::new(16 << 20), 8 << 20, 0xffff_ffff, 12 << 20).is_err());
    }
}
