//! Minimal ACPI tables (RSDP, XSDT, FADT, MADT, DSDT) so Linux can power
//! the VM off.
//!
//! Without ACPI, Linux's `poweroff` halts forever. With a hardware-reduced
//! FADT whose sleep control register is an I/O port and a DSDT with an `_S5_`
//! object, `poweroff` writes `SLP_TYP=5 | SLP_EN` to [`PM_PORT`] and the VMM
//! ends the run (cloud-hypervisor and Firecracker do the same). The MADT
//! lists the vCPUs and the I/O APIC; the DSDT also describes COM1 and every
//! virtio-mmio device with its window and interrupt; the MP table (and the
//! `virtio_mmio.device=` command-line entries) stay for `acpi=off`.
//!
//! The FADT's IA-PC boot flags say: no VGA, no MSI, and (by leaving the
//! 8042 flag clear) no keyboard controller, so Linux skips the i8042 probe;
//! `reboot=k` still resets through port 0x64.

use acpi_tables::{aml, fadt, gas, madt, rsdp::Rsdp, sdt::Sdt, xsdt::XSDT, Aml};
use vm_memory::GuestAddress;

use crate::layout::{APIC_START, IOAPIC_START};
use crate::memory::{BootMemory, MemoryError};

/// Where the tables go: the legacy BIOS area, where Linux also scans for
/// the RSDP. Below 1 MiB, so never hinted.
pub const ACPI_START: u64 = 0xe_0000;
/// End of the ACPI area.
pub const ACPI_END: u64 = 0x10_0000;
/// I/O port of the sleep control/status and reset registers.
pub const PM_PORT: u16 = 0x600;
/// `_S5_` sleep type.
pub const S5_SLP_TYP: u8 = 5;
/// Sleep-enable bit of the sleep control register.
pub const SLP_EN: u8 = 1 << 5;
/// Value of a write that means "power off".
pub const POWEROFF_VALUE: u8 = (S5_SLP_TYP << 2) | SLP_EN;
/// FADT reset value (written to [`PM_PORT`]).
pub const RESET_VALUE: u8 = 1;

const OEM_ID: [u8; 6] = *b"ZEROST";
const OEM_REVISION: u32 = 1;
/// IA-PC boot architecture flags: VGA not present, MSI not supported,
/// PCIe ASPM controls.
const IAPC_BOOT_ARCH: u16 = (1 << 2) | (1 << 3) | (1 << 4);

/// Errors writing ACPI tables.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tables do not fit the BIOS area.
    #[error("ACPI tables need {0} bytes, more than the {max} reserved", max = ACPI_END - ACPI_START)]
    TooLarge(u64),
    /// Writing into guest memory failed.
    #[error("writing ACPI tables: {0}")]
    Memory(#[from] MemoryError),
}

fn bytes(t: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    t.to_aml_bytes(&mut v);
    v
}

/// COM1 as an ACPI device (PNP0501, ports 0x3f8..0x3ff, edge-triggered
/// active-high GSI 4). In hardware-reduced mode Linux has no legacy PIC and
/// maps no ISA IRQs by itself, so without this the UART gets no interrupt
/// and user-space console output stalls.
fn com1_device() -> Vec<u8> {
    let hid = aml::EISAName::new("PNP0501");
    let io = aml::IO::new(0x3f8, 0x3f8, 1, 8);
    let irq = aml::Interrupt::new(true, true, false, false, 4);
    let crs = aml::ResourceTemplate::new(vec![&io, &irq]);
    let names = [
        aml::Name::new("_HID".into(), &hid),
        aml::Name::new("_UID".into(), &aml::ZERO),
        aml::Name::new("_CRS".into(), &crs),
    ];
    let dev = aml::Device::new("COM1".into(), names.iter().map(|n| n as &dyn Aml).collect());
    bytes(&aml::Scope::new("_SB_".into(), vec![&dev]))
}

/// A virtio-mmio device as the DSDT describes it: its register window and
/// its GSI (an I/O APIC pin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VirtioMmio {
    /// Guest-physical base of the register window.
    pub base: u32,
    /// Window size in bytes.
    pub size: u32,
    /// GSI: the I/O APIC pin the device's irqfd raises.
    pub gsi: u32,
}

/// The virtio-mmio devices as ACPI devices (`LNRO0005`, the id Linux's
/// virtio_mmio driver matches, as Firecracker and QEMU's microvm describe
/// them), each with `Memory32Fixed` and an edge-triggered active-high
/// `Interrupt`. Why not only `virtio_mmio.device=` on the command line:
/// with a hardware-reduced FADT Linux maps no ISA IRQ by itself, so a
/// command-line device's IRQ has no I/O APIC route and the driver's
/// `request_irq` fails with -EINVAL (seen: virtio_blk "probe failed with
/// error -22"); an ACPI `Interrupt` resource is a GSI, which Linux routes.
fn virtio_devices(devs: &[VirtioMmio]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, d) in devs.iter().enumerate() {
        let mem = aml::Memory32Fixed::new(true, d.base, d.size);
        let irq = aml::Interrupt::new(true, true, false, false, d.gsi);
        let crs = aml::ResourceTemplate::new(vec![&mem, &irq]);
        let uid = i as u32;
        let hid: aml::AmlStr = "LNRO0005";
        let names = [
            aml::Name::new("_HID".into(), &hid),
            aml::Name::new("_UID".into(), &uid),
            aml::Name::new("_CRS".into(), &crs),
        ];
        let name = format!("VR{i:02X}");
        let dev = aml::Device::new(
            name.as_str().into(),
            names.iter().map(|n| n as &dyn Aml).collect(),
        );
        out.extend(bytes(&aml::Scope::new("_SB_".into(), vec![&dev])));
    }
    out
}

fn port_gas(port: u16) -> gas::GAS {
    gas::GAS::new(
        gas::AddressSpace::SystemIo,
        8,
        0,
        gas::AccessSize::ByteAccess,
        u64::from(port),
    )
}

/// Builds the tables for `cpus` vCPUs and the `virtio` devices as
/// `(address, bytes)` pieces, RSDP first at [`ACPI_START`].
pub fn build(cpus: u8, virtio: &[VirtioMmio]) -> Result<Vec<(u64, Vec<u8>)>, Error> {
    let align = |a: u64| (a + 15) & !15;
    let rsdp_addr = ACPI_START;
    let mut at = align(rsdp_addr + Rsdp::len() as u64);

    let mut dsdt = Sdt::new(*b"DSDT", 36, 6, OEM_ID, *b"ZSDSDT  ", OEM_REVISION);
    let s5 = aml::Name::new("_S5_".into(), &aml::Package::new(vec![&S5_SLP_TYP]));
    dsdt.append_slice(&bytes(&s5));
    dsdt.append_slice(&com1_device());
    dsdt.append_slice(&virtio_devices(virtio));
    let dsdt = bytes(&dsdt);
    let dsdt_addr = at;
    at = align(at + dsdt.len() as u64);

    let mut f = fadt::FADTBuilder::new(OEM_ID, *b"ZSFACP  ", OEM_REVISION)
        .dsdt_64(dsdt_addr)
        .flag(fadt::Flags::HwReducedAcpi)
        .flag(fadt::Flags::ResetRegSup);
    f.iapc_boot_arch = IAPC_BOOT_ARCH.into();
    f.sleep_control_reg = port_gas(PM_PORT);
    f.sleep_status_reg = port_gas(PM_PORT);
    f.reset_reg = port_gas(PM_PORT);
    f.reset_value = RESET_VALUE;
    let fadt = bytes(&f.finalize());
    let fadt_addr = at;
    at = align(at + fadt.len() as u64);

    let mut m = madt::MADT::new(
        OEM_ID,
        *b"ZSAPIC  ",
        OEM_REVISION,
        madt::LocalInterruptController::Address(APIC_START as u32),
    );
    for i in 0..cpus {
        m.add_structure(madt::ProcessorLocalApic::new(
            i,
            i,
            madt::EnabledStatus::Enabled,
        ));
    }
    m.add_structure(madt::IoApic::new(cpus, IOAPIC_START as u32, 0));
    let madt = bytes(&m);
    let madt_addr = at;
    at = align(at + madt.len() as u64);

    let mut x = XSDT::new(OEM_ID, *b"ZSXSDT  ", OEM_REVISION);
    x.add_entry(fadt_addr);
    x.add_entry(madt_addr);
    let xsdt = bytes(&x);
    let xsdt_addr = at;
    at += xsdt.len() as u64;
    if at > ACPI_END {
        return Err(Error::TooLarge(at - ACPI_START));
    }
    let rsdp = bytes(&Rsdp::new(OEM_ID, xsdt_addr));
    Ok(vec![
        (rsdp_addr, rsdp),
        (dsdt_addr, dsdt),
        (fadt_addr, fadt),
        (madt_addr, madt),
        (xsdt_addr, xsdt),
    ])
}

/// Writes the tables and returns the RSDP address (for
/// `boot_params.acpi_rsdp_addr`).
pub fn setup_acpi<M: BootMemory>(
    mem: &mut M,
    cpus: u8,
    virtio: &[VirtioMmio],
) -> Result<GuestAddress, Error> {
    for (addr, data) in build(cpus, virtio)? {
        mem.write_tracked(&data, GuestAddress(addr))
            .map_err(MemoryError)?;
    }
    Ok(GuestAddress(ACPI_START))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    #[test]
    fn tables_chain_and_checksum() {
        let virtio = [
            VirtioMmio {
                base: 0xd000_0000,
                size: 0x1000,
                gsi: 5,
            },
            VirtioMmio {
                base: 0xd000_1000,
                size: 0x1000,
                gsi: 6,
            },
        ];
        let t = build(4, &virtio).unwrap();
        let find = |a: u64| &t.iter().find(|(x, _)| *x == a).unwrap().1;
        let rsdp = find(ACPI_START);
        assert_eq!(&rsdp[..8], b"RSD PTR ");
        assert_eq!(sum(&rsdp[..20]), 0, "RSDP v1 checksum");
        assert_eq!(sum(rsdp), 0, "RSDP extended checksum");
        let xsdt = find(u64_at(rsdp, 24));
        assert_eq!(&xsdt[..4], b"XSDT");
        assert_eq!(sum(xsdt), 0);
        let fadt = find(u64_at(xsdt, 36));
        let madt = find(u64_at(xsdt, 44));
        assert_eq!((&fadt[..4], &madt[..4]), (&b"FACP"[..], &b"APIC"[..]));
        assert_eq!((sum(fadt), sum(madt)), (0, 0));
        // FADT: HW-reduced, sleep control register at PM_PORT, X_DSDT.
        assert_ne!(u32_at(fadt, 112) & (1 << 20), 0);
        assert_eq!(fadt[244], 1, "sleep control: system I/O");
        assert_eq!(u64_at(fadt, 248), u64::from(PM_PORT));
        let dsdt = find(u64_at(fadt, 140));
        assert_eq!(&dsdt[..4], b"DSDT");
        assert_eq!(sum(dsdt), 0);
        assert!(dsdt.windows(4).any(|w| w == b"_S5_"));
        assert!(dsdt.windows(4).any(|w| w == b"COM1"));
        // EISA id of PNP0501 and the extended IRQ descriptor for GSI 4
        // (consumer, edge, active high).
        assert!(dsdt.windows(4).any(|w| w == [0x41, 0xd0, 0x05, 0x01]));
        assert!(dsdt
            .windows(9)
            .any(|w| w == [0x89, 6, 0, 0x03, 1, 4, 0, 0, 0]));
        // Each virtio-mmio device: LNRO0005, its 4 KiB window at its base
        // (Memory32Fixed, read-write) and its GSI (extended IRQ, edge).
        assert_eq!(dsdt.windows(8).filter(|w| w == b"LNRO0005").count(), 2);
        for (name, d) in [(b"VR00", virtio[0]), (b"VR01", virtio[1])] {
            assert!(dsdt.windows(4).any(|w| w == name));
            let mut m = vec![0x86, 9, 0, 1];
            m.extend(d.base.to_le_bytes());
            m.extend(d.size.to_le_bytes());
            assert!(dsdt.windows(m.len()).any(|w| w == m), "window of {name:?}");
            let irq = [0x89, 6, 0, 0x03, 1, d.gsi as u8, 0, 0, 0];
            assert!(dsdt.windows(9).any(|w| w == irq), "GSI of {name:?}");
        }
        assert!(build(4, &[]).is_ok());
        // MADT: 4 local APICs (8 bytes each) and one I/O APIC (12 bytes).
        assert_eq!(u32_at(madt, 4) as usize, madt.len());
        assert_eq!(madt.len(), 44 + 4 * 8 + 12);
        assert_eq!((madt[44], madt[44 + 3]), (0, 0));
        assert_eq!(madt[44 + 3 * 8 + 3], 3, "last APIC id");
        // All in the BIOS area, non-overlapping.
        let mut spans: Vec<_> = t.iter().map(|(a, b)| (*a, *a + b.len() as u64)).collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0);
        }
        assert!(spans.last().unwrap().1 <= ACPI_END);
        assert_eq!(POWEROFF_VALUE, 0x34);
    }
}
