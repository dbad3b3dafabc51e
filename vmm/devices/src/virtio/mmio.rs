//! The virtio-mmio transport, register layout version 2 (virtio 1.2,
//! section 4.2.2): one 4 KiB window per device, announced to Linux as
//! `virtio_mmio.device=4K@BASE:GSI`.
//!
//! Registers are 32 bits wide and read or written whole; any other access
//! below the configuration space reads 0 and is ignored when written (the
//! spec requires 32-bit accesses; we do not guess at what a narrower one
//! meant). Queue notifications are handled synchronously, on the vCPU
//! thread that wrote `QueueNotify` (Firecracker moves them to an event
//! loop with ioeventfds; for one block device on a raw file the exit
//! round trip is not what a boot waits on), except for the queues a vhost
//! backend runs: the VMM registers their `QueueNotify` as a KVM ioeventfd
//! (datamatch = queue index) that the kernel's vhost worker reads, so
//! those writes never reach this code. Interrupts go out through the
//! [`Interrupt`] (an [`EventFd`] the VMM registers as a KVM irqfd, as
//! COM1's, plus the `InterruptStatus` bits), which a device's own thread
//! may raise too (the tap RX worker, the vhost call relay).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

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

/// One device's virtio-mmio register window and transport state.
pub struct MmioTransport<M: GuestMemory, D: VirtioDevice<M>> {
    device: D,
    mem: M,
    queues: Vec<Queue>,
    queue_sel: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    unknown_features_acked: bool,
    status: u32,
    irq: Arc<Interrupt>,
    /// The device was handed its queues ([`VirtioDevice::activate`]) and
    /// not reset since.
    active: bool,
}

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
        Ok(MmioTransport {
            device,
            mem,
            queues,
            queue_sel: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            unknown_features_acked: false,
            status: 0,
            irq: Arc::new(Interrupt::new()?),
            active: false,
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

    /// The device, mutably (the VMM's own setup; never while the guest
    /// runs it).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The guest memory the device works on.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
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
            data.fill(0);
            self.device.read_config(offset - CONFIG_OFFSET, data);
            return;
        }
        let Ok(out) = <&mut [u8; 4]>::try_from(&mut *data) else {
            data.fill(0);
            return;
        };
        let v = match offset {
            MAGIC => MMIO_MAGIC,
            VERSION => MMIO_VERSION,
            DEVICE_ID => self.device.device_type(),
            VENDOR_ID => MMIO_VENDOR_ID,
            DEVICE_FEATURES => match self.device_features_sel {
                0 => self.device.features() as u32,
                1 => (self.device.features() >> 32) as u32,
                _ => 0,
            },
            QUEUE_NUM_MAX => self.selected().map_or(0, |q| u32::from(q.max_size())),
            QUEUE_READY => self.selected().map_or(0, |q| u32::from(q.ready())),
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
            QUEUE_NOTIFY => {
                self.notify(v);
            }
            INTERRUPT_ACK => {
                self.irq.status.fetch_and(!v, Ordering::SeqCst);
            }
            STATUS => self.set_status(v),
            _ => {}
        }
    }

    fn selected(&self) -> Option<&Queue> {
        self.queues.get(self.queue_sel as usize)
    }

    /// Applies `f` to the selected queue, if it exists and is not live
    /// yet (virtio 1.2, 4.2.2.2: the driver writes a queue's registers
    /// only while it is not ready); a value the queue refuses is a driver
    /// error that makes the device NEEDS_RESET.
    fn queue_op(&mut self, f: impl FnOnce(&mut Queue) -> Result<(), String>) {
        let sel = self.queue_sel;
        let Some(q) = self.queues.get_mut(sel as usize) else {
            return;
        };
        if let Err(e) = f(q) {
            self.needs_reset(format!("queue {sel}: {e}"));
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
            let offered = self.device.features();
            if self.driver_features & !offered != 0
                || self.unknown_features_acked
                || self.driver_features & (1 << VIRTIO_F_VERSION_1) == 0
            {
                new &= !VIRTIO_CONFIG_S_FEATURES_OK;
            }
        }
        self.status = new;
        let live = VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK;
        if !self.active && new & live == live && self.irq.fault().is_none() {
            self.active = true;
            let ctx = Activation {
                mem: &self.mem,
                queues: &self.queues,
                features: self.driver_features,
                interrupt: &self.irq,
            };
            if let Err(e) = self.device.activate(ctx) {
                self.needs_reset(format!("activating the device: {e}"));
            }
        }
    }

    /// Runs queue `index` as if the driver had notified it: for a device
    /// thread that has new input for the guest (a frame from the tap).
    /// Returns false if the device could not run it (not live, or
    /// `NEEDS_RESET`, or the queue not ready).
    pub fn poll_queue(&mut self, index: u32) -> bool {
        self.notify(index)
    }

    /// Stops the device's own work (a vhost backend) before the VMM
    /// unmaps guest memory.
    pub fn stop(&mut self) {
        self.device.reset();
        self.active = false;
    }

    fn reset(&mut self) {
        for q in &mut self.queues {
            q.reset();
        }
        self.queue_sel = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
        self.unknown_features_acked = false;
        self.status = 0;
        self.irq.clear();
        self.active = false;
        self.device.reset();
    }

    /// The driver says queue `index` has new buffers; false if the device
    /// could not run it.
    fn notify(&mut self, index: u32) -> bool {
        let live = VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK;
        if self.status & live != live || self.irq.fault().is_some() {
            return false;
        }
        let Some(q) = self.queues.get_mut(index as usize) else {
            return false;
        };
        if !q.ready() {
            return false;
        }
        if !q.is_valid(&self.mem) {
            self.needs_reset(format!(
                "queue {index}: descriptor table, avail or used ring not inside guest RAM"
            ));
            return false;
        }
        match self.device.process_queue(index as usize, q, &self.mem) {
            Ok(true) => self.irq.signal_used(),
            Ok(false) => {}
            Err(e) => {
                self.needs_reset(format!("queue {index}: {e}"));
                return false;
            }
        }
        true
    }

    /// The device cannot go on until the driver resets it (virtio 1.2,
    /// 2.1.2): set NEEDS_RESET and send a configuration change interrupt.
    fn needs_reset(&mut self, why: String) {
        self.irq.fail(why);
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
