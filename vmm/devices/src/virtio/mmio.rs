//! The virtio-mmio transport, register layout version 2 (virtio 1.2,
//! section 4.2.2): one 4 KiB window per device, announced to Linux as
//! `virtio_mmio.device=4K@BASE:GSI`.
//!
//! Registers are 32 bits wide and read or written whole; any other access
//! below the configuration space reads 0 and is ignored when written (the
//! spec requires 32-bit accesses; we do not guess at what a narrower one
//! meant).
//!
//! Queue notifications do not run on the vCPU: the VMM registers each
//! queue's `QueueNotify` write (datamatch = queue index) as a KVM
//! ioeventfd, so the write costs the guest no exit to user space. For a
//! device the VMM runs (virtio-blk, user-space virtio-net) the device's
//! I/O thread ([`super::io_thread`]) waits on those eventfds and runs the
//! queue through a [`QueueRunner`]; for a vhost device the kernel's vhost
//! worker reads them. A `QueueNotify` that still reaches this code (no
//! ioeventfd: the unit tests and fuzz targets, which drive the device
//! through its registers) runs the queue here, on the caller's thread;
//! the device's lock serialises it with the I/O thread. Interrupts go out
//! through the [`Interrupt`] (an [`EventFd`] the VMM registers as a KVM
//! irqfd, as COM1's, plus the `InterruptStatus` bits), which any thread of
//! the device raises (the I/O thread, the tap RX worker, the vhost call
//! relay).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_DRIVER_OK, VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_CONFIG_S_NEEDS_RESET,
    VIRTIO_F_VERSION_1,
};
use virtio_bindings::virtio_mmio::{VIRTIO_MMIO_INT_CONFIG, VIRTIO_MMIO_INT_VRING};
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;
use vm_memory::GuestMemory;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::{Activation, VirtioDevice};

/// `"virt"` in little endian.
pub const MMIO_MAGIC: u32 = 0x7472_6976;
/// The register layout this transport implements (not the legacy 1).
pub const MMIO_VERSION: u32 = 2;
/// Vendor ID reported to the guest (`"ZS"`; Linux does not interpret it).
pub const MMIO_VENDOR_ID: u32 = 0x5a53;
/// Size of one device's register window.
pub const MMIO_WINDOW: u64 = 0x1000;
/// Guest-physical base of the first device's window, in the 3..4 GiB
/// MMIO hole (Firecracker's choice too); device `n` is at
/// `MMIO_BASE + n * MMIO_WINDOW`.
pub const MMIO_BASE: u64 = 0xd000_0000;
/// GSI of the first device; device `n` has `FIRST_GSI + n` (COM1 has 4).
pub const FIRST_GSI: u32 = 5;
/// Devices that fit: GSIs up to 23 are IOAPIC pins.
pub const MAX_DEVICES: usize = 24 - FIRST_GSI as usize;

/// Where device `n` sits and how Linux is told: window base, GSI and the
/// kernel command-line entry `virtio_mmio.device=4K@BASE:GSI`.
pub fn placement(n: usize) -> Option<(u64, u32, String)> {
    (n < MAX_DEVICES).then(|| {
        let base = MMIO_BASE + n as u64 * MMIO_WINDOW;
        let gsi = FIRST_GSI + n as u32;
        (base, gsi, format!("virtio_mmio.device=4K@{base:#x}:{gsi}"))
    })
}

/// Where device-specific configuration space starts in the window.
pub const CONFIG_OFFSET: u64 = 0x100;

/// Register offsets (`virtio_mmio.h`).
#[allow(missing_docs)]
pub mod reg {
    pub const MAGIC: u64 = 0x000;
    pub const VERSION: u64 = 0x004;
    pub const DEVICE_ID: u64 = 0x008;
    pub const VENDOR_ID: u64 = 0x00c;
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    pub const QUEUE_NOTIFY: u64 = 0x050;
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    pub const QUEUE_AVAIL_LOW: u64 = 0x090;
    pub const QUEUE_AVAIL_HIGH: u64 = 0x094;
    pub const QUEUE_USED_LOW: u64 = 0x0a0;
    pub const QUEUE_USED_HIGH: u64 = 0x0a4;
    pub const CONFIG_GENERATION: u64 = 0x0fc;
}
use reg::*;

/// A device's interrupt line and the state the driver reads behind it:
/// `InterruptStatus` bits and the fault that made the device
/// `NEEDS_RESET`. Shared (an `Arc`) between the transport and whatever
/// thread completes the device's buffers.
pub struct Interrupt {
    status: AtomicU32,
    evt: EventFd,
    fault: Mutex<Option<String>>,
}

impl Interrupt {
    fn new() -> std::io::Result<Self> {
        Ok(Interrupt {
            status: AtomicU32::new(0),
            evt: EventFd::new(EFD_NONBLOCK)?,
            fault: Mutex::new(None),
        })
    }

    /// The eventfd the VMM registers as the device's irqfd.
    pub fn eventfd(&self) -> &EventFd {
        &self.evt
    }

    /// Used buffers were added: set the VRING bit and interrupt.
    pub fn signal_used(&self) {
        self.raise(VIRTIO_MMIO_INT_VRING);
    }

    /// Marks the device broken until the driver resets it (virtio 1.2,
    /// 2.1.2): records why, sets NEEDS_RESET and sends a configuration
    /// change interrupt. The first fault is kept.
    pub fn fail(&self, why: String) {
        let mut f = self.fault.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(why);
            drop(f);
            self.raise(VIRTIO_MMIO_INT_CONFIG);
        }
    }

    /// Why the device is `NEEDS_RESET`, if it is.
    pub fn fault(&self) -> Option<String> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn raise(&self, bit: u32) {
        self.status.fetch_or(bit, Ordering::SeqCst);
        // EAGAIN means the counter is saturated: an interrupt is pending
        // anyway.
        let _ = self.evt.write(1);
    }

    fn clear(&self) {
        self.status.store(0, Ordering::SeqCst);
        *self.fault.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// What the register window shares with the threads that run the device's
/// queues (its I/O thread, the net RX worker): the device, its queues and
/// guest memory. The vCPU takes `state` only for what needs it (queue
/// setup, `DRIVER_OK`, reset, a `QueueNotify` that reached it); reads of
/// `InterruptStatus`, `Status` and configuration space never do, so a
/// vCPU in the guest's interrupt handler does not wait for a disk request
/// the I/O thread is running.
struct Core<M, D> {
    mem: M,
    irq: Arc<Interrupt>,
    state: Mutex<State<D>>,
}

/// The part of a device one thread at a time runs.
struct State<D> {
    device: D,
    queues: Vec<Queue>,
    /// `FEATURES_OK | DRIVER_OK` are set: the queues may be run.
    live: bool,
    /// The device was handed its queues ([`VirtioDevice::activate`]) and
    /// not reset since.
    active: bool,
}

impl<M: GuestMemory, D: VirtioDevice<M>> Core<M, D> {
    /// A thread that panicked while running the device left plain data
    /// behind (queue indexes, the device's own fields); the device goes on
    /// or the driver resets it, as after any fault.
    fn lock(&self) -> MutexGuard<'_, State<D>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs queue `index` as the driver asked; false if the device could
    /// not run it (not live, `NEEDS_RESET`, no such queue or not ready).
    fn notify(&self, index: u32) -> bool {
        let mut s = self.lock();
        if !s.live || self.irq.fault().is_some() {
            return false;
        }
        let State { device, queues, .. } = &mut *s;
        let Some(q) = queues.get_mut(index as usize) else {
            return false;
        };
        if !q.ready() {
            return false;
        }
        if !q.is_valid(&self.mem) {
            self.irq.fail(format!(
                "queue {index}: descriptor table, avail or used ring not inside guest RAM"
            ));
            return false;
        }
        match device.process_queue(index as usize, q, &self.mem) {
            Ok(true) => self.irq.signal_used(),
            Ok(false) => {}
            Err(e) => {
                self.irq.fail(format!("queue {index}: {e}"));
                return false;
            }
        }
        true
    }
}

/// The device behind a window, locked: what [`MmioTransport::device`] and
/// [`QueueRunner::device`] hand out.
pub struct DeviceGuard<'a, D>(MutexGuard<'a, State<D>>);

impl<D> std::ops::Deref for DeviceGuard<'_, D> {
    type Target = D;
    fn deref(&self) -> &D {
        &self.0.device
    }
}

impl<D> std::ops::DerefMut for DeviceGuard<'_, D> {
    fn deref_mut(&mut self) -> &mut D {
        &mut self.0.device
    }
}

/// A handle that runs a device's queues from a thread of the device (its
/// I/O thread, the net RX worker) without the register window, whose lock
/// the vCPU holds for every register access.
pub struct QueueRunner<M, D> {
    core: Arc<Core<M, D>>,
}

impl<M, D> Clone for QueueRunner<M, D> {
    fn clone(&self) -> Self {
        QueueRunner {
            core: self.core.clone(),
        }
    }
}

impl<M: GuestMemory, D: VirtioDevice<M>> QueueRunner<M, D> {
    /// Runs queue `index` as if the driver had notified it (an ioeventfd
    /// fired, or the device has new input for the guest). Returns false if
    /// the device could not run it (not live, or `NEEDS_RESET`, or the
    /// queue not ready).
    pub fn run(&self, index: u32) -> bool {
        self.core.notify(index)
    }

    /// Marks the device `NEEDS_RESET` (the thread that serves it gave up).
    pub fn fail(&self, why: String) {
        self.core.irq.fail(why);
    }

    /// How many queues the device has.
    pub fn queue_count(&self) -> usize {
        self.core.lock().queues.len()
    }

    /// The device, locked against the vCPU and the device's other threads.
    pub fn device(&self) -> DeviceGuard<'_, D> {
        DeviceGuard(self.core.lock())
    }
}

/// One device's virtio-mmio register window and transport state.
pub struct MmioTransport<M: GuestMemory, D: VirtioDevice<M>> {
    core: Arc<Core<M, D>>,
    /// What the device reports, read once when the window is built: none
    /// of it changes afterwards (so `ConfigGeneration` stays 0), and a
    /// register read never has to wait for the device's lock.
    device_type: u32,
    device_features: u64,
    config: Vec<u8>,
    queue_sel: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    unknown_features_acked: bool,
    status: u32,
    irq: Arc<Interrupt>,
}

const LIVE: u32 = VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK;

impl<M: GuestMemory, D: VirtioDevice<M>> MmioTransport<M, D> {
    /// Puts `device` behind a register window; it reaches guest memory
    /// only through `mem`.
    pub fn new(device: D, mem: M) -> std::io::Result<Self> {
        let queues = device
            .queue_max_sizes()
            .iter()
            .map(|&max| {
                Queue::new(max).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("virtio queue size {max}: {e:?}"),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let mut config = vec![0u8; (MMIO_WINDOW - CONFIG_OFFSET) as usize];
        device.read_config(0, &mut config);
        let irq = Arc::new(Interrupt::new()?);
        Ok(MmioTransport {
            device_type: device.device_type(),
            device_features: device.features(),
            config,
            core: Arc::new(Core {
                mem,
                irq: irq.clone(),
                state: Mutex::new(State {
                    device,
                    queues,
                    live: false,
                    active: false,
                }),
            }),
            queue_sel: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            unknown_features_acked: false,
            status: 0,
            irq,
        })
    }

    /// The eventfd the transport signals for an interrupt (register it as
    /// an irqfd on the device's GSI).
    pub fn interrupt_evt(&self) -> &EventFd {
        self.irq.eventfd()
    }

    /// The device's interrupt, for a thread that completes its buffers.
    pub fn interrupt(&self) -> Arc<Interrupt> {
        self.irq.clone()
    }

    /// A handle that runs the device's queues from another thread.
    pub fn runner(&self) -> QueueRunner<M, D> {
        QueueRunner {
            core: self.core.clone(),
        }
    }

    /// The device, mutably (the VMM's own setup, tests).
    pub fn device_mut(&mut self) -> DeviceGuard<'_, D> {
        DeviceGuard(self.core.lock())
    }

    /// The guest memory the device works on.
    pub fn memory(&self) -> &M {
        &self.core.mem
    }

    /// The device (locked while the guard lives).
    pub fn device(&self) -> DeviceGuard<'_, D> {
        DeviceGuard(self.core.lock())
    }

    /// The device status register (`VIRTIO_CONFIG_S_*` bits).
    pub fn status(&self) -> u32 {
        if self.irq.fault().is_some() {
            self.status | VIRTIO_CONFIG_S_NEEDS_RESET
        } else {
            self.status & !VIRTIO_CONFIG_S_NEEDS_RESET
        }
    }

    /// Why the device is `NEEDS_RESET`, if it is.
    pub fn fault(&self) -> Option<String> {
        self.irq.fault()
    }

    /// Handles a guest read at `offset` into the window.
    pub fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= CONFIG_OFFSET {
            super::read_config_bytes(&self.config, offset - CONFIG_OFFSET, data);
            return;
        }
        let Ok(out) = <&mut [u8; 4]>::try_from(&mut *data) else {
            data.fill(0);
            return;
        };
        let v = match offset {
            MAGIC => MMIO_MAGIC,
            VERSION => MMIO_VERSION,
            DEVICE_ID => self.device_type,
            VENDOR_ID => MMIO_VENDOR_ID,
            DEVICE_FEATURES => match self.device_features_sel {
                0 => self.device_features as u32,
                1 => (self.device_features >> 32) as u32,
                _ => 0,
            },
            QUEUE_NUM_MAX => self.with_selected(|q| u32::from(q.max_size())),
            QUEUE_READY => self.with_selected(|q| u32::from(q.ready())),
            INTERRUPT_STATUS => self.irq.status.load(Ordering::SeqCst),
            STATUS => self.status(),
            // Configuration space never changes after the device is built.
            CONFIG_GENERATION => 0,
            _ => 0,
        };
        *out = v.to_le_bytes();
    }

    /// Handles a guest write at `offset` into the window.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        if offset >= CONFIG_OFFSET {
            // No writable configuration field is offered (no CONFIG_WCE).
            return;
        }
        let Ok(v) = <[u8; 4]>::try_from(data).map(u32::from_le_bytes) else {
            return;
        };
        let features_open = self.status & VIRTIO_CONFIG_S_FEATURES_OK == 0;
        let queues_open = self.status & VIRTIO_CONFIG_S_DRIVER_OK == 0;
        match offset {
            DEVICE_FEATURES_SEL => self.device_features_sel = v,
            DRIVER_FEATURES_SEL => self.driver_features_sel = v,
            DRIVER_FEATURES if features_open => match self.driver_features_sel {
                0 => self.driver_features = (self.driver_features & !0xffff_ffff) | u64::from(v),
                1 => {
                    self.driver_features =
                        (self.driver_features & 0xffff_ffff) | (u64::from(v) << 32)
                }
                // Bits past 63 are none the device offers: acking one
                // fails FEATURES_OK.
                _ => self.unknown_features_acked |= v != 0,
            },
            QUEUE_SEL => self.queue_sel = v,
            QUEUE_NUM if queues_open => self.queue_op(|q| {
                q.try_set_size(u16::try_from(v).unwrap_or(0))
                    .map_err(|e| format!("queue size {v}: {e:?}"))
            }),
            QUEUE_READY if queues_open => self.queue_op(|q| {
                q.set_ready(v == 1);
                Ok(())
            }),
            QUEUE_DESC_LOW | QUEUE_DESC_HIGH | QUEUE_AVAIL_LOW | QUEUE_AVAIL_HIGH
            | QUEUE_USED_LOW | QUEUE_USED_HIGH
                if queues_open =>
            {
                self.queue_op(|q| set_address(q, offset, v))
            }
            // Reaches here only for a queue with no ioeventfd (tests, a
            // write KVM did not match): run on this vCPU.
            QUEUE_NOTIFY => {
                self.core.notify(v);
            }
            INTERRUPT_ACK => {
                self.irq.status.fetch_and(!v, Ordering::SeqCst);
            }
            STATUS => self.set_status(v),
            _ => {}
        }
    }

    fn with_selected(&self, f: impl FnOnce(&Queue) -> u32) -> u32 {
        self.core
            .lock()
            .queues
            .get(self.queue_sel as usize)
            .map_or(0, f)
    }

    /// Applies `f` to the selected queue, if it exists and is not live
    /// yet (virtio 1.2, 4.2.2.2: the driver writes a queue's registers
    /// only while it is not ready); a value the queue refuses is a driver
    /// error that makes the device NEEDS_RESET.
    fn queue_op(&mut self, f: impl FnOnce(&mut Queue) -> Result<(), String>) {
        let sel = self.queue_sel;
        let r = match self.core.lock().queues.get_mut(sel as usize) {
            Some(q) => f(q),
            None => return,
        };
        if let Err(e) = r {
            self.irq.fail(format!("queue {sel}: {e}"));
        }
    }

    fn set_status(&mut self, v: u32) {
        if v == 0 {
            self.reset();
            return;
        }
        // NEEDS_RESET is the device's bit (kept in `irq`): the driver
        // cannot set or clear it.
        let mut new = v & !VIRTIO_CONFIG_S_NEEDS_RESET;
        if new & VIRTIO_CONFIG_S_FEATURES_OK != 0 && self.status & VIRTIO_CONFIG_S_FEATURES_OK == 0
        {
            // Accept only a subset of what we offer, and only virtio 1.x
            // (no legacy layout); otherwise FEATURES_OK stays clear and the
            // driver, which re-reads it, gives up on the device.
            let offered = self.device_features;
            if self.driver_features & !offered != 0
                || self.unknown_features_acked
                || self.driver_features & (1 << VIRTIO_F_VERSION_1) == 0
            {
                new &= !VIRTIO_CONFIG_S_FEATURES_OK;
            }
        }
        self.status = new;
        let mut s = self.core.lock();
        s.live = new & LIVE == LIVE;
        if !s.active && s.live && self.irq.fault().is_none() {
            s.active = true;
            let State { device, queues, .. } = &mut *s;
            let ctx = Activation {
                mem: &self.core.mem,
                queues,
                features: self.driver_features,
                interrupt: &self.irq,
            };
            if let Err(e) = device.activate(ctx) {
                self.irq.fail(format!("activating the device: {e}"));
            }
        }
    }

    /// Runs queue `index` as if the driver had notified it (tests, and a
    /// caller on the vCPU's side of the window). Returns false if the
    /// device could not run it (not live, or `NEEDS_RESET`, or the queue
    /// not ready).
    pub fn poll_queue(&mut self, index: u32) -> bool {
        self.core.notify(index)
    }

    /// Stops the device's own work (a vhost backend) before the VMM
    /// unmaps guest memory. False, with nothing done, while a thread of
    /// the device still runs a request (the VMM stops those threads first
    /// and retries until its deadline).
    pub fn stop(&mut self) -> bool {
        let mut s = match self.core.state.try_lock() {
            Ok(s) => s,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        s.device.reset();
        s.active = false;
        s.live = false;
        true
    }

    /// Status 0: waits for a request a device thread is running to end
    /// (the driver may free the rings once it sees the reset), then puts
    /// queues and device back to their initial state.
    fn reset(&mut self) {
        let mut s = self.core.lock();
        for q in &mut s.queues {
            q.reset();
        }
        self.queue_sel = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
        self.unknown_features_acked = false;
        self.status = 0;
        self.irq.clear();
        s.active = false;
        s.live = false;
        s.device.reset();
    }
}

/// Writes one half of a queue address; the queue checks alignment of the
/// full address (an odd low half is refused at once).
fn set_address(q: &mut Queue, offset: u64, v: u32) -> Result<(), String> {
    let merge = |old: u64| {
        if offset & 4 == 0 {
            (old & !0xffff_ffff) | u64::from(v)
        } else {
            (old & 0xffff_ffff) | (u64::from(v) << 32)
        }
    };
    let r = match offset & !4 {
        QUEUE_DESC_LOW => q.try_set_desc_table_address(GuestAddress(merge(q.desc_table()))),
        QUEUE_AVAIL_LOW => q.try_set_avail_ring_address(GuestAddress(merge(q.avail_ring()))),
        _ => q.try_set_used_ring_address(GuestAddress(merge(q.used_ring()))),
    };
    r.map_err(|e| format!("ring address {v:#x} at register {offset:#x}: {e:?}"))
}
