//! The pool daemon: regions, the background scrubber, and the socket
//! server that leases regions out.
//!
//! Threads: scrubbers ([`auto_scrubbers`]: by default one per zeroing
//! thread, at most one per region), each preparing one region at a time
//! on an idle-priority worker of its own (an in-place scrub's zeroing runs
//! on all CPUs through [`prezero::Zeroer`]), one acceptor, one per
//! connection. All region state lives in one mutex; a scrubber holds it
//! only to take a dirty region (moving it to `scrubbing`, which no other
//! scrubber takes) and to record the result, never while zeroing.
//!
//! The parts: this module starts and stops the daemon and holds the
//! shared state; `state` is the pool's bookkeeping (which region is
//! where, what a lease gets, what a scrub does, the counters) with no
//! I/O, so its unit tests drive it by plain calls; `scrub` is the
//! background scrubber, `socket` the listener and the per-connection
//! protocol, `lease` grants and ends leases around `state`, and `status`
//! answers `status` requests and metrics scrapes.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::memory::{Fault, Leftover, RegionMemory};
use crate::proto::Status;
use crate::{Error, PageSize};

mod lease;
mod scrub;
mod socket;
mod state;
mod status;

use scrub::{fill_bar, scrub_loop, unlink_named};
use socket::{accept_loop, bind};
use state::PoolState;
use status::{refresh_gauges, status};

pub use crate::memory::FAULT_ENV;

/// Daemon configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Unix socket to serve.
    pub socket: PathBuf,
    /// Total pool bytes (a multiple of `region_bytes`; with `regions`,
    /// their sum).
    pub size: u64,
    /// Bytes per region (the largest lease of one region; a multiple of
    /// the page size; with `regions`, the largest of them).
    pub region_bytes: u64,
    /// Regions of several sizes, in the order they are made (`--regions
    /// 4x1G,2x3G,5G`; [`Config::with_regions`]). Why: a fleet runs guests
    /// of many sizes on one pool, and a VMM that maps one file per guest
    /// (QEMU's one `memory-backend`) holds a whole region, so a 1 GiB guest
    /// on 4 GiB regions would hold 4 GiB; with several sizes each lease
    /// takes the smallest clean region that holds it ([`crate::fit`]).
    /// Empty: `size / region_bytes` regions of `region_bytes`.
    pub regions: Vec<u64>,
    /// Page size.
    pub page: PageSize,
    /// hugetlbfs directory for named region files; `None` = memfds.
    pub hugetlbfs: Option<PathBuf>,
    /// Read every byte back after each scrub.
    pub verify: bool,
    /// Zeroing threads (0 = all CPUs).
    pub threads: usize,
    /// Zeroing backend.
    pub backend: prezero::Choice,
    /// Test hook.
    pub fault: Option<Fault>,
}

impl Config {
    /// A pool of `size` bytes in regions of `region_bytes` on memfds of
    /// `page` pages, zeroed by the automatic backend on all CPUs, without
    /// read-back or test hook: what an in-process pool (tests, examples)
    /// starts from, changing the fields it needs.
    pub fn memfds(socket: PathBuf, size: u64, region_bytes: u64, page: PageSize) -> Config {
        Config {
            socket,
            size,
            region_bytes,
            regions: Vec::new(),
            page,
            hugetlbfs: None,
            verify: false,
            threads: 0,
            backend: prezero::Choice::Auto,
            fault: None,
        }
    }

    /// This configuration with regions of the given sizes, in this order
    /// (`size` their sum, `region_bytes` the largest).
    pub fn with_regions(self, regions: Vec<u64>) -> Config {
        Config {
            size: regions.iter().sum(),
            region_bytes: regions.iter().copied().max().unwrap_or(0),
            regions,
            ..self
        }
    }

    /// How many regions the pool has.
    pub fn region_count(&self) -> usize {
        match self.regions.len() {
            0 => (self.size / self.region_bytes.max(1)) as usize,
            n => n,
        }
    }

    /// Bytes of region `index`.
    pub fn region_size(&self, index: usize) -> u64 {
        self.regions
            .get(index)
            .copied()
            .unwrap_or(self.region_bytes)
    }

    /// Every region's bytes, in index order.
    pub fn region_sizes(&self) -> Vec<u64> {
        (0..self.region_count())
            .map(|i| self.region_size(i))
            .collect()
    }

    /// Checks sizes; every problem names the option and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        let page = self.page.bytes();
        if !self.regions.is_empty() {
            return self.validate_regions();
        }
        if !self.region_bytes.is_multiple_of(page) {
            return Err(Error::BadValue {
                key: "region-size",
                value: self.region_bytes.to_string(),
                fix: format!("must be a multiple of the {} page size", self.page),
            });
        }
        if !self.size.is_multiple_of(self.region_bytes) || self.size < self.region_bytes {
            return Err(Error::BadValue {
                key: "size",
                value: self.size.to_string(),
                fix: format!(
                    "must be a non-zero multiple of --region-size ({} bytes)",
                    self.region_bytes
                ),
            });
        }
        if self.size / self.region_bytes > MAX_REGIONS as u64 {
            return Err(Error::BadValue {
                key: "region-size",
                value: self.region_bytes.to_string(),
                fix: format!("more than {MAX_REGIONS} regions; use larger regions"),
            });
        }
        self.validate_backing()
    }

    /// [`Config::validate`] of a pool of several region sizes.
    fn validate_regions(&self) -> Result<(), Error> {
        let page = self.page.bytes();
        let list = || {
            self.regions
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        if let Some(b) = self
            .regions
            .iter()
            .find(|&&b| b == 0 || !b.is_multiple_of(page))
        {
            return Err(Error::BadValue {
                key: "regions",
                value: list(),
                fix: format!(
                    "region of {b} bytes: every region must be a non-zero multiple of the {} page size",
                    self.page
                ),
            });
        }
        if self.regions.len() > MAX_REGIONS {
            return Err(Error::BadValue {
                key: "regions",
                value: list(),
                fix: format!("more than {MAX_REGIONS} regions; use fewer, larger regions"),
            });
        }
        if self.size != self.regions.iter().sum::<u64>()
            || Some(self.region_bytes) != self.regions.iter().copied().max()
        {
            return Err(Error::BadValue {
                key: "regions",
                value: list(),
                fix: format!(
                    "--size ({}) and --region-size ({}) must be their sum and largest; give --regions alone",
                    self.size, self.region_bytes
                ),
            });
        }
        self.validate_backing()
    }

    fn validate_backing(&self) -> Result<(), Error> {
        if self.hugetlbfs.is_some() && !self.page.is_huge() {
            return Err(Error::BadValue {
                key: "hugetlbfs",
                value: String::new(),
                fix: "needs --page 2M or 1G".into(),
            });
        }
        Ok(())
    }
}

/// The most regions a pool has: each is a file, a mapping and a slot the
/// daemon walks under its mutex.
pub const MAX_REGIONS: usize = 4096;

/// Operations options: how the daemon is watched and what its background
/// work may cost others. Separate from [`Config`] so that callers that
/// build a `Config` (the VMM's tests, the benchmarks) keep compiling.
#[derive(Debug, Clone, Default)]
pub struct Ops {
    /// Serve Prometheus metrics at `http://ADDR/metrics`.
    pub metrics: Option<std::net::SocketAddr>,
    /// Cap on the bytes per second the background work prepares
    /// (`None` = uncapped).
    pub scrub_bandwidth: Option<u64>,
    /// Priority of the background work (default: idle).
    pub scrub_priority: crate::pace::Priority,
    /// Draw a progress bar of the first fill on stderr when it is a
    /// terminal (`serve` sets it; a fill of many GiB takes seconds).
    pub fill_progress: bool,
    /// Let this group lease too: the socket is made 0660 and given to
    /// it (`--socket-group`), so VMMs that run as another user (libvirt's
    /// `libvirt-qemu`, Kata's) lease without root. `None`: 0600, the
    /// daemon's user only.
    pub socket_group: Option<u32>,
    /// Regions prepared at once (`--scrubbers`; 0 = auto, see
    /// [`auto_scrubbers`]).
    /// The kernel zeroes a region's new pages inside one `fallocate` per
    /// chunk, on the calling thread, and calls on one file serialize on
    /// its inode, so a region fills at one thread's rate; several scrubbers,
    /// each on its own region, are what lets a first fill (and a burst of
    /// returned regions) use the host's cores.
    pub scrubbers: usize,
}

/// How many regions are prepared at once. `--scrubbers N` asks for N
/// (a `--scrub-bandwidth` cap is then shared: each gets 1/N of it);
/// 0 means one per zeroing thread (`threads`, 0 = every CPU the daemon may
/// use), except under a bandwidth cap, where one scrubber at the whole cap
/// keeps a lone returned region as fast as the cap allows. Never more
/// than one per region. Fault injection counts scrubs in the order one
/// scrubber does them, so it gets one.
pub fn auto_scrubbers(config: &Config, ops: &Ops) -> usize {
    let regions = config.region_count().max(1);
    if config.fault.is_some() {
        return 1;
    }
    let requested = match (ops.scrubbers, ops.scrub_bandwidth) {
        (0, Some(_)) => 1,
        (n, _) => n,
    };
    let n = match (requested, config.threads) {
        (0, 0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
        (0, t) => t,
        (n, _) => n,
    };
    n.clamp(1, regions)
}

struct Shared {
    config: Config,
    /// The `--hugetlbfs` directory's lock file, held while the daemon runs.
    _dir_lock: Option<std::os::fd::OwnedFd>,
    backend_name: String,
    state: Mutex<PoolState>,
    changed: Condvar,
    stop: AtomicBool,
    metrics: crate::metrics::Metrics,
    ops: Ops,
    /// The first fill's progress bar (hidden unless stderr is a terminal).
    fill_bar: Option<indicatif::ProgressBar>,
    /// NUMA nodes with CPUs; regions are dealt round-robin over them.
    nodes: Vec<crate::numa::Node>,
    /// Scrubbers running ([`auto_scrubbers`]), each preparing one region
    /// at a time.
    scrubbers: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panicking thread must not wedge the pool; the state itself is
        // only ever moved towards `dirty` on error paths.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new_memory(&self, index: usize) -> Result<RegionMemory, Error> {
        let c = &self.config;
        match &c.hugetlbfs {
            None => RegionMemory::memfd(
                &format!("zerostart-pool-{index}"),
                c.region_size(index),
                c.page,
            ),
            Some(dir) => RegionMemory::hugetlbfs(dir, index, c.region_size(index), c.page),
        }
    }
}

/// A running pool daemon (its threads stop when it is dropped).
pub struct Daemon {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    metrics_addr: Option<std::net::SocketAddr>,
}

impl Daemon {
    /// Creates the regions (all dirty), binds the socket (mode 0600) and
    /// starts the scrubber and acceptor threads.
    pub fn start(config: Config) -> Result<Daemon, Error> {
        Self::start_with(config, Ops::default())
    }

    /// [`Daemon::start`] with operations options (metrics endpoint).
    pub fn start_with(config: Config, ops: Ops) -> Result<Daemon, Error> {
        config.validate()?;
        let nodes = match std::env::var_os(crate::numa::FAKE_SYSFS_ENV) {
            Some(root) => {
                if !crate::memory::test_switches_unlocked() {
                    return Err(Error::FakeTopologyLocked(
                        root.to_string_lossy().into_owned(),
                    ));
                }
                eprintln!(
                    "zerostart pool: WARNING: fake NUMA topology from {}",
                    root.to_string_lossy()
                );
                crate::numa::read_nodes(Path::new(&root))
            }
            None => crate::numa::read_nodes(Path::new("/sys/devices/system/node")),
        };
        // Bound before anything else is created: a taken port is a
        // one-line refusal that leaves nothing behind.
        let metrics_server = ops.metrics.map(crate::metrics::Server::bind).transpose()?;
        if !config.page.is_huge() {
            eprintln!(
                "zerostart pool: NOTE: --page 4K is a test/fallback mode: shmem pages, far slower to populate and zero than hugetlb; use --page 2M for VMs"
            );
        }
        if let Some(f) = config.fault {
            if !crate::memory::test_switches_unlocked() {
                return Err(Error::TestSwitchLocked(format!("{f:?}")));
            }
            eprintln!("zerostart pool: WARNING: fault injection {FAULT_ENV} active: {f:?}");
        }
        // All of the pool's hugepages up front: a shortage is one error
        // naming the whole need, not a failure half way through the regions.
        if config.page.is_huge() && config.hugetlbfs.is_none() {
            let need = config.size / config.page.bytes();
            let free = crate::memory::free_hugepages(config.page);
            if free < need {
                return Err(Error::Hugepages {
                    bytes: config.size,
                    page: config.page,
                    free,
                    suggest: crate::memory::total_hugepages(config.page) + need - free,
                    kb: config.page.bytes() >> 10,
                    source: std::io::Error::other(format!("{need} pages needed")),
                });
            }
        }
        // The --hugetlbfs directory is checked and locked, and files an
        // earlier (killed) daemon left are removed, before the socket is
        // bound: a refusal leaves nothing behind.
        let dir_lock = match &config.hugetlbfs {
            None => None,
            Some(dir) => {
                let lock = crate::memory::check_dir(dir, config.page)?;
                for i in 0..config.region_count() {
                    if let Leftover::Removed { holders } = crate::memory::clear_leftover(dir, i)? {
                        let path = crate::memory::region_path(dir, i);
                        if holders.is_empty() {
                            eprintln!("zerostart pool: {}: left by an earlier daemon; removed (its memory is never reused)", path.display());
                        } else {
                            eprintln!("zerostart pool: {}: left by an earlier daemon and still held by pid(s) {holders:?} (a VM leased it); unlinked: that memory stays with them and is never leased again", path.display());
                        }
                    }
                }
                Some(lock)
            }
        };
        // The engine is chosen (and `auto` calibrated: two 256 MiB buffers,
        // a second or more on a loaded host) only after every check above,
        // so a refused configuration is refused at once.
        let zeroer = prezero::Zeroer::new(config.backend)?.threads(config.threads);
        let backend_name = zeroer.backend().name().to_string();
        let listener = bind(&config.socket, ops.socket_group)?;
        let config_size = config.size;
        let n = config.region_count();
        let scrubbers = auto_scrubbers(&config, &ops);
        let shared = Arc::new(Shared {
            config,
            _dir_lock: dir_lock,
            backend_name,
            state: Mutex::new(PoolState::new(n)),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            metrics: crate::metrics::Metrics::new(),
            fill_bar: ops.fill_progress.then(|| fill_bar(config_size)),
            nodes,
            scrubbers,
            ops,
        });
        {
            let mut st = shared.lock();
            for i in 0..n {
                let mem = shared.new_memory(i)?;
                st.add_region(mem, crate::numa::node_of_region(&shared.nodes, i).id);
            }
        }
        let mut threads = Vec::with_capacity(shared.scrubbers + 2);
        for _ in 0..shared.scrubbers {
            let s1 = shared.clone();
            let zeroer = zeroer.clone();
            let spawned = std::thread::Builder::new()
                .name("pool-scrub".into())
                .spawn(move || scrub_loop(&s1, &zeroer));
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    // Those already running stop with the daemon.
                    shared.stop.store(true, Ordering::SeqCst);
                    shared.changed.notify_all();
                    return Err(Error::io("starting a scrubber thread", e));
                }
            }
        }
        let s2 = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("pool-accept".into())
            .spawn(move || accept_loop(&s2, listener))
            .map_err(|e| {
                shared.stop.store(true, Ordering::SeqCst);
                shared.changed.notify_all();
                Error::io("starting the acceptor thread", e)
            })?;
        threads.push(acceptor);
        let mut metrics_addr = None;
        if let Some(server) = metrics_server {
            metrics_addr = Some(server.addr());
            let s3 = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("pool-metrics".into())
                    .spawn(move || {
                        server.run(
                            || {
                                refresh_gauges(&s3);
                                s3.metrics.encode()
                            },
                            || s3.stop.load(Ordering::SeqCst),
                        )
                    })
                    .map_err(|e| Error::io("starting the metrics thread", e))?,
            );
        }
        Ok(Daemon {
            shared,
            threads,
            metrics_addr,
        })
    }

    /// How many scrubbers prepare regions at once ([`auto_scrubbers`]).
    pub fn scrubbers(&self) -> usize {
        self.shared.scrubbers
    }

    /// Where the metrics endpoint listens (the kernel's port for `:0`).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics_addr
    }

    /// The daemon's metrics (what `--metrics` serves).
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.shared.metrics
    }

    /// Current counters.
    pub fn status(&self) -> Status {
        status(&self.shared)
    }

    /// Waits until every region is clean (or `timeout` passes).
    pub fn wait_all_clean(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if st.all_clean() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Serves until the process is killed.
    pub fn wait(mut self) {
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wake the acceptor.
        let _ = UnixStream::connect(&self.shared.config.socket);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Named region files go too: leased ones stay with their clients
        // (they hold the inode), and a next daemon creates its own.
        for m in self.shared.lock().memories() {
            unlink_named(m);
        }
        let _ = std::fs::remove_file(&self.shared.config.socket);
    }
}
