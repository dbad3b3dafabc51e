//! `serve --metrics HOST:PORT`: a real HTTP scrape over loopback of the
//! real daemon binary, the text format parsed, and every metric checked
//! against what the pool did (and against `pool status`): a missing metric,
//! a wrong label or a counter that did not move fails.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use common::*;

/// A free loopback port (bound and released; the daemon binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0; returns (status code, headers, body).
fn http_get(port: u16, path: &str) -> (u16, String, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (code, head.to_string(), body.to_string())
}

/// One scrape, parsed: `name{labels}` -> value, and `name` -> TYPE.
struct Scrape {
    samples: HashMap<String, f64>,
    types: HashMap<String, String>,
}

impl Scrape {
    fn parse(body: &str) -> Scrape {
        let mut samples = HashMap::new();
        let mut types = HashMap::new();
        assert!(
            body.trim_end().ends_with("# EOF"),
            "OpenMetrics text ends with # EOF: {body}"
        );
        for line in body.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, ty) = t.split_once(' ').expect("# TYPE name type");
                types.insert(name.to_string(), ty.to_string());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (key, value) = line.rsplit_once(' ').expect("name value");
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("a number in {line:?}"));
            assert!(
                samples.insert(key.to_string(), value).is_none(),
                "{key} twice"
            );
        }
        Scrape { samples, types }
    }

    fn get(&self, key: &str) -> f64 {
        *self
            .samples
            .get(key)
            .unwrap_or_else(|| panic!("metric {key} missing; scraped: {:?}", self.samples.keys()))
    }

    fn ty(&self, name: &str) -> &str {
        self.types
            .get(name)
            .unwrap_or_else(|| panic!("no # TYPE for {name}"))
    }
}

fn scrape(port: u16) -> Scrape {
    let (code, head, body) = http_get(port, "/metrics");
    assert_eq!(code, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    Scrape::parse(&body)
}

const P: &str = "zerostart_pool_";

/// Region/byte gauges agree with `pool status` for every state.
fn states_agree(m: &Scrape, s: &pool::proto::Status) {
    let rb = s.region_bytes as f64;
    for (state, bytes) in [
        ("clean", s.clean_bytes),
        ("dirty", s.dirty_bytes),
        ("scrubbing", s.scrubbing_bytes),
        ("leased", s.leased_bytes),
    ] {
        let key = format!("{{state=\"{state}\"}}");
        assert_eq!(m.get(&format!("{P}bytes{key}")), bytes as f64, "{state}");
        assert_eq!(
            m.get(&format!("{P}regions{key}")),
            bytes as f64 / rb,
            "{state}"
        );
    }
}

#[test]
fn a_scrape_reports_every_metric_and_follows_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start(&sock(&dir), None, &["--verify", "--metrics", &addr]);
    let s = d.all_clean();
    let rb = region_bytes() as f64;

    // Fresh pool: every region clean, filled once (the kernel's zeroing
    // plus the verify pass cost CPU time), no lease yet.
    let m = scrape(port);
    for (name, ty) in [
        ("regions", "gauge"),
        ("bytes", "gauge"),
        ("leases", "counter"),
        ("lease_latency_seconds", "histogram"),
        ("scrub_bytes", "counter"),
        ("scrub_seconds", "counter"),
        ("scrub_cpu_seconds", "counter"),
        ("retired_regions", "counter"),
        ("scrub_failures", "counter"),
    ] {
        assert_eq!(m.ty(&format!("{P}{name}")), ty, "{name}");
    }
    states_agree(&m, &s);
    assert_eq!(m.get(&format!("{P}regions{{state=\"clean\"}}")), 3.0);
    assert_eq!(
        m.get(&format!("{P}scrub_bytes_total{{kind=\"fill\"}}")),
        REGIONS as f64 * rb
    );
    assert_eq!(
        m.get(&format!("{P}scrub_bytes_total{{kind=\"replace\"}}")),
        0.0
    );
    assert!(m.get(&format!("{P}scrub_seconds_total{{kind=\"fill\"}}")) > 0.0);
    let cpu0 = m.get(&format!("{P}scrub_cpu_seconds_total"));
    assert!(
        cpu0 > 0.0,
        "filling {} bytes cost no CPU?",
        REGIONS * region_bytes()
    );
    assert_eq!(m.get(&format!("{P}leases_total")), 0.0);
    assert_eq!(m.get(&format!("{P}lease_latency_seconds_count")), 0.0);
    assert_eq!(m.get(&format!("{P}retired_regions_total")), 0.0);
    assert_eq!(m.get(&format!("{P}scrub_failures_total")), 0.0);

    // A lease: one region leased, one latency sample, in a finite bucket.
    let h = hold(&d.socket, 0x5a, &[]);
    let s = d.wait_for("one region leased", |s| s.leased_bytes == region_bytes());
    let m = scrape(port);
    states_agree(&m, &s);
    assert_eq!(m.get(&format!("{P}leases_total")), 1.0);
    assert_eq!(m.get(&format!("{P}lease_latency_seconds_count")), 1.0);
    let sum = m.get(&format!("{P}lease_latency_seconds_sum"));
    assert!(sum > 0.0 && sum < 1.0, "lease latency {sum} s");
    assert_eq!(
        m.get(&format!("{P}lease_latency_seconds_bucket{{le=\"+Inf\"}}")),
        1.0
    );

    // The lease ends: the region gets new memory ("replace").
    h.sigkill();
    let s = d.all_clean();
    let m = scrape(port);
    states_agree(&m, &s);
    assert_eq!(
        m.get(&format!("{P}scrub_bytes_total{{kind=\"replace\"}}")),
        rb
    );
    assert_eq!(
        m.get(&format!("{P}scrub_bytes_total{{kind=\"fill\"}}"))
            + m.get(&format!("{P}scrub_bytes_total{{kind=\"replace\"}}")),
        s.scrubbed_bytes as f64
    );
    assert!(m.get(&format!("{P}scrub_cpu_seconds_total")) > cpu0);

    // A lease whose fd another process keeps: retired (reported).
    let h = hold(&d.socket, 0x77, &["--test-leak-fd"]);
    let holder = h.info["holder_pid"].as_u64().expect("holder pid") as i32;
    h.sigkill();
    let s = d.wait_for("the region retired", |s| s.retired_total == 1);
    let m = scrape(port);
    assert_eq!(m.get(&format!("{P}retired_regions_total")), 1.0);
    assert_eq!(m.get(&format!("{P}leases_total")), s.leases_total as f64);
    unsafe { libc::kill(holder, libc::SIGKILL) };

    // Anything but GET /metrics is a 404 that names the path.
    let (code, _, body) = http_get(port, "/");
    assert_eq!(code, 404);
    assert!(body.contains("/metrics"), "{body}");
}

#[test]
fn failed_scrubs_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let fault = format!("skip-zero:{REGIONS}");
    let d = Daemon::start(&sock(&dir), Some(&fault), &["--verify", "--metrics", &addr]);
    d.all_clean();
    hold(&d.socket, 0x3c, &[]).sigkill();
    let s = d.wait_for("a failed scrub", |s| s.scrub_failures >= 1);
    assert_eq!(s.scrub_failures, 1);
    let m = scrape(port);
    assert_eq!(m.get(&format!("{P}scrub_failures_total")), 1.0);
}

#[test]
fn a_bad_or_taken_metrics_address_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for (addr, want) in [
        ("nonsense", "--metrics nonsense: "),
        (taken.as_str(), "pick a free HOST:PORT"),
    ] {
        let mut cmd = serve_cmd(&sock(&dir), REGIONS, &["--metrics", addr]);
        cmd.stderr(Stdio::piped());
        let err = refused(cmd);
        assert!(err.contains(want), "{addr}: {err}");
        assert!(!sock(&dir).exists(), "a refused daemon left its socket");
    }
}

fn launches(m: &Scrape, vmm: &str, outcome: &str) -> f64 {
    m.get(&format!(
        "{P}launches_total{{vmm=\"{vmm}\",outcome=\"{outcome}\"}}"
    ))
}

/// Every launch counter, for comparing two scrapes.
fn all_launches(m: &Scrape) -> Vec<(String, f64)> {
    let mut v: Vec<_> = m
        .samples
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{P}launch")) || k.contains("memory_ready"))
        .filter(|(k, _)| !k.starts_with(&format!("{P}launch_reports_refused")))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Launch reports through the real socket: a leased launch reported on its
/// lease's connection, a fallback and a pass-through on new connections,
/// each counted once under its VMM and outcome, memory_ready in the right
/// bucket of the right source. The negative controls change no launch
/// counter, only the refusal count: a `leased` report off its lease's
/// connection, a second report on the lease's connection, a fallback
/// reported on a lease's connection, a report without memory_ready, and a
/// request this daemon does not know (what an older daemon does with a
/// report: an error, the connection closed).
#[test]
fn launch_reports_are_counted_once_and_bad_ones_change_nothing() {
    use pool::proto::{LaunchReport, Outcome, Vmm};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start(&sock(&dir), None, &["--metrics", &addr]);
    d.all_clean();
    let m0 = scrape(port);
    assert_eq!(m0.ty(&format!("{P}launches")), "counter");
    assert_eq!(m0.ty(&format!("{P}launch_bytes")), "counter");
    // An empty histogram family is not in the text at all (until a
    // launch with memory is reported).
    assert!(!m0.types.contains_key(&format!("{P}memory_ready_seconds")));
    assert_eq!(m0.ty(&format!("{P}launch_reports_refused")), "counter");
    for vmm in ["qemu", "cloud-hypervisor", "firecracker"] {
        for outcome in [
            "leased",
            "fallback_prefault",
            "fallback_none",
            "passthrough",
            "failed",
        ] {
            assert_eq!(launches(&m0, vmm, outcome), 0.0, "{vmm} {outcome}");
        }
    }
    let report = |vmm, outcome, ready| LaunchReport {
        vmm,
        outcome,
        bytes: region_bytes(),
        memory_ready_s: ready,
    };
    let refused = |m: &Scrape| m.get(&format!("{P}launch_reports_refused_total"));

    // A real lease, reported on its connection; it stays leased.
    let lease = pool::client::lease(&d.socket, region_bytes(), page()).unwrap();
    assert!(lease.info().reports, "this daemon takes reports");
    lease
        .report(&report(Vmm::Qemu, Outcome::Leased, Some(0.0003)))
        .unwrap();
    pool::client::report(
        &d.socket,
        &report(Vmm::CloudHypervisor, Outcome::FallbackPrefault, Some(1.5)),
    )
    .unwrap();
    pool::client::report(&d.socket, &report(Vmm::Qemu, Outcome::Passthrough, None)).unwrap();
    let s = d.status().unwrap();
    assert_eq!(s.leased_bytes, region_bytes(), "the report ended the lease");
    let m1 = scrape(port);
    assert_eq!(m1.ty(&format!("{P}memory_ready_seconds")), "histogram");
    assert_eq!(launches(&m1, "qemu", "leased"), 1.0);
    assert_eq!(launches(&m1, "cloud-hypervisor", "fallback_prefault"), 1.0);
    assert_eq!(launches(&m1, "qemu", "passthrough"), 1.0);
    assert_eq!(launches(&m1, "qemu", "fallback_prefault"), 0.0);
    assert_eq!(
        m1.get(&format!(
            "{P}launch_bytes_total{{vmm=\"qemu\",outcome=\"leased\"}}"
        )),
        region_bytes() as f64
    );
    let bucket = |m: &Scrape, vmm: &str, source: &str, le: &str| {
        m.get(&format!(
            "{P}memory_ready_seconds_bucket{{le=\"{le}\",vmm=\"{vmm}\",source=\"{source}\"}}"
        ))
    };
    assert_eq!(bucket(&m1, "qemu", "pool", "0.0002"), 0.0);
    assert_eq!(bucket(&m1, "qemu", "pool", "0.0004"), 1.0);
    assert_eq!(bucket(&m1, "cloud-hypervisor", "prefault", "0.8192"), 0.0);
    assert_eq!(bucket(&m1, "cloud-hypervisor", "prefault", "1.6384"), 1.0);
    let sum = m1.get(&format!(
        "{P}memory_ready_seconds_sum{{vmm=\"cloud-hypervisor\",source=\"prefault\"}}"
    ));
    assert!((sum - 1.5).abs() < 1e-9, "{sum}");
    assert_eq!(refused(&m1), 0.0);

    // Negative controls: refused, one line each, no launch counter moves.
    let before = all_launches(&m1);
    let e = pool::client::report(&d.socket, &report(Vmm::Qemu, Outcome::Leased, Some(0.001)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("only on the lease's own connection"), "{e}");
    let e = lease
        .report(&report(Vmm::Qemu, Outcome::Leased, Some(0.001)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("already reported"), "{e}");
    let other = pool::client::lease(&d.socket, region_bytes(), page()).unwrap();
    let e = other
        .report(&report(Vmm::Qemu, Outcome::FallbackNone, Some(0.001)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("reports only its lease"), "{e}");
    let e = pool::client::report(&d.socket, &report(Vmm::Qemu, Outcome::FallbackNone, None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs memory_ready_s"), "{e}");
    // A request the daemon does not know: an error reply, then EOF.
    {
        use std::os::unix::net::UnixStream;
        let mut c = UnixStream::connect(&d.socket).unwrap();
        let body = br#"{"v":1,"op":"report_v2","vmm":"qemu","outcome":"leased","bytes":1}"#;
        c.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
        c.write_all(body).unwrap();
        let (resp, _) = pool::proto::read_frame::<pool::proto::Response>(&mut c, false)
            .unwrap()
            .expect("an answer");
        match resp.body {
            pool::proto::ResponseBody::Error { message } => {
                assert!(message.contains("unknown variant"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(
            pool::proto::read_frame::<pool::proto::Response>(&mut c, false)
                .unwrap()
                .is_none()
        );
    }
    let m2 = scrape(port);
    assert_eq!(
        all_launches(&m2),
        before,
        "a refused report moved a counter"
    );
    assert_eq!(refused(&m2), 4.0);
    // Both leases are still held: no refusal ended one.
    assert_eq!(d.status().unwrap().leased_bytes, 2 * region_bytes());
    drop((lease, other));
}
