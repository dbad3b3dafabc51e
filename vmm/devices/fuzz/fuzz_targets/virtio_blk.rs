//! Fuzzes virtio-blk behind its virtio-mmio transport the way a hostile
//! guest can reach it: any register read or write, descriptor tables,
//! avail ring entries and indexes written anywhere into guest memory with
//! holes (`devices_fuzz::REGIONS`: RAM at 0, below 4 GiB and just below
//! 2^64), data and status buffers at holes, region ends and wrapping
//! addresses, on a read-write or a `readonly` disk. A short prefix can
//! run the driver's init sequence so most inputs reach request parsing.
//!
//! Checked after every step, besides "no panic, no host access outside
//! guest RAM" (ASan and vm-memory):
//!
//! * the device is `NEEDS_RESET` exactly when it recorded a fault;
//! * a `readonly` disk's image never changes.
#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use devices::virtio::mmio::reg;
use devices::virtio::{Block, MmioTransport};
use devices_fuzz::{memory, Input, Mem, REGIONS};
use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress};

const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x3000;
const USED: u64 = 0x4000;
const NEEDS_RESET: u32 = 0x40;
const DISK_SECTORS: u64 = 32;

/// One disk image per process, 32 sectors of a pattern, unlinked at once
/// (so no run leaves files behind) and opened by the device through
/// `/proc/self/fd`.
fn disk() -> &'static PathBuf {
    static DISK: OnceLock<(std::fs::File, PathBuf)> = OnceLock::new();
    &DISK
        .get_or_init(|| {
            use std::os::fd::AsRawFd;
            let p =
                std::env::temp_dir().join(format!("zs-fuzz-virtio-blk-{}.img", std::process::id()));
            let mut f = std::fs::File::create(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            let data: Vec<u8> = (0..DISK_SECTORS * 512).map(|i| (i / 512) as u8).collect();
            f.write_all(&data).unwrap();
            let fd = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
            (f, fd)
        })
        .1
}

/// A guest address: near one of the RAM regions (and its edges) or any.
fn addr(inp: &mut Input) -> u64 {
    let r = inp.u8();
    match REGIONS.get(usize::from(r % 6)) {
        Some(&(a, l)) => a
            .wrapping_add(u64::from(inp.u32()) % (l + 64))
            .wrapping_sub(32),
        None if r % 6 == 4 => 0x8000 + u64::from(inp.u16() % 0x4000),
        None => inp.u64(),
    }
}

fn w(t: &mut MmioTransport<Mem, Block>, off: u64, v: u32) {
    t.write(off, &v.to_le_bytes());
}

fn init(t: &mut MmioTransport<Mem, Block>, size: u32) {
    w(t, reg::STATUS, 0);
    w(t, reg::STATUS, 3);
    w(t, reg::DRIVER_FEATURES_SEL, 0);
    w(t, reg::DRIVER_FEATURES, 1 << 9 | 1 << 2);
    w(t, reg::DRIVER_FEATURES_SEL, 1);
    w(t, reg::DRIVER_FEATURES, 1);
    w(t, reg::STATUS, 0xb);
    w(t, reg::QUEUE_NUM, size);
    w(t, reg::QUEUE_DESC_LOW, DESC as u32);
    w(t, reg::QUEUE_AVAIL_LOW, AVAIL as u32);
    w(t, reg::QUEUE_USED_LOW, USED as u32);
    w(t, reg::QUEUE_READY, 1);
    w(t, reg::STATUS, 0xf);
}

fn status(t: &mut MmioTransport<Mem, Block>) -> u32 {
    let mut b = [0u8; 4];
    t.read(reg::STATUS, &mut b);
    u32::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let flags = inp.u8();
    let readonly = flags & 1 != 0;
    let mem = memory();
    let path = disk();
    let before = readonly.then(|| std::fs::read(path).unwrap());
    let blk = Block::open(path, readonly).unwrap();
    let mut t = MmioTransport::new(blk, mem.clone()).unwrap();
    let size = 1u32 << (flags >> 1 & 7).min(4);
    if flags & 0x80 == 0 {
        init(&mut t, size);
    }
    let mut avail_idx = 0u16;
    let mut steps = 0;
    while !inp.is_empty() && steps < 64 {
        steps += 1;
        match inp.u8() % 6 {
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
                // A descriptor: index, addr, len, flags, next.
                let i = u64::from(inp.u8() % 16);
                let a = addr(&mut inp);
                let len = match inp.u8() % 4 {
                    0 => 16,
                    1 => 1,
                    2 => 512 * u32::from(inp.u8() % 4),
                    _ => inp.u32(),
                };
                let fl = u16::from(inp.u8() & 7);
                let next = u16::from(inp.u8());
                let mut d = [0u8; 16];
                d[0..8].copy_from_slice(&a.to_le_bytes());
                d[8..12].copy_from_slice(&len.to_le_bytes());
                d[12..14].copy_from_slice(&fl.to_le_bytes());
                d[14..16].copy_from_slice(&next.to_le_bytes());
                mem.write_slice(&d, GuestAddress(DESC + 16 * i)).unwrap();
            }
            3 => {
                // Publish a head and notify; sometimes jump the index.
                let head = u16::from(inp.u8() % 20);
                let slot = AVAIL + 4 + 2 * u64::from(avail_idx % 16);
                mem.write_obj(head, GuestAddress(slot)).unwrap();
                avail_idx = avail_idx.wrapping_add(if inp.u8() == 0xff { inp.u16() } else { 1 });
                mem.write_obj(avail_idx, GuestAddress(AVAIL + 2)).unwrap();
                w(&mut t, reg::QUEUE_NOTIFY, 0);
            }
            4 => {
                // A request header at a small address: type, sector.
                let at = 0x8000 + u64::from(inp.u16() % 0x4000);
                let kind = [0u32, 1, 4, 8, 11, inp.u32()][usize::from(inp.u8() % 6)];
                let sector = match inp.u8() % 3 {
                    0 => u64::from(inp.u8()) % (DISK_SECTORS + 2),
                    1 => u64::MAX - u64::from(inp.u8()),
                    _ => inp.u64(),
                };
                let _ = mem.write_obj(kind, GuestAddress(at));
                let _ = mem.write_obj(sector, GuestAddress(at + 8));
            }
            _ => init(&mut t, 1 << (inp.u8() % 5)),
        }
        let s = status(&mut t);
        assert_eq!(
            s & NEEDS_RESET != 0,
            t.fault().is_some(),
            "NEEDS_RESET and the recorded fault disagree"
        );
    }
    if let Some(before) = before {
        drop(t);
        assert!(
            std::fs::read(path).unwrap() == before,
            "readonly disk changed"
        );
    }
});
