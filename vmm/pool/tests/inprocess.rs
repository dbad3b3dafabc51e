//! The daemon and a client in one process (how the memready bench and
//! guestmem's tests use the pool): a lease whose mappings are gone ends at
//! once; one dropped while a mapping lives on lasts (until exit).

use std::time::{Duration, Instant};

use pool::daemon::{Config, Daemon};
use pool::PageSize;

/// Two 8 MiB regions of 4K pages, serving `dir/pool.sock`.
fn config(dir: &tempfile::TempDir) -> Config {
    Config {
        socket: dir.path().join("pool.sock"),
        size: 16 << 20,
        region_bytes: 8 << 20,
        page: PageSize::Size4K,
        hugetlbfs: None,
        verify: false,
        threads: 0,
        backend: prezero::Choice::Auto,
        fault: None,
    }
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
