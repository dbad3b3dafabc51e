//! What the pool reports: the `status` answer and the metrics' per-state
//! gauges.

use super::Shared;
use crate::proto::Status;

pub(super) fn status(shared: &Shared) -> Status {
    shared.lock().status(&shared.config, &shared.backend_name)
}

/// Sets the metrics' per-state gauges from the pool state (at each scrape).
pub(super) fn refresh_gauges(shared: &Shared) {
    let (counts, bytes) = shared.lock().state_counts();
    shared.metrics.set_states(counts, bytes);
}
