//! virtio devices on the virtio-mmio transport (docs/vmm.md, "virtio
//! devices"): [`MmioTransport`] is the register window the guest programs,
//! [`Block`] the first device behind it.
//!
//! The split ring itself (descriptor chains, the avail and used rings) is
//! rust-vmm's `virtio-queue`; this module owns what it does not: the
//! transport's registers and state machine, and each device's request
//! handling (`virtio-blk` has no published crate).
//!
//! A guest that misprograms a device never reaches a panic or a host access
//! outside guest RAM: every guest address goes through vm-memory's checked
//! accessors, a bad request completes with a virtio error status, and a
//! queue the device cannot use any more (rings outside RAM, a broken
//! descriptor chain, an impossible avail index) marks the device
//! `NEEDS_RESET` until the driver resets it.

pub mod block;
pub mod io_thread;
pub mod mmio;
pub mod mmio_bus;
pub mod net;
pub mod tap;
pub mod vhost;
pub mod worker;

pub use block::{Block, BlockError};
pub use io_thread::spawn_io_thread;
pub use mmio::{DeviceGuard, Interrupt, MmioTransport, QueueRunner};
pub use mmio_bus::{MmioBus, MmioBusError, MmioDevice};
pub use net::Net;
pub use tap::{Tap, TapError};
pub use worker::Worker;

use virtio_queue::Queue;
use vm_memory::GuestMemory;

/// Why a device gave up on a queue: the transport then sets
/// `NEEDS_RESET` and ignores the device until the driver resets it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueueFault(pub String);

/// What a device gets when the driver sets `DRIVER_OK`: the queues as the
/// driver programmed them (sizes, ring addresses, ready) and the features
/// it accepted.
pub struct Activation<'a, M> {
    /// Guest memory.
    pub mem: &'a M,
    /// Every queue of the device, in index order.
    pub queues: &'a [Queue],
    /// The features the driver accepted (a subset of the offer).
    pub features: u64,
    /// The device's interrupt, for a thread of the device.
    pub interrupt: &'a std::sync::Arc<mmio::Interrupt>,
}

/// A virtio device behind a transport: what the transport asks it, and
/// the one thing it does, running the requests of a queue.
pub trait VirtioDevice<M: GuestMemory>: Send {
    /// virtio device ID (`VIRTIO_ID_*`); read once, as the features.
    fn device_type(&self) -> u32;
    /// Feature bits the device offers (including `VIRTIO_F_VERSION_1`).
    fn features(&self) -> u64;
    /// Maximum size of each queue; the length is the number of queues.
    fn queue_max_sizes(&self) -> &[u16];
    /// Reads device configuration space at `offset` (bytes past its end
    /// read 0). The transport reads it whole once, when it is built: no
    /// device here changes its configuration afterwards, and a vCPU's
    /// configuration read then never waits for a request in flight.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Runs every request the driver made available on queue `index`, on
    /// the device's I/O thread (or, without an ioeventfd, on the thread
    /// that wrote `QueueNotify`).
    /// Returns whether used buffers were added (the driver is then
    /// interrupted), or the fault that makes the queue unusable.
    fn process_queue(
        &mut self,
        index: usize,
        queue: &mut Queue,
        mem: &M,
    ) -> Result<bool, QueueFault>;
    /// The driver set `DRIVER_OK`: a device whose queues run elsewhere (a
    /// vhost backend) hands them over now. An error marks the device
    /// `NEEDS_RESET`.
    fn activate(&mut self, _ctx: Activation<'_, M>) -> Result<(), QueueFault> {
        Ok(())
    }
    /// The driver reset the device (status 0), or the VMM is tearing it
    /// down: stop using the queues.
    fn reset(&mut self) {}
}

/// Reads configuration space `config` at `offset` (bytes past the end
/// read 0): the one config-space read of every device and the transport.
pub fn read_config_bytes(config: &[u8], offset: u64, data: &mut [u8]) {
    for (i, b) in data.iter_mut().enumerate() {
        *b = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(i))
            .and_then(|o| config.get(o))
            .copied()
            .unwrap_or(0);
    }
}
