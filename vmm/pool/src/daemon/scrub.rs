//! The scrubbers: each takes dirty regions one at a time, gives them new
//! (or, under fault injection, re-zeroed) memory on an idle-priority
//! worker, and marks them clean. Several run at once (`Shared::scrubbers`),
//! on different regions: taking a region moves it to `scrubbing` under the
//! state lock, and no scrubber takes a region that is not `dirty`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::state::Remedy;
use super::Shared;
use crate::memory::{Fault, RegionMemory, Source};
use crate::Error;

pub(super) fn scrub_loop(shared: &Shared, zeroer: &prezero::Zeroer) {
    let c = &shared.config;
    let workers = shared.scrubbers.max(1);
    // The bandwidth cap is the pool's, shared by its scrubbers; so are the
    // CPUs of a verify pass.
    let bandwidth = shared
        .ops
        .scrub_bandwidth
        .map(|b| (b / workers as u64).max(1));
    let threads = match (workers, c.threads) {
        (1, t) => t,
        (w, 0) => (std::thread::available_parallelism().map_or(1, |n| n.get()) / w).max(1),
        (w, t) => (t / w).max(1),
    };
    loop {
        // Pick a dirty region and move it to scrubbing.
        let (index, old, remedy, done) = {
            let mut st = shared.lock();
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some((i, done)) = st.next_dirty() {
                    if let Some(Fault::StallBeforeScrub { after }) = c.fault {
                        if done >= after {
                            drop(st);
                            crate::memory::stall("before a scrub (region stays dirty)");
                        }
                    }
                    let (remedy, old) = st.begin_scrub(i, c.fault, done);
                    shared.changed.notify_all();
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
        // Other scrubbers move the same bar: add what this one did since
        // its last report.
        let shown = AtomicU64::new(0);
        let show = |done: u64| {
            if let Some(b) = bar {
                b.inc(done.saturating_sub(shown.swap(done, Ordering::Relaxed)));
            }
        };
        let mut pacer =
            crate::pace::Pacer::new(bandwidth, bar.map(|_| &show as &(dyn Fn(u64) + Sync)))
                .stop_on(&shared.stop);
        let res = match remedy {
            Remedy::InPlace(fault) => {
                let mem = old.expect("in-place scrubs keep their memory");
                // SAFETY: the region is `scrubbing`: not leased, not handed
                // out, and no other scrubber takes a region in that state.
                unsafe { mem.scrub(zeroer, c.verify, threads, fault) }.map(|s| (s, None))
            }
            Remedy::Fresh => {
                let mem = old.expect("fresh regions have memory");
                on_idle(shared, index, || {
                    place(shared, index, &mem)?;
                    mem.prepare_fresh_paced(c.verify, threads, stall_half, &mut pacer)
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
                        m.prepare_fresh_paced(c.verify, threads, stall_half, &mut pacer)
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
                st.finish_scrub(index, remedy, &stats, new);
                let cpu = crate::metrics::thread_cpu().saturating_sub(cpu0) + stats.helper_cpu;
                if let Some(b) = bar.filter(|b| b.position() >= c.size && !b.is_finished()) {
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
                shared.metrics.scrub_failures.inc();
                shared.metrics.scrub_cpu_seconds.inc_by(
                    crate::metrics::thread_cpu()
                        .saturating_sub(cpu0)
                        .as_secs_f64(),
                );
                // The next attempt replaces the memory (whatever failed
                // with it is not trusted again).
                let failed = st.fail_scrub(index);
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

/// A named hugetlbfs file about to be replaced is unlinked first: its
/// holders keep the old inode, the replacement is a new file (and the
/// daemon's own lock on the old one does not block it).
pub(super) fn unlink_named(mem: &RegionMemory) {
    if let Source::Hugetlbfs(path) = mem.source() {
        let _ = std::fs::remove_file(path);
    }
}

/// The first fill's progress bar on stderr (indicatif draws nothing when
/// stderr is not a terminal, so logs stay clean).
pub(super) fn fill_bar(total: u64) -> indicatif::ProgressBar {
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
