//! Boot phases, measured from launch, and where each comes from.
//!
//! | phase | zerostart (`--timeline` JSON) | other VMMs (host-timestamped serial) |
//! |---|---|---|
//! | `launch` | `process_start` (0) | the harness spawns the VMM (0) |
//! | `memory_ready` | `memory_ready` | not observable |
//! | `first_output` | `first_serial_output` | first byte on the serial console |
//! | `init_started` | `init_started` (guest boot-timer port 0x440) | first line matching `markers.init_started` |
//! | `test_done` | `test_done` (port 0x440) | first line matching `markers.test_done` |
//! | `exit` | `exit` | the VMM process exits |
//!
//! The real cloud VM (the Debian rootfs of `guest-rootfs/`, booted by the
//! nested host's `make test-microvm`) reports four more, from its own
//! services: `userspace_started` (systemd began sysinit), `network_up` (the
//! default gateway answered a ping), `multi_user_reached` and `app_ready`
//! (its workload touched its memory). Only `vmm = "nested"` scenarios have
//! them: the harness timestamps the guest's lines as L2 sees them.
//!
//! For zerostart the harness also timestamps the serial lines itself, so
//! the same scenario can be compared both ways (`serial_*` phases in
//! report.json).

use serde::Serialize;

/// A boot phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// VMM started (time zero).
    Launch,
    /// Guest RAM mapped and prepared (zerostart only).
    MemoryReady,
    /// First byte of guest serial output.
    FirstOutput,
    /// Guest init (PID 1 / the probe's test) started.
    InitStarted,
    /// The real VM's systemd started its first unit (nested real-VM only).
    UserspaceStarted,
    /// The real VM pinged its default gateway (nested real-VM only).
    NetworkUp,
    /// The real VM reached multi-user.target (nested real-VM only).
    MultiUserReached,
    /// The real VM's workload touched its memory (nested real-VM only).
    AppReady,
    /// The guest's test finished.
    TestDone,
    /// The VMM exited.
    Exit,
}

impl Phase {
    /// All phases in boot order.
    pub const ALL: [Phase; 10] = [
        Phase::Launch,
        Phase::MemoryReady,
        Phase::FirstOutput,
        Phase::InitStarted,
        Phase::UserspaceStarted,
        Phase::NetworkUp,
        Phase::MultiUserReached,
        Phase::AppReady,
        Phase::TestDone,
        Phase::Exit,
    ];

    /// Phases an SLO can bound.
    pub const SLO_NAMES: &'static str =
        "memory_ready, first_output, init_started, userspace_started, \
         network_up, multi_user_reached, app_ready, test_done, exit";

    /// Name in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Launch => "launch",
            Phase::MemoryReady => "memory_ready",
            Phase::FirstOutput => "first_output",
            Phase::InitStarted => "init_started",
            Phase::UserspaceStarted => "userspace_started",
            Phase::NetworkUp => "network_up",
            Phase::MultiUserReached => "multi_user_reached",
            Phase::AppReady => "app_ready",
            Phase::TestDone => "test_done",
            Phase::Exit => "exit",
        }
    }

    /// From a name.
    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Phases only the real cloud VM reports (nested `microvm-*` scenarios).
    pub fn real_vm_only(self) -> bool {
        matches!(
            self,
            Phase::UserspaceStarted | Phase::NetworkUp | Phase::MultiUserReached | Phase::AppReady
        )
    }

    /// Phases marked by a guest serial line for non-timeline VMMs.
    pub fn from_serial_marker(self) -> bool {
        matches!(self, Phase::InitStarted | Phase::TestDone)
    }

    /// The zerostart timeline name of this phase.
    pub fn timeline_name(self) -> &'static str {
        match self {
            Phase::Launch => "process_start",
            Phase::FirstOutput => "first_serial_output",
            p => p.name(),
        }
    }
}

/// The SLO phases among a zerostart timeline's phases (the `phases` of a
/// [`timeline::RunTimeline`] or [`timeline::LaunchTimeline`], or a nested
/// report's `timeline`), in boot order; the others are not SLO phases.
pub fn from_timeline(phases: &[timeline::Phase]) -> Vec<(Phase, f64)> {
    Phase::ALL
        .into_iter()
        .filter_map(|p| {
            phases
                .iter()
                .find(|e| e.name == p.timeline_name())
                .map(|e| (p, e.t_ms))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_maps_names() {
        let doc: Vec<timeline::Phase> = serde_json::from_value(serde_json::json!([
            {"name": "process_start", "t_ms": 0.0},
            {"name": "memory_ready", "t_ms": 0.7},
            {"name": "first_kvm_run", "t_ms": 29.0},
            {"name": "first_serial_output", "t_ms": 30.0},
            {"name": "init_started", "t_ms": 101.2},
            {"name": "test_done", "t_ms": 145.0},
            {"name": "exit", "t_ms": 163.8}
        ]))
        .unwrap();
        assert_eq!(
            from_timeline(&doc),
            vec![
                (Phase::Launch, 0.0),
                (Phase::MemoryReady, 0.7),
                (Phase::FirstOutput, 30.0),
                (Phase::InitStarted, 101.2),
                (Phase::TestDone, 145.0),
                (Phase::Exit, 163.8)
            ]
        );
        assert!(from_timeline(&[]).is_empty());
    }

    #[test]
    fn names_round_trip() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.name()), Some(p));
        }
        assert_eq!(Phase::parse("boot"), None);
    }
}
