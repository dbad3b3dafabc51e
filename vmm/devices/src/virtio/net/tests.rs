//! virtio-net's user-space path driven the way Linux's driver does:
//! through the MMIO registers, with rings written by hand into real guest
//! memory with a hole; frames from an in-memory source, and (as root, in
//! a network namespace of its own) from a real tap and the host kernel.

use super::*;
use crate::virtio::mmio::reg;
use crate::virtio::MmioTransport;
use std::sync::{Arc, Mutex};
use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER, VIRTIO_CONFIG_S_DRIVER_OK,
    VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_CONFIG_S_NEEDS_RESET,
};
use vm_memory::bitmap::{AtomicBitmap, Bitmap};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

type Mem = GuestMemoryMmap<AtomicBitmap>;

const NEXT: u16 = 1;
const WRITE: u16 = 2;
const RAM_END: u64 = 1 << 20;
const HIGH: u64 = 2 << 20;
const HIGH_LEN: u64 = 64 << 10;
/// Per queue q: descriptor table, avail and used ring.
const fn desc(q: u64) -> u64 {
    0x1000 + q * 0x4000
}
const fn avail(q: u64) -> u64 {
    0x2000 + q * 0x4000
}
const fn used(q: u64) -> u64 {
    0x3000 + q * 0x4000
}
const BUF: u64 = 0x20000;
const BUF2: u64 = 0x40000;
const SIZE: u16 = 16;
const MAC: [u8; 6] = [0x0a, 0x5a, 0x53, 0, 0, 1];

fn memory() -> Mem {
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), RAM_END as usize),
        (GuestAddress(HIGH), HIGH_LEN as usize),
    ])
    .unwrap()
}

struct Guest<T: FrameIo> {
    t: Arc<Mutex<MmioTransport<Mem, Net<T>>>>,
    mem: Mem,
    avail_idx: [u16; 2],
    next_desc: [u16; 2],
}

impl<T: FrameIo> Guest<T> {
    fn with(io: T, mem: Mem) -> Self {
        let t = MmioTransport::new(Net::new(io, MAC).unwrap(), mem.clone()).unwrap();
        let t = Arc::new(Mutex::new(t));
        let mut g = Guest {
            t,
            mem,
            avail_idx: [0; 2],
            next_desc: [0; 2],
        };
        g.init();
        g
    }

    fn t(&self) -> std::sync::MutexGuard<'_, MmioTransport<Mem, Net<T>>> {
        self.t.lock().unwrap()
    }

    fn r(&mut self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.t().read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn w(&mut self, off: u64, v: u32) {
        self.t().write(off, &v.to_le_bytes());
    }

    /// Linux's virtio_mmio probe + virtio_net's two queues.
    fn init(&mut self) {
        self.w(reg::STATUS, 0);
        self.w(
            reg::STATUS,
            VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER,
        );
        for sel in 0..2 {
            self.w(reg::DEVICE_FEATURES_SEL, sel);
            let f = self.r(reg::DEVICE_FEATURES);
            self.w(reg::DRIVER_FEATURES_SEL, sel);
            self.w(reg::DRIVER_FEATURES, f);
        }
        let s = self.r(reg::STATUS) | VIRTIO_CONFIG_S_FEATURES_OK;
        self.w(reg::STATUS, s);
        assert_ne!(self.r(reg::STATUS) & VIRTIO_CONFIG_S_FEATURES_OK, 0);
        for q in 0..2u64 {
            self.mem
                .write_slice(&[0u8; 0x3000], GuestAddress(desc(q)))
                .unwrap();
            self.w(reg::QUEUE_SEL, q as u32);
            assert_eq!(self.r(reg::QUEUE_NUM_MAX), u32::from(QUEUE_SIZE));
            self.w(reg::QUEUE_NUM, u32::from(SIZE));
            self.w(reg::QUEUE_DESC_LOW, desc(q) as u32);
            self.w(reg::QUEUE_AVAIL_LOW, avail(q) as u32);
            self.w(reg::QUEUE_USED_LOW, used(q) as u32);
            self.w(reg::QUEUE_READY, 1);
        }
        let s = self.r(reg::STATUS) | VIRTIO_CONFIG_S_DRIVER_OK;
        self.w(reg::STATUS, s);
        self.avail_idx = [0; 2];
        self.next_desc = [0; 2];
    }

    /// Puts a chain of `(addr, len, flags)` on queue `q` (NEXT added),
    /// publishes it; notifies if `notify`.
    fn offer(&mut self, q: usize, chain: &[(u64, u32, u16)], notify: bool) -> u16 {
        let n = chain.len() as u16;
        let head = if self.next_desc[q] + n > SIZE {
            0
        } else {
            self.next_desc[q]
        };
        for (i, &(a, l, f)) in chain.iter().enumerate() {
            let more = (i as u16) + 1 < n;
            let d = Descriptor::new(a, l, f | if more { NEXT } else { 0 }, head + i as u16 + 1);
            let at = GuestAddress(desc(q as u64) + 16 * u64::from(head + i as u16));
            self.mem.write_obj(d, at).unwrap();
        }
        self.next_desc[q] = (head + n) % SIZE;
        self.publish(q, head, notify);
        head
    }

    fn publish(&mut self, q: usize, head: u16, notify: bool) {
        let slot = avail(q as u64) + 4 + 2 * u64::from(self.avail_idx[q] % SIZE);
        self.mem.write_obj(head, GuestAddress(slot)).unwrap();
        self.avail_idx[q] = self.avail_idx[q].wrapping_add(1);
        self.mem
            .write_obj(self.avail_idx[q], GuestAddress(avail(q as u64) + 2))
            .unwrap();
        if notify {
            self.w(reg::QUEUE_NOTIFY, q as u32);
        }
    }

    fn used_idx(&self, q: u64) -> u16 {
        self.mem.read_obj(GuestAddress(used(q) + 2)).unwrap()
    }

    /// (id, len) of used element `i` of queue `q`.
    fn used(&self, q: u64, i: u16) -> (u32, u32) {
        let a = used(q) + 4 + 8 * u64::from(i % SIZE);
        (
            self.mem.read_obj(GuestAddress(a)).unwrap(),
            self.mem.read_obj(GuestAddress(a + 4)).unwrap(),
        )
    }

    fn needs_reset(&mut self) -> bool {
        self.r(reg::STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET != 0
    }

    fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read_slice(&mut v, GuestAddress(addr)).unwrap();
        v
    }
}

/// A frame with a header: `hdr` header bytes, then an Ethernet frame of
/// `len` bytes whose bytes count from `seed`.
fn frame(hdr: u8, len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![hdr; VNET_HDR_LEN];
    f.extend((0..len).map(|i| seed.wrapping_add(i as u8)));
    f
}

fn mem_guest() -> Guest<MemoryFrames> {
    Guest::with(MemoryFrames::default(), memory())
}

#[test]
fn registers_features_and_mac() {
    let mut g = mem_guest();
    assert_eq!(g.r(reg::DEVICE_ID), 1);
    g.w(reg::DEVICE_FEATURES_SEL, 0);
    assert_eq!(g.r(reg::DEVICE_FEATURES), 1 << 5 | 1 << 16, "MAC, STATUS");
    g.w(reg::DEVICE_FEATURES_SEL, 1);
    assert_eq!(g.r(reg::DEVICE_FEATURES), 1, "VERSION_1");
    let mut c = [0u8; 8];
    g.t().read(0x100, &mut c);
    assert_eq!(&c[..6], &MAC);
    assert_eq!(u16::from_le_bytes([c[6], c[7]]), 1, "link up");
    // Past the config: zeros.
    let mut b = [0xffu8; 4];
    g.t().read(0x100 + 8, &mut b);
    assert_eq!(b, [0; 4]);
}

#[test]
fn transmit_reaches_the_tap_with_a_plain_header() {
    let mut g = mem_guest();
    // Header with flags and GSO junk (not negotiated) + 60-byte frame,
    // split over two descriptors the way Linux does.
    let f = frame(0x77, 60, 1);
    g.mem.write_slice(&f, GuestAddress(BUF)).unwrap();
    g.offer(TX, &[(BUF, 12, 0), (BUF + 12, 60, 0)], true);
    let sent = g.t().device().io().sent.clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][..12], &[0u8; 12], "header cleared");
    assert_eq!(&sent[0][12..], &f[12..]);
    assert_eq!(g.used_idx(1), 1);
    assert_eq!(g.used(1, 0), (0, 0));
    assert_eq!(g.r(reg::INTERRUPT_STATUS), 1);
    assert_eq!(g.t().device().stats().tx_frames, 1);
}

#[test]
fn receive_fills_buffers_and_waits_without_them() {
    let mut g = mem_guest();
    let f = frame(0, 98, 9);
    g.t().device_mut().io_mut().incoming.push_back(f.clone());
    // No buffer yet: the frame waits, the device says so.
    assert!(g.t().poll_queue(RX as u32));
    assert!(g.t().device().rx_starved());
    assert_eq!(g.used_idx(0), 0);
    // Linux's small receive buffer: header + 1518 in one descriptor.
    g.offer(RX, &[(BUF, 12 + 1518, WRITE)], true);
    assert_eq!(g.used_idx(0), 1);
    assert_eq!(g.used(0, 0), (0, f.len() as u32));
    let got = g.read(BUF, f.len());
    assert_eq!(&got[12..], &f[12..]);
    assert_eq!(u16::from_le_bytes([got[10], got[11]]), 1, "num_buffers");
    assert!(!g.t().device().rx_starved());
    // A frame split over a chain of two buffers.
    let f2 = frame(0, 1400, 3);
    g.t().device_mut().io_mut().incoming.push_back(f2.clone());
    g.offer(
        RX,
        &[(BUF2, 700, WRITE), (BUF2 + 0x1000, 1000, WRITE)],
        true,
    );
    assert_eq!(g.used(0, 1), (1, f2.len() as u32));
    assert_eq!(
        g.read(BUF2, 700),
        f2[..700]
            .to_vec()
            .iter()
            .enumerate()
            .map(|(i, &b)| if (10..12).contains(&i) {
                [1u8, 0][i - 10]
            } else {
                b
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(g.read(BUF2 + 0x1000, f2.len() - 700), f2[700..]);
}

/// Malformed TX and RX chains: each dropped with length 0, the device
/// keeps working (the control: a good frame right after gets through).
#[test]
fn malformed_chains_drop_the_frame_not_the_device() {
    let mut g = mem_guest();
    let f = frame(0, 60, 1);
    g.mem.write_slice(&f, GuestAddress(BUF)).unwrap();
    let hole = RAM_END + 0x1000;
    for chain in [
        vec![(BUF, 72, WRITE)],              // device-writable TX buffer
        vec![(BUF, 12, 0), (hole, 60, 0)],   // in the hole
        vec![(RAM_END - 8, 72, 0)],          // runs off the end of RAM
        vec![(BUF, 20, 0)],                  // shorter than hdr + Ethernet
        vec![(BUF, 12, 0), (0, 0x20000, 0)], // longer than 64 KiB
    ] {
        g.offer(TX, &chain, true);
        assert!(!g.needs_reset(), "{chain:?}");
    }
    assert_eq!(g.t().device().stats().tx_dropped, 5);
    assert!(g.t().device().io().sent.is_empty());
    g.offer(TX, &[(BUF, 72, 0)], true);
    assert_eq!(g.t().device().io().sent.len(), 1, "control");

    for chain in [
        vec![(BUF2, 1530, 0)],                   // device-readable RX buffer
        vec![(hole, 1530, WRITE)],               // in the hole
        vec![(HIGH + HIGH_LEN - 16, 64, WRITE)], // off the end of RAM
        vec![(BUF2, 30, WRITE)],                 // too short for the frame
    ] {
        g.mem.write_slice(&[0xab; 64], GuestAddress(BUF2)).unwrap();
        g.t()
            .device_mut()
            .io_mut()
            .incoming
            .push_back(frame(0, 60, 5));
        let n = g.used_idx(0);
        g.offer(RX, &chain, true);
        assert_eq!(g.used_idx(0), n + 1, "{chain:?}");
        assert_eq!(g.used(0, n).1, 0, "{chain:?}");
        assert_eq!(
            g.read(BUF2, 64),
            vec![0xab; 64],
            "nothing written: {chain:?}"
        );
        assert!(!g.needs_reset());
    }
    assert_eq!(g.t().device().stats().rx_dropped, 4);
    g.t()
        .device_mut()
        .io_mut()
        .incoming
        .push_back(frame(0, 60, 5));
    g.offer(RX, &[(BUF2, 1530, WRITE)], true);
    assert_eq!(g.t().device().stats().rx_frames, 1, "control");
}

/// What makes a queue unusable marks the device NEEDS_RESET (config
/// interrupt, notifies ignored) until the driver resets it; a reset
/// device works again.
#[test]
fn broken_queues_need_reset() {
    type Case = fn(&mut Guest<MemoryFrames>);
    let cases: [(&str, Case); 4] = [
        ("loop", |g| {
            let d = Descriptor::new(BUF, 72, NEXT, 0);
            g.mem.write_obj(d, GuestAddress(desc(1))).unwrap();
            g.publish(TX, 0, true);
        }),
        ("head past the table", |g| g.publish(TX, SIZE + 3, true)),
        ("avail index far ahead", |g| {
            g.mem.write_obj(100u16, GuestAddress(avail(1) + 2)).unwrap();
            g.w(reg::QUEUE_NOTIFY, 1);
        }),
        ("rx ring in the hole", |g| {
            g.w(reg::STATUS, 0);
            g.init_with_rx_used(RAM_END + 0x8000);
            g.t()
                .device_mut()
                .io_mut()
                .incoming
                .push_back(frame(0, 60, 1));
            g.w(reg::QUEUE_NOTIFY, 0);
        }),
    ];
    for (name, case) in cases {
        let mut g = mem_guest();
        g.mem
            .write_slice(&frame(0, 60, 1), GuestAddress(BUF))
            .unwrap();
        case(&mut g);
        assert!(g.needs_reset(), "{name}");
        assert_ne!(
            g.r(reg::INTERRUPT_STATUS) & 2,
            0,
            "{name}: config interrupt"
        );
        assert!(g.t().fault().is_some(), "{name}");
        // Notifies are ignored while broken.
        let sent = g.t().device().io().sent.len();
        g.offer(TX, &[(BUF, 72, 0)], true);
        assert_eq!(g.t().device().io().sent.len(), sent, "{name}");
        // The driver cannot clear it; a reset does.
        let s = g.r(reg::STATUS) & !VIRTIO_CONFIG_S_NEEDS_RESET;
        g.w(reg::STATUS, s);
        assert!(g.needs_reset(), "{name}");
        g.init();
        assert!(!g.needs_reset(), "{name}");
        g.mem
            .write_slice(&frame(0, 60, 1), GuestAddress(BUF))
            .unwrap();
        g.offer(TX, &[(BUF, 72, 0)], true);
        assert_eq!(
            g.t().device().io().sent.len(),
            sent + 1,
            "{name}: works after reset"
        );
    }
}

impl<T: FrameIo> Guest<T> {
    /// As `init`, with the RX used ring at `used_at`.
    fn init_with_rx_used(&mut self, used_at: u64) {
        self.init();
        self.w(reg::STATUS, 0);
        self.w(
            reg::STATUS,
            VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER,
        );
        for sel in 0..2 {
            self.w(reg::DEVICE_FEATURES_SEL, sel);
            let f = self.r(reg::DEVICE_FEATURES);
            self.w(reg::DRIVER_FEATURES_SEL, sel);
            self.w(reg::DRIVER_FEATURES, f);
        }
        let s = self.r(reg::STATUS) | VIRTIO_CONFIG_S_FEATURES_OK;
        self.w(reg::STATUS, s);
        for q in 0..2u64 {
            self.w(reg::QUEUE_SEL, q as u32);
            self.w(reg::QUEUE_NUM, u32::from(SIZE));
            self.w(reg::QUEUE_DESC_LOW, desc(q) as u32);
            self.w(reg::QUEUE_AVAIL_LOW, avail(q) as u32);
            let u = if q == 0 { used_at } else { used(q) };
            self.w(reg::QUEUE_USED_LOW, u as u32);
            self.w(reg::QUEUE_READY, 1);
        }
        let s = self.r(reg::STATUS) | VIRTIO_CONFIG_S_DRIVER_OK;
        self.w(reg::STATUS, s);
    }
}

/// The zero hint's side (docs/security.md): building the device and the
/// driver's whole setup write no guest RAM; a frame delivered writes only
/// the used ring and the buffer's pages.
#[test]
fn device_writes_only_what_the_guest_asks() {
    let mem = memory();
    let t = MmioTransport::new(Net::new(MemoryFrames::default(), MAC).unwrap(), mem.clone());
    let mut t = t.unwrap();
    let dirty = |m: &Mem| -> Vec<u64> {
        let mut pages = Vec::new();
        for r in m.iter() {
            let base = r.start_addr().0;
            for off in (0..r.len()).step_by(4096) {
                if r.bitmap().dirty_at(off as usize) {
                    pages.push(base + off);
                }
            }
        }
        pages
    };
    assert!(
        dirty(&mem).is_empty(),
        "building the device wrote guest RAM"
    );
    // The driver handshake, done through registers only (rings are the
    // guest's memory: written here untracked, as guest stores are).
    let w =
        |t: &mut MmioTransport<Mem, Net<MemoryFrames>>, off, v: u32| t.write(off, &v.to_le_bytes());
    w(
        &mut t,
        reg::STATUS,
        VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER,
    );
    w(&mut t, reg::DRIVER_FEATURES_SEL, 1);
    w(&mut t, reg::DRIVER_FEATURES, 1);
    w(
        &mut t,
        reg::STATUS,
        VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_FEATURES_OK,
    );
    for q in 0..2u64 {
        w(&mut t, reg::QUEUE_SEL, q as u32);
        w(&mut t, reg::QUEUE_NUM, u32::from(SIZE));
        w(&mut t, reg::QUEUE_DESC_LOW, desc(q) as u32);
        w(&mut t, reg::QUEUE_AVAIL_LOW, avail(q) as u32);
        w(&mut t, reg::QUEUE_USED_LOW, used(q) as u32);
        w(&mut t, reg::QUEUE_READY, 1);
    }
    w(
        &mut t,
        reg::STATUS,
        VIRTIO_CONFIG_S_ACKNOWLEDGE
            | VIRTIO_CONFIG_S_DRIVER
            | VIRTIO_CONFIG_S_FEATURES_OK
            | VIRTIO_CONFIG_S_DRIVER_OK,
    );
    // A frame waiting with no buffer posted: still nothing written.
    t.device_mut().io_mut().incoming.push_back(frame(0, 60, 1));
    t.poll_queue(RX as u32);
    assert!(
        dirty(&mem).is_empty(),
        "driver setup or a frame without a buffer wrote guest RAM"
    );
    assert!(t.fault().is_none());
    // The guest posts a buffer (its own stores: untracked raw writes).
    let host = |a: u64| mem.get_host_address(GuestAddress(a)).unwrap();
    // SAFETY: inside the test's own mapping.
    unsafe {
        std::ptr::write_unaligned(
            host(desc(0)).cast::<Descriptor>(),
            Descriptor::new(BUF, 1530, WRITE, 0),
        );
        std::ptr::write_unaligned(host(avail(0) + 2).cast::<u16>(), 1);
    }
    t.write(reg::QUEUE_NOTIFY, &0u32.to_le_bytes());
    assert_eq!(
        dirty(&mem),
        vec![used(0), BUF],
        "exactly the used ring and the buffer"
    );
}

/// A real tap in a network namespace of the test's own: an ARP request
/// the guest sends reaches the host kernel through the tap, and the
/// kernel's reply comes back into the guest's receive buffer by the RX
/// worker thread. SKIPs (printed) without root, `ip` or /dev/net/tun.
#[test]
fn real_tap_arp_round_trip() {
    let Some(ns) = TestNetns::new() else { return };
    let tap = ns.run_in(|| Tap::open("zst0"));
    let tap = match tap {
        Ok(t) => t,
        Err(e) => panic!("opening the tap in {}: {e}", ns.name),
    };
    let mut g = Guest::with(tap, memory());
    let mut worker = spawn_rx_worker(g.t().runner(), "zs-net-rx-test".into()).unwrap();
    // An RX buffer, then the ARP request "who has 10.99.0.1, tell 10.99.0.2".
    // Several buffers: the host kernel also sends its own frames when the
    // link comes up (IPv6 MLD, router solicitations).
    for k in 0..8 {
        g.offer(RX, &[(BUF2 + k * 0x800, 1530, WRITE)], true);
    }
    let mut arp = vec![0u8; VNET_HDR_LEN];
    arp.extend_from_slice(&[0xff; 6]);
    arp.extend_from_slice(&MAC);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&MAC);
    arp.extend_from_slice(&[10, 99, 0, 2]);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&[10, 99, 0, 1]);
    arp.resize(VNET_HDR_LEN + 60, 0);
    g.mem.write_slice(&arp, GuestAddress(BUF)).unwrap();
    // Sent again every 250 ms until answered, as a real guest's ARP does:
    // the tap gets its carrier when we attach, but the host kernel turns
    // its transmit queue on only when its link watcher runs (up to a
    // second later), and a reply sent before that is dropped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut next_send = std::time::Instant::now();
    let mut sent = 0u64;
    let reply = 'found: loop {
        if std::time::Instant::now() >= next_send {
            g.offer(TX, &[(BUF, arp.len() as u32, 0)], true);
            sent += 1;
            assert_eq!(g.t().device().stats().tx_frames, sent);
            next_send += std::time::Duration::from_millis(250);
        }
        for i in 0..g.used_idx(0) {
            let (id, len) = g.used(0, i);
            let got = g.read(BUF2 + u64::from(id) * 0x800, len as usize);
            let eth = &got[VNET_HDR_LEN.min(got.len())..];
            if eth.len() >= 42 && eth[12..14] == [0x08, 0x06] && eth[20..22] == [0, 2] {
                break 'found eth.to_vec();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ARP reply within 5 s ({sent} requests sent, {} frames received)",
            g.used_idx(0)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(&reply[0..6], &MAC, "to the guest");
    assert_eq!(&reply[28..32], &[10, 99, 0, 1], "from the host's address");
    assert_eq!(&reply[38..42], &[10, 99, 0, 2], "for the guest's address");
    assert!(
        worker.stop(std::time::Duration::from_secs(2)),
        "RX worker stops"
    );
}

/// A network namespace with a tap `zst0` at 10.99.0.1/24, removed on drop.
struct TestNetns {
    name: String,
}

impl TestNetns {
    fn new() -> Option<Self> {
        // SAFETY: plain libc query.
        if unsafe { libc::geteuid() } != 0 {
            testsupport::skip(
                "TAP",
                "not root (a tap in a network namespace needs CAP_NET_ADMIN)",
            );
            return None;
        }
        if !std::path::Path::new("/dev/net/tun").exists() {
            testsupport::skip("TAP", "no /dev/net/tun (modprobe tun)");
            return None;
        }
        let name = format!("zsnet-test-{}", std::process::id());
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["netns", "add", &name]) {
            testsupport::skip("TAP", "`ip netns add` failed (install iproute2)");
            return None;
        }
        let ns = TestNetns { name };
        let n = ns.name.as_str();
        for args in [
            vec!["-n", n, "tuntap", "add", "zst0", "mode", "tap"],
            vec!["-n", n, "addr", "add", "10.99.0.1/24", "dev", "zst0"],
            vec!["-n", n, "link", "set", "zst0", "up"],
        ] {
            assert!(ip(&args), "ip {args:?}");
        }
        Some(ns)
    }

    /// Runs `f` on a thread that entered the namespace.
    fn run_in<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).unwrap();
            // SAFETY: setns on an open netns file, for this thread only.
            let r =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&fd), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A frame sink whose writes wait for the test: a tap that blocks, or a
/// slow disk, as the I/O thread sees it.
struct GatedFrames {
    entered: std::sync::mpsc::Sender<()>,
    release: std::sync::mpsc::Receiver<()>,
    sent: usize,
}

impl FrameIo for GatedFrames {
    fn read_frame(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<usize> {
        let _ = self.entered.send(());
        let _ = self.release.recv();
        self.sent += 1;
        Ok(frame.len())
    }
}

/// TX on the I/O thread, woken by the queue's ioeventfd: while a frame is
/// stuck in the sink, the guest's register reads (its interrupt handler
/// reads `InterruptStatus`, then `Status`) answer at once instead of
/// waiting for the request; when the sink lets go the frame completes and
/// the interrupt arrives from the I/O thread.
#[test]
fn registers_answer_while_the_io_thread_is_busy() {
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let io = GatedFrames {
        entered: entered_tx,
        release: release_rx,
        sent: 0,
    };
    let mut g = Guest::with(io, memory());
    let (mut worker, kicks) =
        crate::virtio::spawn_io_thread(g.t().runner(), "zs-net-test-io".into()).unwrap();
    assert_eq!(kicks.len(), 2);
    g.mem
        .write_slice(&frame(0, 60, 1), GuestAddress(BUF))
        .unwrap();
    g.offer(TX, &[(BUF, (VNET_HDR_LEN + 60) as u32, 0)], false);
    kicks[TX].write(1).unwrap();
    let second = std::time::Duration::from_secs(5);
    entered
        .recv_timeout(second)
        .expect("the I/O thread runs TX");

    let (tx, rx) = std::sync::mpsc::channel();
    let t = g.t.clone();
    let reader = std::thread::spawn(move || {
        let mut b = [0u8; 4];
        let mut t = t.lock().unwrap();
        t.read(reg::INTERRUPT_STATUS, &mut b);
        let irq = u32::from_le_bytes(b);
        t.read(reg::STATUS, &mut b);
        let _ = tx.send((irq, u32::from_le_bytes(b)));
    });
    let (irq, status) = rx
        .recv_timeout(second)
        .expect("register reads waited for the request in flight");
    assert_eq!(irq, 0, "nothing completed yet");
    assert_ne!(status & VIRTIO_CONFIG_S_DRIVER_OK, 0);
    reader.join().unwrap();
    assert_eq!(g.used_idx(TX as u64), 0);

    release.send(()).unwrap();
    let deadline = std::time::Instant::now() + second;
    while g.used_idx(TX as u64) == 0 {
        assert!(std::time::Instant::now() < deadline, "TX never completed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(g.r(reg::INTERRUPT_STATUS), 1);
    assert_eq!(g.t().interrupt_evt().read().unwrap(), 1, "irqfd signalled");
    assert_eq!(g.t().device().io().sent, 1);
    // The sink would block the thread again: let every later write pass.
    drop(release);
    assert!(worker.stop(second), "the I/O thread ends");
}
