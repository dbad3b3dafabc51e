//! Results: SLO evaluation, the terminal table, `report.json` and JUnit
//! XML.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::config::{Scenario, Slo};
use crate::phase::Phase;
use crate::runner::RepResult;
use crate::stats::Summary;

/// One SLO's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct SloResult {
    /// `p95(launch->init_started) <= 500 ms`.
    pub label: String,
    /// The SLO.
    pub slo: Slo,
    /// The measured statistic, if there were samples.
    pub value_ms: Option<f64>,
    /// Samples it was computed from.
    pub samples: usize,
    /// Holds.
    pub pass: bool,
    /// Not evaluated (scenario skipped).
    pub skipped: bool,
    /// Why it failed or was skipped.
    pub note: String,
}

/// One scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Name.
    pub name: String,
    /// VMM name.
    pub vmm: String,
    /// VMM binary used.
    pub binary: Option<String>,
    /// Guest RAM (or the nested host's scenario).
    pub memory: String,
    /// `zerostart launch` memory source (`pool:SOCKET`, `prefault`,
    /// `none`) when the VMM was started through the launcher.
    pub launch: Option<String>,
    /// vCPUs.
    pub vcpus: u32,
    /// Why it was skipped (VMM not installed).
    pub skipped: Option<String>,
    /// The warm-up boots (config `warmup`), run first: reported here,
    /// in no statistic.
    pub warmup: Vec<RepResult>,
    /// Every measured boot.
    pub reps: Vec<RepResult>,
    /// Phase summaries over successful boots.
    pub phases: BTreeMap<Phase, Summary>,
    /// For zerostart: the harness's serial timestamps, summarized.
    pub serial_phases: BTreeMap<Phase, Summary>,
    /// SLO verdicts.
    pub slos: Vec<SloResult>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Config file.
    pub config: String,
    /// Seconds since the epoch at start.
    pub started_unix: u64,
    /// Host facts that matter for boot times.
    pub host: BTreeMap<String, String>,
    /// Every SLO of every run scenario holds.
    pub pass: bool,
    /// SLOs evaluated / failed / skipped.
    pub counts: Counts,
    /// Scenarios.
    pub scenarios: Vec<ScenarioReport>,
}

/// SLO counts.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    /// Evaluated.
    pub evaluated: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

fn summarize(reps: &[RepResult], serial: bool) -> BTreeMap<Phase, Summary> {
    let mut out = BTreeMap::new();
    for p in Phase::ALL {
        let v: Vec<f64> = reps
            .iter()
            .filter(|r| r.ok)
            .filter_map(|r| {
                if serial {
                    r.serial_phases.get(&p)
                } else {
                    r.phases.get(&p)
                }
            })
            .copied()
            .collect();
        if let Some(s) = Summary::of(&v) {
            out.insert(p, s);
        }
    }
    out
}

impl ScenarioReport {
    /// A scenario whose VMM is not available.
    pub fn skipped(s: &Scenario, why: String) -> Self {
        ScenarioReport {
            name: s.name.clone(),
            vmm: s.vmm.name().into(),
            binary: None,
            memory: s.memory.clone(),
            launch: s.launch.as_ref().map(|l| l.source.arg()),
            vcpus: s.vcpus,
            slos: s
                .slos
                .iter()
                .map(|slo| SloResult {
                    label: slo.label(),
                    slo: slo.clone(),
                    value_ms: None,
                    samples: 0,
                    pass: false,
                    skipped: true,
                    note: why.clone(),
                })
                .collect(),
            skipped: Some(why),
            warmup: Vec::new(),
            reps: Vec::new(),
            phases: BTreeMap::new(),
            serial_phases: BTreeMap::new(),
        }
    }

    /// Evaluates the SLOs of a scenario that ran. Every SLO fails if any
    /// boot failed, or if a boot did not reach its phase: a percentile
    /// over the survivors would hide exactly the slow or broken boots.
    pub fn evaluate(s: &Scenario, binary: String, reps: Vec<RepResult>) -> Self {
        Self::evaluate_warmed(s, binary, Vec::new(), reps)
    }

    /// [`Self::evaluate`] after warm-up boots: their times are in no
    /// statistic, but a warm-up boot that failed fails every SLO, as a
    /// measured one does (a VMM that cannot boot has no warm state).
    pub fn evaluate_warmed(
        s: &Scenario,
        binary: String,
        warmup: Vec<RepResult>,
        reps: Vec<RepResult>,
    ) -> Self {
        let phases = summarize(&reps, false);
        let serial_phases = summarize(&reps, true);
        let failed: Vec<&RepResult> = reps.iter().filter(|r| !r.ok).collect();
        let warm_failed = warmup.iter().find(|r| !r.ok);
        let slos = s
            .slos
            .iter()
            .map(|slo| {
                let samples: Vec<f64> = reps
                    .iter()
                    .filter(|r| r.ok)
                    .filter_map(|r| r.phases.get(&slo.phase).copied())
                    .collect();
                let value = Summary::of(&samples).map(|x| x.get(slo.stat));
                let (pass, note) = if let Some(w) = warm_failed {
                    (
                        false,
                        format!(
                            "warm-up boot {} failed: {}",
                            w.rep,
                            w.error.as_deref().unwrap_or("?")
                        ),
                    )
                } else if !failed.is_empty() {
                    (
                        false,
                        format!(
                            "{} of {} boots failed: {}",
                            failed.len(),
                            reps.len(),
                            failed[0].error.as_deref().unwrap_or("?")
                        ),
                    )
                } else if samples.len() < reps.len() {
                    (
                        false,
                        format!(
                            "only {} of {} boots reached {}",
                            samples.len(),
                            reps.len(),
                            slo.phase.name()
                        ),
                    )
                } else {
                    let v = value.expect("samples are present");
                    if v <= slo.max_ms {
                        (true, String::new())
                    } else {
                        (false, format!("{v:.1} ms > {} ms", slo.max_ms))
                    }
                };
                SloResult {
                    label: slo.label(),
                    slo: slo.clone(),
                    value_ms: value,
                    samples: samples.len(),
                    pass,
                    skipped: false,
                    note,
                }
            })
            .collect();
        ScenarioReport {
            name: s.name.clone(),
            vmm: s.vmm.name().into(),
            binary: Some(binary),
            memory: s.memory.clone(),
            launch: s.launch.as_ref().map(|l| l.source.arg()),
            vcpus: s.vcpus,
            skipped: None,
            warmup,
            reps,
            phases,
            serial_phases,
            slos,
        }
    }
}

impl Report {
    /// Builds the report and its verdict.
    pub fn new(config: String, started_unix: u64, scenarios: Vec<ScenarioReport>) -> Self {
        let mut counts = Counts::default();
        for r in scenarios.iter().flat_map(|s| &s.slos) {
            if r.skipped {
                counts.skipped += 1;
            } else {
                counts.evaluated += 1;
                if !r.pass {
                    counts.failed += 1;
                }
            }
        }
        let mut host = BTreeMap::new();
        host.insert(
            "cpus".into(),
            std::thread::available_parallelism()
                .map(|n| n.get().to_string())
                .unwrap_or_default(),
        );
        if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
            host.insert("kernel".into(), k.trim().to_string());
        }
        Report {
            config,
            started_unix,
            host,
            pass: counts.failed == 0,
            counts,
            scenarios,
        }
    }

    /// The terminal table. The phase column fits the longest phase name
    /// (`multi_user_reached`), so the real VM's rows stay aligned.
    pub fn table(&self) -> String {
        let mut o = String::new();
        for s in &self.scenarios {
            if s.vmm == "nested" {
                let _ = writeln!(o, "\n{} (nested host scenario {})", s.name, s.memory);
            } else {
                let _ = writeln!(
                    o,
                    "\n{} ({}{}, {}, {} vCPU{})",
                    s.name,
                    s.vmm,
                    s.launch
                        .as_ref()
                        .map(|l| format!(" through zerostart launch, source={l}"))
                        .unwrap_or_default(),
                    s.memory,
                    s.vcpus,
                    if s.vcpus == 1 { "" } else { "s" }
                );
            }
            if let Some(why) = &s.skipped {
                let _ = writeln!(o, "  SKIPPED: {why}");
                continue;
            }
            for w in &s.warmup {
                let times: Vec<String> = [Phase::MemoryReady, Phase::Exit]
                    .iter()
                    .filter_map(|p| w.phases.get(p).map(|v| format!("{} {v:.1} ms", p.name())))
                    .collect();
                let _ = writeln!(
                    o,
                    "  warm-up boot {} (in no statistic): {}",
                    w.rep,
                    match &w.error {
                        None => format!("ok, {}", times.join(", ")),
                        Some(e) => format!("FAILED: {e}"),
                    }
                );
            }
            let ok = s.reps.iter().filter(|r| r.ok).count();
            let _ = writeln!(o, "  boots: {ok}/{} ok", s.reps.len());
            for r in s.reps.iter().filter(|r| !r.ok) {
                let _ = writeln!(
                    o,
                    "  boot {} FAILED: {}",
                    r.rep,
                    r.error.as_deref().unwrap_or("?")
                );
            }
            let _ = writeln!(
                o,
                "  {:<18} {:>4} {:>10} {:>10} {:>10} {:>10}",
                "launch->", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"
            );
            for (p, x) in &s.phases {
                if *p == Phase::Launch {
                    continue;
                }
                let _ = writeln!(
                    o,
                    "  {:<18} {:>4} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                    p.name(),
                    x.n,
                    x.p50,
                    x.p90,
                    x.p99,
                    x.max
                );
            }
            for r in &s.slos {
                let _ = writeln!(
                    o,
                    "  {} {}{}{}",
                    if r.pass { "PASS" } else { "FAIL" },
                    r.label,
                    r.value_ms
                        .map(|v| format!(": {v:.1} ms"))
                        .unwrap_or_default(),
                    if r.note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", r.note)
                    }
                );
            }
        }
        let c = self.counts;
        let _ = writeln!(
            o,
            "\n{}: {} of {} SLOs hold{}",
            if self.pass { "PASS" } else { "FAIL" },
            c.evaluated - c.failed,
            c.evaluated,
            if c.skipped > 0 {
                format!(", {} skipped (VMM not installed)", c.skipped)
            } else {
                String::new()
            }
        );
        o
    }

    /// JUnit XML: one `<testsuite>` per scenario, one `<testcase>` per
    /// SLO; skipped scenarios' SLOs are `<skipped/>`.
    pub fn junit(&self) -> String {
        let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let c = self.counts;
        let _ = writeln!(
            o,
            "<testsuites name=\"zerostart-slo\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">",
            c.evaluated + c.skipped,
            c.failed,
            c.skipped
        );
        for s in &self.scenarios {
            let failures = s.slos.iter().filter(|r| !r.pass && !r.skipped).count();
            let skipped = s.slos.iter().filter(|r| r.skipped).count();
            let _ = writeln!(
                o,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\">",
                xml(&s.name),
                s.slos.len()
            );
            for r in &s.slos {
                let time = r.value_ms.map(|v| v / 1000.0).unwrap_or(0.0);
                let _ = write!(
                    o,
                    "    <testcase classname=\"slo.{}\" name=\"{}\" time=\"{time:.6}\"",
                    xml(&s.name),
                    xml(&r.label)
                );
                if r.skipped {
                    let _ = writeln!(
                        o,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        xml(&r.note)
                    );
                } else if !r.pass {
                    let _ = writeln!(
                        o,
                        ">\n      <failure message=\"{}\" type=\"slo\"/>\n    </testcase>",
                        xml(&r.note)
                    );
                } else {
                    let _ = writeln!(o, "/>");
                }
            }
            let _ = writeln!(o, "  </testsuite>");
        }
        o.push_str("</testsuites>\n");
        o
    }
}

/// Escapes text for an XML attribute.
pub fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Backing, Stat, Vmm};
    use std::time::Duration;

    fn scenario(slos: Vec<Slo>) -> Scenario {
        Scenario {
            name: "s<1>".into(),
            vmm: Vmm::Qemu,
            binary: None,
            kernel: "k".into(),
            disk: None,
            nested: None,
            initramfs: None,
            cmdline: String::new(),
            memory: "256M".into(),
            memory_bytes: 256 << 20,
            backing: Backing::Thp,
            prefault: false,
            pool_socket: None,
            launch: None,
            vcpus: 1,
            repetitions: 3,
            warmup: 0,
            timeout: Duration::from_secs(1),
            accel: "tcg".into(),
            extra_args: vec![],
            expect: None,
            markers: vec![],
            slos,
        }
    }

    fn rep(i: u32, ok: bool, exit: f64) -> RepResult {
        RepResult {
            rep: i,
            ok,
            error: (!ok).then(|| "exited with 1 & \"boom\"".into()),
            phases: [(Phase::Launch, 0.0), (Phase::Exit, exit)]
                .into_iter()
                .collect(),
            serial_phases: BTreeMap::new(),
            exit_code: Some(if ok { 0 } else { 1 }),
            serial_log: "x".into(),
        }
    }

    fn slo(stat: Stat, max_ms: f64) -> Slo {
        Slo {
            phase: Phase::Exit,
            stat,
            max_ms,
        }
    }

    #[test]
    fn slos_pass_and_fail_on_the_statistic() {
        let s = scenario(vec![slo(Stat::P50, 20.0), slo(Stat::Max, 25.0)]);
        let r = ScenarioReport::evaluate(
            &s,
            "q".into(),
            vec![rep(0, true, 10.0), rep(1, true, 20.0), rep(2, true, 30.0)],
        );
        assert!(r.slos[0].pass);
        assert!(!r.slos[1].pass);
        assert_eq!(r.slos[1].note, "30.0 ms > 25 ms");
        let rep = Report::new("c".into(), 0, vec![r]);
        assert!(!rep.pass);
        assert_eq!((rep.counts.evaluated, rep.counts.failed), (2, 1));
        assert!(rep
            .table()
            .contains("FAIL max(launch->exit) <= 25 ms: 30.0 ms"));
    }

    #[test]
    fn a_warm_up_boot_is_shown_and_in_no_statistic_but_its_failure_counts() {
        // ci13's first prefaulted 1 GiB hugetlb boot: 2890 ms to exit, the
        // nine after it about 270 ms (the pool's pages faulted in beneath
        // the VM once). As a warm-up it is reported and not a sample.
        let s = scenario(vec![slo(Stat::Max, 400.0)]);
        let warm = vec![rep(0, true, 2890.3)];
        let measured = vec![rep(1, true, 264.0), rep(2, true, 270.7)];
        let r = ScenarioReport::evaluate_warmed(&s, "q".into(), warm, measured.clone());
        assert!(r.slos[0].pass, "{:?}", r.slos[0]);
        assert_eq!((r.slos[0].samples, r.slos[0].value_ms), (2, Some(270.7)));
        let table = Report::new("c".into(), 0, vec![r]).table();
        assert!(
            table.contains("warm-up boot 0 (in no statistic): ok, exit 2890.3 ms"),
            "{table}"
        );
        assert!(table.contains("boots: 2/2 ok"), "{table}");
        // Negative control: the same boot measured fails the SLO.
        let all = [vec![rep(0, true, 2890.3)], measured.clone()].concat();
        assert!(!ScenarioReport::evaluate(&s, "q".into(), all).slos[0].pass);
        // A warm-up boot that failed fails every SLO.
        let r = ScenarioReport::evaluate_warmed(&s, "q".into(), vec![rep(0, false, 5.0)], measured);
        assert!(!r.slos[0].pass);
        assert!(
            r.slos[0]
                .note
                .starts_with("warm-up boot 0 failed: exited with 1"),
            "{}",
            r.slos[0].note
        );
    }

    #[test]
    fn a_failed_boot_fails_every_slo() {
        let s = scenario(vec![slo(Stat::P50, 1e9)]);
        let r =
            ScenarioReport::evaluate(&s, "q".into(), vec![rep(0, true, 10.0), rep(1, false, 5.0)]);
        assert!(!r.slos[0].pass);
        assert!(r.slos[0].note.starts_with("1 of 2 boots failed"));
    }

    #[test]
    fn junit_has_one_testcase_per_slo_and_escapes() {
        let s = scenario(vec![slo(Stat::P50, 20.0), slo(Stat::Max, 25.0)]);
        let ran = ScenarioReport::evaluate(
            &s,
            "q".into(),
            vec![rep(0, true, 10.0), rep(1, false, 30.0)],
        );
        let mut s2 = scenario(vec![slo(Stat::P95, 1.0)]);
        s2.name = "fc".into();
        let skipped = ScenarioReport::skipped(&s2, "firecracker is not on PATH".into());
        let x = Report::new("c".into(), 0, vec![ran, skipped]).junit();
        assert_eq!(x.matches("<testcase ").count(), 3);
        assert!(x.contains(
            "<testsuites name=\"zerostart-slo\" tests=\"3\" failures=\"2\" skipped=\"1\">"
        ));
        assert!(x.contains("name=\"s&lt;1&gt;\""));
        assert!(x.contains("&amp; &quot;boom&quot;"));
        assert!(x.contains("<skipped message=\"firecracker is not on PATH\"/>"));
        // Well-formed, and the structure CI tools read.
        let doc = roxmltree::Document::parse(&x).expect("junit.xml parses");
        let cases: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len(), 3);
        assert_eq!(
            cases[0].attribute("name"),
            Some("p50(launch->exit) <= 20 ms")
        );
        assert_eq!(cases[0].attribute("classname"), Some("slo.s<1>"));
        assert!(cases[1].children().any(|c| c.has_tag_name("failure")));
        assert!(cases[2].children().any(|c| c.has_tag_name("skipped")));
    }

    #[test]
    fn xml_escaping() {
        assert_eq!(xml("a<b>&\"'\u{1}"), "a&lt;b&gt;&amp;&quot;&apos;");
    }
}
