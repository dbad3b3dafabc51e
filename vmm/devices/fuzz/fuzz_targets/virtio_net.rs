//! Fuzzes virtio-net's user-space path behind its virtio-mmio transport
//! the way a hostile guest reaches it: any register access, TX and RX
//! descriptor tables, avail entries and indexes written into guest memory
//! with holes (`devices_fuzz::REGIONS`), buffers at holes, region ends
//! and wrapping addresses, and frames of any length arriving from the
//! "tap" (an in-memory frame queue) whether or not buffers wait. A short
//! prefix can run the driver's init so most inputs reach the queues.
//!
//! Checked after every step, besides "no panic, no host access outside
//! guest RAM" (ASan and vm-memory):
//!
//! * the device is `NEEDS_RESET` exactly when it recorded a fault;
//! * every frame handed to the tap has a zeroed header (no offload was
//!   negotiated) and a length from header + Ethernet header to the most;
//! * every RX completion is either 0 (dropped) or the whole frame (while
//!   no guest store or RX buffer could have overwritten the used ring:
//!   the guest may scribble on its own ring, and then the harness cannot
//!   read the device's completions back).
#![no_main]

use devices::virtio::mmio::reg;
use devices::virtio::net::{MemoryFrames, Net, MAX_FRAME, RX};
use devices::virtio::tap::VNET_HDR_LEN;
use devices::virtio::MmioTransport;
use devices_fuzz::{memory, Input, Mem, REGIONS};
use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress};

const NEEDS_RESET: u32 = 0x40;
/// Per queue: descriptor table, avail ring, used ring.
const DESC: [u64; 2] = [0x1000, 0x5000];
const AVAIL: [u64; 2] = [0x3000, 0x7000];
const USED: [u64; 2] = [0x4000, 0x8000];

type T = MmioTransport<Mem, Net<MemoryFrames>>;

fn addr(inp: &mut Input) -> u64 {
    let r = inp.u8();
    match REGIONS.get(usize::from(r % 6)) {
        Some(&(a, l)) => a
            .wrapping_add(u64::from(inp.u32()) % (l + 64))
            .wrapping_sub(32),
        None if r % 6 == 4 => 0x10000 + u64::from(inp.u16() % 0x8000),
        None => inp.u64(),
    }
}

/// Whether `[a, a + len)` may touch the RX used ring.
fn hits_rx_used(a: u64, len: u64) -> bool {
    let (start, end) = (USED[0], USED[0] + 4 + 8 * 16 + 2);
    a < end && a.saturating_add(len) > start || a.checked_add(len).is_none()
}

fn w(t: &mut T, off: u64, v: u32) {
    t.write(off, &v.to_le_bytes());
}

fn init(t: &mut T, size: u32) {
    w(t, reg::STATUS, 0);
    w(t, reg::STATUS, 3);
    w(t, reg::DRIVER_FEATURES_SEL, 0);
    w(t, reg::DRIVER_FEATURES, 1 << 5 | 1 << 16);
    w(t, reg::DRIVER_FEATURES_SEL, 1);
    w(t, reg::DRIVER_FEATURES, 1);
    w(t, reg::STATUS, 0xb);
    for q in 0..2 {
        w(t, reg::QUEUE_SEL, q as u32);
        w(t, reg::QUEUE_NUM, size);
        w(t, reg::QUEUE_DESC_LOW, DESC[q] as u32);
        w(t, reg::QUEUE_AVAIL_LOW, AVAIL[q] as u32);
        w(t, reg::QUEUE_USED_LOW, USED[q] as u32);
        w(t, reg::QUEUE_READY, 1);
    }
    w(t, reg::STATUS, 0xf);
}

fn status(t: &mut T) -> u32 {
    let mut b = [0u8; 4];
    t.read(reg::STATUS, &mut b);
    u32::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let flags = inp.u8();
    let mem = memory();
    let net = Net::new(MemoryFrames::default(), [0x0a, 0, 0, 0, 0, 1]).unwrap();
    let mut t = MmioTransport::new(net, mem.clone()).unwrap();
    let size = 1u32 << (flags >> 1 & 7).min(4);
    if flags & 0x80 == 0 {
        init(&mut t, size);
    }
    let mut avail_idx = [0u16; 2];
    let mut incoming_lens: Vec<usize> = Vec::new();
    let mut checked_used = 0u16;
    let mut used_clobbered = false;
    let mut steps = 0;
    while !inp.is_empty() && steps < 64 {
        steps += 1;
        match inp.u8() % 8 {
            0 => {
                let off = u64::from(inp.u16() % 0x120);
                let v = inp.u32();
                t.write(off, &v.to_le_bytes());
            }
            1 => {
                let off = u64::from(inp.u16());
                let n = [1, 2, 4, 8][usize::from(inp.u8() % 4)];
                let mut b = [0u8; 8];
                t.read(off, &mut b[..n]);
            }
            2 => {
                // A descriptor of queue q: index, addr, len, flags, next.
                let q = usize::from(inp.u8() & 1);
                let i = u64::from(inp.u8() % 16);
                let a = addr(&mut inp);
                let len = match inp.u8() % 4 {
                    0 => VNET_HDR_LEN as u32,
                    1 => 1530,
                    2 => u32::from(inp.u16()),
                    _ => inp.u32(),
                };
                let fl = u16::from(inp.u8() & 7);
                let next = u16::from(inp.u8());
                used_clobbered |= hits_rx_used(a, u64::from(len));
                let mut d = [0u8; 16];
                d[0..8].copy_from_slice(&a.to_le_bytes());
                d[8..12].copy_from_slice(&len.to_le_bytes());
                d[12..14].copy_from_slice(&fl.to_le_bytes());
                d[14..16].copy_from_slice(&next.to_le_bytes());
                mem.write_slice(&d, GuestAddress(DESC[q] + 16 * i)).unwrap();
            }
            3 => {
                // Publish a head on queue q and notify; sometimes jump.
                let q = usize::from(inp.u8() & 1);
                let head = u16::from(inp.u8() % 20);
                let slot = AVAIL[q] + 4 + 2 * u64::from(avail_idx[q] % 16);
                mem.write_obj(head, GuestAddress(slot)).unwrap();
                avail_idx[q] =
                    avail_idx[q].wrapping_add(if inp.u8() == 0xff { inp.u16() } else { 1 });
                mem.write_obj(avail_idx[q], GuestAddress(AVAIL[q] + 2))
                    .unwrap();
                if inp.u8() & 1 == 0 {
                    w(&mut t, reg::QUEUE_NOTIFY, q as u32);
                }
            }
            4 => {
                // A frame arrives on the tap.
                let len = match inp.u8() % 4 {
                    0 => usize::from(inp.u8()),
                    1 => 60 + VNET_HDR_LEN,
                    2 => 1514 + VNET_HDR_LEN,
                    _ => usize::from(inp.u16()),
                };
                let seed = inp.u8();
                let f: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
                incoming_lens.push(len);
                t.device_mut().io_mut().incoming.push_back(f);
            }
            5 => {
                // The RX worker's turn.
                t.poll_queue(RX as u32);
            }
            6 => {
                // The guest fills a buffer: up to 32 bytes of input, at a
                // buffer-like address or anywhere.
                let at = match inp.u8() % 3 {
                    0 => 0x10000 + u64::from(inp.u16() % 0x8000),
                    _ => addr(&mut inp),
                };
                let n = usize::from(inp.u8() % 33).min(inp.0.len());
                let (bytes, rest) = inp.0.split_at(n);
                used_clobbered |= hits_rx_used(at, n as u64);
                let _ = mem.write_slice(bytes, GuestAddress(at));
                inp.0 = rest;
            }
            _ => init(&mut t, 1 << (inp.u8() % 5)),
        }
        let s = status(&mut t);
        assert_eq!(
            s & NEEDS_RESET != 0,
            t.fault().is_some(),
            "NEEDS_RESET and the recorded fault disagree"
        );
        for f in &t.device().io().sent {
            assert!(
                f.len() >= VNET_HDR_LEN + 14 && f.len() <= MAX_FRAME,
                "tx length {}",
                f.len()
            );
            assert_eq!(
                &f[..VNET_HDR_LEN],
                &[0u8; VNET_HDR_LEN],
                "tx header not cleared"
            );
        }
        // RX completions (while the ring sits where init put it).
        let used: u16 = mem.read_obj(GuestAddress(USED[0] + 2)).unwrap();
        while !used_clobbered && checked_used != used {
            let e = USED[0] + 4 + 8 * u64::from(checked_used % 16);
            let len: u32 = mem.read_obj(GuestAddress(e + 4)).unwrap();
            assert!(
                len == 0 || incoming_lens.contains(&(len as usize)),
                "rx completion of {len} bytes matches no frame"
            );
            checked_used = checked_used.wrapping_add(1);
        }
    }
});
