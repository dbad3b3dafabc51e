//! Memory-ready time for a VM's RAM, four ways, in one run:
//!
//! * `pool`: lease a pre-zeroed region from a pool daemon and map it
//!   (`MAP_POPULATE`: page tables only, the pages are already there);
//! * `nt_prefault`: fresh hugetlb memfd, then the parallel non-temporal
//!   engine writes zeros over it (the kernel zeroes each page on fault,
//!   the engine again: what `prefault=on,prefault_method=nt` does);
//! * `populate`: fresh hugetlb memfd + `MADV_POPULATE_WRITE` (the kernel
//!   zeroes each page once);
//! * `no_prefault`: fresh hugetlb memfd, mapped only; the cost moves to the
//!   guest's first touch, measured separately as `first_touch`.
//!
//! `cargo run --release -p pool --example memready -- 1,4,8 [REPS]`
//! (sizes in GiB; needs that many free 2M hugepages: `make bench-pool`
//! reserves and restores them). One JSON object per measurement on
//! stdout, a table on stderr.

use std::time::{Duration, Instant};

use pool::daemon::{Config, Daemon};
use pool::PageSize;

const HUGE_2M: u64 = 2 << 20;

/// A fresh 2M hugetlb memfd, mapped shared.
struct Fresh {
    map: hostmem::Mapping,
}

impl Fresh {
    fn new(len: u64) -> Fresh {
        use std::os::fd::AsFd;
        let fd = hostmem::memfd(c"bench", len, PageSize::Size2M, hostmem::Sealing::Never)
            .unwrap_or_else(|e| panic!("memfd_create: {e}"));
        let map = hostmem::Mapping::file(fd.as_fd(), 0, len as usize)
            .map()
            .unwrap_or_else(|e| panic!("{e} (reserve hugepages first)"));
        Fresh { map }
    }

    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: the bench's own memfd, written by nobody else.
        unsafe { self.map.as_mut_slice() }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(gib: u64, method: &str, rep: usize, t: f64, note: &str) {
    println!(
        "{}",
        serde_json::json!({"gib": gib, "method": method, "rep": rep, "ms": t, "note": note})
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<u64> = args
        .get(1)
        .map(|s| s.as_str())
        .unwrap_or("1,4,8")
        .split(',')
        .map(|s| s.trim().parse().expect("sizes are GiB numbers, e.g. 1,4,8"))
        .collect();
    let reps: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(3);
    let zeroer = prezero::Zeroer::new(prezero::Choice::Auto).unwrap();
    let mut rows = Vec::new();
    for &gib in &sizes {
        let len = gib << 30;
        // Pool: one region of the VM's size, scrubbed in the background.
        let dir = std::env::temp_dir().join(format!("zerostart-memready-{}", std::process::id()));
        let socket = dir.join("pool.sock");
        let t = Instant::now();
        let daemon = Daemon::start(Config::memfds(socket.clone(), len, len, PageSize::Size2M))
            .expect("start the pool");
        assert!(daemon.wait_all_clean(Duration::from_secs(600)));
        let first_scrub = ms(t.elapsed());
        let mut pool_ms = Vec::new();
        let mut scrub_ms = Vec::new();
        for rep in 0..reps {
            let t = Instant::now();
            let lease = pool::client::lease(&socket, len, PageSize::Size2M).expect("lease");
            let m = lease.map(true).expect("map");
            let d = ms(t.elapsed());
            assert_eq!(m.as_slice()[m.as_slice().len() - 1], 0);
            report(gib, "pool", rep, d, "lease + mmap(MAP_POPULATE)");
            pool_ms.push(d);
            drop(m);
            drop(lease);
            let t = Instant::now();
            assert!(daemon.wait_all_clean(Duration::from_secs(600)));
            let s = ms(t.elapsed());
            report(
                gib,
                "pool_rescrub",
                rep,
                s,
                "background, after the lease ends",
            );
            scrub_ms.push(s);
        }
        drop(daemon);
        let _ = std::fs::remove_dir_all(&dir);

        let mut nt = Vec::new();
        let mut pop = Vec::new();
        let mut none = Vec::new();
        let mut touch = Vec::new();
        for rep in 0..reps {
            let t = Instant::now();
            let mut f = Fresh::new(len);
            zeroer.zero_slice(f.slice());
            let d = ms(t.elapsed());
            report(gib, "nt_prefault", rep, d, "memfd hugetlb + NT zero");
            nt.push(d);
            drop(f);

            let t = Instant::now();
            let f = Fresh::new(len);
            f.map.populate().expect("MADV_POPULATE_WRITE");
            let d = ms(t.elapsed());
            report(
                gib,
                "populate",
                rep,
                d,
                "memfd hugetlb + MADV_POPULATE_WRITE",
            );
            pop.push(d);
            drop(f);

            let t = Instant::now();
            let mut f = Fresh::new(len);
            let d = ms(t.elapsed());
            report(gib, "no_prefault", rep, d, "memfd hugetlb, mapped only");
            none.push(d);
            let t = Instant::now();
            for off in (0..f.map.len()).step_by(HUGE_2M as usize) {
                f.slice()[off] = 1;
            }
            let d = ms(t.elapsed());
            report(
                gib,
                "first_touch",
                rep,
                d,
                "one write per 2M page after no_prefault",
            );
            touch.push(d);
        }
        rows.push((
            gib,
            median(&mut pool_ms),
            median(&mut nt),
            median(&mut pop),
            median(&mut none),
            median(&mut touch),
            first_scrub,
            median(&mut scrub_ms),
        ));
    }
    eprintln!(
        "memory-ready, median of {reps} (ms; 2M hugetlb; {} backend)",
        zeroer.backend_for(1 << 30).name()
    );
    eprintln!(
        "{:>5} {:>10} {:>12} {:>10} {:>12} {:>12} | {:>14} {:>12}",
        "GiB",
        "pool",
        "nt_prefault",
        "populate",
        "no_prefault",
        "+first_touch",
        "pool 1st scrub",
        "pool rescrub"
    );
    for r in rows {
        eprintln!(
            "{:>5} {:>10.2} {:>12.1} {:>10.1} {:>12.2} {:>12.1} | {:>14.1} {:>12.1}",
            r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7
        );
    }
}
