//! Granting a lease (the checks, then the first clean region) and ending
//! one (the region goes dirty and is replaced before its next lease).

use std::sync::Arc;

use super::{Shared, Slot};
use crate::memory::RegionMemory;
use crate::proto::LeaseInfo;
use crate::region::State;
use crate::PageSize;

pub(super) fn grant(
    shared: &Shared,
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
) -> Result<(LeaseInfo, Arc<RegionMemory>), String> {
    let c = &shared.config;
    if page != c.page {
        return Err(format!(
            "this pool serves {} pages, the lease asked for {page}; start the pool with --page {page} or map with {} pages",
            c.page, c.page
        ));
    }
    if bytes == 0 || bytes > c.region_bytes {
        return Err(format!(
            "a lease of {bytes} bytes does not fit a region of {} bytes; restart the pool with --region-size of at least {bytes}",
            c.region_bytes
        ));
    }
    if let Some(n) = node {
        if !shared.nodes.iter().any(|x| x.id == n) {
            let ids: Vec<String> = shared.nodes.iter().map(|x| x.id.to_string()).collect();
            return Err(format!(
                "this pool has no regions on NUMA node {n} (its nodes: {}); ask one of those or no node",
                ids.join(", ")
            ));
        }
    }
    let len = bytes.div_ceil(page.bytes()) * page.bytes();
    let mut st = shared.lock();
    let Some(i) = st
        .slots
        .iter()
        .position(|s| s.region.state() == State::Clean && node.is_none_or(|n| s.node == n))
    else {
        if let Some(n) = node {
            let on: Vec<&Slot> = st.slots.iter().filter(|s| s.node == n).collect();
            return Err(format!(
                "no clean region on NUMA node {n} now ({} of its {} regions leased); retry shortly, ask another node, or grow the pool with --size",
                on.iter().filter(|s| s.region.state().name() == "leased").count(),
                on.len()
            ));
        }
        let count = |name: &str| {
            st.slots
                .iter()
                .filter(|s| s.region.state().name() == name)
                .count()
        };
        return Err(format!(
            "no clean region now ({} leased, {} scrubbing, {} dirty of {}); retry shortly or grow the pool with --size",
            count("leased"),
            count("scrubbing"),
            count("dirty"),
            st.slots.len()
        ));
    };
    st.counters.next_lease += 1;
    let id = st.counters.next_lease;
    st.slots[i]
        .region
        .lease(id)
        .expect("clean regions can be leased");
    st.slots[i].fresh = false;
    st.counters.leases_total += 1;
    shared.metrics.leases.inc();
    shared.changed.notify_all();
    Ok((
        LeaseInfo {
            id,
            region: i,
            offset: 0,
            len,
            page,
            verified: c.verify,
            node: Some(st.slots[i].node),
        },
        st.slots[i].mem.clone().expect("clean regions have memory"),
    ))
}

/// The lease is over: the region is dirty, and the scrubber gives it new
/// memory before anyone leases it again. The `/proc` scan here is only a
/// report (`retired_total`, a log line naming the pids): safety does not
/// depend on it, because no page or file of a returned region is reused,
/// and many holders are invisible to it anyway (fds in flight, pipe pages,
/// io_uring buffers, other PID namespaces, `hidepid`).
pub(super) fn end_lease(shared: &Shared, index: usize, lease: u64) {
    let (dev, ino) = shared.lock().slots[index]
        .mem
        .as_ref()
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
    if let Err(e) = st.slots[index].region.release(lease) {
        eprintln!("zerostart pool: {e}; marking it dirty");
    }
    if !holders.is_empty() {
        eprintln!(
            "zerostart pool: region {index}: lease {lease} ended but pid(s) {holders:?} still hold its memory; it is retired like every returned region (never leased again)"
        );
        st.counters.retired_total += 1;
        shared.metrics.retired.inc();
    }
    st.slots[index].fresh = false;
    st.slots[index].region.distrust();
    shared.changed.notify_all();
}
