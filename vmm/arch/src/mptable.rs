//! Intel MultiProcessor Specification 1.4 table: tells the guest how many
//! vCPUs there are (and their APIC ids) and how the 24 I/O APIC pins are
//! wired, without ACPI.

use vm_memory::GuestAddress;

use crate::layout::{APIC_START, IOAPIC_START, MPTABLE_START};
use crate::memory::BootMemory;

/// Most vCPUs the table (and this VMM) supports: the table must fit in the
/// 1 KiB EBDA window the kernel scans.
pub const MAX_VCPUS: u8 = 32;
/// I/O APIC pins.
const IOAPIC_PINS: u8 = 24;
const APIC_VERSION: u8 = 0x14;
const IOAPIC_VERSION: u8 = 0x11;
const CPU_ENABLED: u8 = 1;
const CPU_BSP: u8 = 2;
const MP_INT: u8 = 0;
const MP_NMI: u8 = 1;
const MP_EXTINT: u8 = 3;
/// Size of the floating pointer structure.
const MPF_SIZE: usize = 16;

/// Errors building the MP table.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Too many or zero vCPUs.
    #[error("{0} vCPUs requested; the MP table supports 1..={MAX_VCPUS}")]
    VcpuCount(u8),
    /// Writing into guest memory failed.
    #[error("writing the MP table: {0}")]
    Memory(#[from] crate::memory::MemoryError),
}

fn checksum(b: &[u8]) -> u8 {
    0u8.wrapping_sub(b.iter().fold(0u8, |a, &x| a.wrapping_add(x)))
}

/// Builds the MP floating pointer followed by the configuration table for
/// `cpus` vCPUs (APIC ids 0..cpus, I/O APIC id = cpus), to be placed at
/// `base`.
pub fn build(cpus: u8, base: u64) -> Result<Vec<u8>, Error> {
    if cpus == 0 || cpus > MAX_VCPUS {
        return Err(Error::VcpuCount(cpus));
    }
    let ioapic_id = cpus;
    let mut entries: Vec<u8> = Vec::new();
    let mut count: u16 = 0;
    // Processor entries (20 bytes).
    for id in 0..cpus {
        let flags = CPU_ENABLED | if id == 0 { CPU_BSP } else { 0 };
        entries.extend_from_slice(&[0, id, APIC_VERSION, flags]);
        // Signature: family 6 (any value works; Linux only prints it).
        entries.extend_from_slice(&0x600u32.to_le_bytes());
        // Feature flags: FPU | APIC.
        entries.extend_from_slice(&((1u32 << 0) | (1 << 9)).to_le_bytes());
        entries.extend_from_slice(&[0; 8]);
        count += 1;
    }
    // Bus entry (8 bytes): ISA.
    entries.extend_from_slice(&[1, 0]);
    entries.extend_from_slice(b"ISA   ");
    count += 1;
    // I/O APIC entry (8 bytes).
    entries.extend_from_slice(&[2, ioapic_id, IOAPIC_VERSION, 1]);
    entries.extend_from_slice(&(IOAPIC_START as u32).to_le_bytes());
    count += 1;
    // I/O interrupt entries: ISA IRQ i -> I/O APIC pin i.
    for irq in 0..IOAPIC_PINS {
        entries.extend_from_slice(&[3, MP_INT, 0, 0, 0, irq, ioapic_id, irq]);
        count += 1;
    }
    // Local interrupt entries: ExtINT -> LINT0, NMI -> LINT1 on all CPUs.
    entries.extend_from_slice(&[4, MP_EXTINT, 0, 0, 0, 0, 0xff, 0]);
    entries.extend_from_slice(&[4, MP_NMI, 0, 0, 0, 0, 0xff, 1]);
    count += 2;

    let table_addr = base + MPF_SIZE as u64;
    let table_len = 44 + entries.len();
    let mut table = Vec::with_capacity(table_len);
    table.extend_from_slice(b"PCMP");
    table.extend_from_slice(&(table_len as u16).to_le_bytes());
    table.push(4); // spec revision 1.4
    table.push(0); // checksum
    table.extend_from_slice(b"ZEROSTRT");
    table.extend_from_slice(b"000000000000");
    table.extend_from_slice(&0u32.to_le_bytes()); // OEM table pointer
    table.extend_from_slice(&0u16.to_le_bytes()); // OEM table size
    table.extend_from_slice(&count.to_le_bytes());
    table.extend_from_slice(&(APIC_START as u32).to_le_bytes());
    table.extend_from_slice(&0u16.to_le_bytes()); // extended table length
    table.push(0); // extended table checksum
    table.push(0); // reserved
    debug_assert_eq!(table.len(), 44);
    table.extend_from_slice(&entries);
    table[7] = checksum(&table);

    let mut mpf = Vec::with_capacity(MPF_SIZE);
    mpf.extend_from_slice(b"_MP_");
    mpf.extend_from_slice(&(table_addr as u32).to_le_bytes());
    mpf.push(1); // length in 16-byte units
    mpf.push(4); // spec revision
    mpf.push(0); // checksum
    mpf.extend_from_slice(&[0; 5]); // feature bytes: table present, no default config
    mpf[10] = checksum(&mpf);

    let mut out = mpf;
    out.extend_from_slice(&table);
    Ok(out)
}

/// Writes the MP table for `cpus` vCPUs at [`MPTABLE_START`].
pub fn setup_mptable<M: BootMemory>(mem: &mut M, cpus: u8) -> Result<(), Error> {
    let t = build(cpus, MPTABLE_START)?;
    mem.write_tracked(&t, GuestAddress(MPTABLE_START))
        .map_err(crate::memory::MemoryError)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
    }

    #[test]
    fn checksums_and_layout() {
        for cpus in [1u8, 2, 7, MAX_VCPUS] {
            let t = build(cpus, MPTABLE_START).unwrap();
            assert_eq!(&t[..4], b"_MP_");
            assert_eq!(sum(&t[..16]), 0, "floating pointer checksum");
            let ptr = u32::from_le_bytes(t[4..8].try_into().unwrap()) as u64;
            assert_eq!(ptr, MPTABLE_START + 16);
            let tab = &t[16..];
            assert_eq!(&tab[..4], b"PCMP");
            let len = u16::from_le_bytes([tab[4], tab[5]]) as usize;
            assert_eq!(len, tab.len());
            assert_eq!(sum(tab), 0, "table checksum");
            let count = u16::from_le_bytes([tab[34], tab[35]]) as usize;
            assert_eq!(count, cpus as usize + 1 + 1 + 24 + 2);
            assert_eq!(tab[44], 0); // first entry: processor
            assert_eq!(tab[44 + 3], CPU_ENABLED | CPU_BSP);
            assert!(
                t.len() <= 1024,
                "{cpus} vCPUs: {} bytes exceed the EBDA KiB",
                t.len()
            );
        }
    }

    #[test]
    fn apic_ids_are_sequential() {
        let t = build(4, MPTABLE_START).unwrap();
        for i in 0..4 {
            let e = &t[16 + 44 + i * 20..];
            assert_eq!((e[0], e[1]), (0, i as u8));
            assert_eq!(e[3] & CPU_BSP != 0, i == 0);
        }
    }

    #[test]
    fn bad_counts() {
        assert!(build(0, MPTABLE_START).is_err());
        assert!(build(MAX_VCPUS + 1, MPTABLE_START).is_err());
    }
}
