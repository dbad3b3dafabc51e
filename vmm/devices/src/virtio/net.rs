//! virtio-net (virtio 1.2, section 5.1) on a host tap, the user-space
//! path: the VMM moves every frame. (With `/dev/vhost-net` the kernel
//! moves them instead: [`super::vhost::VhostNet`]; both offer the guest
//! the same device.)
//!
//! Two queues, receive (0) and transmit (1). Offered: `VERSION_1`, `MAC`
//! (configuration space: the MAC) and `STATUS` (link always up), nothing
//! else: no checksum or segmentation offload, no mergeable receive
//! buffers, no control queue. Every frame carries the 12-byte
//! `virtio_net_hdr_v1` in front, on the queues and on the tap alike
//! (the tap is opened with `IFF_VNET_HDR`, [`super::tap`]).
//!
//! What the guest can get wrong, and what it gets:
//!
//! | guest error | result |
//! |---|---|
//! | a TX chain with a device-writable descriptor, a descriptor outside guest RAM, shorter than the header plus an Ethernet header or longer than 64 KiB | the frame is dropped, the chain returned with length 0 |
//! | TX header flags or GSO fields set (not negotiated) | cleared: the tap gets a plain frame |
//! | an RX chain with a device-readable descriptor or a descriptor outside guest RAM, or too short for the frame | the frame is dropped, the chain returned with length 0 |
//! | a chain that loops, points past the table or cannot be read; an avail index more than the queue size ahead; rings outside RAM | [`QueueFault`]: the transport marks the device `NEEDS_RESET` |
//!
//! TX (and the guest's RX notify) runs on the device's I/O thread
//! ([`super::io_thread`]), woken by the ioeventfd on `QueueNotify`; RX on
//! a worker thread ([`spawn_rx_worker`]) that waits for the tap and,
//! while the guest has no receive buffers, for the guest's RX notify
//! instead (so a full tap never spins it). Frames are copied through a VMM buffer with
//! vm-memory's checked accessors: a guest can never make the device touch
//! host memory outside guest RAM, and cannot change a frame between the
//! checks and the write to the tap.

use std::io;
use std::os::fd::AsRawFd;

use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ids::VIRTIO_ID_NET;
use virtio_bindings::virtio_net::{VIRTIO_NET_F_MAC, VIRTIO_NET_F_STATUS, VIRTIO_NET_S_LINK_UP};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestMemory, Permissions};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::tap::{Tap, VNET_HDR_LEN};
use super::{read_config_bytes, QueueFault, QueueRunner, VirtioDevice, Worker};

/// Receive queue index.
pub const RX: usize = 0;
/// Transmit queue index.
pub const TX: usize = 1;
/// Descriptors per queue (Firecracker's and cloud-hypervisor's default).
pub const QUEUE_SIZE: u16 = 256;
/// Ethernet header: the shortest frame the tap takes.
const ETH_HLEN: usize = 14;
/// Largest frame with its header either way (64 KiB of frame, the most a
/// tap with a raised MTU could hand over without GSO).
pub const MAX_FRAME: usize = VNET_HDR_LEN + 65535;
/// Frames moved per RX wake-up before the device's lock is let go (the
/// I/O thread's TX, and a vCPU resetting the device, wait for it).
const RX_BATCH: usize = 64;

/// The features both net paths offer.
pub fn offered_features() -> u64 {
    1u64 << VIRTIO_F_VERSION_1 | 1 << VIRTIO_NET_F_MAC | 1 << VIRTIO_NET_F_STATUS
}

/// `struct virtio_net_config` up to `status`: MAC, then link up.
pub fn config_space(mac: [u8; 6]) -> [u8; 8] {
    let mut c = [0u8; 8];
    c[..6].copy_from_slice(&mac);
    c[6..8].copy_from_slice(&(VIRTIO_NET_S_LINK_UP as u16).to_le_bytes());
    c
}

/// Where frames come from and go to: a tap, or (tests, fuzzing) a queue
/// of frames in memory.
pub trait FrameIo: Send {
    /// Reads one frame with its header; `WouldBlock` when none waits.
    fn read_frame(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes one frame with its header.
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<usize>;
    /// A descriptor that polls readable when a frame waits, if any.
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

impl FrameIo for Tap {
    fn read_frame(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Tap::read_frame(self, buf)
    }
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<usize> {
        Tap::write_frame(self, &[io::IoSlice::new(frame)])
    }
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.as_raw_fd())
    }
}

/// Frames in memory: what the guest sent (`sent`) and what waits for it
/// (`incoming`).
#[derive(Debug, Default)]
pub struct MemoryFrames {
    /// Frames for the guest, with their headers.
    pub incoming: std::collections::VecDeque<Vec<u8>>,
    /// Frames the guest sent, with their headers.
    pub sent: Vec<Vec<u8>>,
}

impl FrameIo for MemoryFrames {
    fn read_frame(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.incoming.pop_front().ok_or(io::ErrorKind::WouldBlock)?;
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Ok(n)
    }
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<usize> {
        self.sent.push(frame.to_vec());
        Ok(frame.len())
    }
}

/// Frame counters (for the VMM's log and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NetStats {
    /// Frames sent to the tap.
    pub tx_frames: u64,
    /// TX chains dropped (malformed, or the tap refused them).
    pub tx_dropped: u64,
    /// Frames delivered to the guest.
    pub rx_frames: u64,
    /// Frames dropped on the way in (RX buffer malformed or too short).
    pub rx_dropped: u64,
}

/// A virtio-net device whose frames the VMM moves (no vhost).
pub struct Net<T: FrameIo = Tap> {
    io: T,
    config: [u8; 8],
    queue_sizes: [u16; 2],
    /// A frame read from the tap that waits for a receive buffer.
    pending: Option<usize>,
    frame: Vec<u8>,
    txbuf: Vec<u8>,
    /// No receive buffer was available last time: the RX worker waits for
    /// the guest's notify (`rx_kick`) instead of the tap.
    starved: bool,
    rx_kick: EventFd,
    stats: NetStats,
}

impl<T: FrameIo> Net<T> {
    /// A device on `io` with MAC `mac`.
    pub fn new(io: T, mac: [u8; 6]) -> io::Result<Self> {
        Ok(Net {
            io,
            config: config_space(mac),
            queue_sizes: [QUEUE_SIZE; 2],
            pending: None,
            frame: vec![0; MAX_FRAME],
            txbuf: Vec::with_capacity(MAX_FRAME),
            starved: true,
            rx_kick: EventFd::new(EFD_NONBLOCK)?,
            stats: NetStats::default(),
        })
    }

    /// The frame source and sink.
    pub fn io(&self) -> &T {
        &self.io
    }

    /// The frame source and sink, mutably (tests queue frames here).
    pub fn io_mut(&mut self) -> &mut T {
        &mut self.io
    }

    /// Frame counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Whether receiving waits for the guest to add buffers.
    pub fn rx_starved(&self) -> bool {
        self.starved
    }

    /// Sends every frame the guest made available on the TX queue.
    fn transmit<M: GuestMemory>(&mut self, queue: &mut Queue, mem: &M) -> Result<bool, QueueFault> {
        let mut used = false;
        loop {
            let chain = queue
                .iter(mem)
                .map_err(|e| QueueFault(format!("TX avail ring: {e}")))?
                .next();
            let Some(chain) = chain else { break };
            let head = chain.head_index();
            let descs = whole_chain(chain)?;
            if gather(mem, &descs, &mut self.txbuf) {
                // Not negotiated, so the driver must send zeros; a plain
                // frame is what the tap gets whatever it sent.
                self.txbuf[..VNET_HDR_LEN].fill(0);
                match self.io.write_frame(&self.txbuf) {
                    Ok(_) => self.stats.tx_frames += 1,
                    // A full tap queue or a link that is down drops the
                    // frame, as a real NIC would.
                    Err(_) => self.stats.tx_dropped += 1,
                }
            } else {
                self.stats.tx_dropped += 1;
            }
            queue
                .add_used(mem, head, 0)
                .map_err(|e| QueueFault(format!("TX used ring: {e}")))?;
            used = true;
        }
        Ok(used)
    }

    /// Moves waiting frames into the guest's receive buffers, up to
    /// [`RX_BATCH`].
    fn receive<M: GuestMemory>(&mut self, queue: &mut Queue, mem: &M) -> Result<bool, QueueFault> {
        let mut used = false;
        self.starved = false;
        for _ in 0..RX_BATCH {
            if self.pending.is_none() {
                match self.io.read_frame(&mut self.frame) {
                    Ok(n) if n >= VNET_HDR_LEN + ETH_HLEN => self.pending = Some(n),
                    Ok(_) => {
                        self.stats.rx_dropped += 1;
                        continue;
                    }
                    Err(_) => break,
                }
            }
            let chain = queue
                .iter(mem)
                .map_err(|e| QueueFault(format!("RX avail ring: {e}")))?
                .next();
            let Some(chain) = chain else {
                self.starved = true;
                break;
            };
            let Some(n) = self.pending.take() else { break };
            let head = chain.head_index();
            let descs = whole_chain(chain)?;
            // virtio_net_hdr_v1.num_buffers: one buffer per frame (no
            // mergeable buffers).
            self.frame[10..12].copy_from_slice(&1u16.to_le_bytes());
            let len = if scatter(mem, &descs, &self.frame[..n]) {
                self.stats.rx_frames += 1;
                n as u32
            } else {
                self.stats.rx_dropped += 1;
                0
            };
            queue
                .add_used(mem, head, len)
                .map_err(|e| QueueFault(format!("RX used ring: {e}")))?;
            used = true;
        }
        Ok(used)
    }
}

/// The descriptors of a chain, or the fault of a chain virtio-queue ended
/// early (loop, next past the table, unreadable descriptor).
fn whole_chain(chain: impl Iterator<Item = Descriptor>) -> Result<Vec<Descriptor>, QueueFault> {
    let descs: Vec<Descriptor> = chain.collect();
    match descs.last() {
        None => Err(QueueFault(
            "descriptor chain: head index past the table or unreadable".into(),
        )),
        Some(d) if d.has_next() => Err(QueueFault(
            "descriptor chain: loops, is longer than the queue, or points past the table".into(),
        )),
        Some(_) => Ok(descs),
    }
}

/// Copies a TX chain into `out`; false if it is not a well-formed frame
/// (a device-writable descriptor, a byte outside RAM, too short or long).
fn gather<M: GuestMemory>(mem: &M, descs: &[Descriptor], out: &mut Vec<u8>) -> bool {
    let mut total = 0usize;
    for d in descs {
        let len = d.len() as usize;
        if d.is_write_only() || !mem.check_range(d.addr(), len, Permissions::Read) {
            return false;
        }
        total = match total.checked_add(len) {
            Some(t) if t <= MAX_FRAME => t,
            _ => return false,
        };
    }
    if total < VNET_HDR_LEN + ETH_HLEN {
        return false;
    }
    out.clear();
    out.resize(total, 0);
    let mut at = 0;
    for d in descs {
        let len = d.len() as usize;
        if mem.read_slice(&mut out[at..at + len], d.addr()).is_err() {
            return false;
        }
        at += len;
    }
    true
}

/// Writes `frame` across an RX chain; false (nothing written) if a
/// descriptor is device-readable or outside RAM, or the chain is too
/// short for the frame.
fn scatter<M: GuestMemory>(mem: &M, descs: &[Descriptor], frame: &[u8]) -> bool {
    let mut room = 0u64;
    for d in descs {
        if !d.is_write_only() || !mem.check_range(d.addr(), d.len() as usize, Permissions::Write) {
            return false;
        }
        room += u64::from(d.len());
    }
    if room < frame.len() as u64 {
        return false;
    }
    let mut at = 0;
    for d in descs {
        if at == frame.len() {
            break;
        }
        let n = (d.len() as usize).min(frame.len() - at);
        if mem.write_slice(&frame[at..at + n], d.addr()).is_err() {
            return false;
        }
        at += n;
    }
    true
}

impl<M: GuestMemory, T: FrameIo> VirtioDevice<M> for Net<T> {
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
        index: usize,
        queue: &mut Queue,
        mem: &M,
    ) -> Result<bool, QueueFault> {
        match index {
            RX => {
                let was_starved = self.starved;
                let r = self.receive(queue, mem);
                // The guest added buffers to a starved queue: the worker
                // goes back to waiting for the tap. (Only on that change,
                // so the worker's own runs never wake it again.)
                if was_starved && !self.starved {
                    let _ = self.rx_kick.write(1);
                }
                r
            }
            TX => self.transmit(queue, mem),
            _ => Ok(false),
        }
    }

    fn reset(&mut self) {
        self.pending = None;
        self.starved = true;
    }
}

/// Starts the thread that delivers tap frames to the guest: it waits for
/// the tap to hold a frame (or, while the guest has no receive buffer,
/// for its RX notify), then runs the RX queue through `runner` (the
/// device's lock, not the register window's).
pub fn spawn_rx_worker<M, T>(runner: QueueRunner<M, Net<T>>, name: String) -> io::Result<Worker>
where
    M: GuestMemory + Send + Sync + 'static,
    T: FrameIo + 'static,
{
    let (kick, tap) = {
        let d = runner.device();
        (d.rx_kick.try_clone()?, d.io.poll_fd())
    };
    let Some(tap) = tap else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the frame source has no descriptor to wait on",
        ));
    };
    Worker::spawn(name, move |stop| {
        let mut starved = true;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: kick.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if starved { -1 } else { tap },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: three valid pollfd entries.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) };
            if r < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            if fds[0].revents != 0 {
                return;
            }
            if fds[1].revents != 0 {
                let _ = kick.read();
            }
            // Not live (before DRIVER_OK, NEEDS_RESET): wait for a notify.
            // (Two lock rounds: `starved` only turns false inside a run,
            // which then writes the kick this loop waits for.)
            starved = !runner.run(RX as u32) || runner.device().rx_starved();
        }
    })
}

#[cfg(test)]
mod tests;
