//! `zerostart bench host`: the zeroing engine and the pool at this host's
//! core count and memory, in one command (issue 33).
//!
//! One purpose: say, on the machine it runs on, how the engine, `auto`,
//! the pool's fill and scrub and a lease behave from one thread to every
//! CPU and at the largest sizes the host holds, with every ratio against
//! a baseline measured in the same run. It needs nothing but this binary
//! and root (to reserve hugepages; they are given back on every exit
//! path), and writes everything under one folder (`--out`): `zero.json`
//! (the engine table, `bench zero`'s report), `host.json` (everything),
//! `engine.png` (GiB/s against threads per method) and `table.txt`.
//!
//! Parts, each reusing the real code rather than a stand-in:
//!
//! * engine: [`crate::run`] (`bench zero`) at 1, 2, 4, ... and all CPUs;
//! * NUMA: `auto` zeroing from one node's CPUs into memory bound to the
//!   same node and to another (only where there are two or more nodes);
//! * pool first fill: the pool crate's [`pool::daemon::Daemon`] in this
//!   process over most of free memory (bounded by `--fill-fraction`,
//!   `--fill-max` and `--fill-timeout`), in one region per CPU (at least
//!   four) so that every scrubber has one, against the kernel's own
//!   hugetlb populate at one and at all threads, and against the same
//!   fill with one scrubber run right after it;
//! * leases: `--leases` leases + `mmap(MAP_POPULATE)` through
//!   [`pool::client`] at the largest region size whose replacement the
//!   pool can keep up with in `--lease-time`, and the pool's replacement
//!   (scrub) throughput while it served them;
//! * memory_ready: `pool::client::lease` of one region of each
//!   `--ready-gib` size, the call `zerostart launch`'s leasing path
//!   (`Region::acquire`) makes, from a pool of that size, against the
//!   same run's kernel populate of that size.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::{Deserialize, Serialize};

use crate::{human, mem_available, BenchError, BenchZeroArgs, Report};

const GIB: u64 = 1 << 30;
const HUGE_2M: u64 = 2 << 20;

/// Command-line arguments of `zerostart bench host`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchHostArgs {
    /// Folder for everything the run writes (created if missing).
    #[arg(long, default_value = "target/bench-host")]
    pub out: PathBuf,
    /// Engine buffer [default: MemAvailable / 16, 256M..2G]: each engine
    /// run zeroes all of it, at every thread count.
    #[arg(long, value_parser = hostmem::parse_size)]
    pub size: Option<u64>,
    /// Thread counts [default: 1, 2, 4, ... and the number of CPUs].
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Runs per kernel populate measurement (engine rows run until settled).
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// The pool's first fill takes this fraction of MemAvailable ...
    #[arg(long, default_value_t = 0.6)]
    pub fill_fraction: f64,
    /// ... but at most this much.
    #[arg(long, default_value = "96G", value_parser = hostmem::parse_size)]
    pub fill_max: u64,
    /// Seconds to wait for the first fill; a fill still running then is
    /// reported as what it made clean so far.
    #[arg(long, default_value_t = 90)]
    pub fill_timeout: u64,
    /// Leases to time (p50/p99 need at least 100).
    #[arg(long, default_value_t = 100)]
    pub leases: usize,
    /// Seconds the lease loop may take, waiting for replaced regions
    /// included; it sizes the regions to fit (the largest power of two
    /// whose replacements fit at the first fill's or the one-thread
    /// populate rate, whichever is higher).
    #[arg(long, default_value_t = 40)]
    pub lease_time: u64,
    /// memory_ready sizes in GiB; a size the host cannot hold is skipped
    /// with the reason, and the largest it can hold is measured instead.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub ready_gib: Vec<u64>,
    /// Never grow the hugepage pool: use only free 2 MiB pages.
    #[arg(long)]
    pub no_hugepage_reserve: bool,
}

impl Default for BenchHostArgs {
    fn default() -> Self {
        BenchHostArgs {
            out: "target/bench-host".into(),
            size: None,
            threads: None,
            reps: 2,
            fill_fraction: 0.6,
            fill_max: 96 << 30,
            fill_timeout: 90,
            leases: 100,
            lease_time: 40,
            ready_gib: vec![1, 16, 64],
            no_hugepage_reserve: false,
        }
    }
}

/// The machine the table is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs this process may use.
    pub cpus: usize,
    /// NUMA nodes with CPUs.
    pub nodes: usize,
    /// MemTotal, bytes.
    pub mem_total: u64,
    /// MemAvailable at the start, bytes.
    pub mem_available: u64,
    /// `uname -r`.
    pub kernel: String,
    /// Engine backends this CPU has.
    pub backends: Vec<String>,
    /// /proc/loadavg at the start and at the end: a busy machine's
    /// numbers are noisy.
    pub loadavg: Vec<String>,
}

/// NUMA local against remote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Numa {
    /// Node whose CPUs zero.
    pub cpu_node: usize,
    /// The remote node the memory is bound to in the remote run.
    pub remote_node: usize,
    /// Threads (the CPU node's CPUs).
    pub threads: usize,
    /// Bytes zeroed per run.
    pub bytes: u64,
    /// Local memory, GiB/s.
    pub local_gib_per_s: f64,
    /// Remote memory, GiB/s.
    pub remote_gib_per_s: f64,
}

/// The pool's first fill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fill {
    /// Pool size asked for.
    pub bytes: u64,
    /// Regions and their size.
    pub regions: usize,
    /// Region size.
    pub region_bytes: u64,
    /// Made clean before the timeout.
    pub clean_bytes: u64,
    /// Start (daemon start) to clean, or to the timeout.
    pub secs: f64,
    /// clean_bytes / secs.
    pub gib_per_s: f64,
    /// Whether everything was clean in time.
    pub complete: bool,
    /// Scrubbers that filled it (regions prepared at once).
    pub scrubbers: usize,
}

/// The lease loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leases {
    /// Region size leased.
    pub region_bytes: u64,
    /// Regions in the pool.
    pub regions: usize,
    /// Leases timed.
    pub count: usize,
    /// Lease + mmap(MAP_POPULATE) latency percentiles, ms.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Bytes the pool made clean (replacing returned regions) during the
    /// loop, per second of the loop.
    pub scrub_gib_per_s: f64,
    /// Loop wall time, s.
    pub secs: f64,
}

/// memory_ready at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    /// Guest RAM size.
    pub bytes: u64,
    /// Lease time (the launcher's memory_ready), ms.
    pub lease_ms: f64,
    /// The same run's kernel hugetlb populate of that many bytes at all
    /// threads (from its GiB/s), ms: what `source=prefault` pays.
    pub populate_ms: Option<f64>,
}

/// Everything `bench host` measured (`host.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostReport {
    /// The machine.
    pub machine: Machine,
    /// The engine table (`bench zero`'s report).
    pub zero: Report,
    /// NUMA local vs remote, where measured.
    pub numa: Option<Numa>,
    /// The pool's first fill, where measured.
    pub fill: Option<Fill>,
    /// The same fill again with one scrubber, right after it (the
    /// baseline for several scrubbers; both run on memory populated once
    /// before them, see `notes`). Only where the first had more than one.
    pub fill_one: Option<Fill>,
    /// The lease loop, where measured.
    pub leases: Option<Leases>,
    /// memory_ready per size measured.
    pub ready: Vec<Ready>,
    /// What was skipped, and why.
    pub skipped: Vec<String>,
    /// How parts were run, where it matters for reading them.
    pub notes: Vec<String>,
    /// Wall time of the whole run, s.
    pub secs: f64,
}

/// Everything that stops `bench host` (parts that cannot run on this host
/// are skipped with the reason instead).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The engine part failed.
    #[error(transparent)]
    Zero(#[from] BenchError),
    /// The output folder cannot be written.
    #[error("cannot write {path}: {source}; give --out a writable folder")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An option out of range.
    #[error("{0}")]
    BadValue(String),
}

fn write(path: &Path, text: &str) -> Result<(), HostError> {
    std::fs::write(path, text).map_err(|source| HostError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// 1, 2, 4, ... up to `n`, and `n`.
pub fn thread_counts(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&t| t.checked_mul(2))
        .take_while(|&t| t < n)
        .collect();
    v.push(n.max(1));
    v
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The largest lease region whose replacement keeps up: `leases` of them
/// replaced at `fill_gib_s` within `secs` (three quarters of it, the rest
/// is slack), at most `cap`, a power of two times 2 MiB.
pub fn lease_region(fill_gib_s: f64, secs: u64, leases: usize, cap: u64) -> u64 {
    let budget = fill_gib_s * GIB as f64 * secs as f64 * 0.75 / leases.max(1) as f64;
    let limit = (budget as u64).min(cap).max(HUGE_2M);
    let mut r = HUGE_2M;
    while r * 2 <= limit {
        r *= 2;
    }
    r
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "model name")
        .map_or_else(|| "unknown".into(), |(_, v)| v.trim().to_string())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn machine() -> Machine {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Machine {
        cpu_model: cpu_model(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        nodes: hostmem::numa::system_nodes().len().max(1),
        mem_total: hostmem::meminfo_kib(&meminfo, "MemTotal").unwrap_or(0) * 1024,
        mem_available: mem_available().unwrap_or(0),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        backends: prezero::available_backends()
            .iter()
            .map(|b| b.name().to_string())
            .collect(),
        loadavg: vec![loadavg()],
    }
}

/// Runs every part, prints the tables, writes the folder.
pub fn run(args: &BenchHostArgs) -> Result<HostReport, HostError> {
    let start = Instant::now();
    if !(0.05..=0.95).contains(&args.fill_fraction) {
        return Err(HostError::BadValue(format!(
            "--fill-fraction {} is outside 0.05..0.95; e.g. --fill-fraction 0.6",
            args.fill_fraction
        )));
    }
    if args.leases == 0 {
        return Err(HostError::BadValue(
            "--leases must be at least 1 (100 for a p99)".into(),
        ));
    }
    let fill_max = args.fill_max;
    std::fs::create_dir_all(&args.out).map_err(|source| HostError::Write {
        path: args.out.clone(),
        source,
    })?;
    let mut m = machine();
    let avail = m.mem_available;
    // A power of two by default, so runs on different hosts compare.
    let size = args
        .size
        .unwrap_or_else(|| 1u64 << (avail / 16).clamp(256 << 20, 2 * GIB).ilog2());
    let threads = args
        .threads
        .clone()
        .unwrap_or_else(|| thread_counts(m.cpus));
    println!(
        "bench host: {} ({} CPUs, {} NUMA node{}, {} RAM, {} available, load {}); output in {}",
        m.cpu_model,
        m.cpus,
        m.nodes,
        if m.nodes == 1 { "" } else { "s" },
        human(m.mem_total),
        human(avail),
        m.loadavg[0],
        args.out.display()
    );

    // 1. Engine, auto, memset and kernel populate per thread count.
    eprintln!("bench host: [1/4] engine, auto, memset, kernel populate at {threads:?} threads");
    let zero = crate::run(&BenchZeroArgs {
        size,
        threads: Some(threads.clone()),
        json: Some(args.out.join("zero.json")),
        reps: args.reps,
        no_hugepage_reserve: args.no_hugepage_reserve,
        no_realtime: false,
        pin_auto: None,
    })?;
    let mut skipped = Vec::new();
    let mut notes = Vec::new();

    // 2. NUMA.
    eprintln!("bench host: [2/4] NUMA local vs remote");
    let nodes = hostmem::numa::system_nodes();
    let numa = if nodes.len() < 2 {
        skipped.push(format!(
            "NUMA local vs remote: this host has {} NUMA node with CPUs",
            nodes.len().max(1)
        ));
        None
    } else {
        let bytes = zero.size_bytes;
        match numa_pair(&nodes[0], nodes[1].id, bytes as usize) {
            Ok(n) => Some(n),
            Err(e) => {
                skipped.push(format!("NUMA local vs remote: {e}"));
                None
            }
        }
    };

    // 3-5. The pool: one hugepage reservation for all of it.
    let mut fill = None;
    let mut fill_one = None;
    let mut leases = None;
    let mut ready = Vec::new();
    let want = ((avail as f64 * args.fill_fraction) as u64).min(fill_max) / GIB * GIB;
    eprintln!(
        "bench host: [3/4] pool first fill and {} leases (up to {} of 2 MiB hugepages, reserved now and given back at the end)",
        args.leases,
        human(want)
    );
    match reserve_most(want, !args.no_hugepage_reserve) {
        Err(why) => skipped.push(format!(
            "pool fill, leases, memory_ready: {why} (run as root, or free hugepages first)"
        )),
        Ok((bytes, _reservation)) => {
            let populate = zero
                .get(
                    "kernel_populate_hugetlb",
                    *threads.iter().max().unwrap_or(&1),
                )
                .map(|x| x.gib_per_s);
            // A returned region is replaced by one worker allocating new
            // pages, so the same run's one-thread hugetlb populate is its
            // rate; the first fill of never-used memory can be far slower
            // where the host backs memory lazily (this development VM).
            let one = zero
                .get("kernel_populate_hugetlb", 1)
                .map_or(0.0, |x| x.gib_per_s);
            // Both fills below then run on memory the host has backed
            // (where it backs memory lazily, as this development VM's does,
            // a first touch of never-used memory runs at the host's pace,
            // ~1 GiB/s, and whichever fill came first would pay it alone).
            match warm(bytes) {
                Ok(secs) => notes.push(format!(
                    "pool fills: {} of 2 MiB hugepages populated once and freed first ({:.1} s, {:.2} GiB/s), so that both fills find memory the host has backed",
                    human(bytes),
                    secs,
                    bytes as f64 / GIB as f64 / secs.max(1e-9)
                )),
                Err(e) => skipped.push(format!("warming the pool's memory: {e} (the fills may pay the host's first touch)")),
            }
            match pool_fill(args, bytes, 0) {
                Ok(f) => {
                    let rate = f.gib_per_s.max(one);
                    if f.scrubbers > 1 {
                        match pool_fill(args, bytes, 1) {
                            Ok(c) => fill_one = Some(c),
                            Err(e) => skipped.push(format!("pool fill, one scrubber: {e}")),
                        }
                    } else {
                        skipped.push(
                            "pool fill, one scrubber: the first fill ran one already (one CPU or --threads 1)".into(),
                        );
                    }
                    fill = Some(f);
                    match pool_leases(args, bytes, rate) {
                        Ok(l) => leases = Some(l),
                        Err(e) => skipped.push(format!("lease latency: {e}")),
                    }
                }
                Err(e) => skipped.push(format!("pool first fill: {e}")),
            }
            let mut sizes: Vec<u64> = args.ready_gib.iter().map(|g| g * GIB).collect();
            let fits = |s: u64| s <= bytes;
            for &s in sizes.iter().filter(|&&s| !fits(s)) {
                skipped.push(format!(
                    "memory_ready at {}: the pool could reserve {} of hugepages here ({} of MemAvailable x --fill-fraction {}, at most --fill-max)",
                    human(s),
                    human(bytes),
                    human(avail),
                    args.fill_fraction
                ));
            }
            let largest = bytes / GIB * GIB;
            if sizes.iter().any(|&s| !fits(s)) && largest >= GIB && !sizes.contains(&largest) {
                sizes.push(largest);
            }
            sizes.retain(|&s| fits(s));
            sizes.sort_unstable();
            eprintln!(
                "bench host: [4/4] memory_ready through a pool lease at {}",
                sizes
                    .iter()
                    .map(|&s| human(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for s in sizes {
                match memory_ready(args, s) {
                    Ok(ms) => ready.push(Ready {
                        bytes: s,
                        lease_ms: ms,
                        populate_ms: populate.map(|g| s as f64 / GIB as f64 / g * 1000.0),
                    }),
                    Err(e) => skipped.push(format!("memory_ready at {}: {e}", human(s))),
                }
            }
        }
    }

    m.loadavg.push(loadavg());
    let report = HostReport {
        machine: m,
        zero,
        numa,
        fill,
        fill_one,
        leases,
        ready,
        skipped,
        notes,
        secs: start.elapsed().as_secs_f64(),
    };
    let table = render(&report, &threads);
    println!("{table}");
    write(&args.out.join("table.txt"), &(table + "\n"))?;
    let json = serde_json::to_string_pretty(&report).expect("plain data serializes");
    write(&args.out.join("host.json"), &(json + "\n"))?;
    let png = args.out.join("engine.png");
    match crate::chart::engine(&report.zero, &threads, &report.machine.cpu_model, &png) {
        Ok(()) => println!("chart: {}", png.display()),
        Err(e) => println!("chart not drawn: {e}"),
    }
    Ok(report)
}

/// Reserves as many 2 MiB hugepages as possible up to `want` bytes (whole
/// GiB, halving on failure, at least 1 GiB); returns the bytes and the
/// guard that gives them back.
fn reserve_most(
    want: u64,
    may_grow: bool,
) -> Result<(u64, hostmem::hugepages::Reservation), String> {
    let mut bytes = want;
    let mut why = format!("MemAvailable too small for a 1 GiB pool ({})", human(want));
    while bytes >= GIB {
        match crate::hugetlb::reserve(bytes / HUGE_2M, may_grow) {
            Ok(r) => return Ok((bytes, r)),
            Err(e) => why = e,
        }
        bytes = bytes / 2 / GIB * GIB;
    }
    Err(why)
}

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "zerostart-bench-host-{}-{tag}.sock",
        std::process::id()
    ))
}

/// Waits (up to 30 s) until `bytes` of 2 MiB hugepages are free again:
/// the kernel frees a stopped pool's hugepages in the background (a
/// workqueue, where their struct pages were optimized away), and the next
/// pool would otherwise find the reservation short.
fn wait_free(bytes: u64) {
    let pages = bytes.div_ceil(HUGE_2M);
    let until = Instant::now() + Duration::from_secs(30);
    while hostmem::hugepages::free(hostmem::PageSize::Size2M) < pages && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Populates `bytes` of 2 MiB hugepages once and frees them: seconds.
fn warm(bytes: u64) -> Result<f64, String> {
    wait_free(bytes);
    let t = Instant::now();
    let m = hostmem::Mapping::anonymous(bytes as usize)
        .hugetlb(hostmem::PageSize::Size2M)
        .populate()
        .map()
        .map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    drop(m);
    Ok(secs)
}

/// A pool daemon in this process; `scrubbers` 0 = the pool's default.
fn start_pool(
    tag: &str,
    size: u64,
    region: u64,
    scrubbers: usize,
) -> Result<(pool::daemon::Daemon, PathBuf), String> {
    wait_free(size);
    let socket = socket_path(tag);
    let _ = std::fs::remove_file(&socket);
    let config = pool::daemon::Config::memfds(socket.clone(), size, region, pool::PageSize::Size2M);
    // Normal priority: at the default idle priority a host with other
    // work fills only when a CPU is idle, which measures the other work.
    let ops = pool::daemon::Ops {
        scrub_priority: pool::pace::Priority::Normal,
        scrubbers,
        ..Default::default()
    };
    let d = pool::daemon::Daemon::start_with(config, ops).map_err(|e| e.to_string())?;
    Ok((d, socket))
}

/// The pool's first fill of `bytes`: daemon start to all clean. In one
/// region per CPU, at least four (whole GiB each where possible): the
/// pool fills one region per scrub worker at a time and runs one worker
/// per CPU, so fewer regions than CPUs would measure fewer threads than
/// the populate baseline it is compared with.
fn pool_fill(args: &BenchHostArgs, bytes: u64, scrubbers: usize) -> Result<Fill, String> {
    let regions = (std::thread::available_parallelism().map_or(1, |n| n.get()) as u64).max(4);
    let region = if bytes >= regions * GIB {
        bytes / regions / GIB * GIB
    } else {
        bytes / regions / HUGE_2M * HUGE_2M
    }
    .max(HUGE_2M);
    let size = bytes / region * region;
    wait_free(size);
    let t = Instant::now();
    let (d, socket) = start_pool("fill", size, region, scrubbers)?;
    let complete = d.wait_all_clean(Duration::from_secs(args.fill_timeout));
    let secs = t.elapsed().as_secs_f64();
    let st = d.status();
    let scrubbers = d.scrubbers();
    drop(d);
    let _ = std::fs::remove_file(socket);
    Ok(Fill {
        bytes: size,
        regions: (size / region) as usize,
        region_bytes: region,
        clean_bytes: st.clean_bytes,
        secs,
        gib_per_s: st.clean_bytes as f64 / GIB as f64 / secs.max(1e-9),
        complete,
        scrubbers,
    })
}

/// Times `args.leases` leases + `mmap(MAP_POPULATE)` from a pool of four
/// regions sized by [`lease_region`], each lease returned before the next
/// (so the pool replaces regions while it serves).
fn pool_leases(args: &BenchHostArgs, bytes: u64, fill_gib_s: f64) -> Result<Leases, String> {
    let region = lease_region(fill_gib_s, args.lease_time, args.leases, bytes / 4);
    let regions = 4;
    let (d, socket) = start_pool("lease", region * regions as u64, region, 0)?;
    if !d.wait_all_clean(Duration::from_secs(args.fill_timeout)) {
        return Err("the lease pool did not fill in --fill-timeout".into());
    }
    let scrubbed0 = d.status().scrubbed_bytes;
    let t = Instant::now();
    let deadline = t + Duration::from_secs(args.lease_time);
    let mut lat = Vec::with_capacity(args.leases);
    while lat.len() < args.leases && Instant::now() < deadline {
        // Untimed: wait for a clean region (the pool replaces returned
        // ones in the background).
        while d.status().clean_bytes < region && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        let t0 = Instant::now();
        let lease = pool::client::lease(&socket, region, pool::PageSize::Size2M)
            .map_err(|e| e.to_string())?;
        let map = lease.map(true).map_err(|e| e.to_string())?;
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
        drop(map);
        drop(lease);
    }
    let secs = t.elapsed().as_secs_f64();
    let scrubbed = d.status().scrubbed_bytes.saturating_sub(scrubbed0);
    drop(d);
    let _ = std::fs::remove_file(socket);
    lat.sort_by(f64::total_cmp);
    Ok(Leases {
        region_bytes: region,
        regions,
        count: lat.len(),
        p50_ms: quantile(&lat, 0.5),
        p99_ms: quantile(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(0.0),
        scrub_gib_per_s: scrubbed as f64 / GIB as f64 / secs.max(1e-9),
        secs,
    })
}

/// memory_ready at `size`: a pool of one region of `size`, filled, then
/// the launcher's leasing call timed.
fn memory_ready(args: &BenchHostArgs, size: u64) -> Result<f64, String> {
    let (d, socket) = start_pool("ready", size, size, 0)?;
    if !d.wait_all_clean(Duration::from_secs(args.fill_timeout)) {
        return Err(format!("the pool did not fill in {} s", args.fill_timeout));
    }
    let t = Instant::now();
    let lease =
        pool::client::lease(&socket, size, pool::PageSize::Size2M).map_err(|e| e.to_string())?;
    if lease.len() < size {
        return Err(format!("lease of {} is short", lease.len()));
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    drop(lease);
    drop(d);
    let _ = std::fs::remove_file(socket);
    Ok(ms)
}

/// `auto` from the CPUs of `cpu_node` into memory bound to it, then to
/// `remote`: best of three each, interleaved.
fn numa_pair(cpu_node: &hostmem::numa::Node, remote: usize, len: usize) -> Result<Numa, String> {
    let backend = prezero::auto_backend_threads(cpu_node.cpus.len().max(1));
    let time = |node: usize| -> Result<f64, String> {
        let m = crate::measure::Mapping::new(len, crate::measure::Backing::Thp)
            .map_err(|e| e.to_string())?;
        // SAFETY: our own mapping; mbind changes only its policy.
        unsafe { hostmem::numa::bind(m.ptr(), len, node) }.map_err(|e| e.to_string())?;
        let d = crate::measure::pinned_zero(&m, len, &cpu_node.cpus, backend);
        Ok(len as f64 / GIB as f64 / d.as_secs_f64().max(1e-9))
    };
    let (mut local, mut far) = (0.0f64, 0.0f64);
    for _ in 0..3 {
        local = local.max(time(cpu_node.id)?);
        far = far.max(time(remote)?);
    }
    Ok(Numa {
        cpu_node: cpu_node.id,
        remote_node: remote,
        threads: cpu_node.cpus.len(),
        bytes: len as u64,
        local_gib_per_s: local,
        remote_gib_per_s: far,
    })
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a / b < 0.01 {
        format!("{:.4}x", a / b)
    } else if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// The bench-host table: one row per measurement, with its same-run
/// baseline and the ratio.
pub fn render(r: &HostReport, threads: &[usize]) -> String {
    let m = &r.machine;
    let mut out = format!(
        "bench host: {}, {} CPUs, {} NUMA node(s), {} RAM ({} available), kernel {}, load {} -> {}; {:.0} s\n",
        m.cpu_model,
        m.cpus,
        m.nodes,
        human(m.mem_total),
        human(m.mem_available),
        m.kernel,
        m.loadavg.first().map_or("", |s| s),
        m.loadavg.last().map_or("", |s| s),
        r.secs
    );
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec!["measurement", "value", "baseline (same run)", "ratio"]);
    let z = &r.zero;
    out += &format!(
        "engine buffer {} (GiB/s, engine rows: mean of the fastest runs)\n",
        human(z.size_bytes)
    );
    for &n in threads {
        let g = |meth: &str| z.get(meth, n).map(|x| x.gib_per_s);
        let pick = z
            .auto_picks
            .iter()
            .find(|p| p.threads == n)
            .map_or_else(|| "?".into(), |p| format!("{}, {}", p.backend, p.source));
        let reference = z.reference_backend(n);
        for b in prezero::available_backends() {
            if let Some(v) = g(b.name()) {
                t.add_row(vec![
                    format!("{n}T {}", b.name()),
                    format!("{v:.2}"),
                    g("memset").map_or("-".into(), |x| format!("memset {x:.2}")),
                    g("memset").map_or("-".into(), |x| ratio(v, x)),
                ]);
            }
        }
        if let (Some(a), Some(rb)) = (g("auto"), reference) {
            t.add_row(vec![
                format!("{n}T auto ({pick})"),
                format!("{a:.2}"),
                format!("best {} {:.2}", rb.method, rb.gib_per_s),
                ratio(a, rb.gib_per_s),
            ]);
        }
        if let (Some(a), Some(x)) = (g("auto"), g("memset")) {
            t.add_row(vec![
                format!("{n}T memset"),
                format!("{x:.2}"),
                format!("auto {a:.2}"),
                ratio(x, a),
            ]);
        }
        for (meth, label) in [
            ("kernel_populate_hugetlb", "hugetlb populate"),
            ("kernel_populate_thp", "THP populate"),
            ("kernel_populate_4k", "4K populate"),
        ] {
            match (g(meth), g("auto")) {
                (Some(v), Some(a)) => t.add_row(vec![
                    format!("{n}T {label}"),
                    format!("{v:.2}"),
                    format!("auto {a:.2}"),
                    ratio(v, a),
                ]),
                _ => t.add_row(vec![
                    format!("{n}T {label}"),
                    "skipped".into(),
                    "-".into(),
                    "-".into(),
                ]),
            };
        }
    }
    if let Some(n) = &r.numa {
        t.add_row(vec![
            format!(
                "NUMA: auto, {}T on node {}, memory on node {}",
                n.threads, n.cpu_node, n.remote_node
            ),
            format!("{:.2} GiB/s", n.remote_gib_per_s),
            format!("local (node {}) {:.2}", n.cpu_node, n.local_gib_per_s),
            ratio(n.remote_gib_per_s, n.local_gib_per_s),
        ]);
    }
    let all = threads.iter().copied().max().unwrap_or(1);
    let hugetlb = z.get("kernel_populate_hugetlb", all).map(|x| x.gib_per_s);
    if let Some(f) = &r.fill {
        // Against the kernel's populate at one thread (what one scrubber
        // does: one region at a time, the kernel zeroing its pages on that
        // thread), at all threads (the pool runs one scrubber per CPU over
        // one region per CPU: what the host could do), and against the
        // same fill with one scrubber.
        let one = z.get("kernel_populate_hugetlb", 1).map(|x| x.gib_per_s);
        let what = |f: &Fill| {
            format!(
                "pool first fill: {} in {} x {}, {} scrubber{}{}",
                human(f.clean_bytes),
                f.regions,
                human(f.region_bytes),
                f.scrubbers,
                if f.scrubbers == 1 { "" } else { "s" },
                if f.complete { "" } else { " (timed out)" }
            )
        };
        let value = |f: &Fill| format!("{:.2} GiB/s ({:.1} s)", f.gib_per_s, f.secs);
        for (n, base) in [(1, one), (all, hugetlb)] {
            if n == 1 && all == 1 && base.is_some() {
                continue;
            }
            t.add_row(vec![
                what(f),
                value(f),
                base.map_or("-".into(), |h| format!("hugetlb populate {n}T {h:.2}")),
                base.map_or("-".into(), |h| ratio(f.gib_per_s, h)),
            ]);
        }
        if let Some(c) = &r.fill_one {
            t.add_row(vec![
                what(f),
                value(f),
                format!("the same, 1 scrubber, after it {:.2}", c.gib_per_s),
                ratio(f.gib_per_s, c.gib_per_s),
            ]);
        }
    }
    if let Some(l) = &r.leases {
        t.add_row(vec![
            format!(
                "lease + mmap, {} leases of {} (pool of {})",
                l.count,
                human(l.region_bytes),
                l.regions
            ),
            format!(
                "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            ),
            hugetlb.map_or("-".into(), |h| {
                format!(
                    "hugetlb populate {all}T of {}: {:.1} ms",
                    human(l.region_bytes),
                    l.region_bytes as f64 / GIB as f64 / h * 1000.0
                )
            }),
            hugetlb.map_or("-".into(), |h| {
                ratio(l.p50_ms, l.region_bytes as f64 / GIB as f64 / h * 1000.0)
            }),
        ]);
        t.add_row(vec![
            "pool scrub (replacing returned regions) while serving them".into(),
            format!("{:.2} GiB/s over {:.1} s", l.scrub_gib_per_s, l.secs),
            r.fill
                .as_ref()
                .map_or("-".into(), |f| format!("first fill {:.2}", f.gib_per_s)),
            r.fill
                .as_ref()
                .map_or("-".into(), |f| ratio(l.scrub_gib_per_s, f.gib_per_s)),
        ]);
    }
    for x in &r.ready {
        t.add_row(vec![
            format!("memory_ready {} (launcher's pool lease)", human(x.bytes)),
            format!("{:.2} ms", x.lease_ms),
            x.populate_ms.map_or("-".into(), |p| {
                format!("hugetlb populate {all}T: {p:.0} ms (from its GiB/s)")
            }),
            x.populate_ms.map_or("-".into(), |p| ratio(x.lease_ms, p)),
        ]);
    }
    out += &t.to_string();
    for s in &r.notes {
        out += &format!("\nnote: {s}");
    }
    for s in &r.skipped {
        out += &format!("\nskipped: {s}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_double_up_to_all_cpus() {
        assert_eq!(thread_counts(1), [1]);
        assert_eq!(thread_counts(2), [1, 2]);
        assert_eq!(thread_counts(6), [1, 2, 4, 6]);
        assert_eq!(thread_counts(16), [1, 2, 4, 8, 16]);
        assert_eq!(thread_counts(192), [1, 2, 4, 8, 16, 32, 64, 128, 192]);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn lease_regions_fit_the_time() {
        // 100 replacements at 2 GiB/s in 45 s (3/4 of it): 0.675 GiB ->
        // 512 MiB.
        assert_eq!(lease_region(2.0, 45, 100, 64 * GIB), 512 << 20);
        // A fast host: 20 GiB/s -> 6.75 GiB -> 4 GiB.
        assert_eq!(lease_region(20.0, 45, 100, 64 * GIB), 4 * GIB);
        // Capped by the pool.
        assert_eq!(lease_region(200.0, 45, 100, 3 * GIB), 2 * GIB);
        // Never below one page.
        assert_eq!(lease_region(0.0, 45, 100, GIB), HUGE_2M);
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        for a in [
            BenchHostArgs {
                fill_fraction: 1.5,
                ..Default::default()
            },
            BenchHostArgs {
                leases: 0,
                ..Default::default()
            },
        ] {
            let e = run(&a).unwrap_err().to_string();
            assert!(
                !e.contains('\n') && (e.contains("--") || e.contains("invalid size")),
                "{e}"
            );
        }
    }
}
