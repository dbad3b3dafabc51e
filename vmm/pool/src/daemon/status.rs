//! What the pool reports: the `status` answer and the metrics' per-state
//! gauges.

use super::Shared;
use crate::proto::{Status, VERSION};

pub(super) fn status(shared: &Shared) -> Status {
    let c = &shared.config;
    let st = shared.lock();
    let bytes = |name: &str| {
        st.slots
            .iter()
            .filter(|s| s.region.state().name() == name)
            .count() as u64
            * c.region_bytes
    };
    let k = &st.counters;
    Status {
        version: VERSION,
        pid: std::process::id(),
        page: c.page,
        backing: match &c.hugetlbfs {
            None => "memfd".into(),
            Some(d) => d.display().to_string(),
        },
        size_bytes: c.size,
        region_bytes: c.region_bytes,
        regions: st.slots.len(),
        clean_bytes: bytes("clean"),
        dirty_bytes: bytes("dirty"),
        scrubbing_bytes: bytes("scrubbing"),
        leased_bytes: bytes("leased"),
        verify: c.verify,
        backend: if k.backend.is_empty() {
            shared.backend_name.clone()
        } else {
            k.backend.to_string()
        },
        scrubbed_bytes: k.scrubbed_bytes,
        scrub_gib_s_last: k.last_gib_s,
        scrub_gib_s_avg: if k.scrub_secs > 0.0 {
            k.scrubbed_bytes as f64 / (1u64 << 30) as f64 / k.scrub_secs
        } else {
            0.0
        },
        leases_total: k.leases_total,
        retired_total: k.retired_total,
        scrub_failures: k.scrub_failures,
    }
}

/// Sets the metrics' per-state gauges from the pool state (at each scrape).
pub(super) fn refresh_gauges(shared: &Shared) {
    let st = shared.lock();
    let mut counts = [0u64; 4];
    for slot in &st.slots {
        let name = slot.region.state().name();
        if let Some(i) = crate::metrics::STATES.iter().position(|&s| s == name) {
            counts[i] += 1;
        }
    }
    drop(st);
    shared
        .metrics
        .set_states(counts, shared.config.region_bytes);
}
