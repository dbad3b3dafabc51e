//! The pool's bookkeeping, free of sockets, threads and clocks: which
//! region is in which state with which memory, which one a lease gets,
//! what the scrubber does with a dirty one, and the counters `status`
//! reports. The daemon's threads call these methods under the pool mutex;
//! the unit tests below call them directly.

use std::sync::Arc;

use crate::memory::{Fault, RegionMemory, ScrubFault, ScrubStats};
use crate::numa::Node;
use crate::proto::{LeaseInfo, Piece, RegionSize, Status, MAX_PIECES, VERSION};
use crate::region::{BadTransition, Region, State};
use crate::PageSize;

use super::Config;

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
    /// The region's size (its memory's, kept while that is replaced).
    bytes: u64,
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

/// Every region of the pool and the counters, behind the daemon's mutex.
pub(super) struct PoolState {
    slots: Vec<Slot>,
    counters: Counters,
}

/// What the scrubber does with a dirty region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Remedy {
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

/// The checks of a lease request that need no region: the page size, the
/// length, the pieces and the node. Returns the lease's length (`bytes`
/// rounded up to whole pages), or the one-line refusal sent to the client.
/// `pieces` is the most regions the client maps (`None`: one).
pub(super) fn check_lease(
    c: &Config,
    nodes: &[Node],
    bytes: u64,
    page: PageSize,
    node: Option<usize>,
    pieces: Option<usize>,
) -> Result<u64, String> {
    if page != c.page {
        return Err(format!(
            "this pool serves {} pages, the lease asked for {page}; start the pool with --page {page} or map with {} pages",
            c.page, c.page
        ));
    }
    let pieces = pieces.unwrap_or(1);
    if pieces == 0 || pieces > MAX_PIECES {
        return Err(format!(
            "a lease may take 1 to {MAX_PIECES} regions, not {pieces}; ask for fewer pieces"
        ));
    }
    let largest = match c.regions.is_empty() {
        true => format!("a region of {} bytes", c.region_bytes),
        false => format!("the largest region ({} bytes)", c.region_bytes),
    };
    if bytes == 0 {
        return Err(format!(
            "a lease of 0 bytes does not fit {largest}; ask for at least one page"
        ));
    }
    if bytes > crate::fit::capacity(&c.region_sizes(), pieces) {
        return Err(match (pieces, c.regions.is_empty()) {
            (1, true) => format!(
                "a lease of {bytes} bytes does not fit {largest}; restart the pool with --region-size of at least {bytes}"
            ),
            (1, false) => format!(
                "a lease of {bytes} bytes does not fit {largest}; restart the pool with a region of at least {bytes} in --regions"
            ),
            (n, true) => format!(
                "a lease of {bytes} bytes does not fit {n} regions of {} bytes; map more pieces or restart the pool with a larger --region-size",
                c.region_bytes
            ),
            (n, false) => format!(
                "a lease of {bytes} bytes does not fit the {n} largest regions of this pool; map more pieces or restart the pool with larger --regions"
            ),
        });
    }
    if let Some(n) = node {
        if !nodes.iter().any(|x| x.id == n) {
            let ids: Vec<String> = nodes.iter().map(|x| x.id.to_string()).collect();
            return Err(format!(
                "this pool has no regions on NUMA node {n} (its nodes: {}); ask one of those or no node",
                ids.join(", ")
            ));
        }
    }
    Ok(bytes.div_ceil(page.bytes()) * page.bytes())
}

impl PoolState {
    /// No regions yet; room for `n`.
    pub(super) fn new(n: usize) -> PoolState {
        PoolState {
            slots: Vec::with_capacity(n),
            counters: Counters::default(),
        }
    }

    /// Adds the next region (dirty) with memory this daemon just created
    /// on `node`.
    pub(super) fn add_region(&mut self, mem: RegionMemory, node: usize) {
        let index = self.slots.len();
        self.slots.push(Slot {
            region: Region::new(index),
            bytes: mem.len(),
            mem: Some(Arc::new(mem)),
            fresh: true,
            node,
        });
    }

    /// Whether every region is clean.
    pub(super) fn all_clean(&self) -> bool {
        self.slots.iter().all(|s| s.region.state() == State::Clean)
    }

    /// The memory regions hold now (not those being replaced).
    pub(super) fn memories(&self) -> impl Iterator<Item = &Arc<RegionMemory>> {
        self.slots.iter().filter_map(|s| s.mem.as_ref())
    }

    /// The memory of region `index` (leased regions always have some).
    pub(super) fn memory(&self, index: usize) -> Option<&Arc<RegionMemory>> {
        self.slots[index].mem.as_ref()
    }

    fn count(&self, name: &str) -> usize {
        self.slots
            .iter()
            .filter(|s| s.region.state().name() == name)
            .count()
    }

    /// Leases the clean regions (on `node`, if asked) that [`crate::fit`]
    /// picks for a lease of `len` bytes mapped as up to `pieces` files
    /// ([`check_lease`] passed): all of them or none, one new lease id,
    /// each region `leased` and no longer fresh. Returns what the client
    /// is sent and the memory of each piece in order (one fd each goes
    /// with it), or the one-line refusal.
    pub(super) fn lease(
        &mut self,
        c: &Config,
        len: u64,
        page: PageSize,
        node: Option<usize>,
        pieces: usize,
    ) -> Result<(LeaseInfo, Vec<Arc<RegionMemory>>), String> {
        let on = |s: &Slot| node.is_none_or(|n| s.node == n);
        let clean: Vec<crate::fit::Free> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.region.state() == State::Clean && on(s))
            .map(|(i, s)| (i, s.bytes))
            .collect();
        let Some(picked) = crate::fit::fit(&clean, len, pieces) else {
            return Err(self.refusal(c, len, node, pieces, clean.len()));
        };
        self.counters.next_lease += 1;
        let id = self.counters.next_lease;
        let mut parts = Vec::with_capacity(picked.len());
        let mut mems = Vec::with_capacity(picked.len());
        for &(i, n) in &picked {
            let slot = &mut self.slots[i];
            slot.region.lease(id).expect("clean regions can be leased");
            slot.fresh = false;
            parts.push(Piece { region: i, len: n });
            mems.push(slot.mem.clone().expect("clean regions have memory"));
        }
        self.counters.leases_total += 1;
        let first = picked[0].0;
        Ok((
            LeaseInfo {
                id,
                region: first,
                offset: 0,
                len,
                page,
                verified: c.verify,
                node: Some(self.slots[first].node),
                reports: true,
                pieces: if parts.len() > 1 { parts } else { Vec::new() },
            },
            mems,
        ))
    }

    /// Why no lease of `len` bytes in up to `pieces` regions can be had
    /// now (`clean` regions, on `node` if asked, did not hold it).
    fn refusal(
        &self,
        c: &Config,
        len: u64,
        node: Option<usize>,
        pieces: usize,
        clean: usize,
    ) -> String {
        // How many regions the lease takes when all of them are clean (on
        // that node): what "not N clean regions" names.
        let all: Vec<crate::fit::Free> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| node.is_none_or(|n| s.node == n))
            .map(|(i, s)| (i, s.bytes))
            .collect();
        let need = crate::fit::fit(&all, len, pieces).map_or(pieces, |p| p.len());
        let fitting = match c.regions.is_empty() {
            true => String::new(),
            false => format!(" holding {len} bytes"),
        };
        if let Some(n) = node {
            let asked = match need {
                1 => fitting,
                k => format!(" for a lease of {k} regions ({clean} clean)"),
            };
            let on: Vec<&Slot> = self.slots.iter().filter(|s| s.node == n).collect();
            return format!(
                "no clean region on NUMA node {n} now{asked} ({} of its {} regions leased); retry shortly, ask another node, or grow the pool with --size",
                on.iter().filter(|s| s.region.state().name() == "leased").count(),
                on.len()
            );
        }
        let what = match need {
            1 => format!("no clean region{fitting} now"),
            k => format!("not {k} clean regions now ({clean} clean)"),
        };
        format!(
            "{what} ({} leased, {} scrubbing, {} dirty of {}); retry shortly or grow the pool with {}",
            self.count("leased"),
            self.count("scrubbing"),
            self.count("dirty"),
            self.slots.len(),
            match c.regions.is_empty() {
                true => "--size",
                false => "--regions",
            }
        )
    }

    /// Lease `lease` of region `index` is over: the region is dirty and
    /// distrusted (its memory is replaced before the next lease), and
    /// `retired_total` counts it when other processes still `held` its
    /// memory. A release that does not match the region's lease is
    /// returned (to be logged); the region is dirty all the same.
    pub(super) fn end_lease(
        &mut self,
        index: usize,
        lease: u64,
        held: bool,
    ) -> Result<(), BadTransition> {
        let released = self.slots[index].region.release(lease);
        if held {
            self.counters.retired_total += 1;
        }
        self.slots[index].fresh = false;
        self.slots[index].region.distrust();
        released
    }

    /// The first dirty region, and how many scrubs the pool has done
    /// (completed and failed: what fault injection counts).
    pub(super) fn next_dirty(&self) -> Option<(usize, u64)> {
        let i = self
            .slots
            .iter()
            .position(|s| s.region.state() == State::Dirty)?;
        let done = self.slots.iter().map(|s| s.region.scrubs()).sum::<u64>()
            + self.counters.scrub_failures;
        Some((i, done))
    }

    /// Moves dirty region `index` to `scrubbing` and decides what to do
    /// with it: fresh memory is only populated, anything else replaced
    /// (unless `fault` says otherwise once `done` scrubs are done). For a
    /// replacement the slot gives up its memory now, so the old pages are
    /// freed before new ones are reserved (a pool sized to its hugepages
    /// has no spare ones). Returns the remedy and the region's memory
    /// (`None` when it had none).
    pub(super) fn begin_scrub(
        &mut self,
        index: usize,
        fault: Option<Fault>,
        done: u64,
    ) -> (Remedy, Option<Arc<RegionMemory>>) {
        let slot = &mut self.slots[index];
        slot.region
            .begin_scrub()
            .expect("dirty regions can begin a scrub");
        let in_place = match fault {
            Some(Fault::SkipZero { after }) if done >= after => Some(ScrubFault::SkipZero),
            Some(Fault::ScrubInPlace { after }) if done >= after => Some(ScrubFault::None),
            _ => None,
        };
        let remedy = match (in_place, &slot.mem, slot.fresh) {
            (Some(f), Some(_), _) => Remedy::InPlace(f),
            (_, Some(_), true) => Remedy::Fresh,
            _ => Remedy::Replace,
        };
        let old = if remedy == Remedy::Replace {
            slot.mem.take()
        } else {
            slot.mem.clone()
        };
        (remedy, old)
    }

    /// The scrub of region `index` succeeded: it is clean (with `new`
    /// memory if it was replaced), and its bytes and time are counted.
    pub(super) fn finish_scrub(
        &mut self,
        index: usize,
        remedy: Remedy,
        stats: &ScrubStats,
        new: Option<Arc<RegionMemory>>,
    ) {
        let slot = &mut self.slots[index];
        if let Some(m) = new {
            slot.mem = Some(m);
        }
        slot.fresh = remedy != Remedy::InPlace(ScrubFault::SkipZero);
        slot.region
            .finish_scrub()
            .expect("only the scrubber moves a region out of scrubbing");
        let secs = stats.elapsed.as_secs_f64();
        let gib = stats.bytes as f64 / (1u64 << 30) as f64;
        let k = &mut self.counters;
        k.scrubbed_bytes += stats.bytes;
        k.scrub_secs += secs;
        k.backend = stats.backend;
        k.last_gib_s = if secs > 0.0 { gib / secs } else { 0.0 };
    }

    /// The scrub of region `index` failed: it is dirty again, not fresh,
    /// and gives up its memory (whatever failed with it is not trusted
    /// again), which is returned to be retired.
    pub(super) fn fail_scrub(&mut self, index: usize) -> Option<Arc<RegionMemory>> {
        self.counters.scrub_failures += 1;
        let slot = &mut self.slots[index];
        slot.fresh = false;
        slot.region
            .fail_scrub()
            .expect("only the scrubber moves a region out of scrubbing");
        slot.mem.take()
    }

    /// The `status` answer; `backend_name` is the zeroing backend named
    /// before any scrub has run.
    pub(super) fn status(&self, c: &Config, backend_name: &str) -> Status {
        let bytes = |name: &str| {
            self.slots
                .iter()
                .filter(|s| s.region.state().name() == name)
                .map(|s| s.bytes)
                .sum()
        };
        let sizes = RegionSize::group(
            self.slots
                .iter()
                .map(|s| (s.bytes, s.region.state() == State::Clean)),
        );
        let k = &self.counters;
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
            regions: self.slots.len(),
            sizes,
            clean_bytes: bytes("clean"),
            dirty_bytes: bytes("dirty"),
            scrubbing_bytes: bytes("scrubbing"),
            leased_bytes: bytes("leased"),
            verify: c.verify,
            backend: if k.backend.is_empty() {
                backend_name.to_string()
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

    /// Regions and their bytes per state, in the order of
    /// [`crate::metrics::STATES`].
    pub(super) fn state_counts(&self) -> ([u64; 4], [u64; 4]) {
        let mut counts = [0u64; 4];
        let mut bytes = [0u64; 4];
        for slot in &self.slots {
            let name = slot.region.state().name();
            if let Some(i) = crate::metrics::STATES.iter().position(|&s| s == name) {
                counts[i] += 1;
                bytes[i] += slot.bytes;
            }
        }
        (counts, bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::daemon::MAX_REGIONS;

    const REGION: u64 = 64 << 10;

    /// A 4K pool of `n` regions of 64 KiB, as the daemon validates it.
    fn config(n: u64) -> Config {
        Config {
            socket: "/nonexistent/pool.sock".into(),
            size: n * REGION,
            region_bytes: REGION,
            regions: Vec::new(),
            page: PageSize::Size4K,
            hugetlbfs: None,
            verify: true,
            threads: 1,
            backend: prezero::Choice::Auto,
            fault: None,
        }
    }

    fn nodes(ids: &[usize]) -> Vec<Node> {
        ids.iter().map(|&id| Node { id, cpus: vec![0] }).collect()
    }

    fn memory() -> RegionMemory {
        RegionMemory::memfd("zerostart-pool-unit", REGION, PageSize::Size4K).unwrap()
    }

    /// `n` fresh regions, dealt over `node_ids` as the daemon deals them.
    fn pool(n: usize, node_ids: &[usize]) -> PoolState {
        let ns = nodes(node_ids);
        let mut st = PoolState::new(n);
        for i in 0..n {
            st.add_region(memory(), crate::numa::node_of_region(&ns, i).id);
        }
        st
    }

    fn stats(bytes: u64) -> ScrubStats {
        ScrubStats {
            bytes,
            elapsed: Duration::from_millis(500),
            verified: true,
            backend: "test",
            helper_cpu: Duration::ZERO,
        }
    }

    /// What the scrubber does for one region, minus the zeroing: pick,
    /// begin, finish. Returns the region and the remedy it got.
    fn scrub_one(st: &mut PoolState, fault: Option<Fault>) -> (usize, Remedy) {
        let (i, done) = st.next_dirty().expect("a dirty region");
        let (remedy, old) = st.begin_scrub(i, fault, done);
        let new = match remedy {
            // The old memory (if any) is dropped here, as `retire` does.
            Remedy::Replace => Some(Arc::new(memory())),
            _ => {
                assert!(old.is_some(), "{remedy:?} keeps the region's memory");
                None
            }
        };
        st.finish_scrub(i, remedy, &stats(REGION), new);
        (i, remedy)
    }

    fn scrub_all(st: &mut PoolState) {
        while st.next_dirty().is_some() {
            scrub_one(st, None);
        }
    }

    #[test]
    fn new_regions_start_dirty_and_their_first_scrub_is_a_fill() {
        let mut st = pool(2, &[0]);
        assert!(!st.all_clean());
        assert_eq!(st.state_counts().0, [2, 0, 0, 0]);
        assert_eq!(st.next_dirty(), Some((0, 0)));
        assert_eq!(scrub_one(&mut st, None), (0, Remedy::Fresh));
        assert_eq!(st.next_dirty(), Some((1, 1)));
        assert_eq!(scrub_one(&mut st, None), (1, Remedy::Fresh));
        assert!(st.all_clean() && st.next_dirty().is_none());
        assert_eq!(st.state_counts().0, [0, 0, 2, 0]);
        assert_eq!(st.memories().count(), 2);
    }

    #[test]
    fn a_lease_takes_the_first_clean_region_with_a_new_id() {
        let c = config(2);
        let mut st = pool(2, &[0]);
        scrub_all(&mut st);
        let (a, mem) = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert_eq!((a.id, a.region, a.offset, a.len), (1, 0, 0, 4096));
        assert!(a.verified);
        assert_eq!(a.node, Some(0));
        assert_eq!(mem.len(), 1);
        assert!(Arc::ptr_eq(&mem[0], st.memory(0).unwrap()));
        assert!(a.pieces.is_empty(), "one region: no piece list");
        let (b, _) = st
            .lease(&c, REGION, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert_eq!((b.id, b.region, b.len), (2, 1, REGION));
        assert_eq!(st.state_counts().0, [0, 0, 0, 2]);
        let s = st.status(&c, "auto");
        assert_eq!(
            (s.leases_total, s.leased_bytes, s.clean_bytes),
            (2, 2 * REGION, 0)
        );
    }

    #[test]
    fn an_empty_pool_refuses_with_what_it_holds() {
        let c = config(3);
        let mut st = pool(3, &[0]);
        scrub_one(&mut st, None);
        scrub_one(&mut st, None);
        st.lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        let (i, done) = st.next_dirty().unwrap();
        st.begin_scrub(i, None, done);
        st.lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        let e = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap_err();
        assert_eq!(
            e,
            "no clean region now (2 leased, 1 scrubbing, 0 dirty of 3); retry shortly or grow the pool with --size"
        );
        // A refusal changes nothing.
        assert_eq!(st.status(&c, "auto").leases_total, 2);
    }

    #[test]
    fn a_lease_on_a_node_takes_only_that_nodes_regions() {
        let c = config(4);
        let mut st = pool(4, &[0, 1]);
        scrub_all(&mut st);
        let (a, _) = st
            .lease(&c, 4096, PageSize::Size4K, Some(1), MAX_PIECES)
            .unwrap();
        assert_eq!((a.region, a.node), (1, Some(1)));
        let (b, _) = st
            .lease(&c, 4096, PageSize::Size4K, Some(1), MAX_PIECES)
            .unwrap();
        assert_eq!((b.region, b.node), (3, Some(1)));
        let e = st
            .lease(&c, 4096, PageSize::Size4K, Some(1), MAX_PIECES)
            .unwrap_err();
        assert!(
            e.starts_with("no clean region on NUMA node 1 now (2 of its 2 regions leased); "),
            "{e}"
        );
        // Node 0 still has both of its regions; no node takes the first.
        let (d, _) = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert_eq!(d.region, 0);
    }

    #[test]
    fn lease_requests_are_checked_before_any_region() {
        let c = config(2);
        let ns = nodes(&[0, 1]);
        let check = |bytes, page, node| check_lease(&c, &ns, bytes, page, node, None);
        assert_eq!(check(1, PageSize::Size4K, None), Ok(4096));
        assert_eq!(check(4097, PageSize::Size4K, Some(1)), Ok(8192));
        assert_eq!(check(REGION, PageSize::Size4K, None), Ok(REGION));
        for (bytes, page, node, want) in [
            (4096, PageSize::Size2M, None, "this pool serves 4K pages, the lease asked for 2M; start the pool with --page 2M or map with 4K pages"),
            (0, PageSize::Size4K, None, "a lease of 0 bytes does not fit a region of 65536 bytes; ask for at least one page"),
            (REGION + 1, PageSize::Size4K, None, "a lease of 65537 bytes does not fit a region of 65536 bytes; restart the pool with --region-size of at least 65537"),
            (4096, PageSize::Size4K, Some(7), "this pool has no regions on NUMA node 7 (its nodes: 0, 1); ask one of those or no node"),
        ] {
            assert_eq!(check(bytes, page, node).unwrap_err(), want);
        }
    }

    /// The regions a lease took, from its reply.
    fn regions(info: &LeaseInfo) -> Vec<usize> {
        info.all_pieces().iter().map(|p| p.region).collect()
    }

    #[test]
    fn leases_of_one_three_and_five_regions_hold_exactly_that() {
        let c = config(9);
        let mut st = pool(9, &[0]);
        scrub_all(&mut st);
        let mut taken: Vec<usize> = Vec::new();
        for (units, id) in [(1u64, 1u64), (3, 2), (5, 3)] {
            let (info, mems) = st
                .lease(&c, units * REGION, PageSize::Size4K, None, MAX_PIECES)
                .unwrap();
            assert_eq!((info.id, info.len, info.offset), (id, units * REGION, 0));
            let r = regions(&info);
            assert_eq!(r.len() as u64, units);
            assert_eq!(mems.len() as u64, units);
            // One piece is the old reply; several list every region.
            assert_eq!(info.pieces.is_empty(), units == 1);
            assert!(info.all_pieces().iter().all(|p| p.len == REGION));
            for (i, m) in r.iter().zip(&mems) {
                assert!(Arc::ptr_eq(m, st.memory(*i).unwrap()), "piece order");
                assert!(!taken.contains(i), "region {i} in two leases");
                taken.push(*i);
            }
        }
        let s = st.status(&c, "auto");
        assert_eq!((s.leased_bytes, s.clean_bytes), (9 * REGION, 0));
        assert_eq!(s.leases_total, 3);
        assert_eq!(st.state_counts().0, [0, 0, 0, 9]);
    }

    /// A pool of regions of 1, 3, 5 and 1 units (`--regions 1G,3G,5G,1G`
    /// in miniature), all clean.
    fn mixed() -> (Config, PoolState) {
        let sizes = vec![REGION, 3 * REGION, 5 * REGION, REGION];
        let c = config(1).with_regions(sizes.clone());
        c.validate().unwrap();
        let mut st = PoolState::new(sizes.len());
        for b in sizes {
            let m = RegionMemory::memfd("zerostart-pool-unit", b, PageSize::Size4K).unwrap();
            st.add_region(m, 0);
        }
        scrub_all(&mut st);
        (c, st)
    }

    fn size(bytes: u64, regions: usize, clean: usize) -> RegionSize {
        RegionSize {
            bytes,
            regions,
            clean,
        }
    }

    /// A guest of one region (QEMU's one `memory-backend`) takes the
    /// smallest clean region that holds it, so leases of 1, 3 and 5 units
    /// hold 1, 3 and 5 units, and the status says what is left by size.
    #[test]
    fn regions_of_several_sizes_lease_the_best_fit() {
        let (c, mut st) = mixed();
        assert_eq!(
            (c.size, c.region_bytes, c.region_count()),
            (10 * REGION, 5 * REGION, 4)
        );
        let s = st.status(&c, "auto");
        assert_eq!(
            s.sizes,
            [
                size(REGION, 2, 2),
                size(3 * REGION, 1, 1),
                size(5 * REGION, 1, 1)
            ]
        );
        assert_eq!(
            (s.size_bytes, s.clean_bytes, s.regions),
            (10 * REGION, 10 * REGION, 4)
        );
        let mut held = 0;
        for (len, region) in [(REGION, 0), (3 * REGION - 4096, 1), (5 * REGION, 2)] {
            let (info, mems) = st.lease(&c, len, PageSize::Size4K, None, 1).unwrap();
            assert_eq!((info.region, info.len, info.pieces.len()), (region, len, 0));
            assert_eq!(mems[0].len(), sizes_of(&c)[region]);
            held += sizes_of(&c)[region];
            let s = st.status(&c, "auto");
            assert_eq!(s.leased_bytes, held);
            assert_eq!(s.clean_bytes, 10 * REGION - held);
        }
        assert_eq!(held, 9 * REGION);
        assert_eq!(
            st.status(&c, "auto").sizes,
            [
                size(REGION, 2, 1),
                size(3 * REGION, 1, 0),
                size(5 * REGION, 1, 0)
            ]
        );
        // Two units fit no clean region now (the 3 and 5 are leased).
        let e = st
            .lease(&c, 2 * REGION, PageSize::Size4K, None, 1)
            .unwrap_err();
        assert!(
            e.starts_with(&format!(
                "no clean region holding {} bytes now (3 leased, 0 scrubbing, 0 dirty of 4); ",
                2 * REGION
            )) && e.ends_with("grow the pool with --regions"),
            "{e}"
        );
        // The refusal took nothing: the last unit is still there.
        let (info, _) = st.lease(&c, 4096, PageSize::Size4K, None, 1).unwrap();
        assert_eq!(info.region, 3);
        assert_eq!(st.state_counts(), ([0, 0, 0, 4], [0, 0, 0, 10 * REGION]));
    }

    fn sizes_of(c: &Config) -> Vec<u64> {
        c.region_sizes()
    }

    /// A lease larger than every region (cloud-hypervisor's zones) takes
    /// the largest first and the best fit last; what no choice of regions
    /// could hold is refused before any region is looked at.
    #[test]
    fn regions_of_several_sizes_lease_several_pieces() {
        let (c, mut st) = mixed();
        let (info, mems) = st.lease(&c, 7 * REGION, PageSize::Size4K, None, 8).unwrap();
        let p: Vec<(usize, u64)> = info.pieces.iter().map(|p| (p.region, p.len)).collect();
        assert_eq!(p, [(2, 5 * REGION), (1, 2 * REGION)]);
        assert_eq!(mems.len(), 2);
        assert_eq!(st.status(&c, "auto").leased_bytes, 8 * REGION);
        let nodes = nodes(&[0]);
        let check = |bytes, pieces| check_lease(&c, &nodes, bytes, PageSize::Size4K, None, pieces);
        assert_eq!(check(5 * REGION, None), Ok(5 * REGION));
        assert_eq!(
            check(5 * REGION + 1, None).unwrap_err(),
            format!(
                "a lease of {} bytes does not fit the largest region ({} bytes); restart the pool with a region of at least {} in --regions",
                5 * REGION + 1,
                5 * REGION,
                5 * REGION + 1
            )
        );
        assert_eq!(check(9 * REGION, Some(3)), Ok(9 * REGION));
        assert!(check(9 * REGION + 1, Some(3))
            .unwrap_err()
            .contains("does not fit the 3 largest regions of this pool"));
        assert_eq!(check(10 * REGION, Some(4)), Ok(10 * REGION));
        // 3 units in 2 pieces: only the two 1-unit regions are clean.
        let e = st
            .lease(&c, 3 * REGION, PageSize::Size4K, None, 2)
            .unwrap_err();
        assert!(e.starts_with("no clean region holding"), "{e}");
        let (info, _) = st.lease(&c, 2 * REGION, PageSize::Size4K, None, 2).unwrap();
        assert_eq!(regions(&info), [0, 3]);
    }

    #[test]
    fn a_list_of_region_sizes_is_checked() {
        let c = config(1);
        let bad = |sizes: Vec<u64>| {
            c.clone()
                .with_regions(sizes)
                .validate()
                .unwrap_err()
                .to_string()
        };
        assert!(bad(vec![REGION, 4096 + 1]).contains("region of 4097 bytes: every region must be a non-zero multiple of the 4K page size"), "{}", bad(vec![REGION, 4097]));
        assert!(bad(vec![0]).contains("region of 0 bytes"));
        assert!(bad(vec![4096; MAX_REGIONS + 1]).contains("more than 4096 regions"));
        let mut c = c.with_regions(vec![REGION, 2 * REGION]);
        c.validate().unwrap();
        c.size += REGION;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("give --regions alone"));
    }

    #[test]
    fn a_lease_that_does_not_fill_its_last_region_holds_it_whole() {
        let c = config(4);
        let mut st = pool(4, &[0]);
        scrub_all(&mut st);
        let (info, _) = st
            .lease(&c, 2 * REGION + 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        let lens: Vec<u64> = info.all_pieces().iter().map(|p| p.len).collect();
        assert_eq!(lens, vec![REGION, REGION, 4096]);
        assert_eq!(st.status(&c, "auto").leased_bytes, 3 * REGION);
    }

    #[test]
    fn several_regions_are_all_or_nothing() {
        let c = config(5);
        let mut st = pool(5, &[0]);
        scrub_all(&mut st);
        st.lease(&c, 2 * REGION, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        let e = st
            .lease(&c, 4 * REGION, PageSize::Size4K, None, MAX_PIECES)
            .unwrap_err();
        assert_eq!(
            e,
            "not 4 clean regions now (3 clean) (2 leased, 0 scrubbing, 0 dirty of 5); retry shortly or grow the pool with --size"
        );
        // The refusal took nothing: the 3 clean regions lease as one.
        assert_eq!(st.state_counts().0, [0, 0, 3, 2]);
        let (info, _) = st
            .lease(&c, 3 * REGION, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert_eq!(regions(&info), vec![2, 3, 4]);
    }

    #[test]
    fn several_regions_on_a_node_come_from_that_node_only() {
        let c = config(6);
        let mut st = pool(6, &[0, 1]);
        scrub_all(&mut st);
        let (info, _) = st
            .lease(&c, 2 * REGION, PageSize::Size4K, Some(1), MAX_PIECES)
            .unwrap();
        assert_eq!(regions(&info), vec![1, 3]);
        let e = st
            .lease(&c, 2 * REGION, PageSize::Size4K, Some(1), MAX_PIECES)
            .unwrap_err();
        assert!(
            e.starts_with("no clean region on NUMA node 1 now for a lease of 2 regions (1 clean)"),
            "{e}"
        );
    }

    #[test]
    fn ending_a_lease_of_several_regions_dirties_and_replaces_every_one() {
        let c = config(4);
        let mut st = pool(4, &[0]);
        scrub_all(&mut st);
        let (info, old) = st
            .lease(&c, 3 * REGION, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        for r in regions(&info) {
            st.end_lease(r, info.id, false).unwrap();
        }
        assert_eq!(st.state_counts().0, [3, 0, 1, 0]);
        for _ in 0..3 {
            assert_eq!(scrub_one(&mut st, None).1, Remedy::Replace);
        }
        // The next lease of the same size gets new memory everywhere.
        let (again, new) = st
            .lease(&c, 3 * REGION, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert_eq!(regions(&again), vec![0, 1, 2]);
        for m in &new {
            assert!(
                old.iter().all(|o| !Arc::ptr_eq(o, m)),
                "old memory leased again"
            );
        }
    }

    #[test]
    fn pieces_are_checked_before_any_region() {
        let c = config(2);
        let ns = nodes(&[0]);
        let check = |bytes, pieces| check_lease(&c, &ns, bytes, PageSize::Size4K, None, pieces);
        assert_eq!(check(2 * REGION, Some(2)), Ok(2 * REGION));
        assert_eq!(check(REGION + 1, Some(2)), Ok(REGION + 4096));
        // Without pieces, as before: one region is the most.
        assert!(check(REGION + 1, None)
            .unwrap_err()
            .contains("does not fit a region of 65536 bytes"));
        assert_eq!(
            check(3 * REGION, Some(2)).unwrap_err(),
            "a lease of 196608 bytes does not fit 2 regions of 65536 bytes; map more pieces or restart the pool with a larger --region-size"
        );
        for bad in [0, MAX_PIECES + 1] {
            assert!(check(REGION, Some(bad)).unwrap_err().starts_with(&format!(
                "a lease may take 1 to {MAX_PIECES} regions, not {bad}"
            )));
        }
    }

    #[test]
    fn an_ended_lease_is_dirty_and_its_memory_replaced() {
        let c = config(1);
        let mut st = pool(1, &[0]);
        scrub_all(&mut st);
        let (a, leased) = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert!(st.next_dirty().is_none());
        st.end_lease(a.region, a.id, false).unwrap();
        assert_eq!(st.state_counts().0, [1, 0, 0, 0]);
        assert_eq!(st.status(&c, "auto").retired_total, 0);
        // Leased memory is never leased again: the scrub replaces it, and
        // the slot lets go of the old pages before new ones are made.
        let (i, done) = st.next_dirty().unwrap();
        let (remedy, old) = st.begin_scrub(i, None, done);
        assert_eq!(remedy, Remedy::Replace);
        assert!(Arc::ptr_eq(old.as_ref().unwrap(), &leased[0]));
        assert!(st.memory(i).is_none());
        st.finish_scrub(i, remedy, &stats(REGION), Some(Arc::new(memory())));
        let (b, again) = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        assert_eq!(b.id, 2);
        assert!(!Arc::ptr_eq(&again[0], &leased[0]));
    }

    #[test]
    fn a_held_return_is_counted_retired_and_a_wrong_id_still_goes_dirty() {
        let c = config(2);
        let mut st = pool(2, &[0]);
        scrub_all(&mut st);
        let (a, _) = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        st.end_lease(a.region, a.id, true).unwrap();
        assert_eq!(st.status(&c, "auto").retired_total, 1);
        let (b, _) = st
            .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
            .unwrap();
        let e = st.end_lease(b.region, b.id + 100, false).unwrap_err();
        assert_eq!(e.action, "release a lease it does not hold");
        assert_eq!(st.state_counts().0, [2, 0, 0, 0]);
    }

    #[test]
    fn scrub_accounting_feeds_the_status() {
        let c = config(2);
        let mut st = pool(2, &[0]);
        let s = st.status(&c, "auto");
        assert_eq!(
            (s.backend.as_str(), s.dirty_bytes, s.regions),
            ("auto", 2 * REGION, 2)
        );
        assert_eq!((s.scrubbed_bytes, s.scrub_gib_s_avg), (0, 0.0));
        scrub_all(&mut st);
        let s = st.status(&c, "auto");
        assert_eq!(s.backend, "test");
        assert_eq!((s.scrubbed_bytes, s.clean_bytes), (2 * REGION, 2 * REGION));
        let gib_s = REGION as f64 / (1u64 << 30) as f64 / 0.5;
        assert!((s.scrub_gib_s_last - gib_s).abs() < 1e-12);
        assert!((s.scrub_gib_s_avg - gib_s).abs() < 1e-12);
        assert_eq!(
            (s.page, s.backing.as_str(), s.size_bytes),
            (PageSize::Size4K, "memfd", 2 * REGION)
        );
    }

    #[test]
    fn a_failed_scrub_goes_dirty_and_the_next_one_replaces() {
        let c = config(1);
        let mut st = pool(1, &[0]);
        let (i, done) = st.next_dirty().unwrap();
        assert_eq!(st.begin_scrub(i, None, done).0, Remedy::Fresh);
        assert_eq!(st.state_counts().0, [0, 1, 0, 0]);
        assert!(st.fail_scrub(i).is_some());
        assert!(st.memory(i).is_none());
        assert_eq!(st.status(&c, "auto").scrub_failures, 1);
        // Failures count as done scrubs for fault injection.
        assert_eq!(st.next_dirty(), Some((0, 1)));
        let (remedy, old) = st.begin_scrub(i, None, 1);
        assert_eq!(remedy, Remedy::Replace);
        assert!(old.is_none());
        // No memory to be had: it fails again with nothing to retire.
        assert!(st.fail_scrub(i).is_none());
        assert_eq!(scrub_one(&mut st, None), (0, Remedy::Replace));
        assert!(st.all_clean());
    }

    #[test]
    fn fault_injection_scrubs_in_place_once_due() {
        let c = config(1);
        let mut st = pool(1, &[0]);
        scrub_all(&mut st);
        let ret = |st: &mut PoolState| {
            let (a, _) = st
                .lease(&c, 4096, PageSize::Size4K, None, MAX_PIECES)
                .unwrap();
            st.end_lease(a.region, a.id, false).unwrap();
        };
        ret(&mut st);
        // Not due yet (one scrub done, due after two): a real replacement.
        let late = Some(Fault::ScrubInPlace { after: 2 });
        assert_eq!(scrub_one(&mut st, late), (0, Remedy::Replace));
        ret(&mut st);
        assert_eq!(
            scrub_one(&mut st, late),
            (0, Remedy::InPlace(ScrubFault::None))
        );
        ret(&mut st);
        // A skipped zeroing leaves the region not fresh, so a later real
        // scrub replaces it rather than trusting the pages.
        let skip = Some(Fault::SkipZero { after: 0 });
        assert_eq!(
            scrub_one(&mut st, skip),
            (0, Remedy::InPlace(ScrubFault::SkipZero))
        );
        ret(&mut st);
        assert_eq!(scrub_one(&mut st, None), (0, Remedy::Replace));
    }
}
