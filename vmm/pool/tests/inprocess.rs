//! The daemon and a client in one process (how the memready bench and
//! guestmem's tests use the pool): a lease whose mappings are gone ends at
//! once; one dropped while a mapping lives on lasts (until exit).

use std::time::{Duration, Instant};

use pool::daemon::{Config, Daemon};
use pool::PageSize;

/// Two 8 MiB regions of 4K pages, serving `dir/pool.sock`.
fn config(dir: &tempfile::TempDir) -> Config {
    Config::memfds(
        dir.path().join("pool.sock"),
        16 << 20,
        8 << 20,
        PageSize::Size4K,
    )
}

fn daemon(dir: &tempfile::TempDir) -> Daemon {
    let d = Daemon::start(config(dir)).unwrap();
    assert!(d.wait_all_clean(Duration::from_secs(60)));
    d
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn unmapped_lease_ends_at_once_in_the_daemons_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir);
    let socket = dir.path().join("pool.sock");
    for _ in 0..3 {
        let l = pool::client::lease(&socket, 8 << 20, PageSize::Size4K).unwrap();
        let mut m = l.map(true).unwrap();
        assert!(m.as_slice().iter().all(|&b| b == 0));
        m.as_mut_slice().fill(7);
        drop(m);
        drop(l);
        wait_until("the lease to end", || d.status().leased_bytes == 0);
        assert!(d.wait_all_clean(Duration::from_secs(60)));
    }
    let s = d.status();
    assert_eq!((s.leases_total, s.retired_total), (3, 0));
}

#[test]
fn lease_dropped_while_mapped_stays_leased() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir);
    let socket = dir.path().join("pool.sock");
    let l = pool::client::lease(&socket, 8 << 20, PageSize::Size4K).unwrap();
    // A fresh shared mapping of the lease, kept past the lease's end (it
    // stands for guest RAM still used by other threads).
    let m = hostmem::Mapping::file(l.fd(), l.offset(), l.len() as usize)
        .map()
        .unwrap();
    drop(l);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(d.status().leased_bytes, 8 << 20);
    drop(m);
}

/// `--socket-group`: the socket is that group's and 0660 (members lease
/// without being the daemon's user); without it, 0600.
#[test]
fn socket_group_opens_the_socket_to_that_group_only() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // A group this process may give files to: its own, or (as root) any.
    // SAFETY: no preconditions.
    let gid = if unsafe { libc::geteuid() } == 0 {
        65534
    } else {
        unsafe { libc::getegid() }
    };
    let dir = tempfile::tempdir().unwrap();
    let ops = pool::daemon::Ops {
        socket_group: Some(gid),
        ..Default::default()
    };
    let d = Daemon::start_with(config(&dir), ops).unwrap();
    let md = std::fs::metadata(dir.path().join("pool.sock")).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o660);
    assert_eq!(md.gid(), gid);
    drop(d);
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(config(&dir)).unwrap();
    let md = std::fs::metadata(dir.path().join("pool.sock")).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    drop(d);
}

/// Several scrubbers fill several regions at once (the kernel zeroes a
/// region's new pages on the one thread that allocates them, so this is
/// how a first fill uses more than one CPU); with one scrubber no two
/// regions are ever `scrubbing` together, the negative control that shows
/// the observation tells the two apart.
#[test]
fn scrubbers_fill_several_regions_at_once() {
    const REGION: u64 = 128 << 20;
    for n in [4usize, 1] {
        let dir = tempfile::tempdir().unwrap();
        let c = Config {
            size: 4 * REGION,
            region_bytes: REGION,
            ..config(&dir)
        };
        let ops = pool::daemon::Ops {
            scrubbers: n,
            // Normal priority: a loaded test machine must not hold idle
            // workers off the CPU for the whole fill.
            scrub_priority: pool::pace::Priority::Normal,
            ..Default::default()
        };
        let d = Daemon::start_with(c, ops).unwrap();
        assert_eq!(d.scrubbers(), n);
        let mut most = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = d.status();
            most = most.max(s.scrubbing_bytes / REGION);
            if s.clean_bytes == 4 * REGION {
                break;
            }
            assert!(Instant::now() < deadline, "not filled in 60 s: {s:?}");
            std::thread::sleep(Duration::from_micros(500));
        }
        if n == 1 {
            assert!(most <= 1, "one scrubber had {most} regions scrubbing");
        } else {
            assert!(most >= 2, "{n} scrubbers never had two regions scrubbing");
        }
        // Every region the scrubbers filled is zero.
        let socket = dir.path().join("pool.sock");
        let l = pool::client::lease_pieces(&socket, 4 * REGION, PageSize::Size4K, None, 4).unwrap();
        let m = l.map(true).unwrap();
        assert!(m.as_slice().iter().all(|&b| b == 0));
    }
}

/// How many scrubbers a pool runs: one per zeroing thread, at most one per
/// region; one under a bandwidth cap unless asked (the cap is then
/// shared); one under fault injection whatever was asked.
#[test]
fn scrubbers_follow_threads_regions_cap_and_faults() {
    use pool::daemon::{auto_scrubbers, Ops};
    let dir = tempfile::tempdir().unwrap();
    let c = |threads: usize, regions: u64| Config {
        threads,
        size: regions * (8 << 20),
        ..config(&dir)
    };
    let ops = |n: usize, cap: Option<u64>| Ops {
        scrubbers: n,
        scrub_bandwidth: cap,
        ..Default::default()
    };
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(auto_scrubbers(&c(0, 64), &ops(0, None)), cpus.min(64));
    assert_eq!(auto_scrubbers(&c(3, 64), &ops(0, None)), 3);
    assert_eq!(auto_scrubbers(&c(3, 2), &ops(0, None)), 2);
    assert_eq!(auto_scrubbers(&c(0, 64), &ops(5, None)), 5);
    assert_eq!(auto_scrubbers(&c(0, 3), &ops(5, None)), 3);
    assert_eq!(auto_scrubbers(&c(8, 64), &ops(0, Some(1 << 30))), 1);
    assert_eq!(auto_scrubbers(&c(8, 64), &ops(4, Some(1 << 30))), 4);
    let faulty = Config {
        fault: Some(pool::memory::Fault::StallBeforeScrub { after: 9 }),
        ..c(8, 64)
    };
    assert_eq!(auto_scrubbers(&faulty, &ops(4, None)), 1);
}
