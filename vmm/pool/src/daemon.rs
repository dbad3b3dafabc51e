//! The pool daemon: regions, the background scrubber, and the socket
//! server that leases regions out.
//!
//! Threads: one scrubber (zeroing itself runs on all CPUs through
//! [`prezero::Zeroer`]), one acceptor, one per connection. All region
//! state lives in one mutex; the scrubber holds it only to change states,
//! never while zeroing.

use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::memory::{Fault, Leftover, RegionMemory, ScrubFault, Source};
use crate::proto::{
    read_frame, write_frame, LeaseInfo, Request, RequestBody, Response, ResponseBody, Status,
    VERSION,
};
use crate::region::{Region, State};
use crate::{Error, PageSize};

pub use crate::memory::FAULT_ENV;

/// Daemon configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Unix socket to serve.
    pub socket: PathBuf,
    /// Total pool bytes (a multiple of `region_bytes`).
    pub size: u64,
    /// Bytes per region (the largest lease; a multiple of the page size).
    pub region_bytes: u64,
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
    /// Checks sizes; every problem names the option and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        let page = self.page.bytes();
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
        if self.size / self.region_bytes > 4096 {
            return Err(Error::BadValue {
                key: "region-size",
                value: self.region_bytes.to_string(),
                fix: "more than 4096 regions; use larger regions".into(),
            });
        }
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
}

struct Slot {
    region: Region,
    /// `None` only while the scrubber replaces it (the region is
    /// `scrubbing` or, if no memory could be had, `dirty`).
    mem: Option<Arc<RegionMemory>>,
    /// The memory was created by this daemon and never handed out, so the
    /// kernel's zeroing of its new pages is the only write it has seen.
    fresh: bool,
    /// NUMA node of the region's memory.
    node: usize,
}

#[derive(Default)]
struct Counters {
    scrubbed_bytes: u64,
    scrub_secs: f64,
    last_gib_s: f64,
    leases_total: u64,
    retired_total: u64,
    scrub_failures: u64,
    next_lease: u64,
    backend: &'static str,
}

struct PoolState {
    slots: Vec<Slot>,
    counters: Counters,
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
            None => RegionMemory::memfd(&format!("zerostart-pool-{index}"), c.region_bytes, c.page),
            Some(dir) => RegionMemory::hugetlbfs(dir, index, c.region_bytes, c.page),
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
        let zeroer = prezero::Zeroer::new(config.backend)?.threads(config.threads);
        let backend_name = zeroer.backend().name().to_string();
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
                for i in 0..(config.size / config.region_bytes) as usize {
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
        let listener = bind(&config.socket, ops.socket_group)?;
        let config_size = config.size;
        let n = (config.size / config.region_bytes) as usize;
        let shared = Arc::new(Shared {
            config,
            _dir_lock: dir_lock,
            backend_name,
            state: Mutex::new(PoolState {
                slots: Vec::with_capacity(n),
                counters: Counters::default(),
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            metrics: crate::metrics::Metrics::new(),
            fill_bar: ops.fill_progress.then(|| fill_bar(config_size)),
            nodes,
            ops,
        });
        {
            let mut st = shared.lock();
            for i in 0..n {
                let mem = shared.new_memory(i)?;
                st.slots.push(Slot {
                    region: Region::new(i),
                    mem: Some(Arc::new(mem)),
                    fresh: true,
                    node: crate::numa::node_of_region(&shared.nodes, i).id,
                });
            }
        }
        let s1 = shared.clone();
        let scrubber = std::thread::Builder::new()
            .name("pool-scrub".into())
            .spawn(move || scrub_loop(&s1, &zeroer))
            .map_err(|e| Error::io("starting the scrubber thread", e))?;
        let s2 = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("pool-accept".into())
            .spawn(move || accept_loop(&s2, listener))
            .map_err(|e| Error::io("starting the acceptor thread", e))?;
        let mut threads = vec![scrubber, acceptor];
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
            if st.slots.iter().all(|s| s.region.state() == State::Clean) {
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
        for slot in &self.shared.lock().slots {
            if let Some(m) = &slot.mem {
                unlink_named(m);
            }
        }
        let _ = std::fs::remove_file(&self.shared.config.socket);
    }
}

/// Binds `path`, replacing a stale socket file left by a killed daemon but
/// never one a live daemon answers on; with `group`, the socket is 0660
/// and that group's.
fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener, Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(Error::AlreadyServing(path.to_path_buf()));
        }
        std::fs::remove_file(path)
            .map_err(|e| Error::io(format!("removing stale socket {}", path.display()), e))?;
    }
    // The socket file is created 0600 by `bind` itself (Linux takes its
    // mode from the socket inode, set here first), so there is no moment
    // in which a permissive umask lets another user connect and lease.
    use nix::sys::socket::{
        bind as nix_bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
    };
    let sock = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| Error::io("creating the pool socket", e.into()))?;
    nix::sys::stat::fchmod(&sock, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| Error::io("fchmod 0600 of the pool socket", e.into()))?;
    let addr = UnixAddr::new(path)
        .map_err(|e| Error::io(format!("socket path {}", path.display()), e.into()))?;
    nix_bind(sock.as_raw_fd(), &addr)
        .map_err(|e| Error::io(format!("binding {}", path.display()), e.into()))?;
    // The group is given the socket before its mode opens to the group,
    // so no other group ever may connect; nobody can connect before
    // listen() anyway.
    if let Some(gid) = group {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid))).map_err(|e| {
            Error::io(
                format!("giving {} to group {gid} (--socket-group)", path.display()),
                e.into(),
            )
        })?;
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o660))
            .map_err(|e| Error::io(format!("chmod 0660 {}", path.display()), e))?;
    }
    listen(&sock, Backlog::MAXCONN)
        .map_err(|e| Error::io(format!("listening on {}", path.display()), e.into()))?;
    Ok(UnixListener::from(sock))
}

/// What the scrubber does with a dirty region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Remedy {
    /// Memory this daemon created and never handed out: populate (the
    /// kernel zeroes new pages) and verify.
    Fresh,
    /// Memory that was leased, or failed a scrub: drop its pages and its
    /// file and make new ones. Whatever a former lessee still holds (an fd
    /// in flight, a pipe full of spliced pages, an io_uring fixed buffer,
    /// pinned pages, a process the `/proc` scan cannot see) stays attached
    /// to the old file and pages, which the pool never hands out again.
    Replace,
    /// Fault injection only: zero the same pages in place (or skip even
    /// that) and lease them again.
    InPlace(ScrubFault),
}

fn scrub_loop(shared: &Shared, zeroer: &prezero::Zeroer) {
    let c = &shared.config;
    loop {
        // Pick a dirty region and move it to scrubbing.
        let (index, old, remedy, done) = {
            let mut st = shared.lock();
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(i) = st
                    .slots
                    .iter()
                    .position(|s| s.region.state() == State::Dirty)
                {
                    let done = st.slots.iter().map(|s| s.region.scrubs()).sum::<u64>()
                        + st.counters.scrub_failures;
                    if let Some(Fault::StallBeforeScrub { after }) = c.fault {
                        if done >= after {
                            drop(st);
                            crate::memory::stall("before a scrub (region stays dirty)");
                        }
                    }
                    st.slots[i]
                        .region
                        .begin_scrub()
                        .expect("dirty regions can begin a scrub");
                    shared.changed.notify_all();
                    let slot = &mut st.slots[i];
                    let in_place = match c.fault {
                        Some(Fault::SkipZero { after }) if done >= after => {
                            Some(ScrubFault::SkipZero)
                        }
                        Some(Fault::ScrubInPlace { after }) if done >= after => {
                            Some(ScrubFault::None)
                        }
                        _ => None,
                    };
                    let remedy = match (in_place, &slot.mem, slot.fresh) {
                        (Some(f), Some(_), _) => Remedy::InPlace(f),
                        (_, Some(_), true) => Remedy::Fresh,
                        _ => Remedy::Replace,
                    };
                    // The slot gives up its memory for a replacement now, so
                    // the old pages are freed before new ones are reserved
                    // (a pool sized to its hugepages has no spare ones).
                    let old = if remedy == Remedy::Replace {
                        slot.mem.take()
                    } else {
                        slot.mem.clone()
                    };
                    break (i, old, remedy, done);
                }
                st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        let stall_half = matches!(c.fault, Some(Fault::StallMidScrub { after }) if done >= after);
        let kind = match remedy {
            Remedy::Fresh => "fill",
            Remedy::Replace => "replace",
            Remedy::InPlace(_) => "in_place",
        };
        let cpu0 = crate::metrics::thread_cpu();
        let bar = shared
            .fill_bar
            .as_ref()
            .filter(|b| remedy == Remedy::Fresh && !b.is_finished());
        let base = bar.map_or(0, |b| b.position());
        let show = |done: u64| {
            if let Some(b) = bar {
                b.set_position(base + done);
            }
        };
        let mut pacer = crate::pace::Pacer::new(
            shared.ops.scrub_bandwidth,
            bar.map(|_| &show as &(dyn Fn(u64) + Sync)),
        )
        .stop_on(&shared.stop);
        let res = match remedy {
            Remedy::InPlace(fault) => {
                let mem = old.expect("in-place scrubs keep their memory");
                // SAFETY: the region is `scrubbing`: not leased, not handed
                // out, and this is the only scrubber.
                unsafe { mem.scrub(zeroer, c.verify, c.threads, fault) }.map(|s| (s, None))
            }
            Remedy::Fresh => {
                let mem = old.expect("fresh regions have memory");
                on_idle(shared, index, || {
                    place(shared, index, &mem)?;
                    mem.prepare_fresh_paced(c.verify, c.threads, stall_half, &mut pacer)
                })
                .map(|s| (s, None))
            }
            Remedy::Replace => {
                // Retiring and creating the new file (mmap: the mm's lock
                // for writing) stay on this normal-priority thread; only
                // the allocation and zeroing of its pages run at idle.
                if let Some(old) = old {
                    retire(index, old);
                }
                shared.new_memory(index).and_then(|m| {
                    let s = on_idle(shared, index, || {
                        place(shared, index, &m)?;
                        m.prepare_fresh_paced(c.verify, c.threads, stall_half, &mut pacer)
                    })?;
                    Ok((s, Some(Arc::new(m))))
                })
            }
        };
        if shared.stop.load(Ordering::SeqCst) {
            // Stopping: whatever was half prepared is never leased (the
            // region stays `scrubbing` and the daemon exits).
            return;
        }
        let mut st = shared.lock();
        match res {
            Ok((stats, new)) => {
                let slot = &mut st.slots[index];
                if let Some(m) = new {
                    slot.mem = Some(m);
                }
                slot.fresh = remedy != Remedy::InPlace(ScrubFault::SkipZero);
                slot.region
                    .finish_scrub()
                    .expect("only the scrubber moves a region out of scrubbing");
                let secs = stats.elapsed.as_secs_f64();
                let gib = stats.bytes as f64 / (1u64 << 30) as f64;
                st.counters.scrubbed_bytes += stats.bytes;
                st.counters.scrub_secs += secs;
                st.counters.backend = stats.backend;
                st.counters.last_gib_s = if secs > 0.0 { gib / secs } else { 0.0 };
                let cpu = crate::metrics::thread_cpu().saturating_sub(cpu0) + stats.helper_cpu;
                if let Some(b) = bar.filter(|b| b.position() >= c.size) {
                    b.finish_with_message(format!(
                        "first fill done: the kernel zeroed each page once, {:.1} GiB/s",
                        b.position() as f64 / (1u64 << 30) as f64 / b.elapsed().as_secs_f64()
                    ));
                }
                shared
                    .metrics
                    .scrubbed(kind, stats.bytes, stats.elapsed, cpu);
            }
            Err(e) => {
                eprintln!(
                    "zerostart pool: region {index}: preparing it failed: {e}; replacing its memory"
                );
                st.counters.scrub_failures += 1;
                shared.metrics.scrub_failures.inc();
                shared.metrics.scrub_cpu_seconds.inc_by(
                    crate::metrics::thread_cpu()
                        .saturating_sub(cpu0)
                        .as_secs_f64(),
                );
                let slot = &mut st.slots[index];
                slot.fresh = false;
                slot.region
                    .fail_scrub()
                    .expect("only the scrubber moves a region out of scrubbing");
                // The next attempt replaces the memory (whatever failed
                // with it is not trusted again).
                let failed = slot.mem.take();
                drop(st);
                shared.changed.notify_all();
                match failed {
                    Some(m) => retire(index, m),
                    // No memory could be had (hugepages still held by a
                    // former lessee?): do not spin on it.
                    None => std::thread::sleep(Duration::from_secs(1)),
                }
                continue;
            }
        }
        shared.changed.notify_all();
    }
}

/// Runs the bulk of a preparation (allocating and zeroing pages, the
/// verify reads) on a thread of its own at the scrub priority (idle by
/// default), and adds that thread's CPU time to the stats.
///
/// Why a separate thread: a `SCHED_IDLE` thread on a busy host can be off
/// the CPU for seconds. If it held the pool mutex or the mm's lock then,
/// every lease would wait for it (seen: a 5 s wait took 46 s with two
/// CPU-bound threads on two cores). The worker takes neither: it never
/// touches the pool state, and it allocates pages with `fallocate` on the
/// region's file, not by faulting them into the daemon's mm. The
/// coordinating thread, which does take the mutex, stays at normal
/// priority.
fn on_idle(
    shared: &Shared,
    index: usize,
    work: impl FnOnce() -> Result<crate::memory::ScrubStats, Error> + Send,
) -> Result<crate::memory::ScrubStats, Error> {
    let prio = shared.ops.scrub_priority;
    // On the region's node's CPUs (the verify threads inherit it).
    let cpus = crate::numa::node_of_region(&shared.nodes, index)
        .cpus
        .clone();
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("pool-scrub-idle".into())
            .spawn_scoped(s, move || {
                if shared.nodes.len() > 1 {
                    crate::numa::pin_current_thread(&cpus);
                }
                let applied = crate::pace::apply(prio);
                if prio == crate::pace::Priority::Idle
                    && applied == crate::pace::Applied::Unchanged
                {
                    eprintln!("zerostart pool: neither SCHED_IDLE nor nice 19 could be set for the scrub; it runs at the daemon's priority");
                }
                let r = work();
                // A new thread: its whole CPU time is this preparation's.
                let cpu = crate::metrics::thread_cpu();
                r.map(|mut st| {
                    st.helper_cpu += cpu;
                    st
                })
            });
        match h {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err(Error::Protocol("the scrub worker panicked".into()))),
            Err(e) => Err(Error::io("starting the scrub worker thread", e)),
        }
    })
}

/// Binds a region's new memory to its node before its pages are allocated
/// (only on a multi-node pool, and only to nodes this machine has: a fake
/// test topology names nodes that may not exist).
fn place(shared: &Shared, index: usize, mem: &RegionMemory) -> Result<(), Error> {
    let node = crate::numa::node_of_region(&shared.nodes, index).id;
    if shared.nodes.len() > 1 && crate::numa::node_exists(node) {
        mem.bind_node(node)?;
    }
    Ok(())
}

/// Takes a returned region's memory out of the pool for good: its pages are
/// punched out of the file (freed now unless a holder pinned them), a named
/// hugetlbfs file is unlinked (a holder keeps the old inode; the
/// replacement is a new file), and the daemon's mapping and fd are closed.
fn retire(index: usize, old: Arc<RegionMemory>) {
    if let Err(e) = old.punch() {
        // Not a safety problem (the file is never leased again); its pages
        // are freed when the last holder closes it instead of now.
        eprintln!("zerostart pool: region {index}: {e}");
    }
    unlink_named(&old);
    drop(old);
}

fn accept_loop(shared: &Arc<Shared>, listener: UnixListener) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("pool-conn".into())
            .spawn(move || serve_connection(&s, conn));
        if let Err(e) = spawned {
            eprintln!("zerostart pool: cannot start a connection thread: {e}");
        }
    }
}

fn reply(conn: &mut UnixStream, body: ResponseBody) -> Result<(), Error> {
    write_frame(conn, &Response { v: VERSION, body }, None)
}

fn refuse(conn: &mut UnixStream, message: String) {
    let _ = reply(conn, ResponseBody::Error { message });
}

fn serve_connection(shared: &Shared, mut conn: UnixStream) {
    let mut held: Option<(usize, u64)> = None;
    loop {
        let req = match read_frame::<Request>(&mut conn, false) {
            Ok(Some((req, _))) => req,
            Ok(None) => break,
            Err(e) => {
                refuse(&mut conn, e.to_string());
                break;
            }
        };
        if req.v != VERSION {
            refuse(
                &mut conn,
                format!(
                    "protocol version {} is not supported; this daemon speaks {VERSION} (use a zerostart of the same release)",
                    req.v
                ),
            );
            break;
        }
        match req.body {
            RequestBody::Status => {
                if reply(&mut conn, ResponseBody::Status(status(shared))).is_err() {
                    break;
                }
            }
            RequestBody::Lease { bytes, page, node } => {
                let asked = Instant::now();
                if held.is_some() {
                    refuse(
                        &mut conn,
                        "this connection already holds a lease; open one connection per lease"
                            .into(),
                    );
                    continue;
                }
                match grant(shared, bytes, page, node) {
                    Err(message) => refuse(&mut conn, message),
                    Ok((info, mem)) => {
                        held = Some((info.region, info.id));
                        let sent = write_frame(
                            &mut conn,
                            &Response {
                                v: VERSION,
                                body: ResponseBody::Lease(info),
                            },
                            Some(mem.fd()),
                        );
                        if sent.is_err() {
                            // The client may or may not have the fd: dirty.
                            break;
                        }
                        shared
                            .metrics
                            .lease_latency
                            .observe(asked.elapsed().as_secs_f64());
                    }
                }
            }
        }
    }
    if let Some((region, lease)) = held {
        end_lease(shared, region, lease);
    }
}

fn grant(
    shared: &Shared,
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
) -> Result<(LeaseInfo, Arc<RegionMemory>), String> {
    let c = &shared.config;
    if page != c.page {
        return Err(format!(
            "this pool serves {} pages, the lease asked for {page}; start the pool with --page {page} or map with {} pages",
            c.page, c.page
        ));
    }
    if bytes == 0 || bytes > c.region_bytes {
        return Err(format!(
            "a lease of {bytes} bytes does not fit a region of {} bytes; restart the pool with --region-size of at least {bytes}",
            c.region_bytes
        ));
    }
    if let Some(n) = node {
        if !shared.nodes.iter().any(|x| x.id == n) {
            let ids: Vec<String> = shared.nodes.iter().map(|x| x.id.to_string()).collect();
            return Err(format!(
                "this pool has no regions on NUMA node {n} (its nodes: {}); ask one of those or no node",
                ids.join(", ")
            ));
        }
    }
    let len = bytes.div_ceil(page.bytes()) * page.bytes();
    let mut st = shared.lock();
    let Some(i) = st
        .slots
        .iter()
        .position(|s| s.region.state() == State::Clean && node.is_none_or(|n| s.node == n))
    else {
        if let Some(n) = node {
            let on: Vec<&Slot> = st.slots.iter().filter(|s| s.node == n).collect();
            return Err(format!(
                "no clean region on NUMA node {n} now ({} of its {} regions leased); retry shortly, ask another node, or grow the pool with --size",
                on.iter().filter(|s| s.region.state().name() == "leased").count(),
                on.len()
            ));
        }
        let count = |name: &str| {
            st.slots
                .iter()
                .filter(|s| s.region.state().name() == name)
                .count()
        };
        return Err(format!(
            "no clean region now ({} leased, {} scrubbing, {} dirty of {}); retry shortly or grow the pool with --size",
            count("leased"),
            count("scrubbing"),
            count("dirty"),
            st.slots.len()
        ));
    };
    st.counters.next_lease += 1;
    let id = st.counters.next_lease;
    st.slots[i]
        .region
        .lease(id)
        .expect("clean regions can be leased");
    st.slots[i].fresh = false;
    st.counters.leases_total += 1;
    shared.metrics.leases.inc();
    shared.changed.notify_all();
    Ok((
        LeaseInfo {
            id,
            region: i,
            offset: 0,
            len,
            page,
            verified: c.verify,
            node: Some(st.slots[i].node),
        },
        st.slots[i].mem.clone().expect("clean regions have memory"),
    ))
}

/// The lease is over: the region is dirty, and the scrubber gives it new
/// memory before anyone leases it again. The `/proc` scan here is only a
/// report (`retired_total`, a log line naming the pids): safety does not
/// depend on it, because no page or file of a returned region is reused,
/// and many holders are invisible to it anyway (fds in flight, pipe pages,
/// io_uring buffers, other PID namespaces, `hidepid`).
fn end_lease(shared: &Shared, index: usize, lease: u64) {
    let (dev, ino) = shared.lock().slots[index]
        .mem
        .as_ref()
        .expect("leased regions have memory")
        .identity();
    // A lessee that exits closes its fds in fd order, so the socket can
    // reach EOF here while the same dying process still shows the memfd:
    // give such holders a moment to vanish before reporting them.
    let mut holders = crate::holders::other_holders(dev, ino);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while !holders.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        holders = crate::holders::other_holders(dev, ino);
    }
    let mut st = shared.lock();
    if let Err(e) = st.slots[index].region.release(lease) {
        eprintln!("zerostart pool: {e}; marking it dirty");
    }
    if !holders.is_empty() {
        eprintln!(
            "zerostart pool: region {index}: lease {lease} ended but pid(s) {holders:?} still hold its memory; it is retired like every returned region (never leased again)"
        );
        st.counters.retired_total += 1;
        shared.metrics.retired.inc();
    }
    st.slots[index].fresh = false;
    st.slots[index].region.distrust();
    shared.changed.notify_all();
}

/// A named hugetlbfs file about to be replaced is unlinked first: its
/// holders keep the old inode, the replacement is a new file (and the
/// daemon's own lock on the old one does not block it).
fn unlink_named(mem: &RegionMemory) {
    if let Source::Hugetlbfs(path) = mem.source() {
        let _ = std::fs::remove_file(path);
    }
}

fn status(shared: &Shared) -> Status {
    let c = &shared.config;
    let st = shared.lock();
    let bytes = |name: &str| {
        st.slots
            .iter()
            .filter(|s| s.region.state().name() == name)
            .count() as u64
            * c.region_bytes
    };
    let k = &st.counters;
    Status {
        version: VERSION,
        pid: std::process::id(),
        page: c.page,
        backing: match &c.hugetlbfs {
            None => "memfd".into(),
            Some(d) => d.display().to_string(),
        },
        size_bytes: c.size,
        region_bytes: c.region_bytes,
        regions: st.slots.len(),
        clean_bytes: bytes("clean"),
        dirty_bytes: bytes("dirty"),
        scrubbing_bytes: bytes("scrubbing"),
        leased_bytes: bytes("leased"),
        verify: c.verify,
        backend: if k.backend.is_empty() {
            shared.backend_name.clone()
        } else {
            k.backend.to_string()
        },
        scrubbed_bytes: k.scrubbed_bytes,
        scrub_gib_s_last: k.last_gib_s,
        scrub_gib_s_avg: if k.scrub_secs > 0.0 {
            k.scrubbed_bytes as f64 / (1u64 << 30) as f64 / k.scrub_secs
        } else {
            0.0
        },
        leases_total: k.leases_total,
        retired_total: k.retired_total,
        scrub_failures: k.scrub_failures,
    }
}

/// Sets the metrics' per-state gauges from the pool state (at each scrape).
fn refresh_gauges(shared: &Shared) {
    let st = shared.lock();
    let mut counts = [0u64; 4];
    for slot in &st.slots {
        let name = slot.region.state().name();
        if let Some(i) = crate::metrics::STATES.iter().position(|&s| s == name) {
            counts[i] += 1;
        }
    }
    drop(st);
    shared
        .metrics
        .set_states(counts, shared.config.region_bytes);
}

/// The first fill's progress bar on stderr (indicatif draws nothing when
/// stderr is not a terminal, so logs stay clean).
fn fill_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "zerostart pool: first fill {bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
        )
        .expect("a valid template"),
    );
    bar
}
