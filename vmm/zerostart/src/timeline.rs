//! The boot timeline: named monotonic timestamps relative to process start.

use std::time::Instant;

use serde::Serialize;

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
}
