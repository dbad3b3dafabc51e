//! `vmm = "nested"`: a scenario of the nested test host, read from its
//! report, and the guest keys that host fixes itself.

use super::context::Ctx;
use super::raw::RawScenario;
use super::{real_vm_scenario, ConfigError, Nested, Vmm};

/// The nested host's scenario of scenario `n` (`None` for other VMMs).
pub(super) fn nested(
    cx: &Ctx<'_>,
    n: &str,
    vmm: Vmm,
    s: &RawScenario,
) -> Result<Option<Nested>, ConfigError> {
    let nested = match (vmm, &s.nested_scenario) {
        (Vmm::Nested, Some(name)) => {
            let Some(report) = s.nested_report.as_deref() else {
                return Err(cx.err(
                    n,
                    "nested_report",
                    "is missing".into(),
                    if real_vm_scenario(name) {
                        "name the report.json of `tests/nested-host/run.py microvm`: \"${ROOT}/target/microvm/report.json\" (make test-microvm writes it)"
                    } else {
                        "name the report.json of `tests/nested-host/run.py e2e --report PATH` (make slo-nested writes it)"
                    },
                ));
            };
            let v = s.nested_vmm.clone();
            if let Some(x) = v.as_deref().filter(|x| !["zerostart", "qemu"].contains(x)) {
                return Err(cx.err(
                    n,
                    "nested_vmm",
                    format!("'{x}' is not a VMM of the nested host"),
                    "use zerostart or qemu",
                ));
            }
            Some(Nested {
                scenario: name.clone(),
                vmm: v,
                // Written by the harness after the config is read: not checked here.
                report: cx.path(n, "nested_report", report, false)?,
            })
        }
        (Vmm::Nested, None) => {
            return Err(cx.err(
                n,
                "nested_scenario",
                "is missing".into(),
                "name a scenario of tests/nested-host/run.py, e.g. zs-prezero-1g",
            ))
        }
        (_, Some(_)) => {
            return Err(cx.err(
                n,
                "nested_scenario",
                "only applies to vmm = \"nested\"".into(),
                "drop it or set vmm = \"nested\"",
            ))
        }
        (_, None) => {
            if s.nested_report.is_some() {
                return Err(cx.err(
                    n,
                    "nested_report",
                    "only applies to vmm = \"nested\"".into(),
                    "drop it or set vmm = \"nested\"",
                ));
            }
            None
        }
    };
    if vmm == Vmm::Nested {
        let set = [
            ("initramfs", s.initramfs.is_some()),
            ("cmdline", s.cmdline.is_some()),
            ("memory", s.memory.is_some()),
            ("backing", s.backing.is_some()),
            ("prefault", s.prefault.is_some()),
            ("vcpus", s.vcpus.is_some()),
            ("warmup", s.warmup.is_some()),
            ("binary", s.binary.is_some()),
            ("accel", s.accel.is_some()),
            ("extra_args", !s.extra_args.is_empty()),
            ("expect", s.expect.is_some()),
            ("markers", !s.markers.is_empty()),
        ];
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err(cx.err(
                n,
                key,
                "does not apply to vmm = \"nested\"".into(),
                "drop it: the nested host's scenario (tests/nested-host/run.py) fixes the guest",
            ));
        }
    }
    Ok(nested)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{parse, OK};
    use crate::phase::Phase;

    #[test]
    fn nested_scenarios() {
        let base = r#"
[[scenario]]
name = "n"
vmm = "nested"
nested_scenario = "zs-prezero-1g"
nested_report = "${ROOT}/target/n.json"
[[scenario.slo]]
phase = "memory_ready"
stat = "max"
max_ms = 1000
"#;
        let c = parse(base).unwrap();
        let s = &c.scenarios[0];
        assert_eq!(s.nested.as_ref().unwrap().scenario, "zs-prezero-1g");
        // A [defaults] warmup leaves the nested host's runs alone.
        let d = parse(&format!("[defaults]\nwarmup = 1\n{base}")).unwrap();
        assert_eq!(d.scenarios[0].warmup, 0);
        // The real VM's phases are bounds of nested scenarios.
        let real = base
            .replace("zs-prezero-1g", "microvm-zerostart")
            .replace("memory_ready", "app_ready");
        assert_eq!(
            parse(&real).unwrap().scenarios[0].slos[0].phase,
            Phase::AppReady
        );
        assert!(s.nested.as_ref().unwrap().report.ends_with("target/n.json"));
        for (from, to, want) in [
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nkernel = \"k\"",
                "cannot be chosen for vmm = \"nested\"",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nmemory = \"1G\"",
                "`memory`: does not apply to vmm = \"nested\"",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nwarmup = 1",
                "`warmup`: does not apply to vmm = \"nested\"",
            ),
            (
                "nested_scenario = \"zs-prezero-1g\"",
                "",
                "`nested_scenario`: is missing",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nnested_vmm = \"kvmtool\"",
                "use zerostart or qemu",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"qemu\"",
                "`nested_scenario`: only applies",
            ),
            (
                "nested_report = \"${ROOT}/target/n.json\"",
                "",
                "`nested_report`: is missing; name the report.json of `tests/nested-host/run.py e2e",
            ),
            (
                "zs-prezero-1g\"\nnested_report = \"${ROOT}/target/n.json\"",
                "microvm-stock\"",
                "`nested_report`: is missing; name the report.json of `tests/nested-host/run.py microvm`: \"${ROOT}/target/microvm/report.json\" (make test-microvm writes it)",
            ),
        ] {
            let e = parse(&base.replace("memory_ready", "exit").replace(from, to)).unwrap_err();
            assert!(e.contains(want), "{to}: {e}");
        }
        let no_kernel = OK.replace("kernel = \"k\"\n", "");
        assert!(parse(&no_kernel)
            .unwrap_err()
            .contains("`kernel`: is missing"));
    }
}
