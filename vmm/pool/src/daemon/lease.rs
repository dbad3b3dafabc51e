//! Granting a lease and ending one, around the pool state's bookkeeping
//! (`state`): the metrics, the wake-ups, and on return the `/proc` scan
//! for processes that still hold the region's memory.

use std::sync::Arc;

use super::state::check_lease;
use super::Shared;
use crate::memory::RegionMemory;
use crate::proto::LeaseInfo;
use crate::PageSize;

pub(super) fn grant(
    shared: &Shared,
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
    pieces: Option<usize>,
) -> Result<(LeaseInfo, Vec<Arc<RegionMemory>>), String> {
    let c = &shared.config;
    let len = check_lease(c, &shared.nodes, bytes, page, node, pieces)?;
    let mut st = shared.lock();
    let granted = st.lease(c, len, page, node, pieces.unwrap_or(1))?;
    shared.metrics.leases.inc();
    shared.changed.notify_all();
    Ok(granted)
}

/// The lease is over: every region it took is dirty, and the scrubber
/// gives each new memory before anyone leases it again. The `/proc` scan
/// here is only a report (`retired_total`, a log line naming the pids):
/// safety does not depend on it, because no page or file of a returned
/// region is reused, and many holders are invisible to it anyway (fds in
/// flight, pipe pages, io_uring buffers, other PID namespaces, `hidepid`).
pub(super) fn end_lease(shared: &Shared, regions: &[usize], lease: u64) {
    for &index in regions {
        end_region(shared, index, lease);
    }
}

fn end_region(shared: &Shared, index: usize, lease: u64) {
    let (dev, ino) = shared
        .lock()
        .memory(index)
        .expect("leased regions have memory")
        .identity();
    // A lessee that exits closes its fds in fd order, so the socket can
    // reach EOF here while the same dying process still shows the memfd:
    // give such holders a moment to vanish before reporting them.
    let mut holders = crate::holders::other_holders(dev, ino);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !holders.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        holders = crate::holders::other_holders(dev, ino);
    }
    let mut st = shared.lock();
    if let Err(e) = st.end_lease(index, lease, !holders.is_empty()) {
        eprintln!("zerostart pool: {e}; marking it dirty");
    }
    if !holders.is_empty() {
        eprintln!(
            "zerostart pool: region {index}: lease {lease} ended but pid(s) {holders:?} still hold its memory; it is retired like every returned region (never leased again)"
        );
        shared.metrics.retired.inc();
    }
    shared.changed.notify_all();
}
