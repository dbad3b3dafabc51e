//! A device's I/O thread: where the requests of a device the VMM runs
//! itself (virtio-blk, user-space virtio-net) are served, instead of on
//! the vCPU that wrote `QueueNotify`.
//!
//! Why: a request run on the vCPU thread stalls that vCPU for the whole
//! disk read or write (the guest sees a CPU that stops answering, its
//! timer and IPIs included), and every notify is a full exit to the VMM.
//! Here the VMM registers one eventfd per queue with KVM as an ioeventfd
//! on the window's `QueueNotify` (datamatch = queue index, as for the
//! vhost backends), so the guest's write completes inside KVM and the vCPU
//! goes straight back to the guest; this thread, driven by rust-vmm's
//! `event-manager`, wakes on the eventfd and runs the queue through the
//! device's [`QueueRunner`]. Completions raise the device's interrupt
//! (its irqfd) from here.
//!
//! The thread takes only the device's lock, never the register window's,
//! so a vCPU reading `InterruptStatus` or `Status` does not wait for a
//! request in flight. It ends when its [`Worker`] is stopped (a stop
//! eventfd on the same event manager), before guest RAM is unmapped.

use std::io;

use event_manager::{EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberOps};
use vm_memory::GuestMemory;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::{QueueRunner, VirtioDevice, Worker};

/// The `data` of the stop event (queue indexes are small).
const STOP: u32 = u32::MAX;

/// The thread's one subscriber: the queues' eventfds and the stop eventfd.
struct QueueEvents<M, D> {
    runner: QueueRunner<M, D>,
    kicks: Vec<EventFd>,
    stop: EventFd,
    stopped: bool,
    /// The first registration that failed (reported by the spawner).
    err: Option<io::Error>,
}

impl<M: GuestMemory, D: VirtioDevice<M>> MutEventSubscriber for QueueEvents<M, D> {
    fn init(&mut self, ops: &mut EventOps) {
        let events = std::iter::once(Events::with_data(&self.stop, STOP, EventSet::IN)).chain(
            self.kicks
                .iter()
                .enumerate()
                .map(|(i, k)| Events::with_data(k, i as u32, EventSet::IN)),
        );
        for ev in events {
            let fd = ev.fd();
            if let Err(e) = ops.add(ev) {
                self.err
                    .get_or_insert(io::Error::other(format!("{e} (fd {fd})")));
            }
        }
    }

    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        let index = events.data();
        if index == STOP {
            self.stopped = true;
            return;
        }
        let Some(kick) = self.kicks.get(index as usize) else {
            return;
        };
        // Reset the counter first: a notify that arrives while the queue
        // runs leaves it readable, and the next round picks it up.
        let _ = kick.read();
        self.runner.run(index);
    }
}

/// Starts the I/O thread of the device behind `runner` (named `name`) and
/// returns it with one eventfd per queue, in queue order, for the VMM to
/// register as KVM ioeventfds on the window's `QueueNotify` with the
/// queue index as datamatch. (KVM keeps its own reference to each; these
/// copies may be dropped after registering.)
pub fn spawn_io_thread<M, D>(
    runner: QueueRunner<M, D>,
    name: String,
) -> io::Result<(Worker, Vec<EventFd>)>
where
    M: GuestMemory + Send + Sync + 'static,
    D: VirtioDevice<M> + 'static,
{
    let em_err = |e: event_manager::Error| io::Error::other(format!("{name}: {e}"));
    let kicks = (0..runner.queue_count())
        .map(|_| EventFd::new(EFD_NONBLOCK))
        .collect::<io::Result<Vec<_>>>()?;
    let theirs = kicks
        .iter()
        .map(|k| k.try_clone())
        .collect::<io::Result<Vec<_>>>()?;
    let stop = EventFd::new(EFD_NONBLOCK)?;
    let mut em = EventManager::new().map_err(em_err)?;
    let id = em.add_subscriber(QueueEvents {
        runner,
        kicks,
        stop: stop.try_clone()?,
        stopped: false,
        err: None,
    });
    if let Some(e) = em.subscriber_mut(id).map_err(em_err)?.err.take() {
        return Err(io::Error::other(format!(
            "{name}: registering an eventfd: {e}"
        )));
    }
    let worker = Worker::spawn_with(stop, name, move |_| loop {
        if let Err(e) = em.run() {
            // epoll_wait itself failed (not EINTR, which run() absorbs):
            // nothing would serve the queues any more, so tell the driver
            // rather than leave its requests hanging.
            if let Ok(s) = em.subscriber_mut(id) {
                s.runner
                    .fail(format!("the device's I/O thread stopped: {e}"));
            }
            return;
        }
        if em.subscriber_mut(id).map_or(true, |s| s.stopped) {
            return;
        }
    })?;
    Ok((worker, theirs))
}
