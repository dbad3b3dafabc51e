//! virtio-blk driven the way a guest driver does: through the MMIO
//! registers, with descriptor tables and rings written by hand into real
//! guest memory (a vm-memory `GuestMemoryMmap` with a hole), and a real
//! image file.

use std::io::{Read, Seek, SeekFrom, Write};

use super::*;
use crate::virtio::mmio::{reg, MmioTransport};
use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER, VIRTIO_CONFIG_S_DRIVER_OK,
    VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_CONFIG_S_NEEDS_RESET,
};
use vm_memory::bitmap::{AtomicBitmap, Bitmap};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

/// Guest memory as the VMM has it: with vm-memory's dirty bitmap, the
/// second record of VMM writes behind the zero hint.
type Mem = GuestMemoryMmap<AtomicBitmap>;

const NEXT: u16 = 1;
const WRITE: u16 = 2;
/// RAM is [0, 1 MiB) and [2 MiB, 2 MiB + 64 KiB); the rest is a hole.
const RAM_END: u64 = 1 << 20;
const HIGH: u64 = 2 << 20;
const HIGH_LEN: u64 = 64 << 10;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x3000;
const USED: u64 = 0x4000;
const HDR: u64 = 0x10000;
const BUF: u64 = 0x20000;
const STATUS: u64 = 0x30000;
/// Disk size: 64 sectors.
const DISK: u64 = 64 * SECTOR_SIZE;

fn memory() -> Mem {
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), RAM_END as usize),
        (GuestAddress(HIGH), HIGH_LEN as usize),
    ])
    .unwrap()
}

/// A disk image whose sector `s` is filled with byte `s + 1`.
fn image() -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    for s in 0..DISK / SECTOR_SIZE {
        f.write_all(&[s as u8 + 1; SECTOR_SIZE as usize]).unwrap();
    }
    f.flush().unwrap();
    f
}

fn file_bytes(f: &tempfile::NamedTempFile) -> Vec<u8> {
    let mut v = Vec::new();
    let mut h = f.reopen().unwrap();
    h.seek(SeekFrom::Start(0)).unwrap();
    h.read_to_end(&mut v).unwrap();
    v
}

/// The guest side: a virtio-mmio driver for queue 0.
struct Guest {
    t: MmioTransport<Mem, Block>,
    mem: Mem,
    size: u16,
    avail_idx: u16,
    next_desc: u16,
    /// The queue's ioeventfd, when an I/O thread serves the device: a
    /// notify is then what KVM does with the guest's `QueueNotify` write.
    ioeventfd: Option<EventFd>,
}

impl Guest {
    fn new(img: &tempfile::NamedTempFile, readonly: bool) -> Self {
        let mem = memory();
        let blk = Block::open(img.path(), readonly).unwrap();
        let t = MmioTransport::new(blk, mem.clone()).unwrap();
        let mut g = Guest {
            t,
            mem,
            size: 16,
            avail_idx: 0,
            next_desc: 0,
            ioeventfd: None,
        };
        g.init(16);
        g
    }

    fn r(&mut self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.t.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn w(&mut self, off: u64, v: u32) {
        self.t.write(off, &v.to_le_bytes());
    }

    /// Linux's virtio_mmio probe + virtio_blk's queue setup.
    fn init(&mut self, size: u16) {
        self.w(reg::STATUS, 0);
        self.w(
            reg::STATUS,
            VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER,
        );
        self.w(reg::DEVICE_FEATURES_SEL, 0);
        let lo = self.r(reg::DEVICE_FEATURES);
        self.w(reg::DEVICE_FEATURES_SEL, 1);
        let hi = self.r(reg::DEVICE_FEATURES);
        self.w(reg::DRIVER_FEATURES_SEL, 0);
        self.w(reg::DRIVER_FEATURES, lo);
        self.w(reg::DRIVER_FEATURES_SEL, 1);
        self.w(reg::DRIVER_FEATURES, hi);
        let s = self.r(reg::STATUS) | VIRTIO_CONFIG_S_FEATURES_OK;
        self.w(reg::STATUS, s);
        assert_ne!(self.r(reg::STATUS) & VIRTIO_CONFIG_S_FEATURES_OK, 0);
        self.w(reg::QUEUE_SEL, 0);
        assert_eq!(self.r(reg::QUEUE_NUM_MAX), u32::from(QUEUE_SIZE));
        self.w(reg::QUEUE_NUM, u32::from(size));
        self.w(reg::QUEUE_DESC_LOW, DESC as u32);
        self.w(reg::QUEUE_DESC_HIGH, 0);
        self.w(reg::QUEUE_AVAIL_LOW, AVAIL as u32);
        self.w(reg::QUEUE_AVAIL_HIGH, 0);
        self.w(reg::QUEUE_USED_LOW, USED as u32);
        self.w(reg::QUEUE_USED_HIGH, 0);
        self.w(reg::QUEUE_READY, 1);
        let s = self.r(reg::STATUS) | VIRTIO_CONFIG_S_DRIVER_OK;
        self.w(reg::STATUS, s);
        self.size = size;
        self.avail_idx = 0;
        self.next_desc = 0;
        // Fresh rings.
        self.mem
            .write_slice(&[0u8; 0x2000], GuestAddress(DESC))
            .unwrap();
        self.mem
            .write_slice(&[0u8; 0x1000], GuestAddress(AVAIL))
            .unwrap();
        self.mem
            .write_slice(&[0u8; 0x1000], GuestAddress(USED))
            .unwrap();
    }

    /// Writes raw descriptors (next fields as given) at index `at`.
    fn put_desc(&self, at: u16, d: &[(u64, u32, u16, u16)]) {
        for (i, &(addr, len, flags, next)) in d.iter().enumerate() {
            let a = GuestAddress(DESC + 16 * (u64::from(at) + i as u64));
            self.mem
                .write_obj(Descriptor::new(addr, len, flags, next), a)
                .unwrap();
        }
    }

    /// Publishes head `head` in the avail ring and notifies.
    fn kick(&mut self, head: u16) {
        let slot = AVAIL + 4 + 2 * u64::from(self.avail_idx % self.size);
        self.mem.write_obj(head, GuestAddress(slot)).unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.mem
            .write_obj(self.avail_idx, GuestAddress(AVAIL + 2))
            .unwrap();
        let Some(evt) = &self.ioeventfd else {
            self.w(reg::QUEUE_NOTIFY, 0);
            return;
        };
        // As KVM does for the guest's write, then the guest waits for its
        // interrupt: the request completes (or the device gives up) on
        // the I/O thread.
        evt.write(1).unwrap();
        let irq = self.t.interrupt_evt().try_clone().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.used_idx() != self.avail_idx && !self.needs_reset() {
            assert!(
                std::time::Instant::now() < deadline,
                "no completion from the I/O thread within 5 s"
            );
            let mut pfd = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&irq),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 100) };
        }
    }

    /// Submits a chain of `(addr, len, flags)` (NEXT added as needed).
    fn submit(&mut self, chain: &[(u64, u32, u16)]) -> u16 {
        let n = chain.len() as u16;
        // Requests complete synchronously, so the whole table is free:
        // start over when the chain would not fit behind the last one.
        let head = if self.next_desc + n > self.size {
            0
        } else {
            self.next_desc
        };
        let d: Vec<_> = chain
            .iter()
            .enumerate()
            .map(|(i, &(a, l, f))| {
                let more = (i as u16) + 1 < n;
                (a, l, f | if more { NEXT } else { 0 }, head + i as u16 + 1)
            })
            .collect();
        self.put_desc(head, &d);
        self.next_desc = (head + n) % self.size;
        self.kick(head);
        head
    }

    /// A request with a 16-byte header at HDR, data at BUF and the status
    /// byte at STATUS.
    fn request(&mut self, kind: u32, sector: u64, data_len: u32, data_flags: u16) -> u8 {
        self.header(kind, sector);
        self.mem.write_obj(0xeeu8, GuestAddress(STATUS)).unwrap();
        let mut c = vec![(HDR, 16, 0)];
        if data_len > 0 {
            c.push((BUF, data_len, data_flags));
        }
        c.push((STATUS, 1, WRITE));
        self.submit(&c);
        self.status_byte()
    }

    fn header(&self, kind: u32, sector: u64) {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&sector.to_le_bytes());
        self.mem.write_slice(&h, GuestAddress(HDR)).unwrap();
    }

    fn status_byte(&self) -> u8 {
        self.mem.read_obj(GuestAddress(STATUS)).unwrap()
    }

    fn used_idx(&self) -> u16 {
        self.mem.read_obj(GuestAddress(USED + 2)).unwrap()
    }

    /// (id, len) of used element `i`.
    fn used(&self, i: u16) -> (u32, u32) {
        let a = USED + 4 + 8 * u64::from(i % self.size);
        (
            self.mem.read_obj(GuestAddress(a)).unwrap(),
            self.mem.read_obj(GuestAddress(a + 4)).unwrap(),
        )
    }

    fn needs_reset(&mut self) -> bool {
        self.r(reg::STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET != 0
    }

    fn fill(&self, addr: u64, len: usize, b: u8) {
        self.mem
            .write_slice(&vec![b; len], GuestAddress(addr))
            .unwrap();
    }

    fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mem.read_slice(&mut v, GuestAddress(addr)).unwrap();
        v
    }
}

const OK: u8 = VIRTIO_BLK_S_OK as u8;
const IOERR: u8 = VIRTIO_BLK_S_IOERR as u8;

#[test]
fn registers_and_config() {
    let img = image();
    let mut g = Guest::new(&img, false);
    assert_eq!(g.r(reg::MAGIC), 0x7472_6976);
    assert_eq!(g.r(reg::VERSION), 2);
    assert_eq!(g.r(reg::DEVICE_ID), 2);
    g.w(reg::DEVICE_FEATURES_SEL, 0);
    let lo = g.r(reg::DEVICE_FEATURES);
    assert_eq!(lo, 1 << VIRTIO_BLK_F_FLUSH | 1 << VIRTIO_BLK_F_SEG_MAX);
    g.w(reg::DEVICE_FEATURES_SEL, 1);
    assert_eq!(g.r(reg::DEVICE_FEATURES), 1, "VERSION_1");
    let mut cap = [0u8; 8];
    g.t.read(0x100, &mut cap);
    assert_eq!(u64::from_le_bytes(cap), DISK / SECTOR_SIZE);
    assert_eq!(g.r(0x100 + 12), SEG_MAX);
    // Past the config, and narrow register reads: 0, no panic.
    assert_eq!(g.r(0xffc), 0);
    let mut b = [0xffu8; 2];
    g.t.read(reg::MAGIC, &mut b);
    assert_eq!(b, [0, 0]);
    g.t.read(u64::MAX - 1, &mut b);

    drop(g); // the image's write lock goes with it
    let mut ro = Guest::new(&img, true);
    ro.w(reg::DEVICE_FEATURES_SEL, 0);
    assert_ne!(ro.r(reg::DEVICE_FEATURES) & 1 << VIRTIO_BLK_F_RO, 0);
}

#[test]
fn write_then_read_back() {
    let img = image();
    let mut g = Guest::new(&img, false);
    let data: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
    g.mem.write_slice(&data, GuestAddress(BUF)).unwrap();
    assert_eq!(g.request(VIRTIO_BLK_T_OUT, 3, 1024, 0), OK);
    assert_eq!(g.used(0), (0, 1), "a write puts only the status byte");
    assert_eq!(&file_bytes(&img)[3 * 512..5 * 512], &data[..]);
    // The interrupt: vring bit set and the irqfd signalled.
    assert_eq!(g.r(reg::INTERRUPT_STATUS), 1);
    assert_eq!(g.t.interrupt_evt().read().unwrap(), 1);
    g.w(reg::INTERRUPT_ACK, 1);
    assert_eq!(g.r(reg::INTERRUPT_STATUS), 0);

    g.fill(BUF, 1536, 0);
    assert_eq!(g.request(VIRTIO_BLK_T_IN, 2, 1536, WRITE), OK);
    assert_eq!(g.used(1), (3, 1537));
    let back = g.read(BUF, 1536);
    assert_eq!(&back[..512], &[3u8; 512][..], "sector 2 untouched");
    assert_eq!(&back[512..], &data[..]);
    assert_eq!(g.used_idx(), 2);
}

/// The header and data need not sit in descriptors of their own (virtio
/// 1.x framing): header and data of a write in one descriptor, data of a
/// read split over three with the status byte in the last.
#[test]
fn any_framing() {
    let img = image();
    let mut g = Guest::new(&img, false);
    g.header(VIRTIO_BLK_T_OUT, 5);
    g.fill(HDR + 16, 512, 0x5a);
    g.submit(&[(HDR, 16 + 512, 0), (STATUS, 1, WRITE)]);
    assert_eq!(g.status_byte(), OK);
    assert_eq!(&file_bytes(&img)[5 * 512..6 * 512], &[0x5a; 512][..]);
    g.header(VIRTIO_BLK_T_IN, 5);
    g.submit(&[
        (HDR, 8, 0),
        (HDR + 8, 8, 0),
        (BUF, 100, WRITE),
        (BUF + 100, 412 + 1, WRITE),
    ]);
    assert_eq!(g.read(BUF, 512), vec![0x5a; 512]);
    assert_eq!(g.read(BUF + 512, 1), vec![OK]);
}

#[test]
fn flush_get_id_and_unsupported() {
    let img = image();
    let mut g = Guest::new(&img, false);
    assert_eq!(g.request(VIRTIO_BLK_T_FLUSH, 0, 0, 0), OK);
    g.fill(BUF, 20, 0xff);
    assert_eq!(g.request(VIRTIO_BLK_T_GET_ID, 0, 20, WRITE), OK);
    let id = g.read(BUF, 20);
    assert_ne!(id, vec![0xff; 20]);
    assert!(id.iter().all(|&b| b == 0 || b.is_ascii_hexdigit()));
    // DISCARD is not offered.
    assert_eq!(g.request(11, 0, 512, 0), VIRTIO_BLK_S_UNSUPP as u8);
    // A flush that carries data is malformed.
    assert_eq!(g.request(VIRTIO_BLK_T_FLUSH, 0, 512, 0), IOERR);
    assert!(!g.needs_reset());
}

/// A write to a readonly disk fails and leaves the file as it was; the
/// same write on a read-write disk changes it (negative control).
#[test]
fn readonly_refuses_writes() {
    for readonly in [true, false] {
        let img = image();
        let before = file_bytes(&img);
        let mut g = Guest::new(&img, readonly);
        g.fill(BUF, 512, 0xab);
        let s = g.request(VIRTIO_BLK_T_OUT, 0, 512, 0);
        let changed = file_bytes(&img) != before;
        assert_eq!(
            (s == IOERR, changed),
            (readonly, !readonly),
            "readonly={readonly}"
        );
        // Reads still work.
        assert_eq!(g.request(VIRTIO_BLK_T_IN, 1, 512, WRITE), OK);
        assert!(!g.needs_reset());
    }
}

/// The last sector is readable (control); one past it, a range running
/// over the end and a sector that overflows u64 arithmetic are not.
#[test]
fn past_the_end() {
    let img = image();
    let mut g = Guest::new(&img, false);
    let last = DISK / SECTOR_SIZE - 1;
    assert_eq!(g.request(VIRTIO_BLK_T_IN, last, 512, WRITE), OK);
    assert_eq!(g.read(BUF, 1), vec![last as u8 + 1]);
    g.fill(BUF, 1024, 0xcc);
    assert_eq!(g.request(VIRTIO_BLK_T_IN, last + 1, 512, WRITE), IOERR);
    assert_eq!(g.request(VIRTIO_BLK_T_IN, last, 1024, WRITE), IOERR);
    assert_eq!(g.request(VIRTIO_BLK_T_OUT, last, 1024, 0), IOERR);
    assert_eq!(g.request(VIRTIO_BLK_T_IN, u64::MAX, 512, WRITE), IOERR);
    assert_eq!(g.request(VIRTIO_BLK_T_OUT, u64::MAX / 512, 512, 0), IOERR);
    assert_eq!(g.read(BUF, 1024), vec![0xcc; 1024], "nothing transferred");
    assert!(!g.needs_reset());
}

#[test]
fn bad_lengths() {
    let img = image();
    let before = file_bytes(&img);
    let mut g = Guest::new(&img, false);
    assert_eq!(g.request(VIRTIO_BLK_T_OUT, 0, 100, 0), IOERR);
    assert_eq!(g.request(VIRTIO_BLK_T_IN, 0, 513, WRITE), IOERR);
    // Header of 8 bytes.
    g.header(VIRTIO_BLK_T_IN, 0);
    g.submit(&[(HDR, 8, 0), (BUF, 512, WRITE), (STATUS, 1, WRITE)]);
    assert_eq!(g.status_byte(), IOERR);
    // Data direction wrong: a read whose buffer is device-readable.
    assert_eq!(g.request(VIRTIO_BLK_T_IN, 0, 512, 0), IOERR);
    // Readable after writable.
    g.header(VIRTIO_BLK_T_OUT, 0);
    g.submit(&[
        (HDR, 16, 0),
        (BUF, 512, WRITE),
        (BUF, 512, 0),
        (STATUS, 1, WRITE),
    ]);
    assert_eq!(g.status_byte(), IOERR);
    assert_eq!(file_bytes(&img), before);
    assert!(!g.needs_reset());
}

/// Data in the hole between RAM regions, running off the end of a region,
/// or at an address that wraps: IOERR, nothing read or written, and the
/// RAM next to the hole keeps its bytes. The same request inside RAM
/// succeeds (control).
#[test]
fn data_outside_ram() {
    let img = image();
    let before = file_bytes(&img);
    let mut g = Guest::new(&img, false);
    let edge = HIGH + HIGH_LEN - 512;
    g.fill(edge, 512, 0x11);
    for (addr, flags) in [
        (RAM_END, WRITE),
        (RAM_END - 256, WRITE),
        (HIGH + HIGH_LEN - 256, WRITE),
        (u64::MAX - 255, WRITE),
        (RAM_END - 256, 0),
        (u64::MAX - 255, 0),
    ] {
        let kind = if flags == WRITE {
            VIRTIO_BLK_T_IN
        } else {
            VIRTIO_BLK_T_OUT
        };
        g.header(kind, 0);
        g.submit(&[(HDR, 16, 0), (addr, 512, flags), (STATUS, 1, WRITE)]);
        assert_eq!(g.status_byte(), IOERR, "{addr:#x}");
    }
    assert_eq!(g.read(RAM_END - 256, 256), vec![0u8; 256]);
    assert_eq!(g.read(HIGH + HIGH_LEN - 256, 256), vec![0x11; 256]);
    assert_eq!(file_bytes(&img), before);
    g.header(VIRTIO_BLK_T_IN, 0);
    g.submit(&[(HDR, 16, 0), (edge, 512, WRITE), (STATUS, 1, WRITE)]);
    assert_eq!(g.status_byte(), OK);
    assert_eq!(g.read(edge, 512), vec![1u8; 512]);
    assert!(!g.needs_reset());
}

/// More data segments than seg_max: IOERR. 255 data descriptors (the
/// status byte shares the last one) in a 256-entry queue.
#[test]
fn too_many_segments() {
    let img = image();
    let mut g = Guest::new(&img, false);
    g.init(256);
    g.header(VIRTIO_BLK_T_IN, 0);
    let mut c = vec![(HDR, 16, 0)];
    for i in 0..254u64 {
        c.push((BUF + 512 * i, 512, WRITE));
    }
    c.push((STATUS, 513, WRITE));
    assert_eq!(c.len(), 256);
    g.submit(&c);
    assert_eq!(g.read(STATUS + 512, 1), vec![IOERR]);
    assert!(!g.needs_reset());
}

/// No place for the status byte: the device cannot complete the request,
/// so it is NEEDS_RESET (with a config interrupt), ignores notifies until
/// the driver resets it, and works again after a reset.
#[test]
fn status_outside_ram_needs_reset() {
    let img = image();
    let mut g = Guest::new(&img, false);
    g.header(VIRTIO_BLK_T_IN, 0);
    g.submit(&[(HDR, 16, 0), (BUF, 512, WRITE), (RAM_END, 1, WRITE)]);
    assert!(g.needs_reset());
    assert!(
        g.t.fault().unwrap().contains("status byte"),
        "{:?}",
        g.t.fault()
    );
    assert_eq!(g.r(reg::INTERRUPT_STATUS), 2, "config change interrupt");
    assert_eq!(g.used_idx(), 0);
    // Ignored while broken.
    g.request(VIRTIO_BLK_T_IN, 0, 512, WRITE);
    assert_eq!(g.status_byte(), 0xee);
    // The driver cannot clear NEEDS_RESET except by a reset.
    g.w(reg::STATUS, 0xf);
    assert!(g.needs_reset());
    g.init(16);
    assert!(!g.needs_reset());
    assert_eq!(g.request(VIRTIO_BLK_T_IN, 0, 512, WRITE), OK);
}

#[test]
fn status_descriptor_readable_or_empty_needs_reset() {
    for (len, flags) in [(1, 0), (0, WRITE)] {
        let img = image();
        let mut g = Guest::new(&img, false);
        g.header(VIRTIO_BLK_T_FLUSH, 0);
        g.submit(&[(HDR, 16, 0), (STATUS, len, flags)]);
        assert!(g.needs_reset(), "len {len} flags {flags}");
    }
}

/// A chain that loops, or whose next index is past the table.
#[test]
fn broken_chains_need_reset() {
    for next in [0u16, 1, 16, 0xffff] {
        let img = image();
        let mut g = Guest::new(&img, false);
        g.header(VIRTIO_BLK_T_IN, 0);
        g.mem.write_obj(0xeeu8, GuestAddress(STATUS)).unwrap();
        g.put_desc(0, &[(HDR, 16, NEXT, 1), (BUF, 512, WRITE | NEXT, next)]);
        g.kick(0);
        assert!(g.needs_reset(), "next {next}");
        assert!(g.t.fault().unwrap().contains("chain"));
    }
    // Head index past the table.
    let img = image();
    let mut g = Guest::new(&img, false);
    g.kick(16);
    assert!(g.needs_reset());
}

/// The avail index runs further ahead than the queue has entries.
#[test]
fn avail_index_jump_needs_reset() {
    let img = image();
    let mut g = Guest::new(&img, false);
    g.mem.write_obj(17u16, GuestAddress(AVAIL + 2)).unwrap();
    g.w(reg::QUEUE_NOTIFY, 0);
    assert!(g.needs_reset());
    assert!(g.t.fault().unwrap().contains("avail"));
}

/// Rings outside RAM, a misaligned ring and a queue size that is not a
/// power of two.
#[test]
fn bad_queue_setup_needs_reset() {
    let img = image();
    for (off, v) in [
        (reg::QUEUE_DESC_LOW, RAM_END as u32),
        (reg::QUEUE_USED_LOW, (RAM_END - 8) as u32),
        (reg::QUEUE_AVAIL_HIGH, 1),
    ] {
        let mut g = Guest::new(&img, false);
        // Re-open the queue for configuration (a reset and the init
        // sequence up to DRIVER_OK, then the bad address).
        g.w(reg::STATUS, 0);
        g.w(
            reg::STATUS,
            VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER,
        );
        g.w(reg::DRIVER_FEATURES_SEL, 1);
        g.w(reg::DRIVER_FEATURES, 1);
        g.w(reg::STATUS, 0xb);
        g.w(reg::QUEUE_NUM, 16);
        for (o, a) in [
            (reg::QUEUE_DESC_LOW, DESC),
            (reg::QUEUE_AVAIL_LOW, AVAIL),
            (reg::QUEUE_USED_LOW, USED),
        ] {
            g.w(o, a as u32);
        }
        g.w(off, v);
        g.w(reg::QUEUE_READY, 1);
        g.w(reg::STATUS, 0xf);
        assert!(!g.needs_reset(), "only noticed when used");
        g.request(VIRTIO_BLK_T_IN, 0, 512, WRITE);
        assert!(g.needs_reset(), "{off:#x}={v:#x}");
    }
    let mut g = Guest::new(&img, false);
    g.w(reg::STATUS, 0);
    g.w(reg::STATUS, 3);
    g.w(reg::QUEUE_NUM, 3);
    assert!(g.needs_reset());
    drop(g); // one writer of an image at a time (its lock)
    let mut g = Guest::new(&img, false);
    g.w(reg::STATUS, 0);
    g.w(reg::STATUS, 3);
    g.w(reg::QUEUE_DESC_LOW, 0x1001);
    assert!(g.needs_reset());
}

/// FEATURES_OK only for a subset of the offered features that includes
/// VERSION_1.
#[test]
fn feature_negotiation() {
    let img = image();
    let mut g = Guest::new(&img, false);
    for (lo, hi, sel2, ok) in [
        (1 << VIRTIO_BLK_F_FLUSH, 1, 0, true),
        (1 << VIRTIO_BLK_F_FLUSH, 0, 0, false),
        (1 << VIRTIO_BLK_F_RO, 1, 0, false),
        (0, 1, 1, false),
    ] {
        g.w(reg::STATUS, 0);
        g.w(reg::STATUS, 3);
        g.w(reg::DRIVER_FEATURES_SEL, 0);
        g.w(reg::DRIVER_FEATURES, lo);
        g.w(reg::DRIVER_FEATURES_SEL, 1);
        g.w(reg::DRIVER_FEATURES, hi);
        g.w(reg::DRIVER_FEATURES_SEL, 2);
        g.w(reg::DRIVER_FEATURES, sel2);
        g.w(reg::STATUS, 0xb);
        assert_eq!(g.r(reg::STATUS) & 8 != 0, ok, "{lo:#x} {hi:#x} {sel2}");
    }
    // Without DRIVER_OK and FEATURES_OK, notifies do nothing.
    g.w(reg::STATUS, 0);
    g.w(reg::QUEUE_NOTIFY, 0);
    assert!(!g.needs_reset());
}

/// Guest pages (4 KiB) vm-memory's dirty bitmap has seen written.
fn dirty_pages(mem: &Mem) -> Vec<u64> {
    let mut out = Vec::new();
    for r in mem.iter() {
        for off in (0..r.len()).step_by(4096) {
            if vm_memory::MmapRegion::bitmap(r).dirty_at(off as usize) {
                out.push(r.start_addr().0 + off);
            }
        }
    }
    out
}

fn clear_dirty(mem: &Mem) {
    for r in mem.iter() {
        vm_memory::MmapRegion::bitmap(r).reset();
    }
}

/// The zero hint's premise for devices (docs/security.md, section 4):
/// building a virtio-blk device and the whole driver handshake write no
/// guest RAM; the device writes only the buffers, status byte and used
/// ring the guest handed it, and only when the guest asks (the request
/// is the control showing the bitmap sees device writes).
#[test]
fn device_writes_only_what_the_guest_asks() {
    let img = image();
    let mem = memory();
    let blk = Block::open(img.path(), false).unwrap();
    let mut g = Guest {
        t: MmioTransport::new(blk, mem.clone()).unwrap(),
        mem,
        size: 16,
        avail_idx: 0,
        next_desc: 0,
        ioeventfd: None,
    };
    assert_eq!(
        dirty_pages(&g.mem),
        Vec::<u64>::new(),
        "building the device"
    );
    for off in (0..0x200).step_by(4) {
        g.r(off);
    }
    g.init(16);
    // init() itself zeroes the rings as the guest; nothing else is dirty.
    let rings: Vec<u64> = (DESC..USED + 0x1000).step_by(4096).collect();
    assert_eq!(dirty_pages(&g.mem), rings, "driver handshake");
    g.header(VIRTIO_BLK_T_IN, 0);
    g.put_desc(
        0,
        &[
            (HDR, 16, NEXT, 1),
            (BUF, 512, WRITE | NEXT, 2),
            (STATUS, 1, WRITE, 0),
        ],
    );
    g.mem.write_obj(0u16, GuestAddress(AVAIL + 4)).unwrap();
    g.mem.write_obj(1u16, GuestAddress(AVAIL + 2)).unwrap();
    clear_dirty(&g.mem);
    g.w(reg::QUEUE_NOTIFY, 0);
    assert_eq!(g.status_byte(), OK);
    assert_eq!(dirty_pages(&g.mem), vec![USED, BUF, STATUS]);
}

/// An image is one VM's while it writes it: a second writable open and a
/// reader beside a writer are refused with the one-line "in use" error;
/// readers share; closing the first user frees the image. (OFD locks
/// conflict within one process, so this runs in one.)
#[test]
fn image_lock() {
    let img = image();
    let msg = |r: Result<Block, BlockError>| r.err().map(|e| e.to_string()).unwrap_or_default();
    let writer = Block::open(img.path(), false).unwrap();
    let second = msg(Block::open(img.path(), false));
    assert!(
        second.contains("is in use") && second.contains("write lock"),
        "{second}"
    );
    assert!(msg(Block::open(img.path(), true)).contains("write lock"));
    drop(writer);
    let r1 = Block::open(img.path(), true).unwrap();
    let r2 = Block::open(img.path(), true).unwrap();
    let w = msg(Block::open(img.path(), false));
    assert!(w.contains("read lock") && w.contains("readonly=on"), "{w}");
    assert_eq!(w.lines().count(), 1);
    drop((r1, r2));
    Block::open(img.path(), false).unwrap();
}

/// Requests served on the I/O thread, woken by the queue's ioeventfd as
/// KVM wakes it (the guest's `QueueNotify` write never reaches the
/// register window): data moves, the interrupt reaches the irqfd from that
/// thread, a ring the device cannot use still makes it `NEEDS_RESET` (and
/// a reset brings it back), and the thread stops within the teardown
/// bound with nothing left running.
#[test]
fn requests_on_the_io_thread() {
    let img = image();
    let mut g = Guest::new(&img, false);
    let (mut worker, kicks) =
        crate::virtio::spawn_io_thread(g.t.runner(), "zs-blk-test-io".into()).unwrap();
    assert_eq!(kicks.len(), 1, "one eventfd per queue");
    g.ioeventfd = kicks.into_iter().next();

    let data: Vec<u8> = (0..1024u32).map(|i| (i * 11) as u8).collect();
    g.mem.write_slice(&data, GuestAddress(BUF)).unwrap();
    assert_eq!(g.request(VIRTIO_BLK_T_OUT, 5, 1024, 0), OK);
    assert_eq!(&file_bytes(&img)[5 * 512..7 * 512], &data[..]);
    assert_eq!(g.t.interrupt_evt().read().unwrap(), 1, "irqfd signalled");
    assert_eq!(g.r(reg::INTERRUPT_STATUS), 1);
    g.w(reg::INTERRUPT_ACK, 1);
    g.fill(BUF, 512, 0);
    assert_eq!(g.request(VIRTIO_BLK_T_IN, 1, 512, WRITE), OK);
    assert_eq!(g.read(BUF, 512), vec![2u8; 512]);
    assert_eq!(g.used_idx(), 2);

    // A head index past the table: NEEDS_RESET, as on the vCPU path.
    g.kick(16);
    assert!(g.needs_reset());
    assert!(g.t.fault().unwrap().contains("chain"));
    g.init(16);
    assert!(!g.needs_reset());
    assert_eq!(g.request(VIRTIO_BLK_T_IN, 0, 512, WRITE), OK);

    assert!(
        worker.stop(std::time::Duration::from_secs(2)),
        "the I/O thread ends within the teardown bound"
    );
    // Nothing serves the eventfd now: a request stays unanswered...
    let kick = g.ioeventfd.take().unwrap();
    g.header(VIRTIO_BLK_T_IN, 0);
    g.put_desc(
        4,
        &[
            (HDR, 16, NEXT, 5),
            (BUF, 512, WRITE | NEXT, 6),
            (STATUS, 1, WRITE, 0),
        ],
    );
    g.mem.write_obj(4u16, GuestAddress(AVAIL + 4 + 2)).unwrap();
    g.mem.write_obj(2u16, GuestAddress(AVAIL + 2)).unwrap();
    g.avail_idx = 2;
    kick.write(1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(g.used_idx(), 1);
    // ...until a QueueNotify reaches the register window (no ioeventfd):
    // the vCPU path runs it.
    g.w(reg::QUEUE_NOTIFY, 0);
    assert_eq!(g.used_idx(), 2);
    assert!(g.t.stop(), "no thread holds the device any more");
}
