//! `zerostart pool status --wait-clean`: the one wait the test scripts use
//! before measuring or leasing (it replaced four shell polling loops).

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, hold, sock, Daemon};

fn wait_clean(socket: &std::path::Path, timeout_s: u64) -> Output {
    Command::new(bin())
        .args(["status", "--json", "--wait-clean", "--timeout"])
        .arg(timeout_s.to_string())
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn returns_once_every_region_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let s = sock(&dir);
    let _d = Daemon::start(&s, None, &[]);
    let o = wait_clean(&s, 60);
    assert!(o.status.success(), "{}", stderr(&o));
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["clean_bytes"], st["size_bytes"], "{st}");
}

#[test]
fn waits_for_a_daemon_that_is_not_listening_yet() {
    let dir = tempfile::tempdir().unwrap();
    let s = sock(&dir);
    let waiter = {
        let s = s.clone();
        std::thread::spawn(move || wait_clean(&s, 60))
    };
    std::thread::sleep(Duration::from_millis(500));
    let _d = Daemon::start(&s, None, &[]);
    let o = waiter.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Negative control: a region that stays leased keeps the pool from being
/// clean, and the wait must end in time with one line that says so.
#[test]
fn a_held_lease_times_out_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = sock(&dir);
    let d = Daemon::start(&s, None, &[]);
    // A lease is refused until a region is clean (seen under load in a
    // fresh-clone run: "no clean region now (0 leased, 1 scrubbing, 2
    // dirty of 3)"), as every other holder test knows.
    d.all_clean();
    let h = hold(&s, 0xa5, &[]);
    let t = Instant::now();
    let o = wait_clean(&s, 1);
    let err = stderr(&o);
    assert!(!o.status.success(), "clean while a lease is held: {err}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(
        err.contains("not clean after 1 s") && err.contains("leased"),
        "{err}"
    );
    h.sigkill();
}

#[test]
fn no_daemon_times_out_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let o = wait_clean(&sock(&dir), 1);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains("cannot connect"), "{err}");
}

#[test]
fn timeout_without_wait_clean_is_refused() {
    let o = Command::new(bin())
        .args(["status", "--timeout", "5"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--wait-clean"), "{}", stderr(&o));
}
