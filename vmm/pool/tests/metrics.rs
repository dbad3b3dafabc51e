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
