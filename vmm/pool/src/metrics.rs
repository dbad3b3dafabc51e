//! `zerostart pool serve --metrics HOST:PORT`: the daemon's counters in the
//! Prometheus text format at `http://HOST:PORT/metrics`.
//!
//! Why: operators watch host daemons through Prometheus, and the mm
//! maintainers' objection to background zeroing is that its cost escapes
//! accounting. So besides region states and lease latency the daemon
//! exports what preparing memory cost: bytes, wall seconds and the CPU
//! seconds (`getrusage(RUSAGE_THREAD)` of every thread that did the work).
//!
//! Encoding is `prometheus-client`'s (OpenMetrics text, which Prometheus
//! scrapes natively); HTTP is `tiny_http`. Gauges of region states are
//! refreshed from the pool state at each scrape, so they never drift from
//! what `zerostart pool status` reports.
//!
//! Launch metrics: only the launcher knows that a launch fell back to its
//! own memory, or how long its memory took, so `zerostart launch` and the
//! QEMU drop-in report each launch that asked this pool for memory
//! ([`crate::proto::LaunchReport`]); [`Metrics::launch`] checks and counts
//! it. Labels come from closed enums, so no client can grow the series.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::proto::{LaunchReport, Outcome, Vmm};
use crate::Error;

/// Every region state, in the order the state machine moves through them.
pub const STATES: [&str; 4] = ["dirty", "scrubbing", "clean", "leased"];

/// Label of the per-state gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// `dirty`, `scrubbing`, `clean` or `leased`.
    pub state: &'static str,
}

/// Label of the preparation counters: what kind of work made a region
/// clean.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `fill` (first fill of memory the daemon created), `replace` (a
    /// returned region's new file) or `in_place` (test faults only).
    pub kind: &'static str,
}

/// Labels of the launch counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchLabel {
    /// `qemu`, `cloud-hypervisor` or `firecracker`.
    pub vmm: &'static str,
    /// `leased`, `fallback_prefault`, `fallback_none`, `passthrough` or
    /// `failed` ([`Outcome`]).
    pub outcome: &'static str,
}

/// Labels of the memory_ready histogram: the VMM and where the memory
/// came from, so a pool lease's time is never averaged with a prefault's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadyLabel {
    /// `qemu`, `cloud-hypervisor` or `firecracker`.
    pub vmm: &'static str,
    /// `pool`, `prefault` or `none`.
    pub source: &'static str,
}

/// The longest memory_ready a report may carry: a day. Anything longer
/// is a broken clock or a broken client, refused rather than counted.
pub const MAX_MEMORY_READY_S: f64 = 86_400.0;

/// A memory_ready histogram (the family's constructor).
fn ready_histogram() -> Histogram {
    // 100 us .. ~52 s: a pool lease is a socket round trip (0.1-10 ms
    // natively), a prefault grows with the guest (0.2 s per GiB at the
    // kernel's populate rate, tens of seconds nested).
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1e-4, 2.0, 20,
    ))
}

/// The daemon's metrics (cheap to update: atomics).
pub struct Metrics {
    registry: Registry,
    regions: Family<StateLabel, Gauge>,
    bytes: Family<StateLabel, Gauge>,
    /// Leases granted.
    pub leases: Counter,
    /// Seconds from a lease request's arrival to its reply (fd) sent.
    pub lease_latency: Histogram,
    /// Bytes made clean, by kind.
    pub scrub_bytes: Family<KindLabel, Counter>,
    /// Wall seconds spent making memory clean, by kind.
    pub scrub_seconds: Family<KindLabel, Counter<f64, AtomicU64>>,
    /// CPU seconds (user + system) of the threads that did it.
    pub scrub_cpu_seconds: Counter<f64, AtomicU64>,
    /// Leases whose memory some process still held when they ended.
    pub retired: Counter,
    /// Preparations that failed (the region got new memory again).
    pub scrub_failures: Counter,
    /// Launches reported, by VMM and outcome.
    pub launches: Family<LaunchLabel, Counter>,
    /// Guest RAM bytes of those launches.
    pub launch_bytes: Family<LaunchLabel, Counter>,
    /// Launcher start to guest memory ready, by VMM and memory source.
    pub memory_ready: Family<ReadyLabel, Histogram, fn() -> Histogram>,
    /// Launch reports refused (malformed, a `leased` report off its lease's
    /// connection, a second report on one connection).
    pub reports_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `zerostart_pool_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("zerostart_pool");
        let regions = Family::<StateLabel, Gauge>::default();
        let bytes = Family::<StateLabel, Gauge>::default();
        let leases = Counter::default();
        // 50 us .. ~1.6 s: a lease is a socket round trip and an fd pass;
        // anything in the upper buckets means a stalled daemon.
        let lease_latency = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(50e-6, 2.0, 16),
        );
        let scrub_bytes = Family::<KindLabel, Counter>::default();
        let scrub_seconds = Family::<KindLabel, Counter<f64, AtomicU64>>::default();
        let scrub_cpu_seconds = Counter::<f64, AtomicU64>::default();
        let retired = Counter::default();
        let scrub_failures = Counter::default();
        let launches = Family::<LaunchLabel, Counter>::default();
        let launch_bytes = Family::<LaunchLabel, Counter>::default();
        let memory_ready = Family::<ReadyLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            ready_histogram,
        );
        let reports_refused = Counter::default();
        registry.register("regions", "Regions by state", regions.clone());
        registry.register("bytes", "Pool bytes by region state", bytes.clone());
        registry.register("leases", "Leases granted", leases.clone());
        registry.register(
            "lease_latency_seconds",
            "Lease request to reply (fd sent)",
            lease_latency.clone(),
        );
        registry.register(
            "scrub_bytes",
            "Bytes made clean (fill: first fill, replace: a returned region's new memory)",
            scrub_bytes.clone(),
        );
        registry.register(
            "scrub_seconds",
            "Wall seconds spent making memory clean",
            scrub_seconds.clone(),
        );
        registry.register(
            "scrub_cpu_seconds",
            "CPU seconds (user+system, getrusage of the scrub threads) spent making memory clean",
            scrub_cpu_seconds.clone(),
        );
        registry.register(
            "retired_regions",
            "Returned regions some process still held at lease end",
            retired.clone(),
        );
        registry.register(
            "scrub_failures",
            "Failed preparations (the region gets new memory again)",
            scrub_failures.clone(),
        );
        registry.register(
            "launches",
            "Launches that asked this pool for memory, by VMM and outcome (reported by the launcher)",
            launches.clone(),
        );
        registry.register(
            "launch_bytes",
            "Guest RAM bytes of those launches, by VMM and outcome",
            launch_bytes.clone(),
        );
        registry.register(
            "memory_ready_seconds",
            "Launcher start to guest memory ready, by VMM and memory source",
            memory_ready.clone(),
        );
        registry.register(
            "launch_reports_refused",
            "Launch reports refused (malformed, or not from the launch they claim)",
            reports_refused.clone(),
        );
        for vmm in Vmm::ALL {
            for outcome in Outcome::ALL {
                let l = LaunchLabel {
                    vmm: vmm.name(),
                    outcome: outcome.name(),
                };
                let _ = launches.get_or_create(&l);
                let _ = launch_bytes.get_or_create(&l);
            }
        }
        for s in STATES {
            let _ = regions.get_or_create(&StateLabel { state: s });
            let _ = bytes.get_or_create(&StateLabel { state: s });
        }
        for k in ["fill", "replace"] {
            let _ = scrub_bytes.get_or_create(&KindLabel { kind: k });
            let _ = scrub_seconds.get_or_create(&KindLabel { kind: k });
        }
        Metrics {
            registry,
            regions,
            bytes,
            leases,
            lease_latency,
            scrub_bytes,
            scrub_seconds,
            scrub_cpu_seconds,
            retired,
            scrub_failures,
            launches,
            launch_bytes,
            memory_ready,
            reports_refused,
        }
    }

    /// Counts one launch report, or refuses it (one line, sent back to
    /// the launcher) and counts the refusal. `on_lease` says whether it
    /// came on a connection that holds a lease, `first` whether it is that
    /// connection's first report: a `leased` outcome is believed only from
    /// the lease's own connection, and nothing else is taken there, so a
    /// launch is counted once and a lease once.
    pub fn launch(&self, r: &LaunchReport, on_lease: bool, first: bool) -> Result<(), String> {
        let checked = check_report(r, on_lease, first);
        let Ok(()) = checked else {
            self.reports_refused.inc();
            return checked;
        };
        let l = LaunchLabel {
            vmm: r.vmm.name(),
            outcome: r.outcome.name(),
        };
        self.launches.get_or_create(&l).inc();
        self.launch_bytes.get_or_create(&l).inc_by(r.bytes);
        if let (Some(source), Some(s)) = (r.outcome.source(), r.memory_ready_s) {
            self.memory_ready
                .get_or_create(&ReadyLabel {
                    vmm: r.vmm.name(),
                    source,
                })
                .observe(s);
        }
        Ok(())
    }

    /// Sets the per-state gauges: `counts[i]` regions of `bytes[i]` bytes
    /// in all in `STATES[i]`.
    pub fn set_states(&self, counts: [u64; 4], bytes: [u64; 4]) {
        for ((s, n), b) in STATES.iter().zip(counts).zip(bytes) {
            let l = StateLabel { state: s };
            self.regions.get_or_create(&l).set(n as i64);
            self.bytes
                .get_or_create(&l)
                .set(b.min(i64::MAX as u64) as i64);
        }
    }

    /// Records one preparation of `bytes` that took `wall` and `cpu`.
    pub fn scrubbed(&self, kind: &'static str, bytes: u64, wall: Duration, cpu: Duration) {
        let l = KindLabel { kind };
        self.scrub_bytes.get_or_create(&l).inc_by(bytes);
        self.scrub_seconds
            .get_or_create(&l)
            .inc_by(wall.as_secs_f64());
        self.scrub_cpu_seconds.inc_by(cpu.as_secs_f64());
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// The checks of [`Metrics::launch`], free of counters.
fn check_report(r: &LaunchReport, on_lease: bool, first: bool) -> Result<(), String> {
    if !first {
        return Err(
            "this connection already reported a launch; report each launch once, on its own connection"
                .into(),
        );
    }
    match (r.outcome == Outcome::Leased, on_lease) {
        (true, false) => {
            return Err(
                "a leased outcome is taken only on the lease's own connection; report it through the Lease"
                    .into(),
            )
        }
        (false, true) => {
            return Err(format!(
                "a lease's connection reports only its lease, not {}; report it on a new connection",
                r.outcome.name()
            ))
        }
        _ => {}
    }
    match (r.outcome.has_memory(), r.memory_ready_s) {
        (true, None) => Err(format!(
            "a {} report needs memory_ready_s; send the launch's memory_ready in seconds",
            r.outcome.name()
        )),
        (false, Some(_)) => Err(format!(
            "a {} launch has no memory_ready; leave memory_ready_s out",
            r.outcome.name()
        )),
        (true, Some(s)) if !(0.0..=MAX_MEMORY_READY_S).contains(&s) => Err(format!(
            "memory_ready_s {s} is not between 0 and {MAX_MEMORY_READY_S}; send seconds since the launcher started"
        )),
        _ => Ok(()),
    }
}

/// CPU time (user + system) of the calling thread so far.
pub fn thread_cpu() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer; RUSAGE_THREAD is Linux's per-thread usage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The HTTP endpoint: `GET /metrics` answers the exposition (refreshed by
/// `refresh` first), anything else 404.
pub struct Server {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
}

impl Server {
    /// Binds `addr` (one-line error naming the address and the fix).
    pub fn bind(addr: SocketAddr) -> Result<Server, Error> {
        let server = tiny_http::Server::http(addr).map_err(|e| Error::BadValue {
            key: "metrics",
            value: addr.to_string(),
            fix: format!("cannot listen there ({e}); pick a free HOST:PORT"),
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .expect("a TCP listener has an IP address");
        Ok(Server {
            server: Arc::new(server),
            addr,
        })
    }

    /// The address it listens on (with the port the kernel chose for 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `stop()` returns true (checked every 100 ms).
    pub fn run(&self, refresh: impl Fn() -> String, stop: impl Fn() -> bool) {
        while !stop() {
            let req = match self.server.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(_) => continue,
            };
            let path = req.url().split('?').next().unwrap_or("");
            let resp = if req.method() == &tiny_http::Method::Get && path == "/metrics" {
                let ct = tiny_http::Header::from_bytes(
                    &b"Content-Type"[..],
                    &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                )
                .expect("a valid header");
                tiny_http::Response::from_string(refresh()).with_header(ct)
            } else {
                tiny_http::Response::from_string("not found; the metrics are at /metrics\n")
                    .with_status_code(404)
            };
            let _ = req.respond(resp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: Outcome, ready: Option<f64>) -> LaunchReport {
        LaunchReport {
            vmm: Vmm::CloudHypervisor,
            outcome,
            bytes: 1 << 30,
            memory_ready_s: ready,
        }
    }

    /// The value of one sample line of the exposition (`name{labels}`).
    fn sample(m: &Metrics, key: &str) -> f64 {
        let text = m.encode();
        let line = text
            .lines()
            .find(|l| l.rsplit_once(' ').is_some_and(|(k, _)| k == key))
            .unwrap_or_else(|| panic!("{key} not in\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    }

    fn launches(m: &Metrics, vmm: &str, outcome: &str) -> f64 {
        sample(
            m,
            &format!("zerostart_pool_launches_total{{vmm=\"{vmm}\",outcome=\"{outcome}\"}}"),
        )
    }

    #[test]
    fn every_launch_series_starts_at_zero() {
        let m = Metrics::new();
        for vmm in Vmm::ALL {
            for outcome in Outcome::ALL {
                assert_eq!(launches(&m, vmm.name(), outcome.name()), 0.0);
            }
        }
        assert_eq!(
            sample(&m, "zerostart_pool_launch_reports_refused_total"),
            0.0
        );
    }

    #[test]
    fn reports_are_counted_by_vmm_and_outcome() {
        let m = Metrics::new();
        m.launch(&report(Outcome::Leased, Some(0.0003)), true, true)
            .unwrap();
        m.launch(&report(Outcome::FallbackPrefault, Some(2.5)), false, true)
            .unwrap();
        m.launch(&report(Outcome::Passthrough, None), false, true)
            .unwrap();
        let chv = "cloud-hypervisor";
        assert_eq!(launches(&m, chv, "leased"), 1.0);
        assert_eq!(launches(&m, chv, "fallback_prefault"), 1.0);
        assert_eq!(launches(&m, chv, "passthrough"), 1.0);
        assert_eq!(launches(&m, chv, "fallback_none"), 0.0);
        assert_eq!(launches(&m, "qemu", "leased"), 0.0);
        assert_eq!(
            sample(
                &m,
                "zerostart_pool_launch_bytes_total{vmm=\"cloud-hypervisor\",outcome=\"leased\"}"
            ),
            (1u64 << 30) as f64
        );
        // memory_ready by source: the lease in the 0.4 ms bucket, the
        // prefault in its own series; a pass-through has none.
        let h = |source: &str, le: &str| {
            sample(
                &m,
                &format!("zerostart_pool_memory_ready_seconds_bucket{{le=\"{le}\",vmm=\"cloud-hypervisor\",source=\"{source}\"}}"),
            )
        };
        assert_eq!(h("pool", "0.0002"), 0.0);
        assert_eq!(h("pool", "0.0004"), 1.0);
        assert_eq!(h("prefault", "1.6384"), 0.0);
        assert_eq!(h("prefault", "3.2768"), 1.0);
        assert_eq!(
            sample(
                &m,
                "zerostart_pool_memory_ready_seconds_count{vmm=\"cloud-hypervisor\",source=\"pool\"}"
            ),
            1.0
        );
        assert!(!m.encode().contains("source=\"none\""));
        assert_eq!(
            sample(&m, "zerostart_pool_launch_reports_refused_total"),
            0.0
        );
    }

    #[test]
    fn bad_reports_are_refused_and_change_no_launch_counter() {
        let m = Metrics::new();
        let leased = report(Outcome::Leased, Some(0.001));
        for (r, on_lease, first, want) in [
            (
                leased.clone(),
                false,
                true,
                "only on the lease's own connection",
            ),
            (leased.clone(), true, false, "already reported"),
            (
                report(Outcome::FallbackNone, Some(0.1)),
                true,
                true,
                "reports only its lease, not fallback_none",
            ),
            (
                report(Outcome::Leased, None),
                true,
                true,
                "needs memory_ready_s",
            ),
            (
                report(Outcome::Failed, Some(1.0)),
                false,
                true,
                "has no memory_ready",
            ),
            (
                report(Outcome::FallbackPrefault, Some(-1.0)),
                false,
                true,
                "not between 0 and 86400",
            ),
            (
                report(Outcome::FallbackPrefault, Some(1e9)),
                false,
                true,
                "not between",
            ),
            (
                report(Outcome::FallbackPrefault, Some(f64::NAN)),
                false,
                true,
                "not between",
            ),
        ] {
            let e = m.launch(&r, on_lease, first).unwrap_err();
            assert!(e.contains(want), "{r:?}: {e}");
            assert!(!e.contains('\n'));
        }
        assert_eq!(
            sample(&m, "zerostart_pool_launch_reports_refused_total"),
            8.0
        );
        for vmm in Vmm::ALL {
            for outcome in Outcome::ALL {
                assert_eq!(launches(&m, vmm.name(), outcome.name()), 0.0);
            }
        }
        assert!(!m.encode().contains("memory_ready_seconds_count"));
    }

    /// Every `zerostart_pool_*` name the docs and the Grafana dashboard use
    /// is one the daemon exports (a sample name, or a family's `# TYPE`
    /// name): a renamed metric fails here, not on an operator's dashboard.
    #[test]
    fn the_docs_and_the_dashboard_name_only_exported_metrics() {
        let m = Metrics::new();
        for outcome in Outcome::ALL {
            let ready = outcome.has_memory().then_some(0.01);
            let on_lease = outcome == Outcome::Leased;
            m.launch(&report(outcome, ready), on_lease, true).unwrap();
        }
        let text = m.encode();
        let mut exported = std::collections::BTreeSet::new();
        for line in text.lines() {
            let name = match line.strip_prefix("# TYPE ") {
                Some(t) => t.split(' ').next(),
                None if line.starts_with('#') => None,
                None => line.split(['{', ' ']).next(),
            };
            exported.extend(name.map(str::to_string));
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut seen = 0;
        for file in [
            "docs/fleet.md",
            "docs/pool.md",
            "dist/grafana/zerostart-pool-launches.json",
        ] {
            let doc = std::fs::read_to_string(root.join(file)).unwrap();
            for (at, _) in doc.match_indices("zerostart_pool_") {
                let name: String = doc[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                assert!(
                    exported.contains(&name),
                    "{file}: {name} is not exported; exported: {exported:?}"
                );
                seen += 1;
            }
        }
        assert!(seen > 20, "only {seen} metric names found in the docs");
        let dash: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("dist/grafana/zerostart-pool-launches.json"))
                .unwrap(),
        )
        .unwrap();
        let panels = dash["panels"].as_array().expect("panels");
        assert!(panels
            .iter()
            .all(|p| p["targets"].as_array().is_some_and(|t| !t.is_empty())));
    }
}
