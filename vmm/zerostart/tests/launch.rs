//! `zerostart launch` with a real QEMU on the host and a real `zerostart
//! pool` (4K shmem regions): the lease's lifetime when the launcher is
//! SIGKILLed, signal forwarding and exit status. QEMU runs paused (`-S`),
//! so no guest code is needed; the guest's writes are simulated by writing
//! through the VMM's own descriptor of the region (`/proc/PID/fd/N`), so
//! they land exactly where the guest's would.
//!
//! SKIPs (printed) without `qemu-system-x86_64` on PATH.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_zerostart");
const REGION: u64 = 64 << 20;

fn qemu() -> Option<PathBuf> {
    let p = std::env::var_os("PATH")?;
    std::env::split_paths(&p)
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.exists())
}

macro_rules! need_qemu {
    () => {
        match qemu() {
            Some(q) => q,
            None => {
                testsupport::skip(
                    "QEMU",
                    "qemu-system-x86_64 is not on PATH (apt-get install qemu-system-x86)",
                );
                return;
            }
        }
    };
}

struct Pool {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pool {
    /// Two 64 MiB regions of 4K shmem.
    fn start() -> Pool {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("pool.sock");
        Pool::start_at(dir, socket, &[])
    }

    /// The same pool at `socket` (in `dir`), with more `serve` options.
    fn start_at(dir: tempfile::TempDir, socket: PathBuf, extra: &[&str]) -> Pool {
        let mut args = vec!["--size", "128M", "--region-size", "64M"];
        args.extend_from_slice(extra);
        Pool::serve(dir, socket, &args)
    }

    /// A pool of 4K shmem serving `socket` (in `dir`) with these `serve`
    /// options, once all of it is clean.
    fn serve(dir: tempfile::TempDir, socket: PathBuf, args: &[&str]) -> Pool {
        let child = Command::new(BIN)
            .args(["pool", "serve", "--page", "4K"])
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let p = Pool {
            child,
            socket,
            _dir: dir,
        };
        p.wait_until("all clean", |s| s.clean_bytes == s.size_bytes);
        p
    }

    fn status(&self) -> Option<pool::proto::Status> {
        pool::client::status(&self.socket).ok()
    }

    fn wait_until(
        &self,
        what: &str,
        f: impl Fn(&pool::proto::Status) -> bool,
    ) -> pool::proto::Status {
        let t = Instant::now();
        loop {
            if let Some(s) = self.status().filter(|s| f(s)) {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "pool never reached '{what}': {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Leases both regions at once and scans every byte.
    fn every_region_zero(&self) {
        let a = pool::client::lease(&self.socket, REGION, pool::PageSize::Size4K).unwrap();
        let b = pool::client::lease(&self.socket, REGION, pool::PageSize::Size4K).unwrap();
        for l in [&a, &b] {
            let m = l.map(false).unwrap();
            let nz = m.as_slice().iter().filter(|&&x| x != 0).count();
            assert_eq!(nz, 0, "lease {} has {nz} non-zero bytes", l.id());
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn launch(pool: &Pool, qemu: &Path, extra: &[&str]) -> (Child, tempfile::NamedTempFile) {
    launch_sized(pool, qemu, 64, extra)
}

/// [`launch`] of a guest of `mib` MiB.
fn launch_sized(
    pool: &Pool,
    qemu: &Path,
    mib: u64,
    extra: &[&str],
) -> (Child, tempfile::NamedTempFile) {
    // A 64 KiB "firmware": QEMU maps it as the BIOS ROM; with -S no vCPU
    // ever runs it.
    let mut fw = tempfile::NamedTempFile::new().unwrap();
    fw.write_all(&[0xf4; 65536]).unwrap();
    let child = Command::new(BIN)
        .env("ZEROSTART_TEST_SWITCHES", "1")
        .arg("launch")
        .args(["--vmm", "qemu", "--vmm-binary"])
        .arg(qemu)
        .arg("--memory")
        .arg(format!(
            "size={mib}M,source=pool:{},hugepages=off",
            pool.socket.display()
        ))
        .arg("--firmware")
        .arg(fw.path())
        .args(extra)
        .args([
            "--",
            "-accel",
            "tcg",
            "-nodefaults",
            "-display",
            "none",
            "-S",
            "-monitor",
            "none",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, fw)
}

/// A failed assertion must not leave a QEMU behind (it would hold the
/// test harness's output pipe open).
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: signalling a VMM this test started.
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

fn alive(pid: u32) -> bool {
    // Zombies count as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// The VMM (child of the launcher) once it maps the pool's region;
/// returns its pid and the path of its descriptor of the region.
fn vmm_of(launcher: u32) -> (u32, PathBuf) {
    let t = Instant::now();
    loop {
        let kids = std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children"))
            .unwrap_or_default();
        if let Some(pid) = kids
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<u32>().ok())
        {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            if maps.contains("zerostart-pool") {
                for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .unwrap()
                    .flatten()
                {
                    if let Ok(t) = std::fs::read_link(fd.path()) {
                        if t.to_string_lossy().contains("zerostart-pool") {
                            return (pid, fd.path());
                        }
                    }
                }
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the VMM never mapped the region"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a guest would do: fill its RAM with a non-zero pattern.
fn dirty_through(fd_path: &Path) {
    let f = OpenOptions::new().write(true).open(fd_path).unwrap();
    let buf = vec![0xa5u8; 1 << 20];
    for i in 0..(REGION >> 20) {
        f.write_all_at(&buf, i << 20).unwrap();
    }
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let t = Instant::now();
    while alive(pid) {
        if t.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Launcher SIGKILLed: the VMM dies with it (PR_SET_PDEATHSIG), the lease
/// ends only after the VMM is gone (it held the connection), so the pool
/// finds no holder, scrubs the region and hands it out again zeroed:
/// neither retired nor leased forever.
#[test]
fn killed_launcher_takes_the_vmm_and_the_lease_with_it() {
    let qemu = need_qemu!();
    let pool = Pool::start();
    let (mut launcher, _fw) = launch(&pool, &qemu, &[]);
    let (vmm, fd) = vmm_of(launcher.id());
    let _guard = KillOnDrop(vmm);
    pool.wait_until("one region leased", |s| s.leased_bytes == REGION);
    dirty_through(&fd);
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    assert!(
        wait_gone(vmm, Duration::from_secs(5)),
        "the VMM outlived its killed launcher"
    );
    let s = pool.wait_until("all clean again", |s| s.clean_bytes == 2 * REGION);
    assert_eq!(s.retired_total, 0, "the pool saw a holder: {s:?}");
    pool.every_region_zero();
}

/// A VMM that survives its SIGKILLed launcher (PR_SET_PDEATHSIG does not
/// fire, e.g. after a set-uid exec; simulated by a test switch) keeps the
/// lease: the region is not scrubbed or re-leased while it maps it and
/// its guest keeps writing; when the VMM ends, the lease ends and the
/// region comes back zeroed.
#[test]
fn a_vmm_that_outlives_its_launcher_keeps_the_lease_until_it_exits() {
    let qemu = need_qemu!();
    let pool = Pool::start();
    let (mut launcher, _fw) = launch(&pool, &qemu, &["--test-no-pdeathsig"]);
    let (vmm, fd) = vmm_of(launcher.id());
    let _guard = KillOnDrop(vmm);
    pool.wait_until("one region leased", |s| s.leased_bytes == REGION);
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    // Longer than the pool's grace for dying holders (2 s): a lease that
    // had ended with the launcher would be judged (and retired) by now.
    std::thread::sleep(Duration::from_secs(3));
    assert!(alive(vmm), "the VMM should survive without PDEATHSIG");
    // The guest still writes its RAM after the launcher is gone.
    dirty_through(&fd);
    let s = pool.status().unwrap();
    assert_eq!(
        s.leased_bytes, REGION,
        "lease ended under a live VMM: {s:?}"
    );
    assert_eq!(s.clean_bytes, REGION, "{s:?}");
    // Only the other region can be leased.
    let other = pool::client::lease(&pool.socket, REGION, pool::PageSize::Size4K).unwrap();
    assert!(pool::client::lease(&pool.socket, REGION, pool::PageSize::Size4K).is_err());
    drop(other);
    // The VMM ends (here: killed) -> the lease ends -> scrubbed, not retired.
    // SAFETY: signalling the VMM this test started.
    unsafe { libc::kill(vmm as i32, libc::SIGKILL) };
    assert!(wait_gone(vmm, Duration::from_secs(5)));
    let s = pool.wait_until("all clean again", |s| s.clean_bytes == 2 * REGION);
    assert_eq!(s.retired_total, 0, "{s:?}");
    pool.every_region_zero();
}

/// SIGTERM to the launcher reaches the VMM (QEMU ends on it), the
/// launcher exits with the VMM's status, and the region comes back.
#[test]
fn signals_are_forwarded_and_the_status_passed_through() {
    let qemu = need_qemu!();
    let pool = Pool::start();
    let (mut launcher, _fw) = launch(&pool, &qemu, &[]);
    let (vmm, _) = vmm_of(launcher.id());
    let _guard = KillOnDrop(vmm);
    // Let QEMU finish starting (and install its own SIGTERM handler).
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: signalling the launcher this test started.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    let st = launcher.wait().unwrap();
    assert!(!alive(vmm));
    // QEMU exits 0 after "terminating on signal 15", and so does the launcher.
    assert_eq!(st.code(), Some(0), "{st:?}");
    pool.wait_until("all clean again", |s| s.clean_bytes == 2 * REGION);

    // A VMM that fails: its exit code comes through.
    let out = Command::new(BIN)
        .arg("launch")
        .args(["--vmm", "qemu", "--vmm-binary"])
        .arg(&qemu)
        .arg("--memory")
        .arg(format!(
            "size=64M,source=pool:{},hugepages=off,hint=off",
            pool.socket.display()
        ))
        .args(["--", "-accel", "tcg", "-no-such-option"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    pool.wait_until("all clean again", |s| s.clean_bytes == 2 * REGION);
}

/// A pool that cannot lease: by default the launcher waits --pool-wait,
/// warns in one line and starts the VM on a memfd of its own (here QEMU
/// exits 1 at once on a bad option: its status comes through); with
/// --pool-fallback fail it starts nothing and exits 125. A VMM binary that
/// is not there is 127.
#[test]
fn an_unavailable_pool_falls_back_or_fails_as_asked() {
    let qemu = need_qemu!();
    let mem = "size=64M,source=pool:/nonexistent.sock,hugepages=off,hint=off";
    let run = |extra: &[&str], binary: &Path| {
        Command::new(BIN)
            .arg("launch")
            .args(["--vmm", "qemu", "--vmm-binary"])
            .arg(binary)
            .args(["--memory", mem, "--pool-wait", "200ms"])
            .args(extra)
            .args(["--", "-accel", "tcg", "-no-such-option"])
            .output()
            .unwrap()
    };
    let t = Instant::now();
    let out = run(&[], &qemu);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "QEMU's own status: {err}");
    assert!(t.elapsed() >= Duration::from_millis(200), "did not wait");
    let warn: Vec<_> = err
        .lines()
        .filter(|l| l.contains("zerostart launch: warning"))
        .collect();
    assert_eq!(warn.len(), 1, "{err}");
    assert!(warn[0].contains("falling back to source=prefault"), "{err}");
    let out = run(&["--pool-fallback", "none"], &qemu);
    assert!(String::from_utf8_lossy(&out.stderr).contains("source=none"));
    let out = run(&["--pool-fallback", "fail"], &qemu);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let out = run(&["--pool-fallback", "none"], Path::new("/nonexistent/qemu"));
    assert_eq!(out.status.code(), Some(127), "{out:?}");
}

/// One-line errors naming the fix.
#[test]
fn bad_input_is_one_line() {
    let pool = Pool::start();
    let sock = pool.socket.display().to_string();
    for (args, want) in [
        (
            vec![
                "--vmm",
                "qemu",
                "--memory",
                &format!("size=128M,source=pool:{sock},hugepages=off,hint=off") as &str,
                "--pool-fallback",
                "fail",
                "--",
                "-accel",
                "tcg",
            ],
            "region",
        ),
        (
            vec![
                "--vmm",
                "qemu",
                "--memory",
                "size=64M,source=none,hint=off",
                "--",
                "-m",
                "1G",
            ],
            "conflicts",
        ),
        (
            vec![
                "--vmm",
                "qemu",
                "--memory",
                "size=64M,source=none,hugepages=off",
            ],
            "--firmware",
        ),
        (
            vec!["--vmm", "qemu", "--memory", "size=64M", "--dry-run"],
            "source= is required",
        ),
        (
            vec![
                "--vmm",
                "cloud-hypervisor",
                "--memory",
                "size=64M,source=none",
                "--",
                "--kernel",
                "k",
            ],
            "cannot read --kernel k",
        ),
        (
            vec![
                "--vmm",
                "cloud-hypervisor",
                "--memory",
                "size=64M,source=none",
                "--",
                "--cpus",
                "boot=1",
            ],
            "can carry the hint only to a kernel it boots directly",
        ),
        (
            vec![
                "--vmm",
                "qemu",
                "--memory",
                "size=64M,source=pool:/nonexistent.sock,hint=off",
                "--pool-wait",
                "100ms",
                "--pool-fallback",
                "fail",
            ],
            "zerostart pool serve",
        ),
        (
            vec![
                "--vmm",
                "qemu",
                "--memory",
                "size=64M,source=none,hint=off",
                "--test-no-pdeathsig",
            ],
            "ZEROSTART_TEST_SWITCHES",
        ),
    ] {
        let out = Command::new(BIN)
            .arg("launch")
            .args(&args)
            .env_remove("ZEROSTART_TEST_SWITCHES")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // The launcher's own errors exit 125, apart from the VMM's 1.
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `--disk` / `--net` / `--vsock` through the real binary: bad values are
/// one line before anything starts, and a dry run prints the QEMU devices.
#[test]
fn device_options_through_the_binary() {
    let base = [
        "--vmm",
        "qemu",
        "--memory",
        "size=64M,source=none,hint=off",
        "--dry-run",
    ];
    for (extra, want) in [
        (vec!["--net", "tap=a/b"], "interface name"),
        (vec!["--net", "tap=t0,mac=01:00:00:00:00:01"], "unicast"),
        (vec!["--disk", "readonly=on"], "path= is required"),
        (vec!["--vsock", "cid=1"], "from 3 to"),
        (
            vec!["--vsock", "cid=3,socket=/tmp/v.sock"],
            "give only cid=",
        ),
    ] {
        let out = Command::new(BIN)
            .arg("launch")
            .args(base)
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
    }
    let out = Command::new(BIN)
        .arg("launch")
        .args(base)
        .args([
            "--disk",
            "path=/img/root.img",
            "--net",
            "tap=zstap0,vhost=off",
            "--vsock",
            "cid=5",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for want in [
        "-drive file=/img/root.img,format=raw,if=none,id=zs-disk0,cache=none -device virtio-blk-pci,drive=zs-disk0",
        "-netdev tap,id=zs-net0,ifname=zstap0,script=no,downscript=no,vhost=off -device virtio-net-pci,netdev=zs-net0,mac=0a:5a:53:00:00:00,romfile=",
        "-device vhost-vsock-pci,guest-cid=5",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// An ELF64 with one PT_LOAD of 16 bytes at 1 MiB: what the launcher
/// reads of a CloudHv-like firmware or a PVH kernel (its load segments).
fn pvh_elf() -> Vec<u8> {
    let mut elf = vec![0u8; 120];
    elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
    elf[32] = 64;
    elf[54] = 56;
    elf[56] = 1;
    elf[64] = 1;
    elf[64 + 26] = 0x10;
    elf[64 + 40] = 0x10;
    elf
}

/// cloud-hypervisor itself when it is on PATH: the launcher's fw_cfg
/// detection against the real binary's --help. A release binary (no
/// fw_cfg) gets the hint as an SMBIOS OEM string, one with fw_cfg over
/// --fw-cfg-config; --dry-run names which.
#[test]
fn cloud_hypervisor_when_present() {
    let Some(p) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("cloud-hypervisor"))
            .find(|p| p.exists())
    }) else {
        testsupport::skip(
            "CLOUD_HYPERVISOR",
            "cloud-hypervisor is not on PATH (it is in no package registry; docs/launch.md)",
        );
        return;
    };
    let help = Command::new(&p).arg("--help").output().unwrap();
    let has = String::from_utf8_lossy(&help.stdout).contains("--fw-cfg-config");
    let mut fw = tempfile::NamedTempFile::new().unwrap();
    fw.write_all(&pvh_elf()).unwrap();
    // The same launch, for real and as a dry run.
    let launch = |first: &[&str]| {
        Command::new(BIN)
            .args(first)
            .args([
                "--vmm",
                "cloud-hypervisor",
                "--memory",
                "size=64M,source=none,hugepages=off",
                "--firmware",
            ])
            .arg(fw.path())
            .arg("--vmm-binary")
            .arg(&p)
            .output()
            .unwrap()
    };
    let out = launch(&["launch"]);
    let err = String::from_utf8_lossy(&out.stderr);
    // It gets as far as booting the fake firmware either way.
    assert!(!err.contains("has no fw_cfg device"), "{err}");
    let dry = launch(&["launch", "--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    if has {
        assert!(
            text.contains("--fw-cfg-config") && text.contains("over fw_cfg"),
            "{text}"
        );
    } else {
        assert!(
            text.contains("--platform 'oem_strings=[prezero.hint=")
                || text.contains("--platform oem_strings=[prezero.hint="),
            "{text}"
        );
        assert!(text.contains("in an SMBIOS OEM string"), "{text}");
    }
}

/// A free loopback port (bound and released; the pool binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The pool's launch counters and memory_ready counts, scraped over HTTP:
/// every `zerostart_pool_launches_total` and
/// `zerostart_pool_memory_ready_seconds_count` sample line, parsed
/// strictly (`name{labels} value`, each key once).
fn launch_counters(port: u16) -> std::collections::BTreeMap<String, f64> {
    use std::io::Read;
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(c, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    let mut out = std::collections::BTreeMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let (key, value) = line.rsplit_once(' ').expect("name value");
        if key.starts_with("zerostart_pool_launches_total{")
            || key.starts_with("zerostart_pool_memory_ready_seconds_count{")
        {
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
            assert!(out.insert(key.to_string(), v).is_none(), "{key} twice");
        }
    }
    assert_eq!(
        out.keys().filter(|k| k.contains("launches_total")).count(),
        15,
        "3 VMMs x 5 outcomes: {out:?}"
    );
    out
}

fn launches(vmm: &str, outcome: &str) -> String {
    format!("zerostart_pool_launches_total{{vmm=\"{vmm}\",outcome=\"{outcome}\"}}")
}

fn ready_count(vmm: &str, source: &str) -> String {
    format!("zerostart_pool_memory_ready_seconds_count{{vmm=\"{vmm}\",source=\"{source}\"}}")
}

/// A stand-in VMM: a script that ignores its arguments and exits at once,
/// or, with `ZS_FAKE_VMM_UNTIL` set, creates `$ZS_FAKE_VMM_UNTIL.started`
/// and waits until the file `ZS_FAKE_VMM_UNTIL` names exists (at most
/// 60 s), so the launcher's own reporting is tested without booting
/// anything.
fn fake_vmm(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("fake-vmm");
    std::fs::write(
        &p,
        "#!/bin/sh\n[ -z \"$ZS_FAKE_VMM_UNTIL\" ] && exit 0\n: > \"$ZS_FAKE_VMM_UNTIL.started\"\nn=0\nwhile [ ! -e \"$ZS_FAKE_VMM_UNTIL\" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// `zerostart launch --vmm qemu` of the fake VMM with `memory`.
fn launch_fake(vmm: &Path, memory: &str, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("launch")
        .args(["--vmm", "qemu", "--vmm-binary"])
        .arg(vmm)
        .args(["--memory", memory, "--pool-wait", "0"])
        .args(extra)
        .args(["--", "-accel", "tcg"])
        .output()
        .unwrap()
}

/// Each launch outcome, through the real binary and a real pool with
/// `--metrics`, moves exactly its own counter: a lease (`leased`, its
/// memory_ready in the `pool` series), a guest larger than the pool's
/// regions falling back to prefault and to none, and `--pool-fallback
/// fail`; the drop-in's pass-through. Negative controls move nothing: a
/// launch that asks no pool (`source=prefault`), a `--dry-run`, and a
/// drop-in capability probe.
#[test]
fn launch_outcomes_are_counted_on_the_pools_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let vmm = fake_vmm(dir.path());
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let pdir = tempfile::tempdir().unwrap();
    let socket = pdir.path().join("pool.sock");
    // The portable backend: no zeroing calibration at start (the other
    // tests' pools calibrate on the same CPUs).
    let pool = Pool::start_at(
        pdir,
        socket.clone(),
        &["--metrics", &addr, "--backend", "portable"],
    );
    let sock = socket.display().to_string();
    let fits = format!("size=64M,source=pool:{sock},hugepages=off,hint=off");
    let too_big = format!("size=128M,source=pool:{sock},hugepages=off,hint=off");
    let mut want = launch_counters(port);
    assert!(want.values().all(|&v| v == 0.0), "{want:?}");

    // (what, --memory, more launcher options, exit status, series moved)
    type Step<'a> = (&'a str, String, Vec<&'a str>, i32, Vec<String>);
    let steps: Vec<Step> = vec![
        (
            "a lease",
            fits.clone(),
            vec![],
            0,
            vec![launches("qemu", "leased"), ready_count("qemu", "pool")],
        ),
        (
            "fallback prefault",
            too_big.clone(),
            vec![],
            0,
            vec![
                launches("qemu", "fallback_prefault"),
                ready_count("qemu", "prefault"),
            ],
        ),
        (
            "fallback none",
            too_big.clone(),
            vec!["--pool-fallback", "none"],
            0,
            vec![
                launches("qemu", "fallback_none"),
                ready_count("qemu", "none"),
            ],
        ),
        (
            "fallback fail",
            too_big.clone(),
            vec!["--pool-fallback", "fail"],
            125,
            vec![launches("qemu", "failed")],
        ),
        (
            "no pool asked",
            "size=64M,source=prefault,hugepages=off,hint=off".into(),
            vec![],
            0,
            vec![],
        ),
        ("a dry run", fits.clone(), vec!["--dry-run"], 0, vec![]),
    ];
    for (what, memory, extra, code, moved) in steps {
        let out = launch_fake(&vmm, &memory, &extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{what}: {err}");
        assert!(!err.contains("not counted"), "{what}: {err}");
        for k in moved {
            // memory_ready series appear with their first sample.
            *want.entry(k).or_insert(0.0) += 1.0;
        }
        assert_eq!(launch_counters(port), want, "after {what}");
    }
    // Every lease was returned; none is retired.
    let s = pool.wait_until("no lease held", |s| s.leased_bytes == 0);
    assert_eq!((s.leases_total, s.retired_total), (1, 0));

    // The drop-in: a capability probe moves nothing; a start it cannot
    // serve (a machine other than q35) passes through, counted.
    let dropin = |args: &[&str]| {
        Command::new(BIN)
            .args(["qemu-dropin", "--qemu"])
            .arg(&vmm)
            .args(["--pool", &sock, "--page", "4K", "--"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = dropin(&["-machine", "none", "-qmp", "stdio"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(launch_counters(port), want, "after a probe");
    let out = dropin(&["-machine", "pc", "-m", "64"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("starting QEMU unchanged"),
        "{err}"
    );
    *want.get_mut(&launches("qemu", "passthrough")).unwrap() += 1.0;
    assert_eq!(launch_counters(port), want, "after a pass-through");
}

/// A pool that is down when the VM starts still counts its fallback when
/// it comes back while the VM runs: the launcher asks again every second,
/// and once more when the VMM exits. The pool starts 300 ms after the VMM
/// did, so the launcher's first try (right after the spawn) has failed by
/// then: with the retry taken out (one try), this test fails. Negative
/// control: a pool started only after the VMM (and the launcher) exited
/// counts nothing.
#[test]
fn a_pool_back_while_the_vm_runs_still_counts_its_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let vmm = fake_vmm(dir.path());
    let until = dir.path().join("vm-may-exit");
    for back_while_running in [true, false] {
        let _ = std::fs::remove_file(&until);
        let _ = std::fs::remove_file(dir.path().join("vm-may-exit.started"));
        let pdir = tempfile::tempdir().unwrap();
        let socket = pdir.path().join("pool.sock");
        let memory = format!(
            "size=64M,source=pool:{},hugepages=off,hint=off",
            socket.display()
        );
        let mut cmd = Command::new(BIN);
        cmd.arg("launch")
            .args(["--vmm", "qemu", "--vmm-binary"])
            .arg(&vmm)
            .args(["--memory", &memory, "--pool-wait", "0"])
            .args(["--", "-accel", "tcg"])
            .stderr(Stdio::piped());
        if back_while_running {
            cmd.env("ZS_FAKE_VMM_UNTIL", &until);
        }
        let mut launcher = Some(cmd.spawn().unwrap());
        let finish = |l: std::process::Child| {
            let out = l.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(out.status.success(), "{err}");
            assert!(err.contains("falling back to source=prefault"), "{err}");
        };
        if !back_while_running {
            finish(launcher.take().unwrap());
        }
        if back_while_running {
            let started = dir.path().join("vm-may-exit.started");
            let t = Instant::now();
            while !started.exists() {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "the VMM never started"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        // The portable backend: no zeroing calibration before the socket.
        let _pool = Pool::start_at(pdir, socket, &["--metrics", &addr, "--backend", "portable"]);
        if let Some(l) = launcher {
            std::fs::write(&until, b"").unwrap();
            finish(l);
        }
        let key = launches("qemu", "fallback_prefault");
        let want = if back_while_running { 1.0 } else { 0.0 };
        assert_eq!(
            launch_counters(port)[&key],
            want,
            "pool back while the VM ran: {back_while_running}"
        );
    }
}

/// cloud-hypervisor on a guest larger than the pool's regions (issue 29
/// item 4): one lease of whole regions, one `--memory-zone` per region in
/// guest order, each zone's file the region's own (distinct files, the
/// last holding the rest), all of them held while the VMM runs and back
/// when it exits; `--dry-run` shows the zones and the lease it would take.
/// The VMM is a stand-in script that records what each zone's
/// `/proc/self/fd/N` is (it inherits the launcher's fds as
/// cloud-hypervisor would); no cloud-hypervisor needed. Negative control:
/// QEMU maps one file, so the same guest on the same pool falls back.
#[test]
fn cloud_hypervisor_zones_take_several_regions() {
    use std::os::unix::fs::PermissionsExt;
    let pool = Pool::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("zones.txt");
    let until = dir.path().join("until");
    let vmm = dir.path().join("fake-chv");
    std::fs::write(
        &vmm,
        format!(
            "#!/bin/sh\n: > {out}\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --memory-zone ]; then\n    f=$(echo \"$2\" | sed 's/.*file=\\([^,]*\\).*/\\1/')\n    echo \"$2 $(stat -L -c '%s %i' \"$f\")\" >> {out}\n  fi\n  shift\ndone\n: > {until}.started\nn=0\nwhile [ ! -e {until} ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done\n",
            out = out.display(),
            until = until.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&vmm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let kernel = dir.path().join("vmlinux");
    std::fs::write(&kernel, pvh_elf()).unwrap();
    let size = REGION + REGION / 2;
    let memory = format!(
        "size={}M,source=pool:{},hugepages=off",
        size >> 20,
        pool.socket.display()
    );
    let cmd = |vmm_kind: &str, first: &[&str]| {
        let mut c = Command::new(BIN);
        c.arg("launch")
            .args(first)
            .args(["--vmm", vmm_kind, "--vmm-binary"])
            .arg(&vmm)
            .args(["--pool-wait", "0", "--memory"]);
        match vmm_kind {
            "qemu" => c.arg(format!("{memory},hint=off")),
            _ => c.arg(&memory),
        };
        c
    };
    let dry = cmd("cloud-hypervisor", &["--dry-run"])
        .arg("--")
        .arg("--kernel")
        .arg(&kernel)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{text}{dry:?}");
    assert!(
        text.contains(&format!(
            "--memory-zone id=zerostart-ram0,size={REGION},file=/proc/self/fd/REGION_FD0"
        )) && text.contains(&format!(
            "--memory-zone id=zerostart-ram1,size={},file=/proc/self/fd/REGION_FD1",
            REGION / 2
        )),
        "{text}"
    );
    assert!(
        text.contains("a lease of 2 regions would be granted now"),
        "{text}"
    );
    let child = cmd("cloud-hypervisor", &[])
        .arg("--")
        .arg("--kernel")
        .arg(&kernel)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = until.with_extension("started");
    let t = Instant::now();
    while !started.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the VMM never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = pool.status().unwrap();
    assert_eq!(st.leased_bytes, 2 * REGION, "both regions held: {st:?}");
    let zones = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<Vec<&str>> = zones
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{zones}");
    assert!(rows[0][0].starts_with(&format!("id=zerostart-ram0,size={REGION},")));
    assert!(rows[1][0].starts_with(&format!("id=zerostart-ram1,size={},", REGION / 2)));
    // Each zone's file is a whole region of its own.
    assert_eq!(
        (rows[0][1], rows[1][1]),
        ("67108864", "67108864"),
        "{zones}"
    );
    assert_ne!(rows[0][2], rows[1][2], "two zones on one file: {zones}");
    std::fs::write(&until, b"").unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{err}");
    assert!(err.contains("source=pool lease="), "{err}");
    assert!(err.contains("regions=2"), "{err}");
    pool.wait_until("both regions back and clean", |s| {
        s.leased_bytes == 0 && s.clean_bytes == 2 * REGION
    });
    // Negative control: QEMU takes one file, so the same guest cannot
    // lease and falls back (one warning line), holding nothing.
    let q = cmd("qemu", &[])
        .args(["--", "-accel", "tcg"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&q.stderr);
    assert!(err.contains("falling back to source=prefault"), "{err}");
}

/// A fleet's pool of several region sizes under real QEMUs (one
/// `memory-backend` each, so one region each): guests of 1, 3 and 5 units
/// (64 MiB here for a GiB) each lease the smallest region that holds them
/// and hold exactly that, side by side; the dry run says so first; a
/// guest no clean region holds falls back with one line; every region
/// comes back clean when the VMs end.
#[test]
fn qemu_guests_of_several_sizes_hold_what_they_need() {
    let qemu = need_qemu!();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pool.sock");
    // Largest first: a pool that took the first clean region that holds
    // a guest (not the smallest) would give the 64 MiB guest 320 MiB.
    let pool = Pool::serve(dir, socket, &["--regions", "320M,192M,2x64M"]);
    let st = pool.status().unwrap();
    assert_eq!(
        (st.size_bytes, st.regions, st.region_bytes),
        (10 * REGION, 4, 5 * REGION)
    );
    let dry = |mib: u64| {
        let out = Command::new(BIN)
            .arg("launch")
            .arg("--dry-run")
            .args(["--vmm", "qemu", "--vmm-binary"])
            .arg(&qemu)
            .arg("--memory")
            .arg(format!(
                "size={mib}M,source=pool:{},hugepages=off,hint=off",
                pool.socket.display()
            ))
            .args(["--", "-accel", "tcg"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = dry(192);
    assert!(
        text.contains("a lease would be granted now (201326592 bytes held)"),
        "{text}"
    );
    assert!(text.contains("2 of 67108864 bytes, 2 clean"), "{text}");
    assert!(dry(384).contains("none as large as size=402653184"));
    let mut vms = Vec::new();
    for (mib, held) in [(64u64, REGION), (192, 3 * REGION), (320, 5 * REGION)] {
        let before = pool.status().unwrap().leased_bytes;
        let (launcher, fw) = launch_sized(&pool, &qemu, mib, &[]);
        let (vmm, fd) = vmm_of(launcher.id());
        let guard = KillOnDrop(vmm);
        // The region QEMU maps is the smallest that holds the guest.
        assert_eq!(
            std::fs::metadata(&fd).unwrap().len(),
            held,
            "{mib} MiB guest"
        );
        pool.wait_until("the guest's region leased", |s| {
            s.leased_bytes == before + held
        });
        vms.push((launcher, fw, guard, mib));
    }
    let st = pool.status().unwrap();
    assert_eq!(
        (st.leased_bytes, st.clean_bytes),
        (9 * REGION, REGION),
        "{st:?}"
    );
    let clean: Vec<(u64, usize, usize)> = st
        .sizes
        .iter()
        .map(|c| (c.bytes, c.regions, c.clean))
        .collect();
    assert_eq!(
        clean,
        [(REGION, 2, 1), (3 * REGION, 1, 0), (5 * REGION, 1, 0)]
    );
    // 128 MiB: the one clean region is 64 MiB. Falls back, holds nothing.
    let out = Command::new(BIN)
        .arg("launch")
        .args(["--vmm", "qemu", "--vmm-binary"])
        .arg(&qemu)
        .args(["--pool-wait", "0", "--memory"])
        .arg(format!(
            "size=128M,source=pool:{},hugepages=off,hint=off",
            pool.socket.display()
        ))
        .args(["--", "-accel", "tcg", "-no-such-option"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no clean region holding 134217728 bytes now")
            && err.contains("falling back to source=prefault"),
        "{err}"
    );
    assert_eq!(pool.status().unwrap().leased_bytes, 9 * REGION);
    for (launcher, _fw, _guard, mib) in vms {
        // SAFETY: signalling the launcher this test started.
        unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
        let done = launcher.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(done.status.success(), "{err}");
        // The launcher's closing line says what the lease held.
        assert!(
            err.contains(&format!("memory={mib}MiB source=pool lease="))
                && err.contains(&format!(" held={mib}MiB ")),
            "{err}"
        );
    }
    pool.wait_until("every region back and clean", |s| {
        s.leased_bytes == 0 && s.clean_bytes == 10 * REGION
    });
}
