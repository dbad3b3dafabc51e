//! `auto`: choosing the fastest backend for this machine by measuring.
//!
//! Which backend wins depends on the CPU and memory system, so instead of
//! a table of CPU models the first large job calibrates, once per process:
//!
//! * The buffer is private, touched first (page faults would dominate
//!   otherwise), and 4× the last-level cache (clamped to 64..256 MiB; 128
//!   MiB here), so a pass cannot stay in cache.
//! * Each candidate zeroes the whole buffer in timed passes, each after an
//!   untimed pass of ordinary stores (so every pass starts from memory
//!   that held data, as guest RAM and pool regions do), issued in the
//!   engine's large-job chunk size; the candidates rotate their order each
//!   round and a first round (first-touch faults) is not counted. The
//!   estimate is the mean of the three fastest passes that no worker was
//!   preempted in (all passes if a machine is too busy for them): a busy machine
//!   (preemption, other tenants' memory traffic) only ever slows a pass,
//!   and under a load of 3 runnable threads per CPU nearly every pass
//!   longer than a time slice is preempted. The first version
//!   took the median of 8 MiB windows and ranked clzero above AVX-512 NT
//!   on an EPYC whose sustained 2 GiB passes ranked them the other way
//!   (docs: `zerostart bench zero`): short windows measure bursts the
//!   memory system absorbs, not the sustained store rate.
//! * Candidates: every available backend, except that `portable` is
//!   skipped when `rep stosb` exists (glibc's `memset` is `rep stosb` for
//!   large sizes) and `movnti` when a vector NT backend exists (same
//!   protocol, 8-byte instead of 32/64-byte stores).
//! * The fastest non-temporal candidate wins unless a cache-allocating one
//!   is more than [`CACHED_MARGIN`] faster: throughput alone does not show
//!   that a cache-allocating pass over GiBs evicts everyone's working set.
//! * One warm-up and eight counted rounds always run (≈0.1 s of stores on
//!   this machine plus the touch); more rounds, up to 64, run until no
//!   estimate rose by 1 % in six rounds, or [`CALIBRATION_BUDGET`] (per
//!   thread) is spent. A single best pass (the previous rule) was the
//!   luckiest of many noisy draws: in one run on a shared host it put
//!   clzero 8 % ahead of AVX2/AVX-512 NT, which sustained 2 GiB passes in
//!   the same process measured 10 % faster than clzero.
//!
//! Ties and decisions (issue 33): candidates within [`TIE_BAND`] (5 %)
//! of the rule's pick are a tie, broken by how each scales with threads
//! ([`pick_robust`]); every thread count is decided on its own
//! ([`calibration_for`]), with per-worker buffers bounded at host scale
//! ([`per_thread_bytes`]). Each decision is cached per CPU model, feature
//! set and thread count ([`crate::autocache`]), so it is made once per
//! machine, and an operator can pin the backend ([`PIN_ENV`], [`pin`]).
//!
//! Small jobs (below [`small_threshold`], half the cache) do not use the calibrated
//! backend: their data is likely wanted in cache soon (page tables, boot
//! structures, a just-allocated buffer), and non-temporal stores would push
//! it out to DRAM, so they use cache-allocating `rep stosb` (or `memset`,
//! if that measures faster: see [`small_backend`]).
//!
//! The cost is dominated by touching the buffer: ≈0.1 s on ordinary
//! hardware, up to ≈1 s on a machine whose memory is backed lazily
//! underneath (first touch ≈0.4 GiB/s; those pages are then reused by the
//! guest RAM mapped next, which would have paid for them anyway). A VMM
//! hides it with [`start_calibration`] at process start; callers that know
//! the answer choose a fixed backend with [`crate::Choice::Backend`].

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{kernels, Backend};

/// The smallest [`small_threshold`]: below 1 MiB a job is always small.
pub const SMALL_THRESHOLD: usize = 1 << 20;
/// The largest [`small_threshold`].
pub const MAX_SMALL_THRESHOLD: usize = 64 << 20;

/// Jobs smaller than this use [`small_backend`] under [`crate::Choice::Auto`]:
/// half the last-level cache (from sysfs; 16 MiB on the development
/// machine), clamped to [`SMALL_THRESHOLD`]..=[`MAX_SMALL_THRESHOLD`].
///
/// A job that fits in half the cache leaves its zeros cache-resident for
/// whoever reads them next without evicting everything else, so ordinary
/// stores win (criterion, 2 MiB: `rep stosb` ≈ 16 GiB/s against ≈ 11 GiB/s
/// for NT stores when the buffer is reused). Guest RAM regions are far
/// larger than any cache and store-bandwidth bound: they take the
/// calibrated backend.
pub fn small_threshold() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| threshold_for_llc(llc_bytes()))
}

fn threshold_for_llc(llc: Option<usize>) -> usize {
    llc.map_or(SMALL_THRESHOLD, |c| {
        (c / 2).clamp(SMALL_THRESHOLD, MAX_SMALL_THRESHOLD)
    })
}

/// Calibration stops starting new rounds after this much time (times the
/// thread count) once its minimum rounds are done.
pub const CALIBRATION_BUDGET: Duration = Duration::from_millis(500);

/// The calibration buffer is a whole number of this many pieces (it is
/// sized in 2 MiB steps for hugepages: a multiple of 16 pieces keeps
/// every piece 2 MiB aligned when split among workers).
pub const WINDOWS: usize = 16;

/// The measurement (or the cached or pinned decision) behind
/// [`auto_backend_threads`] for one thread count.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The backend `auto` uses for large jobs at this thread count.
    pub backend: Backend,
    /// Estimate per measured candidate (the mean of its fastest passes),
    /// aggregate GiB/s over the calibration's threads, in
    /// [`Backend::ALL`] order. From the cache when [`Calibration::source`]
    /// is [`Source::Cached`]; empty when pinned.
    pub gib_per_s: Vec<(Backend, f64)>,
    /// Wall time spent deciding, including touching the buffers (and any
    /// measurement a tie-break needed).
    pub elapsed: Duration,
    /// Size of the calibration buffers, all threads together (0 when
    /// nothing was measured in this process).
    pub buffer_bytes: usize,
    /// The thread count it is for.
    pub threads: usize,
    /// Where the decision came from.
    pub source: Source,
    /// The candidates within [`TIE_BAND`] of the rule's pick ([`tie_set`]);
    /// one entry when there was no tie.
    pub tied: Vec<Backend>,
    /// The scaling that broke a tie, per tied backend ([`pick_robust`]);
    /// empty when there was no tie.
    pub scaling: Vec<(Backend, f64)>,
}

/// Where a [`Calibration`]'s decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Measured in this process (and written to the cache).
    Measured,
    /// Read from the decision cache ([`crate::autocache`]).
    Cached,
    /// Pinned by the operator ([`PIN_ENV`] or [`pin`]).
    Pinned,
}

impl Source {
    /// Name in reports: `measured`, `cached` or `pinned`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Cached => "cached",
            Source::Pinned => "pinned",
        }
    }
}

/// Environment variable that pins `auto`'s backend for large jobs, e.g.
/// `ZEROSTART_AUTO_BACKEND=avx2_nt`: no calibration runs and the cache is
/// not read. For an operator who has measured their host (`zerostart
/// bench host`), or who must rule a backend out. Small jobs keep their
/// cache-allocating backend ([`small_backend`]).
pub const PIN_ENV: &str = "ZEROSTART_AUTO_BACKEND";

/// Two candidates whose estimates differ by less than this fraction of
/// the faster one are a tie: the same backend measured twice in one
/// process differs by 1-4 % here, and ci13's 2-thread calibration had
/// clzero 56.7 against AVX2 NT 55.3 GiB/s (2.5 %) and then measured AVX2
/// NT 15 % ahead. A tie is broken by scaling ([`pick_robust`]), not by
/// which draw was luckier.
pub const TIE_BAND: f64 = 0.05;

static PINNED: OnceLock<Backend> = OnceLock::new();

/// Pins `auto`'s backend for large jobs in this process (the CLI form of
/// [`PIN_ENV`]; it wins over the variable). Call it before the first
/// large `auto` job: a thread count already decided keeps its decision.
pub fn pin(backend: Backend) -> Result<(), crate::Error> {
    if !backend.is_available() {
        return Err(crate::Error::unavailable(backend));
    }
    let _ = PINNED.set(backend);
    Ok(())
}

/// The pinned backend, if any: [`pin`]'s, else [`PIN_ENV`]'s. A name
/// that is not a backend, or one this CPU lacks, is an error (CLIs check
/// it at start; `auto` itself warns once and calibrates).
pub fn pinned() -> Result<Option<Backend>, crate::Error> {
    if let Some(b) = PINNED.get() {
        return Ok(Some(*b));
    }
    parse_pin(std::env::var(PIN_ENV).ok().as_deref())
}

/// [`PIN_ENV`]'s value as a pin: unset or blank is none.
fn parse_pin(v: Option<&str>) -> Result<Option<Backend>, crate::Error> {
    match v.map(str::trim) {
        Some(v) if !v.is_empty() => {
            let b: Backend = v.parse()?;
            if !b.is_available() {
                return Err(crate::Error::unavailable(b));
            }
            Ok(Some(b))
        }
        _ => Ok(None),
    }
}

/// The calibrated fastest backend for large jobs on this machine.
///
/// The first call measures (bounded: about [`CALIBRATION_BUDGET`]); later
/// calls return the cached answer.
pub fn auto_backend() -> Backend {
    calibration().backend
}

/// Starts the calibration on a background thread and returns at once, so a
/// VMM can overlap it with loading the kernel and setting up KVM; the
/// first [`auto_backend`] call then waits only for what is left. Calling
/// it again, or after calibration, does nothing.
pub fn start_calibration() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("prezero-calibrate".into())
            .spawn(|| {
                calibration();
            });
        // Without a thread the first auto job calibrates inline instead.
        drop(spawned);
    });
}

/// The one-thread decision (see [`calibration_for`]).
pub fn calibration() -> &'static Calibration {
    calibration_for(1)
}

/// The backend [`crate::Choice::Auto`] uses for jobs below
/// [`small_threshold`]: the faster cache-allocating backend, `rep stosb`
/// or the C library's `memset` ([`Backend::Portable`]), on a 256 KiB
/// cache-resident buffer. Measured once (well under a millisecond); `rep
/// stosb` wins ties within 5 %. Without ERMS it is always `memset`.
pub fn small_backend() -> Backend {
    static SMALL: OnceLock<Backend> = OnceLock::new();
    *SMALL.get_or_init(|| {
        if !Backend::RepStosb.is_available() {
            return Backend::Portable;
        }
        let mut buf = vec![1u8; 256 << 10];
        let mut time = |b: Backend| {
            (0..16)
                .map(|_| {
                    let t = Instant::now();
                    // SAFETY: our own buffer; both backends are available.
                    unsafe { kernels::zero(b, buf.as_mut_ptr(), buf.len()) };
                    t.elapsed()
                })
                .min()
                .unwrap_or_default()
        };
        let (rep, memset) = (time(Backend::RepStosb), time(Backend::Portable));
        if rep.as_secs_f64() <= memset.as_secs_f64() * 1.05 {
            Backend::RepStosb
        } else {
            Backend::Portable
        }
    })
}

/// The backend [`crate::Choice::Auto`] uses for a job of `len` bytes.
pub fn auto_backend_for(len: usize) -> Backend {
    if len < small_threshold() {
        small_backend()
    } else {
        auto_backend()
    }
}

/// The calibrated fastest backend for large jobs that run on `threads`
/// workers.
///
/// Why per thread count: the fastest backend on one thread need not be the
/// fastest on several. On an AMD EPYC with avx2 and clzero, `auto`
/// calibrated on one thread chose clzero and ran at 0.85x the best backend
/// on two threads, where AVX2 NT stores were faster (the memory system
/// saturates differently). One thread uses [`calibration`]; each other
/// count is measured once, on first use, with that many threads zeroing
/// their own buffers at the same time, and cached for the process.
pub fn auto_backend_threads(threads: usize) -> Backend {
    calibration_for(threads).backend
}

/// The decision behind [`auto_backend_threads`], made once per process
/// and thread count: the pinned backend if there is one ([`pinned`]),
/// else the cached decision for this CPU and thread count
/// ([`crate::autocache`]), else a measurement at `threads` picked by
/// [`pick_robust`] (and cached).
pub fn calibration_for(threads: usize) -> &'static Calibration {
    once_per(threads.max(1), &DECIDED, decide)
}

/// Calibrations per thread count, each made once (bounded: one per thread
/// count a process uses, at most the CPU count, kept for its life).
type PerThreads = std::sync::Mutex<Vec<(usize, &'static OnceLock<Calibration>)>>;
static DECIDED: PerThreads = std::sync::Mutex::new(Vec::new());
static MEASURED: PerThreads = std::sync::Mutex::new(Vec::new());

/// `make(threads)` once per thread count; the lock is not held while it
/// runs, so a decision may measure other thread counts.
fn once_per(
    threads: usize,
    table: &'static PerThreads,
    make: fn(usize) -> Calibration,
) -> &'static Calibration {
    let cell: &'static OnceLock<Calibration> = {
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        match t.iter().find(|(n, _)| *n == threads) {
            Some((_, c)) => c,
            None => {
                let c: &'static OnceLock<Calibration> = Box::leak(Box::new(OnceLock::new()));
                t.push((threads, c));
                c
            }
        }
    };
    cell.get_or_init(|| make(threads))
}

/// The raw measurement at `threads` (once per process).
fn measured(threads: usize) -> &'static Calibration {
    once_per(threads, &MEASURED, calibrate_threads)
}

fn decide(threads: usize) -> Calibration {
    let start = Instant::now();
    match pinned() {
        Ok(Some(b)) => {
            return Calibration {
                backend: b,
                gib_per_s: Vec::new(),
                elapsed: start.elapsed(),
                buffer_bytes: 0,
                threads,
                source: Source::Pinned,
                tied: vec![b],
                scaling: Vec::new(),
            }
        }
        Ok(None) => {}
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("prezero: ignoring {PIN_ENV}: {e}"));
        }
    }
    let candidates = candidates();
    let key = crate::autocache::Key::here(threads, &candidates);
    let cache = crate::autocache::path();
    if let Some(path) = &cache {
        if let crate::autocache::Lookup::Hit(e) = crate::autocache::load(path, &key) {
            let named = |v: &[(String, f64)]| -> Vec<(Backend, f64)> {
                v.iter()
                    .filter_map(|(n, g)| n.parse().ok().map(|b| (b, *g)))
                    .collect()
            };
            if let Ok(backend) = e.backend.parse() {
                return Calibration {
                    backend,
                    gib_per_s: named(&e.gib_per_s),
                    elapsed: start.elapsed(),
                    buffer_bytes: 0,
                    threads,
                    source: Source::Cached,
                    tied: e.tied.iter().filter_map(|n| n.parse().ok()).collect(),
                    scaling: named(&e.scaling),
                };
            }
        }
    }
    let here = measured(threads);
    let tied = tie_set(&here.gib_per_s);
    let scaling = if tied.len() > 1 {
        scaling_for(threads, &here.gib_per_s, &tied)
    } else {
        Vec::new()
    };
    let backend = if here.gib_per_s.is_empty() {
        here.backend // nothing measured: the fallback
    } else {
        pick_robust(&here.gib_per_s, &scaling).unwrap_or(here.backend)
    };
    let c = Calibration {
        backend,
        gib_per_s: here.gib_per_s.clone(),
        // The measurement may have run earlier, for another thread
        // count's tie-break: count it anyway.
        elapsed: start.elapsed().max(here.elapsed),
        buffer_bytes: here.buffer_bytes,
        threads,
        source: Source::Measured,
        tied,
        scaling,
    };
    if let (Some(path), false) = (&cache, c.gib_per_s.is_empty()) {
        let names =
            |v: &[(Backend, f64)]| v.iter().map(|(b, g)| (b.name().to_string(), *g)).collect();
        let entry = crate::autocache::Entry {
            key,
            backend: c.backend.name().to_string(),
            gib_per_s: names(&c.gib_per_s),
            scaling: names(&c.scaling),
            tied: c.tied.iter().map(|b| b.name().to_string()).collect(),
        };
        // A cache that cannot be written costs the next process a
        // calibration, nothing else.
        if let Err(e) = crate::autocache::store(path, entry) {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "prezero: cannot write the auto cache {}: {e}; set {}=off or a writable path",
                    path.display(),
                    crate::autocache::CACHE_ENV
                )
            });
        }
    }
    c
}

/// How each tied backend scales, the tie-break of [`pick_robust`]: at
/// `threads` > 1, its aggregate here over its one-thread rate (the one
/// that gains more from more threads is the one the memory system
/// favours when it saturates, which is where large jobs run); at one
/// thread, its two-thread rate over its one-thread rate (measured only
/// when there is a tie, and only on a machine with two CPUs).
fn scaling_for(threads: usize, here: &[(Backend, f64)], tied: &[Backend]) -> Vec<(Backend, f64)> {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    type Rates<'a> = &'a [(Backend, f64)];
    let (num, den): (Rates, Rates) = if threads > 1 {
        (here, &measured(1).gib_per_s)
    } else if ncpu >= 2 {
        (&measured(2).gib_per_s, here)
    } else {
        return Vec::new();
    };
    let rate = |v: &[(Backend, f64)], b: Backend| v.iter().find(|m| m.0 == b).map(|m| m.1);
    tied.iter()
        .filter_map(|&b| match (rate(num, b), rate(den, b)) {
            (Some(n), Some(d)) if d > 0.0 => Some((b, n / d)),
            _ => None,
        })
        .collect()
}

/// The candidates tied with [`pick`]'s choice: of the same kind
/// (non-temporal or cache-allocating) and within [`TIE_BAND`] of it,
/// fastest first. Empty when nothing was measured.
pub fn tie_set(measured: &[(Backend, f64)]) -> Vec<Backend> {
    let Some(p) = pick(measured) else {
        return Vec::new();
    };
    let top = measured.iter().find(|m| m.0 == p).map_or(0.0, |m| m.1);
    let mut tied: Vec<(Backend, f64)> = measured
        .iter()
        .filter(|m| m.0.is_non_temporal() == p.is_non_temporal() && m.1 >= top * (1.0 - TIE_BAND))
        .copied()
        .collect();
    tied.sort_by(|a, b| b.1.total_cmp(&a.1));
    tied.into_iter().map(|m| m.0).collect()
}

/// `auto`'s rule: [`pick`]'s choice, unless other candidates are tied
/// with it ([`tie_set`]); then the tied candidate that scales best
/// (`scaling`, per backend, higher is better), if it scales more than
/// [`TIE_BAND`] better than the fastest one. Without scaling for every
/// tied candidate (a one-CPU machine), or when the scaling is itself
/// within the band, the fastest stays.
///
/// Why scaling: a tie is a coin toss between draws of noise, and the
/// measured run in ci13 went the other way by 15 %. What separates tied
/// backends is how they behave as the memory system saturates, which is
/// where large jobs run (every CPU zeroes guest RAM at once).
pub fn pick_robust(measured: &[(Backend, f64)], scaling: &[(Backend, f64)]) -> Option<Backend> {
    let fastest = pick(measured)?;
    let tied = tie_set(measured);
    let score = |b: Backend| scaling.iter().find(|s| s.0 == b).map(|s| s.1);
    if tied.len() < 2 || tied.iter().any(|&b| score(b).is_none()) {
        return Some(fastest);
    }
    let best = tied
        .iter()
        .copied()
        .max_by(|&a, &b| score(a).unwrap_or(0.0).total_cmp(&score(b).unwrap_or(0.0)))
        .unwrap_or(fastest);
    let (sb, sf) = (score(best).unwrap_or(0.0), score(fastest).unwrap_or(0.0));
    Some(if sb > sf * (1.0 + TIE_BAND) {
        best
    } else {
        fastest
    })
}

/// The calibration at `threads`: each worker zeroes its own buffer of
/// [`per_thread_bytes`] at the same time, aggregate GiB/s per candidate.
/// (Half of [`buffer_bytes`] per worker, the first version, made a
/// two-thread pass ≈1 ms here: short enough for the memory system to
/// absorb, and it ranked clzero first where 2 GiB passes ranked it
/// 0.92x of AVX-512 NT.)
fn calibrate_threads(threads: usize) -> Calibration {
    let mut c = measure(threads, per_thread_bytes(threads), || {
        if threads <= 1 {
            small_backend()
        } else {
            measured(1).backend
        }
    });
    c.threads = threads;
    c
}

/// All calibration buffers together stay below this: on a 192-thread
/// host, 256 MiB each would be 48 GiB.
pub const MAX_CALIBRATION_TOTAL: usize = 4 << 30;

/// Per-worker calibration buffer at `threads`: [`buffer_bytes`], less
/// when `threads` of them would pass [`MAX_CALIBRATION_TOTAL`] (but never
/// below 32 MiB, so a pass stays sustained), in 32 MiB steps.
pub fn per_thread_bytes(threads: usize) -> usize {
    let step = 32 << 20;
    let fit = (MAX_CALIBRATION_TOTAL / threads.max(1)) / step * step;
    buffer_bytes().min(fit.max(step))
}

/// Most rounds over all candidates (the first is a warm-up, not counted).
const MAX_ROUNDS: usize = 64;
/// Rounds without a candidate's estimate rising by 1 % after which the
/// calibration stops (after [`MIN_ROUNDS`]).
const SETTLED_ROUNDS: usize = 6;
/// A candidate's estimate is the mean of its this many fastest passes.
const TOP: usize = 3;

/// Mean of the [`TOP`] highest of `v` (all, if fewer; 0 for none); sorts
/// `v` descending.
fn top_mean(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| b.total_cmp(a));
    let top = &v[..v.len().min(TOP)];
    if top.is_empty() {
        0.0
    } else {
        top.iter().sum::<f64>() / top.len() as f64
    }
}
/// Counted rounds that always run, whatever the budget.
const MIN_ROUNDS: usize = 8;

/// One timed pass of `b` over every worker's buffer, `threads` at once:
/// each worker first dirties its own buffer with ordinary stores
/// (untimed), all start together, and the result is the aggregate GiB/s
/// from the first start to the last end. The zeroing is issued in calls
/// of at most [`crate::plan::MAX_CHUNK`], the chunk size the engine gives
/// large jobs (`rep stosb` changes strategy with the call size).
fn pass(bufs: &[(usize, usize)], b: Backend) -> Pass {
    let work = |p: usize, l: usize| {
        let mut off = 0;
        while off < l {
            let n = (l - off).min(crate::plan::MAX_CHUNK);
            // SAFETY: inside this worker's own buffer; b is available.
            unsafe { kernels::zero(b, (p + off) as *mut u8, n) };
            off += n;
        }
    };
    let dirty = |p: usize, l: usize| {
        // SAFETY: this worker's own buffer.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0x5a, l) };
    };
    let bytes: usize = bufs.iter().map(|x| x.1).sum();
    let mut preempted = false;
    let span = if let [(p, l)] = *bufs {
        dirty(p, l);
        let (t, cs) = (Instant::now(), involuntary_switches());
        work(p, l);
        preempted = involuntary_switches() != cs;
        t.elapsed()
    } else {
        let barrier = std::sync::Barrier::new(bufs.len());
        std::thread::scope(|s| {
            let hs: Vec<_> = bufs
                .iter()
                .map(|&(p, l)| {
                    let (barrier, work, dirty) = (&barrier, &work, &dirty);
                    s.spawn(move || {
                        dirty(p, l);
                        barrier.wait();
                        let (t, cs) = (Instant::now(), involuntary_switches());
                        work(p, l);
                        (t, Instant::now(), involuntary_switches() != cs)
                    })
                })
                .collect();
            let spans: Vec<(Instant, Instant)> = hs
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .map(|(a, b, p)| {
                    preempted |= p;
                    (a, b)
                })
                .collect();
            let first = spans.iter().map(|s| s.0).min().expect("threads > 1");
            let last = spans.iter().map(|s| s.1).max().expect("threads > 1");
            last.duration_since(first)
        })
    };
    Pass {
        gib_per_s: bytes as f64 / span.as_secs_f64().max(1e-9) / (1u64 << 30) as f64,
        preempted,
    }
}

/// One timed pass.
struct Pass {
    /// Aggregate throughput.
    gib_per_s: f64,
    /// Some worker was switched out involuntarily during it: on a busy
    /// machine its time measures the scheduler, not the stores.
    preempted: bool,
}

/// Involuntary context switches of the calling thread so far (0 if the
/// kernel will not say).
fn involuntary_switches() -> i64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return 0;
        }
        ru.ru_nivcsw
    }
}

/// Measures every candidate with `threads` workers, `per` bytes each,
/// in whole passes (see [`pass`]); `fallback` is the answer when no
/// buffer can be mapped.
///
/// Why whole passes over memory that held data, and the best pass: the
/// large jobs auto serves (guest RAM, pool regions) are sustained streams
/// over memory that held data, far larger than any cache. Short timed
/// windows over an already zeroed buffer (the first version) measured
/// bursts the memory system absorbs and ranked backends differently from
/// the sustained rate: on an EPYC with avx512f and clzero, 8 MiB windows
/// ranked clzero above AVX-512 NT, 2 GiB passes the other way. Noise
/// from a busy machine (preemption, other tenants' traffic) only ever
/// slows a pass, so the mean of the fastest undisturbed passes is the
/// estimate, as in `zerostart bench zero`; the candidates run in a rotated order,
/// reversed every other round, so no backend always follows the same one.
fn measure(threads: usize, per: usize, fallback: impl Fn() -> Backend) -> Calibration {
    let start = Instant::now();
    let candidates = candidates();
    let bufs: Option<Vec<hostmem::Mapping>> = (0..threads.max(1)).map(|_| buffer(per)).collect();
    let Some(bufs) = bufs else {
        return Calibration {
            backend: fallback(),
            gib_per_s: Vec::new(),
            elapsed: start.elapsed(),
            buffer_bytes: 0,
            threads,
            source: Source::Measured,
            tied: Vec::new(),
            scaling: Vec::new(),
        };
    };
    let ptrs: Vec<(usize, usize)> = bufs
        .iter()
        .map(|b| (b.as_ptr() as usize, b.len()))
        .collect();
    // Every counted pass per candidate: [undisturbed, all].
    let mut runs: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()]; candidates.len()];
    // The estimate per candidate and the round it last rose by >1 %.
    let mut est = vec![0.0f64; candidates.len()];
    let mut rose = vec![0usize; candidates.len()];
    for round in 0..MAX_ROUNDS {
        let settled = rose.iter().all(|&r| round >= r + SETTLED_ROUNDS);
        if round > MIN_ROUNDS && (settled || start.elapsed() > CALIBRATION_BUDGET * threads as u32)
        {
            break;
        }
        for k in 0..candidates.len() {
            // Rotated, and reversed every other round, so each candidate
            // follows every other one.
            let k = if round % 2 == 1 {
                candidates.len() - 1 - k
            } else {
                k
            };
            let i = (k + round / 2) % candidates.len();
            let p = pass(&ptrs, candidates[i]);
            // Round 0 pays for first-touch faults: not counted.
            if round > 0 {
                if !p.preempted {
                    runs[i][0].push(p.gib_per_s);
                }
                runs[i][1].push(p.gib_per_s);
                let e = top_mean(&mut runs[i][1]);
                if e > est[i] * 1.01 {
                    rose[i] = round;
                }
                est[i] = e;
            }
        }
    }
    // Undisturbed passes only, when every candidate had enough of them (a
    // machine too busy for that falls back to all passes).
    let col = usize::from(runs.iter().any(|r| r[0].len() < TOP));
    let measured: Vec<(Backend, f64)> = candidates
        .into_iter()
        .zip(runs.iter_mut().map(|r| top_mean(&mut r[col])))
        .collect();
    Calibration {
        backend: pick(&measured).unwrap_or_else(&fallback),
        gib_per_s: measured,
        elapsed: start.elapsed(),
        buffer_bytes: per * ptrs.len(),
        threads,
        source: Source::Measured,
        tied: Vec::new(),
        scaling: Vec::new(),
    }
}

/// An anonymous private mapping for one calibration worker (`None` if it
/// cannot be mapped).
fn buffer(len: usize) -> Option<hostmem::Mapping> {
    let m = hostmem::Mapping::anonymous(len).map().ok()?;
    // Guest RAM is hugepage backed; measure with the same TLB reach.
    // Failure (THP compiled out) is harmless.
    let _ = m.advise(libc::MADV_HUGEPAGE);
    Some(m)
}

/// The backends worth measuring (see the module docs for the pruning).
pub fn candidates() -> Vec<Backend> {
    let avail = crate::available_backends();
    let has = |b| avail.contains(&b);
    avail
        .iter()
        .copied()
        .filter(|&b| match b {
            Backend::Portable => !has(Backend::RepStosb),
            Backend::Movnti => !has(Backend::Avx2Nt) && !has(Backend::Avx512Nt),
            _ => true,
        })
        .collect()
}

/// A cache-allocating backend must beat the best non-temporal one by this
/// factor to be chosen for large jobs: its measured speed leaves out what
/// it costs everyone else (a job of GiBs flushes every cache of the
/// machine), and a short calibration flatters it (see module docs).
pub const CACHED_MARGIN: f64 = 1.2;

/// Chooses from measured (backend, GiB/s) pairs: the fastest
/// non-temporal backend unless a cache-allocating one is more than
/// [`CACHED_MARGIN`] faster. Public so that a benchmark judges `auto`
/// against what this same rule picks from its own numbers, not against
/// a raw maximum the rule declines on purpose.
pub fn pick(measured: &[(Backend, f64)]) -> Option<Backend> {
    let best = |nt: bool| {
        measured
            .iter()
            .filter(|m| m.0.is_non_temporal() == nt)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .copied()
    };
    match (best(true), best(false)) {
        (Some(nt), Some(c)) if c.1 > nt.1 * CACHED_MARGIN => Some(c.0),
        (Some(nt), _) => Some(nt.0),
        (None, c) => c.map(|c| c.0),
    }
}

/// Last-level cache size of CPU 0 from sysfs (largest `index*/size`).
fn llc_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| {
            let s = s.trim();
            let (n, mult) = match s.strip_suffix('K') {
                Some(n) => (n, 1 << 10),
                None => match s.strip_suffix('M') {
                    Some(n) => (n, 1 << 20),
                    None => (s, 1),
                },
            };
            n.parse::<usize>().ok().map(|n| n * mult)
        })
        .max()
}

/// Calibration buffer size: 4× the last-level cache, 64..256 MiB.
pub(crate) fn buffer_bytes() -> usize {
    (llc_bytes().unwrap_or(32 << 20) * 4).clamp(64 << 20, 256 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_count_is_calibrated_once() {
        let c = candidates();
        let two = calibration_for(2);
        assert!(c.contains(&two.backend), "{two:?}");
        assert_eq!(two.gib_per_s.len(), c.len(), "every candidate measured");
        assert!(two.gib_per_s.iter().all(|(_, g)| *g > 0.0), "{two:?}");
        // Cached: the same measurement, not a second one.
        assert!(std::ptr::eq(two, calibration_for(2)));
        assert!(std::ptr::eq(calibration_for(1), calibration()));
        assert_eq!(auto_backend_threads(2), two.backend);
    }

    #[test]
    fn small_jobs_stay_cache_friendly() {
        // Below the threshold Auto never picks a non-temporal backend ...
        let t = small_threshold();
        assert!((SMALL_THRESHOLD..=MAX_SMALL_THRESHOLD).contains(&t));
        for len in [0, 1, 4096, 64 << 10, SMALL_THRESHOLD - 1, t - 1] {
            let b = auto_backend_for(len);
            assert!(!b.is_non_temporal(), "{len}: {b}");
            assert!(matches!(b, Backend::RepStosb | Backend::Portable));
            assert_eq!(b, small_backend());
        }
        // ... and at or above it, it takes the calibrated one.
        assert_eq!(auto_backend_for(t), auto_backend());
        assert_eq!(auto_backend_for(MAX_SMALL_THRESHOLD), auto_backend());
        assert_eq!(auto_backend_for(1 << 30), auto_backend());
    }

    #[test]
    fn threshold_follows_the_cache() {
        assert_eq!(threshold_for_llc(None), SMALL_THRESHOLD);
        assert_eq!(threshold_for_llc(Some(512 << 10)), SMALL_THRESHOLD);
        assert_eq!(threshold_for_llc(Some(32 << 20)), 16 << 20);
        assert_eq!(threshold_for_llc(Some(1 << 30)), MAX_SMALL_THRESHOLD);
    }

    #[test]
    fn pick_prefers_non_temporal_within_margin() {
        use Backend::*;
        assert_eq!(
            pick(&[(RepStosb, 11.0), (Avx2Nt, 24.0), (Avx512Nt, 25.0)]),
            Some(Avx512Nt)
        );
        assert_eq!(pick(&[(RepStosb, 28.0), (Avx512Nt, 25.0)]), Some(Avx512Nt));
        assert_eq!(pick(&[(RepStosb, 31.0), (Avx512Nt, 25.0)]), Some(RepStosb));
        assert_eq!(pick(&[(Portable, 5.0)]), Some(Portable));
        assert_eq!(pick(&[(Clzero, 5.0)]), Some(Clzero));
        assert_eq!(pick(&[]), None);
    }

    #[test]
    fn a_tie_is_called_a_tie() {
        use Backend::*;
        // ci13 at 2 threads: clzero 56.7, AVX2 NT 55.3 (2.5 % apart).
        let ci13 = [(RepStosb, 20.0), (Avx2Nt, 55.3), (Clzero, 56.7)];
        assert_eq!(tie_set(&ci13), vec![Clzero, Avx2Nt]);
        // Outside the band there is no tie, whatever the scaling says.
        let clear = [(Avx2Nt, 50.0), (Clzero, 56.7)];
        assert_eq!(tie_set(&clear), vec![Clzero]);
        assert_eq!(pick_robust(&clear, &[(Avx2Nt, 9.0)]), Some(Clzero));
        // The band is relative to the fastest: 5 % below it is still a tie,
        // 5.1 % is not.
        assert_eq!(tie_set(&[(Avx2Nt, 95.0), (Clzero, 100.0)]).len(), 2);
        assert_eq!(tie_set(&[(Avx2Nt, 94.9), (Clzero, 100.0)]).len(), 1);
        // A cache-allocating backend is never tied with a non-temporal one
        // (pick's margin decides between the kinds).
        assert_eq!(tie_set(&[(RepStosb, 56.0), (Avx2Nt, 56.5)]), vec![Avx2Nt]);
        assert_eq!(tie_set(&[]), Vec::<Backend>::new());
    }

    #[test]
    fn a_tie_goes_to_the_backend_that_scales() {
        use Backend::*;
        let ci13 = [(RepStosb, 20.0), (Avx2Nt, 55.3), (Clzero, 56.7)];
        // AVX2 NT gained 1.6x from the second thread, clzero 1.3x.
        let scaling = [(Avx2Nt, 1.6), (Clzero, 1.3)];
        assert_eq!(pick_robust(&ci13, &scaling), Some(Avx2Nt));
        // Scaling within the band is no reason to leave the fastest.
        assert_eq!(
            pick_robust(&ci13, &[(Avx2Nt, 1.33), (Clzero, 1.3)]),
            Some(Clzero)
        );
        // No scaling for every tied backend (a one-CPU machine): fastest.
        assert_eq!(pick_robust(&ci13, &[]), Some(Clzero));
        assert_eq!(pick_robust(&ci13, &[(Avx2Nt, 2.0)]), Some(Clzero));
        // Three tied: the best scaler of the three.
        let three = [(Avx512Nt, 55.0), (Avx2Nt, 54.0), (Clzero, 56.0)];
        let s = [(Avx512Nt, 1.9), (Avx2Nt, 1.5), (Clzero, 1.2)];
        assert_eq!(pick_robust(&three, &s), Some(Avx512Nt));
        // The kinds rule still comes first.
        assert_eq!(
            pick_robust(&[(RepStosb, 80.0), (Avx2Nt, 50.0)], &[(Avx2Nt, 3.0)]),
            Some(RepStosb)
        );
        assert_eq!(pick_robust(&[], &scaling), None);
    }

    #[test]
    fn pins_are_checked() {
        assert_eq!(parse_pin(None).unwrap(), None);
        assert_eq!(parse_pin(Some("  ")).unwrap(), None);
        assert_eq!(
            parse_pin(Some("portable")).unwrap(),
            Some(Backend::Portable)
        );
        assert_eq!(
            parse_pin(Some(" portable\n")).unwrap(),
            Some(Backend::Portable)
        );
        let e = parse_pin(Some("fastest")).unwrap_err().to_string();
        assert!(e.contains("unknown zeroing backend 'fastest'"), "{e}");
        if let Some(b) = Backend::ALL.into_iter().find(|b| !b.is_available()) {
            let e = parse_pin(Some(b.name())).unwrap_err().to_string();
            assert!(e.contains("not supported by this CPU"), "{e}");
        }
    }

    #[test]
    fn calibration_memory_is_bounded_at_host_scale() {
        assert_eq!(per_thread_bytes(1), buffer_bytes());
        for t in [1, 2, 16, 64, 192, 1024] {
            let p = per_thread_bytes(t);
            assert!(p >= 32 << 20 && p.is_multiple_of(32 << 20), "{t}: {p}");
            assert!(p * t <= MAX_CALIBRATION_TOTAL || p == 32 << 20, "{t}: {p}");
        }
        assert_eq!(per_thread_bytes(192), 32 << 20);
    }

    #[test]
    fn candidates_prune_dominated_backends() {
        let c = candidates();
        assert!(!c.is_empty() && c.iter().all(|b| b.is_available()));
        if Backend::RepStosb.is_available() {
            assert!(!c.contains(&Backend::Portable));
        }
        if Backend::Avx2Nt.is_available() {
            assert!(!c.contains(&Backend::Movnti));
        }
        let b = buffer_bytes();
        assert!((64 << 20..=256 << 20).contains(&b));
        assert_eq!(b % WINDOWS, 0);
    }

    #[test]
    fn background_calibration_agrees() {
        start_calibration();
        start_calibration();
        assert_eq!(auto_backend(), calibration().backend);
    }

    #[test]
    fn calibration_is_bounded_and_complete() {
        let c = calibration();
        assert!(c.backend.is_available());
        assert_eq!(c.gib_per_s.len(), candidates().len());
        assert!((64 << 20..=256 << 20).contains(&c.buffer_bytes));
        assert!(c.gib_per_s.iter().all(|&(_, g)| g > 0.0));
        // The pick follows the rule, not raw speed: a cache-allocating
        // backend up to CACHED_MARGIN faster loses to the best
        // non-temporal one (a CI machine measured exactly that), and a
        // tie goes to the backend that scales.
        assert_eq!(c.source, Source::Measured, "tests never read a cache");
        assert_eq!(
            Some(c.backend),
            pick_robust(&c.gib_per_s, &c.scaling),
            "{c:?}"
        );
        assert!(c.tied.contains(&c.backend), "{c:?}");
        assert_eq!(c.tied, tie_set(&c.gib_per_s));
        let best = c.gib_per_s.iter().map(|x| x.1).fold(0.0, f64::max);
        let chosen = c.gib_per_s.iter().find(|x| x.0 == c.backend).unwrap().1;
        assert!(
            chosen * CACHED_MARGIN >= best * (1.0 - TIE_BAND),
            "{:?}",
            c.gib_per_s
        );
        // One round + touching the buffer; generous for a loaded CI box and
        // unoptimized test builds.
        assert!(c.elapsed < Duration::from_secs(10), "{:?}", c.elapsed);
        // Cached: the same answer again.
        assert_eq!(auto_backend(), c.backend);
    }
}
