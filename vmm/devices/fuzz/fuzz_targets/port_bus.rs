//! Fuzzes the port bus with every device the VMM puts on it (see
//! `devices_fuzz::machine`): any sequence of `in`/`out`, string I/O of any
//! element size and count, fw_cfg DMA descriptors anywhere in guest memory
//! with holes. Never a panic or a hang; an unclaimed port reads as all
//! ones; at the end every device stops (`PioBus::stop_devices`) in time.
#![no_main]

use std::time::Duration;

use devices::fw_cfg::FW_CFG_PORT_DMA;
use devices_fuzz::{machine, Input, REGIONS};
use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress};

/// Ports of the devices and their neighbours, so most operations hit
/// something.
const PORTS: &[u16] = &[
    0x3f8, 0x3f9, 0x3fa, 0x3fb, 0x3fc, 0x3fd, 0x3fe, 0x3ff, 0x400, 0x60, 0x61, 0x64, 0x440, 0x441,
    0x442, 0x443, 0x600, 0x601, 0x70, 0x71, 0x72, 0x402, 0x510, 0x511, 0x512, 0x514, 0x515, 0x516,
    0x517, 0x518, 0x519, 0x51a, 0x51b, 0xcf8, 0xcfa, 0xcfc, 0xcfd, 0xcfe, 0xcff, 0x608, 0x609,
    0x60a, 0x60b, 0x60c,
];

fn port(inp: &mut Input) -> u16 {
    match inp.u8() {
        b @ 0..=0xef => PORTS[usize::from(b) % PORTS.len()],
        _ => inp.u16(),
    }
}

/// A guest address: in or near one of the RAM regions, or anywhere.
fn addr(inp: &mut Input) -> u64 {
    let r = inp.u8();
    match REGIONS.get(usize::from(r % 5)) {
        Some(&(a, l)) => a
            .wrapping_add(u64::from(inp.u32()) % (l + 64))
            .wrapping_sub(32),
        None => inp.u64(),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let sizes: Vec<u32> = (0..inp.u8() % 5)
        .map(|_| u32::from(inp.u16()) % 8192)
        .collect();
    let m = machine(&sizes);
    let mut ops = 0;
    while !inp.is_empty() && ops < 256 {
        ops += 1;
        let op = inp.u8();
        let size = [1usize, 2, 4][usize::from(op >> 3) % 3];
        let count = 1 + usize::from(op >> 5);
        match op & 7 {
            0 | 1 => {
                let p = port(&mut inp);
                let d = inp.bytes(size * count);
                let _ = m.bus.write_string(p, size, &d);
            }
            2 | 3 => {
                let p = port(&mut inp);
                let mut d = vec![0x5a; size * count];
                if !m.bus.read_string(p, size, &mut d) {
                    assert!(d.iter().all(|&b| b == 0xff), "unclaimed port {p:#x}: {d:?}");
                }
            }
            4 => {
                // Put bytes (say a DMA descriptor) into guest memory.
                let at = addr(&mut inp);
                let d = inp.bytes(16);
                let _ = m.mem.write_slice(&d, GuestAddress(at));
            }
            5 | 6 => {
                // A DMA descriptor and the write that starts it, as a guest
                // does it (32-bit halves, or one 64-bit write).
                let at = addr(&mut inp);
                let mut desc = Vec::with_capacity(16);
                desc.extend_from_slice(&inp.u32().to_be_bytes());
                let len = match inp.u8() % 4 {
                    0 => u32::from(inp.u8()),
                    1 => u32::from(inp.u16()),
                    2 => (256 << 10) + u32::from(inp.u16()),
                    _ => inp.u32(),
                };
                desc.extend_from_slice(&len.to_be_bytes());
                desc.extend_from_slice(&addr(&mut inp).to_be_bytes());
                let _ = m.mem.write_slice(&desc, GuestAddress(at));
                if op & 7 == 5 {
                    let _ = m
                        .bus
                        .write(FW_CFG_PORT_DMA, &((at >> 32) as u32).to_be_bytes());
                    let _ = m.bus.write(FW_CFG_PORT_DMA + 4, &(at as u32).to_be_bytes());
                } else {
                    let _ = m.bus.write(FW_CFG_PORT_DMA, &at.to_be_bytes());
                }
            }
            _ => {
                // A guest polling `control` until the transfer is done.
                m.fw_cfg.lock().unwrap().wait_dma();
            }
        }
    }
    assert_eq!(
        m.bus.stop_devices(Duration::from_secs(5)),
        0,
        "a device did not stop"
    );
    assert!(!m.fw_cfg.lock().unwrap().dma_in_flight());
});
