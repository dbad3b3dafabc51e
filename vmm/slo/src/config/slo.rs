//! `[[scenario.slo]]`: which phase, statistic and bound, and whether the
//! scenario's VMM can observe that phase at all.

use regex::Regex;

use super::context::Ctx;
use super::raw::RawSlo;
use super::{ConfigError, Launch, Slo, Stat, Vmm};
use crate::phase::Phase;

impl Stat {
    pub(super) const NAMES: &'static str = "min, p50, p90, p95, p99, max, mean";

    pub(super) fn parse(s: &str) -> Option<Stat> {
        Some(match s {
            "min" => Stat::Min,
            "p50" | "median" => Stat::P50,
            "p90" => Stat::P90,
            "p95" => Stat::P95,
            "p99" => Stat::P99,
            "max" | "p100" => Stat::Max,
            "mean" => Stat::Mean,
            _ => return None,
        })
    }
}

/// The SLOs of scenario `n`; at least one.
pub(super) fn slos(
    cx: &Ctx<'_>,
    n: &str,
    vmm: Vmm,
    launch: Option<&Launch>,
    markers: &[(Phase, Regex)],
    raw: &[RawSlo],
) -> Result<Vec<Slo>, ConfigError> {
    let mut slos = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let key = |k: &str| format!("slo[{i}].{k}");
        let phase = Phase::parse(&r.phase)
            .filter(|p| *p != Phase::Launch)
            .ok_or_else(|| {
                cx.err(
                    n,
                    &key("phase"),
                    format!("'{}' is not a phase", r.phase),
                    format!("use one of {}", Phase::SLO_NAMES),
                )
            })?;
        if phase.real_vm_only() && vmm != Vmm::Nested {
            return Err(cx.err(
                n,
                &key("phase"),
                format!(
                    "{} is reported only by the nested host's real VM",
                    phase.name()
                ),
                "use it with vmm = \"nested\" and a microvm-* nested_scenario (make test-microvm)",
            ));
        }
        let timeline = matches!(vmm, Vmm::Zerostart | Vmm::Nested);
        if phase == Phase::MemoryReady && !timeline && launch.is_none() {
            return Err(cx.err(
                n,
                &key("phase"),
                format!("memory_ready is not observable for {}", vmm.name()),
                "use it only with vmm = \"zerostart\" or with launch = \"...\" (qemu, cloud-hypervisor), or bound first_output",
            ));
        }
        if phase.from_serial_marker() && !timeline && !markers.iter().any(|(p, _)| *p == phase) {
            return Err(cx.err(
                n,
                &key("phase"),
                format!("{} has no serial marker for {}", phase.name(), vmm.name()),
                format!(
                    "add [scenario.markers] {} = \"<regex of the guest's line>\"",
                    phase.name()
                ),
            ));
        }
        let stat = Stat::parse(&r.stat).ok_or_else(|| {
            cx.err(
                n,
                &key("stat"),
                format!("'{}' is not a statistic", r.stat),
                format!("use one of {}", Stat::NAMES),
            )
        })?;
        if !(r.max_ms.is_finite() && r.max_ms > 0.0) {
            return Err(cx.err(
                n,
                &key("max_ms"),
                format!("{} is not a positive time", r.max_ms),
                "write milliseconds, e.g. 500",
            ));
        }
        slos.push(Slo {
            phase,
            stat,
            max_ms: r.max_ms,
        });
    }
    if slos.is_empty() {
        return Err(cx.err(
            n,
            "slo",
            "has no SLOs".into(),
            "add [[scenario.slo]] phase = \"exit\", stat = \"p95\", max_ms = ...",
        ));
    }
    Ok(slos)
}
