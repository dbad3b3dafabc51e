//! Kill tests: SIGKILL the daemon or the client at every region state and
//! show that a later lease never sees a non-zero byte.
//!
//! Clients write a non-zero pattern into their lease before they die;
//! every later lease is scanned in full, all regions at once (so the
//! region the pattern was written to is among them).
//!
//! `ZEROSTART_POOL_TEST_PAGE=2M` runs them on hugetlb memory (see
//! `common`); the `--hugetlbfs` tests are in `hugetlbfs.rs`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use pool::client;
use pool::memory::first_nonzero;

#[test]
fn kill_client_while_leased() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &[]);
    d.all_clean();
    let h = hold(&d.socket, 0xa5, &[]);
    d.wait_for("one region leased", |s| s.leased_bytes == region_bytes());
    h.sigkill();
    let s = d.all_clean();
    assert_eq!(s.scrubbed_bytes, (REGIONS + 1) * region_bytes());
    every_region_is_zero(&d);
}

#[test]
fn client_gone_before_the_reply_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &["--verify"]);
    d.all_clean();
    let mut c = UnixStream::connect(&d.socket).unwrap();
    let req = format!(
        r#"{{"v":1,"op":"lease","bytes":{},"page":"{}"}}"#,
        region_bytes(),
        page()
    );
    c.write_all(&(req.len() as u32).to_le_bytes()).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    drop(c);
    // A whole request is still readable after the peer closed, so the
    // daemon grants it to the dead client. Wait for that grant first: a
    // status read before the daemon got to the request would see "all
    // clean" and race it (seen as a flaky failure under load). The region
    // must then come back through a scrub, never straight to clean.
    d.wait_for("the dead client's lease", |s| s.leases_total == 1);
    let s = d.all_clean();
    assert_eq!(s.leases_total, 1);
    assert_eq!(
        s.scrubbed_bytes,
        (REGIONS + s.leases_total) * region_bytes()
    );
    every_region_is_zero(&d);
}

#[test]
fn kill_daemon_while_leased() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &[]);
    d.all_clean();
    let h = hold(&d.socket, 0x5a, &[]);
    d.sigkill();
    // The client keeps its memory; a new daemon never reuses it.
    let d = Daemon::start(&sock(&dir), None, &[]);
    let ids = every_region_is_zero(&d);
    let old = (
        h.info["dev"].as_u64().unwrap(),
        h.info["inode"].as_u64().unwrap(),
    );
    assert!(!ids.contains(&old), "new daemon handed out the old file");
    h.sigkill();
}

#[test]
fn kill_daemon_with_a_dirty_region() {
    let dir = tempfile::tempdir().unwrap();
    let fault = format!("stall-before-scrub:{REGIONS}");
    let d = Daemon::start(&sock(&dir), Some(&fault), &[]);
    d.all_clean();
    let h = hold(&d.socket, 0xff, &[]);
    h.sigkill();
    let s = d.wait_for("the region dirty", |s| s.dirty_bytes == region_bytes());
    assert_eq!(s.clean_bytes, (REGIONS - 1) * region_bytes());
    d.sigkill();
    let d = Daemon::start(&sock(&dir), None, &[]);
    every_region_is_zero(&d);
}

#[test]
fn kill_daemon_mid_scrub() {
    let dir = tempfile::tempdir().unwrap();
    let fault = format!("stall-mid-scrub:{REGIONS}");
    let d = Daemon::start(&sock(&dir), Some(&fault), &["--verify"]);
    d.all_clean();
    let h = hold(&d.socket, 0x11, &[]);
    h.sigkill();
    d.wait_for("a region stuck mid-scrub", |s| {
        s.scrubbing_bytes == region_bytes()
    });
    // Half of that region is zero, half still holds the pattern: the
    // clean ones are leased, that one is refused.
    let a = client::lease(&d.socket, region_bytes(), page()).unwrap();
    let b = client::lease(&d.socket, region_bytes(), page()).unwrap();
    let e = client::lease(&d.socket, region_bytes(), page()).unwrap_err();
    assert!(e.to_string().contains("1 scrubbing"), "{e}");
    drop((a, b));
    d.sigkill();
    let d = Daemon::start(&sock(&dir), None, &[]);
    every_region_is_zero(&d);
}

#[test]
fn kill_daemon_when_clean() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &[]);
    let first = every_region_is_zero(&d);
    d.sigkill();
    let d = Daemon::start(&sock(&dir), None, &[]);
    let second = every_region_is_zero(&d);
    assert!(first.iter().all(|f| !second.contains(f)));
}

#[test]
fn a_region_still_held_elsewhere_is_retired() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &[]);
    d.all_clean();
    let h = hold(&d.socket, 0x77, &["--test-leak-fd"]);
    let holder = h.info["holder_pid"].as_u64().expect("holder pid") as i32;
    let old = (
        h.info["dev"].as_u64().unwrap(),
        h.info["inode"].as_u64().unwrap(),
    );
    h.sigkill();
    let s = d.wait_for("the region retired", |s| s.retired_total == 1);
    assert_eq!(s.leased_bytes, 0);
    let ids = every_region_is_zero(&d);
    assert!(
        !ids.contains(&old),
        "a region another process holds was re-leased"
    );
    unsafe { libc::kill(holder, libc::SIGKILL) };
}

#[test]
fn protocol_errors_are_one_line_and_the_daemon_survives() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &[]);
    let ask = |body: &str| -> String {
        let mut c = UnixStream::connect(&d.socket).unwrap();
        c.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
        c.write_all(body.as_bytes()).unwrap();
        let (r, _): (pool::proto::Response, _) =
            pool::proto::read_frame(&mut c, true).unwrap().unwrap();
        serde_json::to_string(&r.body).unwrap()
    };
    let r = ask(r#"{"v":99,"op":"status"}"#);
    assert!(r.contains("version 99 is not supported"), "{r}");
    let r = ask(r#"{"v":1,"op":"steal"}"#);
    assert!(r.contains("bad message"), "{r}");
    let r = ask(r#"{"v":1,"op":"lease","bytes":0,"page":"4K"}"#);
    assert!(r.contains("error"), "{r}");
    // A second daemon on the same socket is refused.
    let out = Command::new(bin())
        .args([
            "serve",
            "--page",
            "4K",
            "--size",
            "8M",
            "--region-size",
            "8M",
            "--socket",
        ])
        .arg(&d.socket)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already listens"));
    assert!(d.status().is_some());
}

/// The scan these tests rely on can fail: with the zeroing skipped (a
/// broken engine) and no verify, a later lease sees the dead client's
/// pattern.
#[test]
fn without_zeroing_the_pattern_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let fault = format!("skip-zero:{REGIONS}");
    let d = Daemon::start(&sock(&dir), Some(&fault), &[]);
    d.all_clean();
    hold(&d.socket, 0x3c, &[]).sigkill();
    d.all_clean();
    let mut seen = false;
    let leases: Vec<_> = (0..REGIONS)
        .map(|_| client::lease(&d.socket, region_bytes(), page()).unwrap())
        .collect();
    for l in &leases {
        let m = l.map(false).unwrap();
        if let Some(off) = first_nonzero(m.as_slice(), 0) {
            assert_eq!(m.as_slice()[off], 0x3c);
            seen = true;
        }
    }
    assert!(seen, "the injected fault did not leave the pattern behind");
}

/// `--verify` catches the same broken scrub: the region never becomes
/// clean with the pattern in it; it gets fresh memory instead.
#[test]
fn verify_catches_a_scrub_that_did_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    let fault = format!("skip-zero:{REGIONS}");
    let d = Daemon::start(&sock(&dir), Some(&fault), &["--verify"]);
    d.all_clean();
    hold(&d.socket, 0x3c, &[]).sigkill();
    let s = d.wait_for("a failed scrub", |s| s.scrub_failures >= 1);
    assert_eq!(s.scrub_failures, 1);
    every_region_is_zero(&d);
}

/// A client that drops its `Lease` while it still maps the memory (a VMM
/// whose guest RAM is shared with device threads) keeps the lease until it
/// exits, so the region is not retired; then it comes back and is scrubbed.
#[test]
fn a_lease_dropped_while_mapped_lasts_until_exit() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&sock(&dir), None, &[]);
    d.all_clean();
    let mut child = Command::new(bin())
        .args(["lease", "--test-drop-while-mapped", "--socket"])
        .arg(&d.socket)
        .args([
            "--bytes",
            &region_bytes().to_string(),
            "--page",
            page().name(),
            "--fill",
            "0x42",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "dropped");
    std::thread::sleep(Duration::from_millis(200));
    let s = d.status().unwrap();
    assert_eq!(
        s.leased_bytes,
        region_bytes(),
        "lease ended while still mapped"
    );
    drop(child.stdin.take());
    child.wait().unwrap();
    let s = d.all_clean();
    assert_eq!(s.retired_total, 0);
    every_region_is_zero(&d);
}

/// A fault makes the pool lease memory that is not known zero, so the
/// daemon refuses to start with one unless the test switches are unlocked;
/// the same fault with the unlock starts (see every fault test above).
#[test]
fn fault_injection_is_refused_without_the_test_switch() {
    for unlock in [None, Some("0"), Some("yes")] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = serve_cmd(&sock(&dir), 1, &[]);
        cmd.env("ZEROSTART_POOL_FAULT", "skip-zero:0");
        if let Some(v) = unlock {
            cmd.env("ZEROSTART_TEST_SWITCHES", v);
        }
        let err = refused(cmd);
        assert!(
            err.contains("ZEROSTART_POOL_FAULT=skip-zero:0 is a test-only switch")
                && err.contains("ZEROSTART_TEST_SWITCHES=1"),
            "{err}"
        );
        assert!(!sock(&dir).exists(), "the daemon bound its socket");
    }
}

/// Who may lease is who may connect: the socket is created 0600 by `bind`
/// itself, so even a daemon started under umask 0 never has a moment in
/// which another user could connect (it used to be chmod-ed after `bind`).
#[test]
fn the_socket_is_private_even_under_umask_0() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = serve_cmd(&sock(&dir), 1, &[]);
    // SAFETY: umask is async-signal-safe; it runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        })
    };
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !sock(&dir).exists() {
        assert!(std::time::Instant::now() < deadline, "no socket");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mode = std::fs::metadata(sock(&dir)).unwrap().permissions().mode() & 0o777;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
}
