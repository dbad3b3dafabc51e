//! One `[[scenario]]` table: its name, VMM, memory and run keys, checked
//! in file order of the keys that depend on each other.

use std::time::Duration;

use regex::Regex;

use super::context::Ctx;
use super::raw::{RawDefaults, RawScenario};
use super::{boot, nested, slo, Backing, Config, ConfigError, Launch, LaunchSource, Scenario, Vmm};
use crate::phase::Phase;

impl Config {
    pub(super) fn scenario(
        cx: &Ctx<'_>,
        d: &RawDefaults,
        s: RawScenario,
        before: &[Scenario],
    ) -> Result<Scenario, ConfigError> {
        let n = s.name.clone();
        let name_ok = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return Err(cx.err(
                &n,
                "name",
                format!("'{n}' is not a usable name"),
                "use letters, digits, - _ .",
            ));
        }
        if before.iter().any(|b| b.name == n) {
            return Err(cx.err(
                &n,
                "name",
                "is used twice".into(),
                "give each scenario its own name",
            ));
        }
        let vmm = match s.vmm.as_str() {
            "zerostart" => Vmm::Zerostart,
            "qemu" => Vmm::Qemu,
            "cloud-hypervisor" => Vmm::CloudHypervisor,
            "firecracker" => Vmm::Firecracker,
            "nested" => Vmm::Nested,
            v => {
                return Err(cx.err(
                    &n,
                    "vmm",
                    format!("'{v}' is not a supported VMM"),
                    "use zerostart, qemu, cloud-hypervisor, firecracker or nested",
                ))
            }
        };
        let memory = s.memory.clone().unwrap_or_else(|| "512M".into());
        let memory_bytes = hostmem::parse_size(&memory).map_err(|_| {
            cx.err(
                &n,
                "memory",
                format!("'{memory}' is not a size"),
                "write e.g. 256M or 4G",
            )
        })?;
        if memory_bytes < 16 << 20 || memory_bytes % (2 << 20) != 0 {
            return Err(cx.err(
                &n,
                "memory",
                format!("'{memory}' is too small or not a multiple of 2M"),
                "use at least 16M, in whole MiB pairs, e.g. 256M",
            ));
        }
        let backing =
            match s
                .backing
                .as_deref()
                .unwrap_or(if s.launch.is_some() { "hugetlb" } else { "thp" })
            {
                "anon" => Backing::Anon,
                "thp" => Backing::Thp,
                "hugetlb" => Backing::Hugetlb,
                "pool" => Backing::Pool,
                b => {
                    return Err(cx.err(
                        &n,
                        "backing",
                        format!("'{b}' is not a backing"),
                        "use anon, thp, hugetlb or pool",
                    ))
                }
            };
        if backing == Backing::Pool && vmm != Vmm::Zerostart {
            return Err(cx.err(
                &n,
                "backing",
                "'pool' needs vmm = \"zerostart\"".into(),
                if s.launch.is_some() {
                    "drop it: launch = \"pool\" already leases from the pool"
                } else {
                    "use anon, thp or hugetlb for other VMMs, or launch = \"pool\" (qemu, cloud-hypervisor)"
                },
            ));
        }
        let launch = match &s.launch {
            None => {
                if s.firmware.is_some() {
                    return Err(cx.err(
                        &n,
                        "firmware",
                        "only applies with `launch`".into(),
                        "drop it, or set launch = \"pool\" | \"prefault\" | \"none\" (qemu, cloud-hypervisor)",
                    ));
                }
                None
            }
            Some(l) => Some(Self::launch(cx, &n, vmm, &s, l, backing)?),
        };
        let pool_socket = match (backing, s.pool_socket.as_deref()) {
            (Backing::Pool, Some(p)) => Some(cx.path(&n, "pool_socket", p, false)?),
            (Backing::Pool, None) => {
                return Err(cx.err(
                    &n,
                    "pool_socket",
                    "is missing".into(),
                    "name the socket of a running `zerostart pool serve` (backing = \"pool\")",
                ))
            }
            (_, Some(_))
                if matches!(
                    launch,
                    Some(Launch {
                        source: LaunchSource::Pool(_),
                        ..
                    })
                ) =>
            {
                None
            }
            (_, Some(_)) => {
                return Err(cx.err(
                    &n,
                    "pool_socket",
                    "is set but backing is not \"pool\"".into(),
                    "set backing = \"pool\" (zerostart) or launch = \"pool\" (qemu, cloud-hypervisor), or drop pool_socket",
                ))
            }
            (_, None) => None,
        };
        let vcpus = s.vcpus.unwrap_or(1);
        if !(1..=32).contains(&vcpus) {
            return Err(cx.err(
                &n,
                "vcpus",
                format!("{vcpus} is out of range"),
                "use 1..=32",
            ));
        }
        let repetitions = s.repetitions.or(d.repetitions).unwrap_or(5);
        if !(1..=10_000).contains(&repetitions) {
            return Err(cx.err(
                &n,
                "repetitions",
                format!("{repetitions} is out of range"),
                "use 1..=10000",
            ));
        }
        let warmup = s.warmup.or(d.warmup).unwrap_or(0);
        if warmup > 100 {
            return Err(cx.err(
                &n,
                "warmup",
                format!("{warmup} is out of range"),
                "use 0..=100",
            ));
        }
        let timeout_s = s.timeout_s.or(d.timeout_s).unwrap_or(120);
        if !(1..=86_400).contains(&timeout_s) {
            return Err(cx.err(
                &n,
                "timeout_s",
                format!("{timeout_s} is out of range"),
                "use 1..=86400 seconds",
            ));
        }
        let accel = s.accel.clone().unwrap_or_else(|| "tcg".into());
        if vmm == Vmm::Qemu && !["tcg", "kvm"].contains(&accel.as_str()) {
            return Err(cx.err(
                &n,
                "accel",
                format!("'{accel}' is not a QEMU accelerator here"),
                "use tcg or kvm",
            ));
        }
        let re = |key: &str, v: &str| {
            Regex::new(v).map_err(|e| {
                cx.err(
                    &n,
                    key,
                    format!(
                        "'{v}' is not a regex ({})",
                        e.to_string().lines().last().unwrap_or("")
                    ),
                    "fix the pattern (Rust regex syntax)",
                )
            })
        };
        let expect = s.expect.as_deref().map(|v| re("expect", v)).transpose()?;
        let mut markers = Vec::new();
        for (k, v) in &s.markers {
            let phase = Phase::parse(k)
                .filter(|p| p.from_serial_marker())
                .ok_or_else(|| {
                    cx.err(
                        &n,
                        &format!("markers.{k}"),
                        "is not a phase a serial line can mark".into(),
                        "use init_started or test_done",
                    )
                })?;
            markers.push((phase, re(&format!("markers.{k}"), v)?));
        }
        let slos = slo::slos(cx, &n, vmm, launch.as_ref(), &markers, &s.slo)?;
        let nested = nested::nested(cx, &n, vmm, &s)?;
        let (kernel, disk) = boot::kernel_and_disk(cx, &n, vmm, &s)?;
        let memory = match &nested {
            Some(x) => x.scenario.clone(),
            None => memory,
        };
        Ok(Scenario {
            kernel,
            disk,
            nested,
            initramfs: s
                .initramfs
                .as_deref()
                .map(|p| cx.path(&n, "initramfs", p, true))
                .transpose()?,
            binary: s
                .binary
                .as_deref()
                .map(|p| cx.path(&n, "binary", p, true))
                .transpose()?,
            name: n,
            vmm,
            cmdline: s
                .cmdline
                .unwrap_or_else(|| "console=ttyS0 reboot=k panic=1".into()),
            memory,
            memory_bytes,
            backing,
            prefault: s.prefault.unwrap_or(false),
            pool_socket,
            launch,
            vcpus,
            repetitions,
            // A nested scenario's boots come from the harness's report:
            // nothing to warm here (a [defaults] warmup does not apply).
            warmup: if vmm == Vmm::Nested { 0 } else { warmup },
            timeout: Duration::from_secs(timeout_s),
            accel,
            extra_args: s.extra_args,
            expect,
            markers,
            slos,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{parse, OK};

    #[test]
    fn warmup_comes_from_the_scenario_or_the_defaults() {
        let with = |t: &str| OK.replace("memory = \"256M\"\n", &format!("memory = \"256M\"\n{t}"));
        assert_eq!(parse(&with("warmup = 1\n")).unwrap().scenarios[0].warmup, 1);
        let d = format!("[defaults]\nwarmup = 2\n{OK}");
        assert_eq!(parse(&d).unwrap().scenarios[0].warmup, 2);
        let e = parse(&with("warmup = 101\n")).unwrap_err();
        assert!(
            e.contains("`warmup`: 101 is out of range; use 0..=100"),
            "{e}"
        );
    }

    /// Each bad value gives one line naming the key and a fix.
    #[test]
    fn bad_configs_name_the_key_and_the_fix() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "vmm = \"qemu\"",
                "vmm = \"kvmtool\"",
                "`vmm`: 'kvmtool' is not a supported VMM; use zerostart",
            ),
            (
                "memory = \"256M\"",
                "memory = \"lots\"",
                "`memory`: 'lots' is not a size; write e.g. 256M",
            ),
            (
                "stat = \"p95\"",
                "stat = \"p97\"",
                "`slo[0].stat`: 'p97' is not a statistic; use one of",
            ),
            (
                "max_ms = 500",
                "max_ms = -1",
                "`slo[0].max_ms`: -1 is not a positive time",
            ),
            (
                "phase = \"init_started\"",
                "phase = \"boot\"",
                "`slo[0].phase`: 'boot' is not a phase; use one of",
            ),
            (
                "phase = \"init_started\"",
                "phase = \"memory_ready\"",
                "memory_ready is not observable for qemu",
            ),
            (
                "phase = \"init_started\"",
                "phase = \"app_ready\"",
                "app_ready is reported only by the nested host's real VM; use it with vmm = \"nested\"",
            ),
            ("kernel = \"k\"", "kernel = \"missing\"", "`kernel`: "),
            (
                "kernel = \"k\"",
                "kernel = \"${NO_SUCH_VAR_ZS}/k\"",
                "${NO_SUCH_VAR_ZS}, which is not set; export NO_SUCH_VAR_ZS",
            ),
            (
                "markers = { init_started = \"^init\" }",
                "markers = { init_started = \"(\" }",
                "`markers.init_started`: '(' is not a regex",
            ),
            (
                "markers = { init_started = \"^init\" }",
                "markers = {}",
                "init_started has no serial marker for qemu; add [scenario.markers]",
            ),
            (
                "memory = \"256M\"",
                "memroy = \"256M\"",
                "unknown field `memroy`",
            ),
            (
                "memory = \"256M\"",
                "memory = \"256M\"\nbacking = \"pool\"",
                "'pool' needs vmm = \"zerostart\"",
            ),
            (
                "memory = \"256M\"",
                "memory = \"256M\"\npool_socket = \"/s\"",
                "`pool_socket`: is set but backing is not",
            ),
            (
                "vmm = \"qemu\"",
                "vmm = \"zerostart\"\nbacking = \"pool\"",
                "`pool_socket`: is missing",
            ),
        ];
        for (from, to, want) in cases {
            let text = OK.replace(from, to);
            assert_ne!(text, OK, "{from}");
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{to}: got {e}");
            assert!(!e.contains('\n'), "multi-line: {e}");
            assert!(e.contains("slo.toml"), "{e}");
        }
    }
}
