//! What the process-level pool tests share: a daemon started from the real
//! binary, lease-holding client processes, and the full scan of every
//! region.
//!
//! `ZEROSTART_POOL_TEST_PAGE=2M` runs the tests on hugetlb memory (needs
//! free 2M hugepages; `make test-pool` reserves them); the default is 4K
//! shmem so `cargo test` runs anywhere.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pool::client;
use pool::memory::first_nonzero;
use pool::proto::Status;
use pool::PageSize;

/// The daemon and client binary: this build's, or the one named by
/// `ZEROSTART_POOL_TEST_BIN` (to run the attacks against another build, e.g.
/// the release before a fix, and see them fail there).
pub fn bin() -> String {
    std::env::var("ZEROSTART_POOL_TEST_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_zerostart-pool").to_string())
}
pub const REGIONS: u64 = 3;

pub fn page() -> PageSize {
    std::env::var("ZEROSTART_POOL_TEST_PAGE")
        .ok()
        .map(|p| p.parse().expect("ZEROSTART_POOL_TEST_PAGE is 4K or 2M"))
        .unwrap_or(PageSize::Size4K)
}

pub fn region_bytes() -> u64 {
    8 << 20
}

pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub regions: u64,
}

/// The daemon command line, without the fault switch or its unlock.
pub fn serve_cmd(socket: &Path, regions: u64, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--socket"])
        .arg(socket)
        .args([
            "--size",
            &(regions * region_bytes()).to_string(),
            "--region-size",
            &region_bytes().to_string(),
            "--page",
            page().name(),
        ])
        .args(extra)
        .env_remove("ZEROSTART_POOL_FAULT")
        .env_remove("ZEROSTART_TEST_SWITCHES")
        .stdout(Stdio::null());
    cmd
}

impl Daemon {
    pub fn start(socket: &Path, fault: Option<&str>, extra: &[&str]) -> Daemon {
        Self::start_n(socket, REGIONS, fault, extra)
    }

    /// A daemon of `regions` regions; `fault` is set with the test switch
    /// unlocked (the daemon refuses it otherwise).
    pub fn start_n(socket: &Path, regions: u64, fault: Option<&str>, extra: &[&str]) -> Daemon {
        Self::spawn(serve_cmd(socket, regions, extra), socket, regions, fault)
    }

    /// Starts `cmd` (a daemon command line, perhaps under a wrapper) and
    /// waits for its socket.
    pub fn spawn(mut cmd: Command, socket: &Path, regions: u64, fault: Option<&str>) -> Daemon {
        if let Some(f) = fault {
            cmd.env("ZEROSTART_POOL_FAULT", f)
                .env("ZEROSTART_TEST_SWITCHES", "1");
        }
        let child = cmd.spawn().expect("start the daemon");
        let mut d = Daemon {
            child,
            socket: socket.to_path_buf(),
            regions,
        };
        // Until the socket answers; a daemon that exits (its error is on
        // stderr) fails the test at once instead of after the timeout.
        let deadline = Instant::now() + Duration::from_secs(60);
        while d.status().is_none() {
            if let Some(st) = d.child.try_wait().unwrap() {
                panic!("the daemon exited ({st}) instead of serving: {cmd:?}");
            }
            assert!(
                Instant::now() < deadline,
                "the daemon's socket never answered"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn status(&self) -> Option<Status> {
        client::status(&self.socket).ok()
    }

    pub fn wait_for(&self, what: &str, pred: impl Fn(&Status) -> bool) -> Status {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.status() {
                if pred(&s) {
                    return s;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn all_clean(&self) -> Status {
        self.wait_for("every region clean", |s| s.clean_bytes == s.size_bytes)
    }

    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client process holding a lease filled with `fill`.
pub struct Holder {
    pub child: Child,
    pub info: serde_json::Value,
}

pub fn hold(socket: &Path, fill: u8, extra: &[&str]) -> Holder {
    let mut child = Command::new(bin())
        .args(["lease", "--hold", "--socket"])
        .arg(socket)
        .args([
            "--bytes",
            &region_bytes().to_string(),
            "--page",
            page().name(),
            "--fill",
            &fill.to_string(),
        ])
        .args(extra)
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
    assert_eq!(info["filled"], fill);
    Holder { child, info }
}

impl Holder {
    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn identity(&self) -> (u64, u64) {
        (
            self.info["dev"].as_u64().unwrap(),
            self.info["inode"].as_u64().unwrap(),
        )
    }
}

pub fn identity(fd: std::os::fd::BorrowedFd<'_>) -> (u64, u64) {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, zeroed buffer.
    assert_eq!(
        unsafe { libc::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut st) },
        0
    );
    (st.st_dev, st.st_ino)
}

/// Leases every region at once and scans each in full. Returns the
/// (dev, inode) of the files handed out.
pub fn every_region_is_zero(d: &Daemon) -> Vec<(u64, u64)> {
    d.all_clean();
    let mut leases = Vec::new();
    for _ in 0..d.regions {
        leases.push(client::lease(&d.socket, region_bytes(), page()).expect("lease"));
    }
    let mut ids = Vec::new();
    for l in &leases {
        let m = l.map(false).unwrap();
        assert_eq!(m.as_slice().len() as u64, region_bytes());
        if let Some(off) = first_nonzero(m.as_slice(), 0) {
            panic!(
                "lease {} region {} has byte {:#x} at {off:#x}",
                l.id(),
                l.info().region,
                m.as_slice()[off]
            );
        }
        ids.push(identity(l.fd()));
    }
    // Every region is out: one more lease must be refused, not wait or
    // hand out a region twice.
    let e = client::lease(&d.socket, region_bytes(), page()).unwrap_err();
    assert!(e.to_string().contains("no clean region"), "{e}");
    ids
}

pub fn sock(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("pool.sock")
}

/// Runs a daemon command that must refuse to start: it must exit non-zero
/// within 10 s (a daemon that serves is killed and the test fails) with one
/// line on stderr, which is returned.
pub fn refused(mut cmd: Command) -> String {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the daemon started: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    err
}
