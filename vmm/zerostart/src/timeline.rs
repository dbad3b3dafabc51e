//! The boot timeline: named monotonic timestamps relative to process start.

use std::time::Instant;

use guestmem::{GuestRam, PrefaultStats, PrepMethod, Prezero};
use serde::Serialize;
use zerohint::Hint;

/// One phase boundary.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Phase {
    /// `process_start`, `memory_ready`, `first_kvm_run`, a guest marker name,
    /// `first_serial_output` or `exit`.
    pub name: String,
    /// Milliseconds since `process_start`.
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
                t_ms: (t.saturating_duration_since(self.start).as_secs_f64() * 1000.0 * 1000.0)
                    .round()
                    / 1000.0,
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

/// The `prezero` object of the timeline JSON, built here from guestmem's
/// plain facts ([`PrefaultStats`]): the JSON's names and units are the
/// timeline's, and `tests/`, `vmm/slo` and the docs read them, so they stay
/// exactly as they were when guestmem serialized its own report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrezeroReport {
    /// `off` (no hint) or `engine` (hint given).
    pub mode: &'static str,
    /// The zeroing engine's backend when it ran (`nt_engine`), else `None`.
    pub backend: Option<&'static str>,
    /// `nt_engine`, `populate_write`, `kernel_fault_on_demand` (no prefault:
    /// the kernel clears pages as the guest touches them), `pool_lease` or
    /// `none`.
    pub method: &'static str,
    /// The backing class (`anon_4k`, `anon_thp`, `hugetlb_2m`, `hugetlb_1g`,
    /// `pool`).
    pub backing: &'static str,
    /// Bytes prefaulted (0 without prefault).
    pub bytes: u64,
    /// Wall time of the prefault in milliseconds.
    pub ms: f64,
    /// Prefault throughput.
    pub gib_per_s: f64,
    /// Worker threads used for the prefault.
    pub threads: usize,
    /// Entries in the hint passed to the guest.
    pub hint_ranges: usize,
    /// Bytes the hint claims zero.
    pub hint_bytes: u64,
    /// Bytes re-read by `--verify-hint` (0 when not asked).
    pub verified_bytes: u64,
}

impl PrezeroReport {
    /// Report for `ram` and the hint it produced.
    pub fn new(ram: &GuestRam, hint: Option<&Hint>, verified_bytes: u64) -> Self {
        Self::from_facts(
            ram.config().prezero,
            ram.prefault_stats(),
            hint,
            verified_bytes,
        )
    }

    fn from_facts(
        prezero: Prezero,
        st: &PrefaultStats,
        hint: Option<&Hint>,
        verified_bytes: u64,
    ) -> Self {
        PrezeroReport {
            mode: match prezero {
                Prezero::Off => "off",
                Prezero::Engine(_) => "engine",
            },
            backend: st.backend,
            method: match st.method {
                PrepMethod::PoolLease => "pool_lease",
                PrepMethod::Nothing => "none",
                PrepMethod::KernelFaultOnDemand => "kernel_fault_on_demand",
                PrepMethod::PopulateWrite => "populate_write",
                PrepMethod::NtEngine => "nt_engine",
            },
            backing: st.backing.name(),
            bytes: st.bytes,
            ms: st.duration.as_secs_f64() * 1e3,
            gib_per_s: st.gib_per_s(),
            threads: st.threads,
            hint_ranges: hint.map_or(0, |h| h.entries.len()),
            hint_bytes: hint.map_or(0, |h| h.total_bytes()),
            verified_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The JSON as guestmem's serde report wrote it (field order, names,
    /// units, `null` backend), byte for byte.
    #[test]
    fn prezero_report_json_is_unchanged() {
        let st = PrefaultStats {
            method: PrepMethod::PopulateWrite,
            backend: None,
            backing: guestmem::BackingKind::Hugetlb2M,
            bytes: 1 << 30,
            duration: Duration::from_millis(250),
            threads: 2,
        };
        let r = PrezeroReport::from_facts(guestmem::MemoryConfig::default().prezero, &st, None, 0);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"mode":"engine","backend":null,"method":"populate_write","backing":"hugetlb_2m","bytes":1073741824,"ms":250.0,"gib_per_s":4.0,"threads":2,"hint_ranges":0,"hint_bytes":0,"verified_bytes":0}"#
        );
        let st = PrefaultStats {
            method: PrepMethod::Nothing,
            backend: None,
            backing: guestmem::BackingKind::Anon4K,
            bytes: 0,
            duration: Duration::ZERO,
            threads: 0,
        };
        let r = PrezeroReport::from_facts(Prezero::Off, &st, None, 0);
        assert_eq!((r.mode, r.method, r.backing), ("off", "none", "anon_4k"));
        assert_eq!((r.ms, r.gib_per_s), (0.0, 0.0));
    }

    /// Real guest RAM prefaulted by the engine: the report names it
    /// (moved from guestmem's `report_names_method`).
    #[test]
    fn prezero_report_of_real_ram() {
        let cfg = guestmem::MemoryConfig {
            size: 32 << 20,
            prefault: true,
            prefault_method: guestmem::PrefaultMethod::Nt,
            ..Default::default()
        };
        let ram = GuestRam::create(&cfg, &[(vm_memory::GuestAddress(0), 32 << 20)], None).unwrap();
        let j = serde_json::to_value(PrezeroReport::new(&ram, None, 0)).unwrap();
        assert_eq!(j["method"], "nt_engine");
        assert_eq!(j["backing"], "anon_thp");
        assert!(j["backend"].is_string());
        assert!(j["gib_per_s"].as_f64().unwrap() > 0.0);
    }

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
}
