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
        }
    }

    /// Sets the per-state gauges: `counts[i]` regions in `STATES[i]`.
    pub fn set_states(&self, counts: [u64; 4], region_bytes: u64) {
        for (s, n) in STATES.iter().zip(counts) {
            let l = StateLabel { state: s };
            self.regions.get_or_create(&l).set(n as i64);
            self.bytes
                .get_or_create(&l)
                .set((n * region_bytes).min(i64::MAX as u64) as i64);
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
