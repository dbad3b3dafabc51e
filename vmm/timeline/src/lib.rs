//! The boot timeline zerostart writes with `--timeline FILE`: one typed
//! document per writer, [`RunTimeline`] (`zerostart run`) and
//! [`LaunchTimeline`] (`zerostart launch`), the [`Timeline`] recorder
//! that stamps their phases, and the JSON Schema of each ([`schemas`]).
//!
//! Why a crate of its own: the VMM writes these documents, the SLO runner
//! (`vmm/slo`) reads them back, and the Python harness (`tests/zstest/
//! timeline.py`) validates them against the generated schema
//! (`docs/schema/`). Each shape is spelled once, here; the reader must not
//! pull in the VMM's KVM code to get it, so the types live below both.
//!
//! Key order: the files have always had their keys sorted (they used to
//! be built as a `serde_json::Value`, whose map is ordered by key), and
//! the fields below are declared in that order so the bytes stay the same.

#![deny(missing_docs)]

use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One phase boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// `process_start`, `memory_ready`, `first_kvm_run`, a guest marker name,
    /// `first_serial_output` or `exit` (run); `process_start`,
    /// `memory_ready`, `hint_ready`, `vmm_spawned`, `exit` (launch).
    pub name: String,
    /// Milliseconds since `process_start`, rounded to the microsecond.
    #[schemars(range(min = 0.0))]
    pub t_ms: f64,
}

/// Collects phase timestamps. `start` is taken at the very top of `main`
/// (an `Instant`, i.e. CLOCK_MONOTONIC), so dynamic loading and Rust runtime
/// start-up before `main` are not counted (a static binary has almost none).
#[derive(Debug, Clone)]
pub struct Timeline {
    start: Instant,
    marks: Vec<(String, Instant)>,
}

impl Timeline {
    /// A timeline whose zero is `start`.
    pub fn new(start: Instant) -> Self {
        Timeline {
            start,
            marks: vec![("process_start".to_string(), start)],
        }
    }

    /// Records `name` now.
    pub fn mark(&mut self, name: &str) {
        self.mark_at(name, Instant::now());
    }

    /// Records `name` at `at`.
    pub fn mark_at(&mut self, name: &str, at: Instant) {
        self.marks.push((name.to_string(), at));
    }

    /// Phases in time order.
    pub fn phases(&self) -> Vec<Phase> {
        let mut m = self.marks.clone();
        m.sort_by_key(|(_, t)| *t);
        m.into_iter()
            .map(|(name, t)| Phase {
                name,
                t_ms: ms_since(self.start, t),
            })
            .collect()
    }

    /// `name=12.3ms name=45.6ms ...` for the stderr summary.
    pub fn summary(&self) -> String {
        self.phases()
            .iter()
            .map(|p| format!("{}={:.1}ms", p.name, p.t_ms))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Milliseconds from `origin` to `at` (0 when `at` is earlier), rounded to
/// the microsecond: the unit of every time in a timeline.
pub fn ms_since(origin: Instant, at: Instant) -> f64 {
    (at.saturating_duration_since(origin).as_secs_f64() * 1e6).round() / 1e3
}

/// A phase the guest reports over vsock (port 5300,
/// `zsphase: <name> uptime_ms=<n>`), in the order it reaches them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GuestPhaseName {
    /// systemd began sysinit.
    UserspaceStarted,
    /// The default gateway answered a ping.
    NetworkUp,
    /// multi-user.target reached.
    MultiUserReached,
    /// The workload touched its memory.
    AppReady,
}

impl GuestPhaseName {
    /// Every name, in the order the guest reaches them.
    pub const ALL: [GuestPhaseName; 4] = [
        GuestPhaseName::UserspaceStarted,
        GuestPhaseName::NetworkUp,
        GuestPhaseName::MultiUserReached,
        GuestPhaseName::AppReady,
    ];

    /// The name on the guest's line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            GuestPhaseName::UserspaceStarted => "userspace_started",
            GuestPhaseName::NetworkUp => "network_up",
            GuestPhaseName::MultiUserReached => "multi_user_reached",
            GuestPhaseName::AppReady => "app_ready",
        }
    }

    /// From the name on a guest's line.
    pub fn parse(s: &str) -> Option<GuestPhaseName> {
        GuestPhaseName::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// One phase the guest reported, as the VMM (or launcher) heard it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestPhase {
    /// The guest's own `uptime_ms=` (its CLOCK_BOOTTIME).
    pub guest_uptime_ms: u64,
    /// Milliseconds from the VMM's (or launcher's) timeline origin to the
    /// line's arrival.
    #[schemars(range(min = 0.0))]
    pub host_ms: f64,
    /// Which phase.
    pub name: GuestPhaseName,
}

/// `zerostart run --timeline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunTimeline {
    /// How the VM ended.
    pub exit: RunExit,
    /// What the guest reported over vsock, in arrival order (`[]` without
    /// `--vsock`).
    pub guest_phases: Vec<GuestPhase>,
    /// Guest RAM size.
    #[schemars(range(min = 1))]
    pub memory_bytes: u64,
    /// The VMM's phases in time order, `process_start` (0) first.
    #[schemars(length(min = 1))]
    pub phases: Vec<Phase>,
    /// How guest RAM was prepared and what the hint claimed.
    pub prezero: PrezeroReport,
    /// vCPUs booted.
    #[schemars(range(min = 1))]
    pub vcpus: u8,
}

/// The `exit` object of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunExit {
    /// zerostart's exit code.
    pub code: i32,
    /// `reset`, `poweroff`, `guest_crash` or `error`.
    pub kind: String,
    /// Why, in words (`i8042 reset`, `triple fault`, an error message).
    pub reason: String,
}

/// The `prezero` object of a run: how guest RAM was prepared. `tests/`,
/// `vmm/slo` and the docs read these names and units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PrezeroReport {
    /// The zeroing engine's backend when it ran (`nt_engine`), else `None`.
    pub backend: Option<String>,
    /// The backing class (`anon_4k`, `anon_thp`, `hugetlb_2m`, `hugetlb_1g`,
    /// `pool`).
    pub backing: String,
    /// Bytes prefaulted (0 without prefault).
    pub bytes: u64,
    /// Prefault throughput.
    pub gib_per_s: f64,
    /// Bytes the hint claims zero.
    pub hint_bytes: u64,
    /// Entries in the hint passed to the guest.
    pub hint_ranges: usize,
    /// `nt_engine`, `populate_write`, `kernel_fault_on_demand` (no prefault:
    /// the kernel clears pages as the guest touches them), `pool_lease` or
    /// `none`.
    pub method: String,
    /// `off` (no hint) or `engine` (hint given).
    pub mode: String,
    /// Wall time of the prefault in milliseconds.
    pub ms: f64,
    /// Worker threads used for the prefault.
    pub threads: usize,
    /// Bytes re-read by `--verify-hint` (0 when not asked).
    pub verified_bytes: u64,
}

/// `zerostart launch --timeline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LaunchTimeline {
    /// The VMM's command line as run (binary first).
    pub argv: Vec<String>,
    /// `direct` or `uefi`.
    pub boot: String,
    /// How the VMM ended.
    pub exit: LaunchExit,
    /// What the guest reported over vsock, in arrival order.
    pub guest_phases: Vec<GuestPhase>,
    /// The hint the launcher published (`null` without one).
    pub hint: Option<LaunchHint>,
    /// How the hint reached the guest (`fw_cfg`, `cmdline`, `smbios`,
    /// `none`).
    pub hint_transport: String,
    /// The pool lease the memory came from (`null` when not a lease).
    pub lease: Option<u64>,
    /// Bytes of pool memory the lease held: its regions whole, which a
    /// guest smaller than its region does not fill (`null` when not a
    /// lease).
    pub lease_held_bytes: Option<u64>,
    /// Guest RAM size.
    #[schemars(range(min = 1))]
    pub memory_bytes: u64,
    /// The memory source used (after any pool fallback).
    pub memory_source: String,
    /// The memory source asked for.
    pub memory_source_asked: String,
    /// The launcher's phases: `process_start`, `memory_ready`,
    /// `hint_ready`, `vmm_spawned`, `exit`.
    #[schemars(length(min = 1))]
    pub phases: Vec<Phase>,
    /// `qemu`, `cloud-hypervisor` or `firecracker`.
    pub vmm: String,
}

/// The `exit` object of a launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LaunchExit {
    /// The launcher's exit code: the VMM's, or 128 + the signal.
    pub code: i32,
    /// The signal that ended the VMM (`null` when it exited).
    pub signal: Option<i32>,
}

/// The `hint` object of a launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LaunchHint {
    /// Bytes the hint claims zero.
    pub bytes: u64,
    /// The test-only corruption applied (`--test-corrupt-hint`), else `null`.
    pub corrupt: Option<String>,
    /// `[start, length]` of each range, guest-physical.
    pub ranges: Vec<[u64; 2]>,
}

/// The file `--timeline FILE` gets: the document, pretty-printed, with a
/// final newline.
pub fn to_file_text<T: Serialize>(doc: &T) -> String {
    // Plain data with string keys: serializing it cannot fail.
    serde_json::to_string_pretty(doc).unwrap_or_default() + "\n"
}

/// `(file name, text)` of each document's JSON Schema, as committed under
/// `docs/schema/` (`cargo run -p timeline --example gen_schema --
/// docs/schema` rewrites them).
///
/// The schemas describe what the writers produce (serde's serialize
/// side): every key is present, an `Option` is written as `null`.
pub fn schemas() -> Vec<(&'static str, String)> {
    fn of<T: JsonSchema>() -> String {
        to_file_text(
            &schemars::generate::SchemaSettings::default()
                .for_serialize()
                .into_generator()
                .into_root_schema_for::<T>(),
        )
    }
    vec![
        ("timeline-run.schema.json", of::<RunTimeline>()),
        ("timeline-launch.schema.json", of::<LaunchTimeline>()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn phases_are_sorted_and_relative() {
        let s = Instant::now();
        let mut t = Timeline::new(s);
        t.mark_at("b", s + Duration::from_millis(20));
        t.mark_at("a", s + Duration::from_micros(10_500));
        let p = t.phases();
        assert_eq!(
            p[0],
            Phase {
                name: "process_start".into(),
                t_ms: 0.0
            }
        );
        assert_eq!(
            p[1],
            Phase {
                name: "a".into(),
                t_ms: 10.5
            }
        );
        assert_eq!(
            p[2],
            Phase {
                name: "b".into(),
                t_ms: 20.0
            }
        );
        assert_eq!(t.summary(), "process_start=0.0ms a=10.5ms b=20.0ms");
    }

    #[test]
    fn guest_phase_names_round_trip() {
        for p in GuestPhaseName::ALL {
            assert_eq!(GuestPhaseName::parse(p.name()), Some(p));
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::json!(p.name())
            );
        }
        assert_eq!(GuestPhaseName::parse("root_shell"), None);
    }
}
