//! Leases of any size (docs/pool.md, "Leases of any size"): leases of 1, 3
//! and 5 regions' worth from one pool of 9, through the real daemon and the
//! real `lease` command (`--pieces`), held at once. Scaled down: a "GiB"
//! here is one region of the tests' region size (8 MiB), on 4K shmem by
//! default (`ZEROSTART_POOL_TEST_PAGE=2M` for hugetlb).
//!
//! Checked: what the pool holds (exactly 9 regions leased, nothing clean,
//! a 10th lease refused); no region or file in two leases; every piece
//! reads zero when leased (the `lease` command scans every byte of its
//! contiguous mapping and fails otherwise); a returned lease's regions come
//! back with new files, and the next lease of that size never sees the
//! first one's pattern. Negative control: under the `skip-zero` test fault
//! (the returned pages kept, not zeroed) the same next lease fails on the
//! pattern, so the check can fail.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::*;

/// A lease of `units` regions held by a `lease --hold --pieces` process,
/// its memory filled with `fill`.
struct Held {
    child: Child,
    info: serde_json::Value,
}

impl Held {
    /// (region, dev, inode) of every piece.
    fn pieces(&self) -> Vec<(u64, u64, u64)> {
        self.info["pieces"]
            .as_array()
            .expect("pieces")
            .iter()
            .map(|p| {
                (
                    p["region"].as_u64().unwrap(),
                    p["dev"].as_u64().unwrap(),
                    p["inode"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn files(&self) -> BTreeSet<(u64, u64)> {
        self.pieces().iter().map(|&(_, d, i)| (d, i)).collect()
    }

    fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn lease_cmd(d: &Daemon, units: u64) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["lease", "--socket"]).arg(&d.socket).args([
        "--bytes",
        &(units * region_bytes()).to_string(),
        "--page",
        page().name(),
        "--pieces",
        "8",
    ]);
    cmd
}

fn hold_units(d: &Daemon, units: u64, fill: u8) -> Held {
    let mut child = lease_cmd(d, units)
        .args(["--hold", "--fill", &fill.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let info: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("lease output {line:?}: {e}"));
    assert_eq!(info["bytes"], units * region_bytes());
    assert_eq!(info["checked_zero_bytes"], units * region_bytes());
    assert_eq!(info["filled"], fill);
    let held = Held { child, info };
    assert_eq!(held.pieces().len() as u64, units, "{}", held.info);
    held
}

/// The scenario; returns the next 3-region lease's output (the `lease`
/// command's exit status and stderr) after the first 3-region lease, filled
/// with 0xb2, was returned.
fn one_three_five(fault: Option<&str>) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_n(&sock(&dir), 9, fault, &[]);
    d.all_clean();
    let r = region_bytes();
    let a = hold_units(&d, 1, 0xa1);
    let b = hold_units(&d, 3, 0xb2);
    let c = hold_units(&d, 5, 0xc3);
    let s = d.status().unwrap();
    assert_eq!((s.leased_bytes, s.clean_bytes), (9 * r, 0), "{s:?}");
    assert_eq!(s.leases_total, 3);
    // No region and no file in two leases (or twice in one).
    let regions: BTreeSet<u64> = [&a, &b, &c]
        .iter()
        .flat_map(|h| h.pieces().into_iter().map(|p| p.0))
        .collect();
    assert_eq!(regions, (0..9).collect());
    let files: BTreeSet<(u64, u64)> = [&a, &b, &c].iter().flat_map(|h| h.files()).collect();
    assert_eq!(files.len(), 9);
    // Nothing left: one more region is refused and takes nothing.
    let out = lease_cmd(&d, 1).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no clean region"),
        "{err}"
    );
    assert_eq!(d.status().unwrap().leased_bytes, 9 * r);

    // B returns its 3 regions; they come back clean, the others stay held.
    let b_files = b.files();
    b.sigkill();
    let s = d.wait_for("B's regions clean", |s| s.clean_bytes == 3 * r);
    assert_eq!(s.leased_bytes, 6 * r);
    // A 5-region lease does not fit in 3 clean regions: refused, nothing
    // taken.
    let out = lease_cmd(&d, 5).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not 5 clean regions now (3 clean)"), "{err}");
    assert_eq!(d.status().unwrap().clean_bytes, 3 * r);
    let next = if fault.is_none() {
        // The next 3-region lease gets new files, all zero.
        let n = hold_units(&d, 3, 0x5a);
        assert!(
            n.files().is_disjoint(&b_files),
            "a returned region's file leased again"
        );
        n.sigkill();
        d.wait_for("N's regions clean", |s| s.clean_bytes == 3 * r);
        lease_cmd(&d, 3).output().unwrap()
    } else {
        lease_cmd(&d, 3).output().unwrap()
    };
    a.sigkill();
    c.sigkill();
    if fault.is_none() {
        let s = d.all_clean();
        assert_eq!((s.leased_bytes, s.retired_total), (0, 0));
    }
    next
}

#[test]
fn leases_of_one_three_and_five_regions_hold_what_they_need() {
    let out = one_three_five(None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Negative control: the returned pages kept without zeroing (test fault
/// `skip-zero` after the 9 first fills): the next lease of B's regions
/// must see B's 0xb2.
#[test]
fn without_zeroing_the_next_lease_sees_the_pattern() {
    let out = one_three_five(Some("skip-zero:9"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the pattern went unseen: {err}");
    assert!(err.contains("is 0xb2, not zero"), "{err}");
}
