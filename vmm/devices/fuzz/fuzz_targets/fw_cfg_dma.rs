//! Fuzzes fw_cfg DMA against guest memory with holes (RAM regions at 0,
//! below 4 GiB and just below 2^64, see `devices_fuzz::REGIONS`) and a
//! reference model of QEMU's semantics: descriptors at holes and region
//! ends, wrapping addresses, lengths up to 4 GiB, any control bits, inline
//! and worker transfers. After every transfer:
//!
//! * no byte outside the target range and the `control` field changed;
//! * a valid read whose range is all RAM gave status 0 and exactly the
//!   item bytes from the model's offset, then zeros;
//! * any other read gave the error bit, and each RAM byte in its range
//!   holds either its old value or the one the model expected;
//! * reserved control bits and writes fail without touching memory;
//! * select/skip/read move the item offset as the model says (checked
//!   through the port interface).
#![no_main]

use devices::fw_cfg::{
    DMA_CTL_ERROR, DMA_CTL_READ, DMA_CTL_SELECT, DMA_CTL_SKIP, DMA_CTL_WRITE, FW_CFG_PORT_DMA,
    FW_CFG_PORT_SEL,
};
use devices::PioDevice;
use std::cell::RefCell;

use devices_fuzz::{fw_cfg, is_ram, memory, snapshot_into, Input, REGIONS};
use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress};

fn addr(inp: &mut Input) -> u64 {
    let r = inp.u8();
    match REGIONS.get(usize::from(r % 5)) {
        Some(&(a, l)) => a
            .wrapping_add(u64::from(inp.u32()) % (l + 64))
            .wrapping_sub(32),
        None => inp.u64(),
    }
}

/// Where `addr` lives in a snapshot, if it is RAM.
fn locate(addr: u64) -> Option<(usize, usize)> {
    REGIONS
        .iter()
        .position(|&(a, l)| addr >= a && addr - a < l)
        .map(|i| (i, (addr - REGIONS[i].0) as usize))
}

fn in_range(x: u64, start: u64, len: u64) -> bool {
    x.wrapping_sub(start) < len
}

/// All RAM, one buffer per region (see `snapshot_into`).
type Snapshot = Vec<Vec<u8>>;

thread_local! {
    /// RAM before and after a transfer, reused across inputs.
    static SNAPSHOTS: RefCell<(Snapshot, Snapshot)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fuzz_target!(|data: &[u8]| {
    SNAPSHOTS.with_borrow_mut(|(before, after)| run(data, before, after));
});

fn run(data: &[u8], before: &mut Snapshot, after: &mut Snapshot) {
    let mut inp = Input(data);
    let sizes: Vec<u32> = (0..inp.u8() % 5)
        .map(|_| u32::from(inp.u16()) % 8192)
        .collect();
    let mem = memory();
    let mut dev = fw_cfg(mem.clone(), &sizes);
    // Keys a descriptor may select: present items, the directory, and
    // absent ones (with and without the old write bit).
    let keys: Vec<u16> = {
        let mut k = vec![0x00, 0x01, 0x08, 0x15, 0x19, 0x7ff, 0x4000, 0x4020];
        k.extend((0..sizes.len() as u16).map(|i| 0x20 + i));
        k
    };
    let (mut sel, mut off) = (0u16, 0usize);
    let mut errors = 0u64;
    for _ in 0..4 {
        if inp.is_empty() {
            break;
        }
        let access = addr(&mut inp);
        let flags = inp.u8();
        let mut control = u32::from(inp.u16()) & 0xffff;
        if flags & 1 == 0 {
            // Mostly well-formed requests, so the model's paths all run.
            control &= 0x1f;
        }
        if flags & 2 != 0 {
            let k = keys[usize::from(inp.u8()) % keys.len()];
            control = (control & 0xffff) | (u32::from(k) << 16) | DMA_CTL_SELECT;
        } else {
            control |= u32::from(inp.u16()) << 16;
        }
        let length = match inp.u8() % 5 {
            0 => u32::from(inp.u8()),
            1 => u32::from(inp.u16()),
            2 => (256 << 10) + u32::from(inp.u16()) * 2,
            3 => u32::MAX - u32::from(inp.u8()),
            _ => inp.u32(),
        };
        let address = addr(&mut inp);
        let mut desc = Vec::with_capacity(16);
        desc.extend_from_slice(&control.to_be_bytes());
        desc.extend_from_slice(&length.to_be_bytes());
        desc.extend_from_slice(&address.to_be_bytes());
        let desc_ok = is_ram(access, 16);
        if desc_ok {
            mem.write_slice(&desc, GuestAddress(access)).unwrap();
        }
        snapshot_into(&mem, before);
        if flags & 4 == 0 {
            dev.write(FW_CFG_PORT_DMA, 0, &((access >> 32) as u32).to_be_bytes());
            dev.write(FW_CFG_PORT_DMA, 4, &(access as u32).to_be_bytes());
        } else {
            dev.write(FW_CFG_PORT_DMA, 0, &access.to_be_bytes());
        }
        dev.wait_dma();
        snapshot_into(&mem, after);
        if !desc_ok {
            // Nothing readable, nothing to report back: only counted. (A
            // descriptor straddling a region end is read as a whole or not
            // at all.)
            errors += 1;
            assert!(before == after, "descriptor outside RAM changed memory");
            assert_eq!(dev.dma_errors(), errors);
            continue;
        }
        let mut status = [0u8; 4];
        mem.read_slice(&mut status, GuestAddress(access)).unwrap();
        let status = u32::from_be_bytes(status);

        // The model.
        let len = u64::from(length);
        // The item bytes a read copies to `address`; zeros follow them up
        // to `length` (never materialized: up to 4 GiB).
        let mut expect: Option<Vec<u8>> = None;
        let ok: bool;
        if control & 0xffff & !0x1f != 0 {
            ok = false;
        } else {
            if control & DMA_CTL_SELECT != 0 {
                sel = (control >> 16) as u16 & !0x4000;
                off = 0;
            }
            let item = dev.item(sel).map(<[u8]>::to_vec).unwrap_or_default();
            let rest = item.get(off..).unwrap_or(&[]);
            if control & DMA_CTL_READ != 0 {
                if address.checked_add(len).is_none() {
                    ok = false;
                } else {
                    let avail = rest.len().min(length as usize);
                    let e = rest[..avail].to_vec();
                    off += avail;
                    ok = is_ram(address, len);
                    expect = Some(e);
                }
            } else if control & DMA_CTL_WRITE != 0 {
                ok = false;
            } else {
                if control & DMA_CTL_SKIP != 0 {
                    off += rest.len().min(length as usize);
                }
                ok = true;
            }
        }
        if !ok {
            errors += 1;
        }
        assert_eq!(
            status,
            if ok { 0 } else { DMA_CTL_ERROR },
            "status for {control:#x}"
        );
        assert_eq!(dev.dma_errors(), errors);
        // Over what changed (found 256 bytes at a time, so the check stays
        // cheap): only the control field and the target range may, and
        // only to what the model allows.
        for (r, (b, a)) in before.iter().zip(after.iter()).enumerate() {
            for (c, (bc, ac)) in b.chunks(256).zip(a.chunks(256)).enumerate() {
                if bc == ac {
                    continue;
                }
                for (k, (&x, &y)) in bc.iter().zip(ac).enumerate() {
                    if x == y {
                        continue;
                    }
                    let gpa = REGIONS[r].0 + (c * 256 + k) as u64;
                    if in_range(gpa, access, 4) {
                        continue;
                    }
                    let e = expect
                        .as_ref()
                        .filter(|_| in_range(gpa, address, len))
                        .unwrap_or_else(|| panic!("byte {gpa:#x} changed outside the transfer"));
                    let want = e.get((gpa - address) as usize).copied().unwrap_or(0);
                    assert_eq!(y, want, "byte {gpa:#x}");
                }
            }
        }
        if let (true, Some(e)) = (ok, &expect) {
            // A successful read is all RAM, so in one region: every byte is
            // exactly the model's (but the control field, which may
            // overlap the target and holds the status).
            if len > 0 {
                let (r, i) = locate(address).unwrap();
                let got = &after[r][i..i + len as usize];
                let mut want = e.clone();
                want.resize(len as usize, 0);
                for k in 0..4u64 {
                    let gpa = access.wrapping_add(k);
                    if in_range(gpa, address, len) {
                        let j = (gpa - address) as usize;
                        want[j] = got[j];
                    }
                }
                assert!(got == &want[..], "the read's bytes differ from the model");
            }
        }
        // The port interface continues at the model's offset.
        let item = dev.item(sel).map(<[u8]>::to_vec).unwrap_or_default();
        let mut b = [0u8];
        dev.read(FW_CFG_PORT_SEL, 1, &mut b);
        assert_eq!(
            b[0],
            item.get(off).copied().unwrap_or(0),
            "port read at {off}"
        );
        if off < item.len() {
            off += 1;
        }
    }
}
