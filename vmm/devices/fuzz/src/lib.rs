//! What the fuzz targets share: guest memory with holes, and the port bus
//! with every device the VMM puts on it.
//!
//! [`machine`] assembles the bus the way `vmm/zerostart/src/builder.rs`
//! does for a firmware boot with `--acpi on` and `--debugcon` (the largest
//! device set): COM1, i8042 (data and command ports), the boot timer, the
//! ACPI PM register, CMOS, fw_cfg (selector/data and DMA), the PCI host
//! bridge and PM timer of `fw_platform.rs`, and the debug console (both
//! in the devices crate since the VMM restructure, so the fuzzer runs the
//! code the VMM runs). Keep the port list in step with
//! builder.rs (`bus.insert` calls).
#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use devices::fw_cfg::{FW_CFG_PORT_DMA, FW_CFG_PORT_DMA_LEN, FW_CFG_PORT_SEL, FW_CFG_PORT_SEL_LEN};
use devices::{FwCfg, PioBus};
use vm_memory::bitmap::AtomicBitmap;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use devices::fw_platform;

/// Guest memory as the VMM has it (with vm-memory's dirty bitmap).
pub type Mem = GuestMemoryMmap<AtomicBitmap>;

/// RAM regions with holes between them and at both ends of the address
/// space: one larger than fw_cfg's inline DMA limit (so transfers that run
/// on the worker can succeed), one ending at 4 GiB, and one as near 2^64
/// as vm-memory allows a region (its end must not overflow), for
/// wrapping addresses.
pub const REGIONS: [(u64, u64); 4] = [
    (0, 320 << 10),
    (0x8_0000, 64 << 10),
    ((4 << 30) - (64 << 10), 64 << 10),
    (0u64.wrapping_sub(128 << 10), 64 << 10),
];

/// Guest memory laid out as [`REGIONS`], all zero. Mapped once per
/// process and cleared for each input (mapping it per input cost more
/// than the fuzzing).
pub fn memory() -> Mem {
    static MEM: OnceLock<Mem> = OnceLock::new();
    let mem = MEM.get_or_init(|| {
        let r: Vec<_> = REGIONS
            .iter()
            .map(|&(a, l)| (GuestAddress(a), l as usize))
            .collect();
        GuestMemoryMmap::from_ranges(&r).expect("fuzz memory layout")
    });
    for &(a, l) in &REGIONS {
        let p = mem.get_host_address(GuestAddress(a)).unwrap();
        // SAFETY: `p` starts a mapping of `l` bytes that lives as long as
        // the process, and no other thread uses it between inputs (the
        // previous input's device joined its DMA worker when dropped).
        unsafe { std::ptr::write_bytes(p, 0, l as usize) };
    }
    mem.clone()
}

/// Copies all RAM into `out`, region by region, through the host mapping
/// (fast; vm-memory's volatile copies are slow under the sanitizer), and
/// reusing `out`'s buffers (a fresh 320 KiB buffer per copy cost a page
/// fault per page).
pub fn snapshot_into(mem: &Mem, out: &mut Vec<Vec<u8>>) {
    out.resize_with(REGIONS.len(), Vec::new);
    for (v, &(a, l)) in out.iter_mut().zip(&REGIONS) {
        let p = mem.get_host_address(GuestAddress(a)).unwrap();
        // SAFETY: `p` starts a live mapping of `l` bytes; no DMA worker
        // runs while the target takes a snapshot.
        let src = unsafe { std::slice::from_raw_parts(p, l as usize) };
        v.clear();
        v.extend_from_slice(src);
    }
}

/// True when every byte of `[addr, addr + len)` is RAM.
pub fn is_ram(addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let Some(last) = addr.checked_add(len - 1) else {
        return false;
    };
    REGIONS
        .iter()
        .any(|&(a, l)| addr >= a && last <= a + (l - 1))
}

/// The fw_cfg device type the VMM uses.
pub type FwCfgDevice = FwCfg<Mem>;

/// The port bus with every device, and handles on the ones a target
/// inspects.
pub struct Machine {
    pub bus: PioBus,
    pub fw_cfg: Arc<Mutex<FwCfgDevice>>,
    pub mem: Mem,
}

/// fw_cfg items like a firmware boot has: a few numbered items and named
/// files, sizes chosen by the fuzzer (`sizes`, up to 4).
pub fn fw_cfg(mem: Mem, sizes: &[u32]) -> FwCfgDevice {
    use devices::fw_cfg::key;
    let mut d = FwCfg::new(mem);
    d.set_u32(key::KERNEL_SIZE, 0x1234).unwrap();
    d.set_item(key::CMDLINE_DATA, &b"console=ttyS0\0"[..])
        .unwrap();
    for (i, &n) in sizes.iter().take(4).enumerate() {
        let data: Vec<u8> = (0..n)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i as u8 + 1))
            .collect();
        d.add_file(&format!("opt/fuzz/{i}"), data).unwrap();
    }
    d
}

/// Assembles the bus (see the module doc).
pub fn machine(sizes: &[u32]) -> Machine {
    let mem = memory();
    let mut bus = PioBus::new();
    let serial = devices::SerialDevice::new(devices::SerialOutput::Sink).unwrap();
    bus.insert(
        devices::COM1_BASE,
        devices::COM1_LEN,
        Arc::new(Mutex::new(serial)),
    )
    .unwrap();
    let i8042 = Arc::new(Mutex::new(devices::I8042Device::new()));
    bus.insert(devices::I8042_DATA_PORT, 1, i8042.clone())
        .unwrap();
    bus.insert(devices::I8042_COMMAND_PORT, 1, i8042).unwrap();
    bus.insert(
        devices::TIMER_PORT,
        4,
        Arc::new(Mutex::new(devices::BootTimer::new())),
    )
    .unwrap();
    bus.insert(0x600, 1, Arc::new(Mutex::new(devices::AcpiPm)))
        .unwrap();
    bus.insert(
        devices::CMOS_PORT,
        devices::CMOS_LEN,
        Arc::new(Mutex::new(devices::Cmos::new())),
    )
    .unwrap();
    bus.insert(
        devices::DEBUGCON_PORT,
        1,
        Arc::new(Mutex::new(devices::Debugcon::new(Box::new(io::sink())))),
    )
    .unwrap();
    let fw = Arc::new(Mutex::new(fw_cfg(mem.clone(), sizes)));
    bus.insert(FW_CFG_PORT_SEL, FW_CFG_PORT_SEL_LEN, fw.clone())
        .unwrap();
    bus.insert(FW_CFG_PORT_DMA, FW_CFG_PORT_DMA_LEN, fw.clone())
        .unwrap();
    fw_platform::insert(&mut bus).unwrap();
    Machine {
        bus,
        fw_cfg: fw,
        mem,
    }
}

/// Reads input bytes front to back; past the end everything is 0.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}
