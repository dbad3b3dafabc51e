//! Devices whose queues the host kernel runs: vhost-net (`--net`, when
//! `/dev/vhost-net` exists) and vhost-vsock (`--vsock`), through rust-vmm's
//! `vhost` crate (`vhost_kern`).
//!
//! The VMM keeps the virtio-mmio transport (registers, features,
//! configuration space: MAC, CID) and hands the kernel, when the driver
//! sets `DRIVER_OK`: the features it accepted, the guest memory table
//! (guest-physical to VMM-virtual, one entry per RAM region), each queue's
//! size, ring addresses and first avail index, and three eventfds per
//! queue. *kick*: the VMM registers it as a KVM ioeventfd on the window's
//! `QueueNotify` with the queue index as datamatch, so a notify goes from
//! the guest to the vhost worker without leaving the kernel. *call*: the
//! kernel signals used buffers there; virtio-mmio needs the
//! `InterruptStatus` bit set before the line is raised (Linux's handler
//! reads it first), so a relay thread ([`spawn_relay`]) sets it and writes
//! the irqfd. *err*: the kernel signals a ring or buffer it could not use;
//! the relay marks the device `NEEDS_RESET`.
//!
//! What keeps a guest's addresses inside guest RAM: the kernel translates
//! every buffer address through the memory table (an address outside it
//! fails the request and signals *err*), and it reads the rings at the
//! VMM-virtual addresses the VMM gives it, so before that the VMM checks
//! each ring lies whole inside one RAM region (a ring that ran over a
//! region's end would reach whatever the VMM maps next).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use vhost::net::VhostNet as _;
use vhost::vhost_kern::net::Net as KernNet;
use vhost::vhost_kern::vsock::Vsock as KernVsock;
use vhost::vsock::VhostVsock as _;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ids::{VIRTIO_ID_NET, VIRTIO_ID_VSOCK};
use virtio_queue::{Queue, QueueT};
use vm_memory::bitmap::Bitmap;
use vm_memory::{Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::mmio::Interrupt;
use super::net::{config_space, offered_features, QUEUE_SIZE};
use super::read_config_bytes;
use super::tap::Tap;
use super::{Activation, QueueFault, VirtioDevice, Worker};

/// The device node of the kernel's vhost-net backend.
pub const VHOST_NET_DEV: &str = "/dev/vhost-net";
/// The device node of the kernel's vhost-vsock backend.
pub const VHOST_VSOCK_DEV: &str = "/dev/vhost-vsock";
/// Descriptors per vsock queue (cloud-hypervisor's and Firecracker's).
pub const VSOCK_QUEUE_SIZE: u16 = 256;

/// Opening a vhost backend; each message names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum VhostError {
    /// `/dev/vhost-net` cannot be opened.
    #[error("--net tap={tap},vhost=on: cannot open {VHOST_NET_DEV}: {err}; load the module (modprobe vhost_net) or use vhost=off")]
    NetOpen {
        /// Interface.
        tap: String,
        /// Cause.
        err: String,
    },
    /// `/dev/vhost-vsock` cannot be opened.
    #[error("--vsock cid={cid}: cannot open {VHOST_VSOCK_DEV}: {err}; load the module (modprobe vhost_vsock) and run as root")]
    VsockOpen {
        /// CID.
        cid: u32,
        /// Cause.
        err: String,
    },
    /// The CID is taken.
    #[error("--vsock cid={cid}: the kernel refused the CID: {err}; another VM on this host may use it, pick another cid")]
    Cid {
        /// CID.
        cid: u32,
        /// Cause.
        err: String,
    },
    /// Another vhost call failed.
    #[error("{what}: {err}; the host kernel's vhost module refused the setup")]
    Setup {
        /// Which device and call.
        what: String,
        /// Cause.
        err: String,
    },
}

/// The per-queue eventfds a vhost backend uses.
struct QueueFds {
    kick: EventFd,
    call: EventFd,
    err: EventFd,
}

impl QueueFds {
    fn new() -> io::Result<Self> {
        Ok(QueueFds {
            kick: EventFd::new(EFD_NONBLOCK)?,
            call: EventFd::new(EFD_NONBLOCK)?,
            err: EventFd::new(EFD_NONBLOCK)?,
        })
    }
}

/// The guest memory table for `VHOST_SET_MEM_TABLE`: one entry per RAM
/// region (anonymous or file-backed, the kernel only needs the address).
pub fn memory_table<B: Bitmap>(mem: &GuestMemoryMmap<B>) -> Vec<VhostUserMemoryRegionInfo> {
    mem.iter()
        .map(|r| VhostUserMemoryRegionInfo {
            guest_phys_addr: r.start_addr().raw_value(),
            memory_size: r.len(),
            userspace_addr: r.as_ptr() as u64,
            mmap_offset: 0,
            mmap_handle: -1,
        })
        .collect()
}

/// Whether `[addr, addr + len)` lies whole inside one region of `mem`
/// (guest-adjacent regions need not be adjacent in the VMM).
pub fn within_one_region<B: Bitmap>(mem: &GuestMemoryMmap<B>, addr: u64, len: u64) -> bool {
    let Some(r) = mem.find_region(GuestAddress(addr)) else {
        return false;
    };
    let end = r.start_addr().raw_value() + r.len();
    addr.checked_add(len).is_some_and(|e| e <= end)
}

/// Checks queue `q` as the driver left it and returns what vhost needs;
/// every ring must be whole inside one RAM region.
pub fn vring_config<B: Bitmap>(
    mem: &GuestMemoryMmap<B>,
    index: usize,
    q: &Queue,
) -> Result<VringConfigData, QueueFault> {
    if !q.ready() {
        return Err(QueueFault(format!(
            "queue {index} is not ready at DRIVER_OK; the vhost backend needs every queue"
        )));
    }
    let n = u64::from(q.size());
    // With room for the event index fields, negotiated or not.
    for (what, addr, len) in [
        ("descriptor table", q.desc_table(), 16 * n),
        ("avail ring", q.avail_ring(), 6 + 2 * n),
        ("used ring", q.used_ring(), 6 + 8 * n),
    ] {
        if !within_one_region(mem, addr, len) {
            return Err(QueueFault(format!(
                "queue {index}: {what} {addr:#x}+{len:#x} is not inside one guest RAM region"
            )));
        }
    }
    Ok(VringConfigData {
        queue_max_size: q.max_size(),
        queue_size: q.size(),
        flags: 0,
        desc_table_addr: q.desc_table(),
        used_ring_addr: q.used_ring(),
        avail_ring_addr: q.avail_ring(),
        log_addr: None,
    })
}

/// Features, memory table and rings of `queues[..fds.len()]` to a vhost
/// backend (the order QEMU and cloud-hypervisor use).
fn setup_vrings<T: VhostBackend, B: Bitmap>(
    be: &T,
    mem: &GuestMemoryMmap<B>,
    queues: &[Queue],
    fds: &[QueueFds],
    features: u64,
) -> Result<(), QueueFault> {
    let f = |what: &'static str| move |e: vhost::Error| QueueFault(format!("vhost {what}: {e}"));
    be.set_features(features).map_err(f("SET_FEATURES"))?;
    be.set_mem_table(&memory_table(mem))
        .map_err(f("SET_MEM_TABLE"))?;
    for (i, fd) in fds.iter().enumerate() {
        let q = queues
            .get(i)
            .ok_or_else(|| QueueFault(format!("queue {i} missing")))?;
        let cfg = vring_config(mem, i, q)?;
        be.set_vring_num(i, q.size()).map_err(f("SET_VRING_NUM"))?;
        be.set_vring_addr(i, &cfg).map_err(f("SET_VRING_ADDR"))?;
        be.set_vring_base(i, q.next_avail())
            .map_err(f("SET_VRING_BASE"))?;
        be.set_vring_call(i, &fd.call)
            .map_err(f("SET_VRING_CALL"))?;
        be.set_vring_kick(i, &fd.kick)
            .map_err(f("SET_VRING_KICK"))?;
        be.set_vring_err(i, &fd.err).map_err(f("SET_VRING_ERR"))?;
    }
    Ok(())
}

/// Starts the thread that turns the backend's *call* signals into
/// virtio-mmio interrupts and its *err* signals into `NEEDS_RESET`.
fn relay(name: String, fds: &[QueueFds], irq: Arc<Interrupt>) -> io::Result<Worker> {
    let calls = fds
        .iter()
        .map(|f| f.call.try_clone())
        .collect::<io::Result<Vec<_>>>()?;
    let errs = fds
        .iter()
        .map(|f| f.err.try_clone())
        .collect::<io::Result<Vec<_>>>()?;
    Worker::spawn(name, move |stop| loop {
        let mut pfds: Vec<libc::pollfd> = std::iter::once(stop)
            .chain(calls.iter().map(|e| e.as_raw_fd()))
            .chain(errs.iter().map(|e| e.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: a valid array of pollfd.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, -1) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if pfds[0].revents != 0 {
            return;
        }
        let n = calls.len();
        for (i, c) in calls.iter().enumerate() {
            if pfds[1 + i].revents != 0 && c.read().is_ok() {
                irq.signal_used();
            }
        }
        for (i, e) in errs.iter().enumerate() {
            if pfds[1 + n + i].revents != 0 && e.read().is_ok() {
                irq.fail(format!(
                    "queue {i}: the kernel's vhost backend could not use a ring or buffer (an address outside guest RAM or a malformed chain)"
                ));
            }
        }
    })
}

/// virtio-net whose queues the kernel's vhost-net runs on a tap.
pub struct VhostNet<B: Bitmap + 'static> {
    be: KernNet<Arc<GuestMemoryMmap<B>>>,
    tap: Tap,
    config: [u8; 8],
    backend_features: u64,
    fds: Vec<QueueFds>,
    queue_sizes: [u16; 2],
    running: bool,
}

impl<B: Bitmap + 'static> VhostNet<B> {
    /// Opens `/dev/vhost-net` for `tap` on guest memory `mem`.
    pub fn new(mem: Arc<GuestMemoryMmap<B>>, tap: Tap, mac: [u8; 6]) -> Result<Self, VhostError> {
        let open = |err: String| VhostError::NetOpen {
            tap: tap.name().to_string(),
            err,
        };
        let be = KernNet::new(mem).map_err(|e| open(e.to_string()))?;
        let setup = |what: &str| {
            let t = tap.name().to_string();
            let what = format!("--net tap={t}: vhost-net {what}");
            move |e: vhost::Error| VhostError::Setup {
                what,
                err: e.to_string(),
            }
        };
        be.set_owner().map_err(setup("SET_OWNER"))?;
        let backend_features = be.get_features().map_err(setup("GET_FEATURES"))?;
        if backend_features & (1 << VIRTIO_F_VERSION_1) == 0 {
            return Err(setup("GET_FEATURES")(vhost::Error::InvalidOperation));
        }
        let fds = (0..2)
            .map(|_| QueueFds::new())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| open(e.to_string()))?;
        Ok(VhostNet {
            be,
            tap,
            config: config_space(mac),
            backend_features,
            fds,
            queue_sizes: [QUEUE_SIZE; 2],
            running: false,
        })
    }

    /// The kick eventfd of each queue, to register as KVM ioeventfds on
    /// `QueueNotify` with the index as datamatch.
    pub fn kick_fds(&self) -> Vec<&EventFd> {
        self.fds.iter().map(|f| &f.kick).collect()
    }

    /// Starts the call/err relay for interrupt `irq`.
    pub fn spawn_relay(&self, name: String, irq: Arc<Interrupt>) -> io::Result<Worker> {
        relay(name, &self.fds, irq)
    }

    fn stop_backend(&mut self) {
        if self.running {
            for i in 0..self.fds.len() {
                let _ = self.be.set_backend(i, None);
            }
            self.running = false;
        }
    }
}

impl<B: Bitmap + Send + Sync + 'static> VirtioDevice<GuestMemoryMmap<B>> for VhostNet<B> {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_NET
    }

    fn features(&self) -> u64 {
        offered_features()
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        read_config_bytes(&self.config, offset, data);
    }

    fn process_queue(
        &mut self,
        _index: usize,
        _queue: &mut Queue,
        _mem: &GuestMemoryMmap<B>,
    ) -> Result<bool, QueueFault> {
        // Notifies go to the kernel through the ioeventfd; one that
        // reaches the VMM (a queue index with no ioeventfd) does nothing.
        Ok(false)
    }

    fn activate(&mut self, ctx: Activation<'_, GuestMemoryMmap<B>>) -> Result<(), QueueFault> {
        // MAC and STATUS are the VMM's; the kernel takes only its own bits.
        let features = ctx.features & self.backend_features;
        setup_vrings(&self.be, ctx.mem, ctx.queues, &self.fds, features)?;
        for i in 0..self.fds.len() {
            if let Err(e) = self.be.set_backend(i, Some(self.tap.file())) {
                self.running = true;
                self.stop_backend();
                return Err(QueueFault(format!("vhost-net SET_BACKEND: {e}")));
            }
        }
        self.running = true;
        Ok(())
    }

    fn reset(&mut self) {
        self.stop_backend();
    }
}

/// virtio-vsock whose RX and TX queues the kernel's vhost-vsock runs; the
/// event queue (2) is the VMM's and carries nothing (no transport resets
/// are ever sent: the VM is never migrated).
pub struct VhostVsock<B: Bitmap + 'static> {
    be: KernVsock<Arc<GuestMemoryMmap<B>>>,
    cid: u32,
    config: [u8; 8],
    backend_features: u64,
    fds: Vec<QueueFds>,
    queue_sizes: [u16; 3],
    running: bool,
}

impl<B: Bitmap + 'static> VhostVsock<B> {
    /// Opens `/dev/vhost-vsock` for guest CID `cid` on guest memory `mem`.
    pub fn new(mem: Arc<GuestMemoryMmap<B>>, cid: u32) -> Result<Self, VhostError> {
        let be = KernVsock::new(mem).map_err(|e| VhostError::VsockOpen {
            cid,
            err: e.to_string(),
        })?;
        let setup = |what: &'static str| {
            move |e: vhost::Error| VhostError::Setup {
                what: format!("--vsock cid={cid}: vhost-vsock {what}"),
                err: e.to_string(),
            }
        };
        be.set_owner().map_err(setup("SET_OWNER"))?;
        be.set_guest_cid(u64::from(cid))
            .map_err(|e| VhostError::Cid {
                cid,
                err: e.to_string(),
            })?;
        let backend_features = be.get_features().map_err(setup("GET_FEATURES"))?;
        if backend_features & (1 << VIRTIO_F_VERSION_1) == 0 {
            return Err(setup("GET_FEATURES")(vhost::Error::InvalidOperation));
        }
        let fds = (0..2)
            .map(|_| QueueFds::new())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| VhostError::VsockOpen {
                cid,
                err: e.to_string(),
            })?;
        let mut config = [0u8; 8];
        config.copy_from_slice(&u64::from(cid).to_le_bytes());
        Ok(VhostVsock {
            be,
            cid,
            config,
            backend_features,
            fds,
            queue_sizes: [VSOCK_QUEUE_SIZE; 3],
            running: false,
        })
    }

    /// The guest's CID.
    pub fn cid(&self) -> u32 {
        self.cid
    }

    /// The kick eventfds of the RX and TX queues (0, 1).
    pub fn kick_fds(&self) -> Vec<&EventFd> {
        self.fds.iter().map(|f| &f.kick).collect()
    }

    /// Starts the call/err relay for interrupt `irq`.
    pub fn spawn_relay(&self, name: String, irq: Arc<Interrupt>) -> io::Result<Worker> {
        relay(name, &self.fds, irq)
    }
}

impl<B: Bitmap + Send + Sync + 'static> VirtioDevice<GuestMemoryMmap<B>> for VhostVsock<B> {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_VSOCK
    }

    fn features(&self) -> u64 {
        1 << VIRTIO_F_VERSION_1
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &self.queue_sizes
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        read_config_bytes(&self.config, offset, data);
    }

    fn process_queue(
        &mut self,
        _index: usize,
        _queue: &mut Queue,
        _mem: &GuestMemoryMmap<B>,
    ) -> Result<bool, QueueFault> {
        // RX/TX notifies go to the kernel; the event queue's buffers stay
        // with the VMM until an event it never sends.
        Ok(false)
    }

    fn activate(&mut self, ctx: Activation<'_, GuestMemoryMmap<B>>) -> Result<(), QueueFault> {
        let features = ctx.features & self.backend_features;
        setup_vrings(&self.be, ctx.mem, ctx.queues, &self.fds, features)?;
        self.be
            .start()
            .map_err(|e| QueueFault(format!("vhost-vsock SET_RUNNING: {e}")))?;
        self.running = true;
        Ok(())
    }

    fn reset(&mut self) {
        if self.running {
            let _ = self.be.stop();
            self.running = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::bitmap::AtomicBitmap;

    type Mem = GuestMemoryMmap<AtomicBitmap>;

    /// [0, 1 MiB) and [1 MiB, 1 MiB + 64 KiB): guest-adjacent, but two
    /// mappings, so a ring across the boundary is refused.
    fn memory() -> Mem {
        GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 1 << 20),
            (GuestAddress(1 << 20), 64 << 10),
        ])
        .unwrap()
    }

    fn queue(size: u16, desc: u64, avail: u64, used: u64, ready: bool) -> Queue {
        let mut q = Queue::new(256).unwrap();
        q.try_set_size(size).unwrap();
        q.try_set_desc_table_address(GuestAddress(desc)).unwrap();
        q.try_set_avail_ring_address(GuestAddress(avail)).unwrap();
        q.try_set_used_ring_address(GuestAddress(used)).unwrap();
        q.set_ready(ready);
        q
    }

    #[test]
    fn memory_table_names_every_region() {
        let m = memory();
        let t = memory_table(&m);
        assert_eq!(t.len(), 2);
        for (e, r) in t.iter().zip(m.iter()) {
            assert_eq!(e.guest_phys_addr, r.start_addr().0);
            assert_eq!(e.memory_size, r.len());
            assert_eq!(e.userspace_addr, r.as_ptr() as u64);
        }
    }

    /// What the VMM checks before the kernel gets VMM-virtual ring
    /// addresses: whole rings inside one region, every queue ready.
    #[test]
    fn rings_must_lie_inside_one_region() {
        let m = memory();
        let ok = queue(256, 0x1000, 0x5000, 0x6000, true);
        let c = vring_config(&m, 0, &ok).unwrap();
        assert_eq!(
            (
                c.queue_size,
                c.desc_table_addr,
                c.avail_ring_addr,
                c.used_ring_addr
            ),
            (256, 0x1000, 0x5000, 0x6000)
        );
        let end = 1u64 << 20;
        for (name, q) in [
            ("not ready", queue(256, 0x1000, 0x5000, 0x6000, false)),
            (
                "desc across the boundary",
                queue(256, end - 0x800, 0x5000, 0x6000, true),
            ),
            (
                "avail across the boundary",
                queue(256, 0x1000, end - 0x100, 0x6000, true),
            ),
            (
                "used across the boundary",
                queue(256, 0x1000, 0x5000, end - 0x800, true),
            ),
            (
                "used past the end of RAM",
                queue(256, 0x1000, 0x5000, end + 0xf800, true),
            ),
            ("in the hole", queue(16, 0x4000_0000, 0x5000, 0x6000, true)),
        ] {
            let e = vring_config(&m, 1, &q).err().unwrap();
            assert!(e.0.contains("queue 1"), "{name}: {e}");
        }
        assert!(within_one_region(&m, end, 64 << 10));
        assert!(!within_one_region(&m, end, (64 << 10) + 1));
        assert!(!within_one_region(&m, u64::MAX - 1, 4));
    }

    /// Without the kernel module the error is one line with the fix.
    #[test]
    fn missing_backends_are_one_line_errors() {
        let m = Arc::new(memory());
        if std::path::Path::new(VHOST_VSOCK_DEV).exists() {
            testsupport::skip(
                "NO_VHOST_VSOCK",
                format!("the vsock case: {VHOST_VSOCK_DEV} exists here"),
            );
        } else {
            let e = VhostVsock::new(m.clone(), 3).err().unwrap().to_string();
            assert!(
                e.contains("modprobe vhost_vsock") && !e.contains('\n'),
                "{e}"
            );
        }
        let e = VhostError::NetOpen {
            tap: "tap0".into(),
            err: "No such file or directory".into(),
        }
        .to_string();
        assert!(
            e.contains("vhost=off") && e.contains("modprobe vhost_net"),
            "{e}"
        );
    }
}
