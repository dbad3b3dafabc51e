//! Regions per NUMA node, on a fake two-node topology (as prezero's
//! `numa.rs` tests its reader): the daemon is pointed at a fake
//! `/sys/devices/system/node` tree (test switch only) whose node 0 has CPU
//! 0 and node 1 CPU 1. Regions are dealt round-robin; a lease that asks for
//! a node gets a region of that node or a one-line refusal, never another
//! node's memory; the scrub worker of a region runs on its node's CPUs
//! (seen in `/proc/PID/task/TID/status`). Memory binding itself needs real
//! nodes: on this one-node machine the fake node 1 does not exist, so the
//! daemon binds only where the node is real (`numa::tests` binds to node 0).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use pool::client;

fn fake_tree(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("nodes");
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    for (n, list) in [("node0", "0\n"), ("node1", if two { "1\n" } else { "0\n" })] {
        std::fs::create_dir_all(root.join(n)).unwrap();
        std::fs::write(root.join(n).join("cpulist"), list).unwrap();
    }
    root
}

fn start(dir: &tempfile::TempDir, regions: u64, extra: &[&str]) -> Daemon {
    let mut cmd = serve_cmd(&sock(dir), regions, extra);
    cmd.env("ZEROSTART_POOL_NODES_SYSFS", fake_tree(dir.path()))
        .env("ZEROSTART_TEST_SWITCHES", "1");
    Daemon::spawn(cmd, &sock(dir), regions, None)
}

#[test]
fn a_lease_asking_for_a_node_gets_that_nodes_region_or_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(&dir, 4, &[]);
    d.all_clean();
    let on = |n: usize| client::lease_on_node(&d.socket, region_bytes(), page(), Some(n));
    let a = on(1).expect("node 1 lease");
    let b = on(1).expect("second node 1 lease");
    for l in [&a, &b] {
        assert_eq!(l.info().node, Some(1));
        assert_eq!(l.info().region % 2, 1, "regions are dealt round-robin");
    }
    let e = on(1).expect_err("node 1 has no third region").to_string();
    assert!(e.contains("no clean region on NUMA node 1"), "{e}");
    assert_eq!(e.lines().count(), 1);
    // Node 0 still has both of its regions; any-node leases work.
    let c = on(0).expect("node 0 lease");
    assert_eq!(c.info().node, Some(0));
    let any = client::lease(&d.socket, region_bytes(), page()).expect("any node");
    assert_eq!(any.info().node, Some(0));
    let e = on(7).expect_err("no node 7").to_string();
    assert!(
        e.contains("no regions on NUMA node 7 (its nodes: 0, 1)"),
        "{e}"
    );
    // Every lease reads zero.
    for l in [&a, &b, &c, &any] {
        let m = l.map(false).unwrap();
        assert_eq!(pool::memory::first_nonzero(m.as_slice(), 0), None);
    }
}

/// `Cpus_allowed_list` of the daemon's scrub worker, if it runs now.
fn worker_cpus(pid: u32) -> Option<String> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let t = t.ok()?.path();
        if std::fs::read_to_string(t.join("comm"))
            .unwrap_or_default()
            .trim()
            != "pool-scrub-idle"
        {
            continue;
        }
        let status = std::fs::read_to_string(t.join("status")).ok()?;
        return status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string());
    }
    None
}

#[test]
fn scrub_workers_run_on_their_regions_node() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        testsupport::skip("SMP", "one CPU: both fake nodes have CPU 0");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 2 regions of 8 MiB at 4 MiB/s: region 0 (node 0) for 2 s, then
    // region 1 (node 1).
    let d = start(&dir, 2, &["--scrub-bandwidth", "4M"]);
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && d.status().is_some_and(|s| s.clean_bytes < s.size_bytes) {
        if let Some(c) = worker_cpus(d.child.id()) {
            seen.insert(c);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        seen,
        BTreeSet::from(["0".to_string(), "1".to_string()]),
        "workers must run on node 0's CPU, then node 1's, never both"
    );
}

#[test]
fn a_fake_topology_needs_the_test_switch() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = serve_cmd(&sock(&dir), 2, &[]);
    cmd.env("ZEROSTART_POOL_NODES_SYSFS", fake_tree(dir.path()));
    let e = refused(cmd);
    assert!(e.contains("ZEROSTART_TEST_SWITCHES=1"), "{e}");
}
