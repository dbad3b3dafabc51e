//! Boots one scenario repetition and timestamps its phases.
//!
//! The harness takes time zero just before it spawns the VMM, reads the
//! guest serial console from the VMM's stdout in chunks as they arrive
//! (first byte = `first_output`), splits it into lines and stamps each with
//! the host monotonic clock (marker regexes → `init_started`,
//! `test_done`), and stamps the VMM's exit. zerostart's own `--timeline`
//! replaces these for zerostart (it sees `memory_ready` and the guest's
//! boot-timer port writes); the serial stamps are kept as `serial_*`.

use std::collections::BTreeMap;
use std::io::{BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use options::vmm_cmd;
use serde::Serialize;

use crate::config::{Backing, Launch, Nested, Scenario, Vmm};
use crate::phase::{self, Phase};

/// One boot.
#[derive(Debug, Clone, Serialize)]
pub struct RepResult {
    /// Repetition index.
    pub rep: u32,
    /// Exit 0, `expect` seen, no timeout.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
    /// Phase → ms since launch (the phases used for SLOs).
    pub phases: BTreeMap<Phase, f64>,
    /// For zerostart: the harness's own serial timestamps, to compare.
    pub serial_phases: BTreeMap<Phase, f64>,
    /// VMM exit code.
    pub exit_code: Option<i32>,
    /// Serial log with host timestamps.
    pub serial_log: PathBuf,
}

/// The VMM binary for a scenario, or why the scenario is skipped.
pub fn find_binary(s: &Scenario) -> Result<PathBuf, String> {
    if let Some(b) = &s.binary {
        return Ok(b.clone());
    }
    if let Some(n) = &s.nested {
        // Never a skip: read_nested fails every run when the report is missing.
        return Ok(n.report.clone());
    }
    if s.vmm == Vmm::Zerostart {
        if let Some(b) = find_zerostart() {
            return Ok(b);
        }
    }
    if s.launch.is_some() {
        // The VMM must be here (else SKIP, as without launch) and so must
        // the launcher that starts it.
        find_zerostart().ok_or(
            "zerostart (the launcher) is not found; set ZEROSTART_BIN or put it next to zerostart-slo",
        )?;
    }
    which(s.vmm.program()).ok_or_else(|| {
        format!(
            "{} is not on PATH (set `binary` in the scenario to use another location)",
            s.vmm.program()
        )
    })
}

/// This project's binary: `$ZEROSTART_BIN`, `zerostart slo` itself, a
/// `zerostart` next to `zerostart-slo`, or PATH.
pub fn find_zerostart() -> Option<PathBuf> {
    if let Ok(b) = std::env::var("ZEROSTART_BIN") {
        return Some(PathBuf::from(b));
    }
    if let Ok(me) = std::env::current_exe() {
        if me.file_name().is_some_and(|n| n == "zerostart") {
            return Some(me);
        }
        if let Some(sib) = me.parent().map(|d| d.join("zerostart")) {
            if sib.is_file() {
                return Some(sib);
            }
        }
    }
    which("zerostart")
}

/// `prog` on PATH as a shell would run it (an executable file).
fn which(prog: &str) -> Option<PathBuf> {
    which::which(prog).ok()
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

/// QEMU's accelerator and CPU model for the scenario's `accel`.
fn qemu_options(s: &Scenario) -> vmm_cmd::QemuOptions {
    let tcg = s.accel != "kvm";
    vmm_cmd::QemuOptions {
        accel: if tcg {
            vmm_cmd::Accel::Tcg
        } else {
            vmm_cmd::Accel::Kvm
        },
        cpu: Some(if tcg { "max" } else { "host" }.into()),
        no_reboot: true,
        ..Default::default()
    }
}

/// A spec with the scenario's VMM and nothing else set.
fn bare(vmm: vmm_cmd::Vmm, binary: Option<&Path>) -> vmm_cmd::Spec {
    vmm_cmd::Spec {
        vmm,
        binary: binary.map(Path::to_path_buf),
        cpus: None,
        memory: vmm_cmd::Memory::None,
        kernel: None,
        initrd: None,
        cmdline: None,
        firmware: None,
        disks: vec![],
        nets: vec![],
        vsock: None,
        serial: vmm_cmd::Serial::None,
        timeline: None,
        qemu: None,
        firecracker: None,
        launch: None,
        extra_args: vec![],
    }
}

/// The scenario's guest as a VMM command spec (`options::vmm_cmd`, where
/// every VMM flag is spelled): a direct start of `bin`.
pub fn spec(s: &Scenario, bin: &Path, work: &Path, rep: u32) -> Result<vmm_cmd::Spec, String> {
    let mut v = bare(vmm_cmd::Vmm::Qemu, Some(bin));
    v.cpus = Some(s.vcpus);
    v.kernel = Some(s.kernel.clone());
    v.initrd = s.initramfs.clone();
    v.cmdline = Some(s.cmdline.clone());
    v.extra_args = s.extra_args.clone();
    let (size_mib, prealloc) = (mib(s.memory_bytes), s.prefault);
    let os_memory = if s.backing == Backing::Hugetlb {
        vmm_cmd::Memory::MemfdHugetlb { size_mib, prealloc }
    } else {
        vmm_cmd::Memory::Anonymous { size_mib, prealloc }
    };
    match s.vmm {
        Vmm::Zerostart => {
            let mut mem = format!("size={}", s.memory_bytes);
            match s.backing {
                Backing::Anon => mem.push_str(",thp=off"),
                Backing::Thp => mem.push_str(",thp=on"),
                Backing::Hugetlb => mem.push_str(",hugepages=on,hugepage_size=2M"),
                Backing::Pool => {
                    let sock = s
                        .pool_socket
                        .as_ref()
                        .ok_or("backing = \"pool\" needs pool_socket")?;
                    mem.push_str(&format!(",hugepages=on,prezero=pool:{}", sock.display()));
                }
            }
            if s.prefault {
                mem.push_str(",prefault=on");
            }
            v.vmm = vmm_cmd::Vmm::ZerostartRun;
            v.memory = vmm_cmd::Memory::Zerostart { value: mem };
            v.serial = vmm_cmd::Serial::Tty;
            v.timeline = Some(work.join(format!("{}-{rep}.timeline.json", s.name)));
        }
        Vmm::Qemu => {
            v.memory = os_memory;
            v.serial = vmm_cmd::Serial::Stdio;
            v.qemu = Some(vmm_cmd::QemuOptions {
                machine: vmm_cmd::Machine::Pc,
                ..qemu_options(s)
            });
        }
        Vmm::CloudHypervisor => {
            v.vmm = vmm_cmd::Vmm::CloudHypervisor;
            v.memory = os_memory;
            v.serial = vmm_cmd::Serial::Tty;
        }
        Vmm::Firecracker => {
            v.vmm = vmm_cmd::Vmm::Firecracker;
            // Its config file has no prefault; the pages are the host's.
            v.memory = match os_memory {
                vmm_cmd::Memory::MemfdHugetlb { size_mib, .. } => vmm_cmd::Memory::MemfdHugetlb {
                    size_mib,
                    prealloc: false,
                },
                _ => vmm_cmd::Memory::Anonymous {
                    size_mib,
                    prealloc: false,
                },
            };
            v.firecracker = Some(vmm_cmd::FirecrackerOptions {
                config_path: work.join(format!("{}-{rep}.firecracker.json", s.name)),
                no_api: true,
            });
        }
        Vmm::Nested => return Err("nested scenarios run through run_nested".into()),
    }
    Ok(v)
}

/// A built spec as a `Command`, its files (a Firecracker config) written.
fn to_command(spec: &vmm_cmd::Spec) -> Result<Command, String> {
    let b = vmm_cmd::build(spec).map_err(|e| e.to_string())?;
    for (path, text) in &b.files {
        std::fs::write(path, text).map_err(|e| format!("writing {path}: {e}"))?;
    }
    let (prog, args) = b.argv.split_first().ok_or("the builder gave no program")?;
    let mut c = Command::new(prog);
    c.args(args);
    Ok(c)
}

/// The VMM command line for one boot.
pub fn command(s: &Scenario, bin: &Path, work: &Path, rep: u32) -> Result<Command, String> {
    if let Some(l) = &s.launch {
        let launcher = find_zerostart().ok_or("zerostart (the launcher) is not found")?;
        return launch_command(s, l, &launcher, bin, work, rep);
    }
    to_command(&spec(s, bin, work, rep)?)
}

/// The launcher's `--timeline` for one boot (memory_ready comes from it).
fn launch_timeline(s: &Scenario, work: &Path, rep: u32) -> PathBuf {
    work.join(format!("{}-{rep}.launch-timeline.json", s.name))
}

/// `512M`, `4G`: the launcher's `size=` (binary units, as `zerostart run`).
fn size_arg(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("{}G", bytes >> 30)
    } else {
        format!("{}M", mib(bytes))
    }
}

/// `zerostart launch --vmm V [--vmm-binary B] --memory
/// size=S,source=X[,hugepages=off] --firmware F --timeline T -- <VMM
/// args>`: the VMM's spec is that of a direct start without memory (the
/// launcher supplies it, on q35 + the firmware for QEMU), then
/// `extra_args`; cloud-hypervisor boots the firmware from `disk`.
pub fn launch_command(
    s: &Scenario,
    l: &Launch,
    launcher: &Path,
    vmm_bin: &Path,
    work: &Path,
    rep: u32,
) -> Result<Command, String> {
    let mut mem = format!(
        "size={},source={}",
        size_arg(s.memory_bytes),
        l.source.arg()
    );
    if l.small_pages {
        mem.push_str(",hugepages=off");
    }
    // Only an explicit `binary` is passed: otherwise the launcher finds
    // the same VMM on PATH as find_binary did.
    let binary = s.binary.as_ref().map(|_| vmm_bin);
    let mut inner = match s.vmm {
        Vmm::Qemu => {
            let mut v = bare(vmm_cmd::Vmm::Qemu, binary);
            v.kernel = Some(s.kernel.clone());
            v.initrd = s.initramfs.clone();
            v.cmdline = Some(s.cmdline.clone());
            v.serial = vmm_cmd::Serial::Stdio;
            v.qemu = Some(qemu_options(s));
            v
        }
        Vmm::CloudHypervisor => {
            // The config requires `disk` here: the firmware boots the
            // kernel from it (cloud-hypervisor refuses --kernel beside
            // --firmware).
            let mut v = bare(vmm_cmd::Vmm::CloudHypervisor, binary);
            v.disks = s
                .disk
                .iter()
                .map(|d| vmm_cmd::Disk::raw(d.clone(), true))
                .collect();
            v.serial = vmm_cmd::Serial::Tty;
            v
        }
        other => {
            return Err(format!(
                "`zerostart launch` does not start {}",
                other.name()
            ))
        }
    };
    inner.cpus = Some(s.vcpus);
    inner.extra_args = s.extra_args.clone();
    let mut outer = bare(vmm_cmd::Vmm::ZerostartLaunch, Some(launcher));
    outer.memory = vmm_cmd::Memory::Zerostart { value: mem };
    outer.firmware = Some(l.firmware.clone());
    outer.timeline = Some(launch_timeline(s, work, rep));
    outer.launch = Some(Box::new(inner));
    to_command(&outer)
}

struct Serial {
    first_output: Option<Instant>,
    markers: BTreeMap<Phase, Instant>,
    expect_seen: bool,
}

fn read_serial(mut out: impl Read, s: &Scenario, start: Instant, log: &Path) -> Serial {
    let mut log = std::fs::File::create(log).ok().map(BufWriter::new);
    let mut r = Serial {
        first_output: None,
        markers: BTreeMap::new(),
        expect_seen: false,
    };
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let mut on_line = |line: &[u8], at: Instant, r: &mut Serial| {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        if let Some(l) = log.as_mut() {
            let _ = writeln!(l, "[{:10.3}] {text}", (at - start).as_secs_f64() * 1e3);
        }
        for (p, re) in &s.markers {
            if !r.markers.contains_key(p) && re.is_match(text) {
                r.markers.insert(*p, at);
            }
        }
        if s.expect.as_ref().is_some_and(|re| re.is_match(text)) {
            r.expect_seen = true;
        }
    };
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let at = Instant::now();
        r.first_output.get_or_insert(at);
        for &b in &buf[..n] {
            if b == b'\n' {
                on_line(&line, at, &mut r);
                line.clear();
            } else if line.len() < 64 << 10 {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        on_line(&line, Instant::now(), &mut r);
    }
    r
}

fn ms_since(start: Instant, t: Instant) -> f64 {
    ((t - start).as_secs_f64() * 1e6).round() / 1e3
}

/// Boots once. Never panics on a misbehaving VMM: every failure is in
/// `error`.
pub fn run_rep(s: &Scenario, bin: &Path, work: &Path, rep: u32) -> RepResult {
    let serial_log = work.join(format!("{}-{rep}.serial.log", s.name));
    let mut res = RepResult {
        rep,
        ok: false,
        error: None,
        phases: BTreeMap::new(),
        serial_phases: BTreeMap::new(),
        exit_code: None,
        serial_log: serial_log.clone(),
    };
    let mut cmd = match command(s, bin, work, rep) {
        Ok(c) => c,
        Err(e) => {
            res.error = Some(e);
            return res;
        }
    };
    let stderr_path = work.join(format!("{}-{rep}.stderr.log", s.name));
    let stderr = match std::fs::File::create(&stderr_path) {
        Ok(f) => f,
        Err(e) => {
            res.error = Some(format!("creating {}: {e}", stderr_path.display()));
            return res;
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            res.error = Some(format!("starting {}: {e}", bin.display()));
            return res;
        }
    };
    let pid = child.id() as i32;
    let out = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let st = child.wait();
        let _ = tx.send((Instant::now(), st));
    });
    let scen = s.clone();
    let log = serial_log.clone();
    let reader = std::thread::spawn(move || read_serial(out, &scen, start, &log));
    let (exit_at, status) = match rx.recv_timeout(s.timeout) {
        Ok(v) => v,
        Err(_) => {
            // SIGTERM first (zerostart then still writes its timeline and
            // summary for the log), SIGKILL if it does not end in 2 s.
            // SAFETY: signalling the process group we created.
            unsafe { libc::kill(-pid, libc::SIGTERM) };
            if rx.recv_timeout(std::time::Duration::from_secs(2)).is_err() {
                // SAFETY: as above.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let _ = rx.recv();
            }
            res.error = Some(format!(
                "timed out after {} s (killed); see {}",
                s.timeout.as_secs(),
                serial_log.display()
            ));
            let _ = reader.join();
            return res;
        }
    };
    // The VMM is gone; anything it forked that still holds stdout is not.
    // SAFETY: signalling the process group we created.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let serial = reader.join().unwrap_or(Serial {
        first_output: None,
        markers: BTreeMap::new(),
        expect_seen: false,
    });

    let mut harness = BTreeMap::new();
    harness.insert(Phase::Launch, 0.0);
    if let Some(t) = serial.first_output {
        harness.insert(Phase::FirstOutput, ms_since(start, t));
    }
    for (p, t) in &serial.markers {
        harness.insert(*p, ms_since(start, *t));
    }
    harness.insert(Phase::Exit, ms_since(start, exit_at));

    res.exit_code = status.as_ref().ok().and_then(|s| s.code());
    let mut problems = Vec::new();
    match &status {
        Ok(st) if st.success() => {}
        Ok(st) => problems.push(format!(
            "{}{} exited with {st}; see {}",
            if s.launch.is_some() {
                "zerostart launch --vmm "
            } else {
                ""
            },
            s.vmm.name(),
            stderr_path.display()
        )),
        Err(e) => problems.push(format!("waiting for the VMM: {e}")),
    }
    if s.expect.is_some() && !serial.expect_seen {
        problems.push(format!(
            "no serial line matched expect /{}/; see {}",
            s.expect.as_ref().map(|r| r.as_str()).unwrap_or(""),
            serial_log.display()
        ));
    }
    if s.vmm == Vmm::Zerostart {
        let path = work.join(format!("{}-{rep}.timeline.json", s.name));
        let tl = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))
            .and_then(|t| {
                serde_json::from_str::<timeline::RunTimeline>(&t)
                    .map_err(|e| format!("{}: {e}; see {}", path.display(), stderr_path.display()))
            });
        match tl {
            Ok(doc) => {
                res.phases = phase::from_timeline(&doc.phases).into_iter().collect();
                res.serial_phases = harness;
            }
            Err(e) => problems.push(e),
        }
    } else if s.launch.is_some() {
        // memory_ready is the launcher's (from its process start, which
        // follows the harness's spawn by about a millisecond); the guest's
        // phases and exit are the harness's, as for any external VMM.
        let path = launch_timeline(s, work, rep);
        let tl = std::fs::read_to_string(&path)
            .map_err(|e| {
                format!(
                    "reading {}: {e}; see {}",
                    path.display(),
                    stderr_path.display()
                )
            })
            .and_then(|t| {
                serde_json::from_str::<timeline::LaunchTimeline>(&t)
                    .map_err(|e| format!("{}: {e}; see {}", path.display(), stderr_path.display()))
            });
        res.phases = harness;
        match tl.map(|doc| {
            phase::from_timeline(&doc.phases)
                .into_iter()
                .find(|(p, _)| *p == Phase::MemoryReady)
        }) {
            Ok(Some((_, t))) => {
                res.phases.insert(Phase::MemoryReady, t);
            }
            Ok(None) => problems.push(format!("{} has no memory_ready phase", path.display())),
            Err(e) => problems.push(e),
        }
    } else {
        res.phases = harness;
    }
    res.ok = problems.is_empty();
    if !problems.is_empty() {
        res.error = Some(problems.join("; "));
    }
    res
}

/// Whether a nested scenario is the real cloud VM's (`microvm-*`). The two
/// harnesses differ in what a hint must name: `run.py microvm` runs each
/// of its three scenarios once and always writes
/// `target/microvm/report.json` with `console.log` beside it; `run.py e2e`
/// takes `--repeat` and `--report PATH` and writes `PATH` with
/// `.console.log`.
fn real_vm(n: &Nested) -> bool {
    crate::config::real_vm_scenario(&n.scenario)
}

/// The nested harness's console log for a report.
fn nested_console_log(n: &Nested) -> PathBuf {
    if real_vm(n) {
        n.report.with_file_name("console.log")
    } else {
        n.report.with_extension("console.log")
    }
}

/// The command (and make target) that writes the report a nested
/// scenario reads.
fn nested_command(n: &Nested, repetitions: u32) -> String {
    if real_vm(n) {
        format!(
            "run `tests/nested-host/run.py microvm --only {}` first (make test-microvm does; it writes target/microvm/report.json)",
            n.scenario
        )
    } else {
        format!(
            "run `tests/nested-host/run.py e2e --only {} --repeat {repetitions} --report {}` first (make slo-nested does)",
            n.scenario,
            n.report.display()
        )
    }
}

/// The runs of a nested-host scenario, from the report of its harness:
/// `tests/nested-host/run.py e2e --only NAME --repeat N --report PATH`
/// (make runs it; `make slo-nested`), or for the real cloud VM
/// (`microvm-*`) `run.py microvm`, which writes
/// `target/microvm/report.json` (`make test-microvm`). Each run's timeline
/// becomes a boot result (phases as for zerostart: times inside L2, from
/// the VMM's or launcher's start). A scenario the report has no run of
/// fails every repetition, naming the scenarios it does have.
pub fn read_nested(s: &Scenario) -> Vec<RepResult> {
    let n = s
        .nested
        .as_ref()
        .expect("nested scenarios have a nested config");
    let report = &n.report;
    let log = nested_console_log(n);
    let fail_all = |why: String| -> Vec<RepResult> {
        (0..s.repetitions)
            .map(|rep| RepResult {
                rep,
                ok: false,
                error: Some(why.clone()),
                phases: BTreeMap::new(),
                serial_phases: BTreeMap::new(),
                exit_code: None,
                serial_log: log.clone(),
            })
            .collect()
    };
    let doc: serde_json::Value = match std::fs::read_to_string(report)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(d) => d,
        Err(e) => {
            return fail_all(format!(
                "no nested host report {} ({e}); {}",
                report.display(),
                nested_command(n, s.repetitions)
            ))
        }
    };
    let all: Vec<&serde_json::Value> = doc["scenarios"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let runs: Vec<&serde_json::Value> = all
        .iter()
        .copied()
        .filter(|r| {
            let name = r["name"].as_str().unwrap_or("");
            name == n.scenario
                || name
                    .strip_prefix(&n.scenario)
                    .and_then(|x| x.strip_prefix("-r"))
                    .is_some_and(|i| i.parse::<u32>().is_ok())
        })
        .collect();
    if runs.is_empty() {
        let names: Vec<&str> = all.iter().filter_map(|r| r["name"].as_str()).collect();
        return fail_all(format!(
            "the nested host report {} has no run of {} (it has: {}); {}",
            report.display(),
            n.scenario,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
            nested_command(n, s.repetitions)
        ));
    }
    (0..s.repetitions)
        .map(|rep| {
            let mut r = RepResult {
                rep,
                ok: false,
                error: None,
                phases: BTreeMap::new(),
                serial_phases: BTreeMap::new(),
                exit_code: None,
                serial_log: log.clone(),
            };
            let Some(run) = runs.get(rep as usize) else {
                r.error = Some(if real_vm(n) {
                    format!(
                        "the nested host reported {} of {} runs of {}; run.py microvm runs each scenario once: set repetitions = 1",
                        runs.len(),
                        s.repetitions,
                        n.scenario
                    )
                } else {
                    format!(
                        "the nested host reported {} of {} runs; see {}",
                        runs.len(),
                        s.repetitions,
                        log.display()
                    )
                });
                return r;
            };
            r.exit_code = run["vmm_rc"].as_i64().map(|c| c as i32);
            match serde_json::from_value::<Vec<timeline::Phase>>(run["timeline"].clone()) {
                Ok(p) => r.phases = phase::from_timeline(&p).into_iter().collect(),
                Err(e) => {
                    r.error = Some(format!(
                        "the nested host's report has no timeline of {{name, t_ms}} phases ({e}); see {}",
                        log.display()
                    ))
                }
            }
            let failures: Vec<String> = run["failures"]
                .as_array()
                .map(|f| f.iter().map(|x| x.to_string()).collect())
                .unwrap_or_default();
            if let Some(want) = n.vmm.as_deref().filter(|w| run["vmm"].as_str() != Some(w)) {
                r.error = Some(format!(
                    "nested run {} used vmm {}, the config asks for {want}; {}",
                    run["name"].as_str().unwrap_or("?"),
                    run["vmm"],
                    if real_vm(n) {
                        // Each microvm scenario fixes its VMM: (a) zerostart, (b) and (c) QEMU.
                        format!("set nested_vmm = {} (run.py microvm fixes each scenario's VMM)", run["vmm"])
                    } else {
                        format!("run the harness with --vmm {want}")
                    }
                ));
                return r;
            }
            if run["passed"].as_bool() != Some(true) || !failures.is_empty() {
                r.error = Some(format!(
                    "nested scenario {} failed: {}",
                    run["name"].as_str().unwrap_or("?"),
                    failures.join("; ")
                ));
            }
            r.ok = r.error.is_none();
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A config in a temporary directory holding every file it names.
    fn scenario(body: &str, files: &[&str]) -> (tempfile::TempDir, Scenario) {
        let dir = tempfile::tempdir().unwrap();
        for f in files {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let text = format!(
            "[[scenario]]\nname = \"s\"\n{body}\nmarkers = {{ init_started = \"^i\" }}\n\
             [[scenario.slo]]\nphase = \"memory_ready\"\nstat = \"max\"\nmax_ms = 50\n"
        );
        let c = Config::parse(&text, &dir.path().join("slo.toml")).unwrap();
        (dir, c.scenarios.into_iter().next().unwrap())
    }

    /// A direct start (no launcher), its SLO on first_output.
    fn direct(body: &str, files: &[&str]) -> (tempfile::TempDir, Scenario) {
        let dir = tempfile::tempdir().unwrap();
        for f in files {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let text = format!(
            "[[scenario]]\nname = \"s\"\n{body}\n\
             [[scenario.slo]]\nphase = \"first_output\"\nstat = \"max\"\nmax_ms = 50\n"
        );
        let c = Config::parse(&text, &dir.path().join("slo.toml")).unwrap();
        (dir, c.scenarios.into_iter().next().unwrap())
    }

    fn argv(c: &Command, dir: &Path) -> Vec<String> {
        let prefix = format!("{}/", std::fs::canonicalize(dir).unwrap().display());
        c.get_args()
            .map(|a| a.to_string_lossy().replace(&prefix, ""))
            .collect()
    }

    /// The first command of docs/launch.md that starts with `prefix`
    /// (continuation lines joined), split as a shell would.
    fn doc_command(prefix: &str) -> Vec<String> {
        let doc = include_str!("../../../docs/launch.md");
        let mut text = String::new();
        let mut on = false;
        for line in doc.lines() {
            on |= line.starts_with(prefix);
            if on {
                text.push_str(line.trim_end_matches('\\'));
                text.push(' ');
                if !line.ends_with('\\') {
                    break;
                }
            }
        }
        assert!(!text.is_empty(), "docs/launch.md has no `{prefix}` command");
        shlex::split(&text).unwrap()
    }

    /// What slo runs for a cloud-hypervisor launch scenario is exactly
    /// the command docs/launch.md gives operators (plus the timeline slo
    /// reads memory_ready from).
    #[test]
    fn cloud_hypervisor_launch_matches_the_docs() {
        let (dir, s) = scenario(
            "vmm = \"cloud-hypervisor\"\nlaunch = \"pool\"\nfirmware = \"CLOUDHV.fd\"\n\
             disk = \"esp.img\"\nmemory = \"4G\"\nvcpus = 2",
            &["CLOUDHV.fd", "esp.img"],
        );
        let work = dir.path().join("logs");
        let l = s.launch.as_ref().unwrap();
        let c = launch_command(
            &s,
            l,
            Path::new("/opt/zerostart"),
            Path::new("/usr/bin/cloud-hypervisor"),
            &work,
            3,
        )
        .unwrap();
        assert!(c.get_program().to_string_lossy().ends_with("zerostart"));
        let mut got = vec!["zerostart".to_string()];
        got.extend(argv(&c, dir.path()));
        let t = got.iter().position(|a| a == "--timeline").unwrap();
        assert_eq!(got[t + 1], "logs/s-3.launch-timeline.json");
        got.drain(t..t + 2);
        assert_eq!(
            got,
            doc_command(
                "zerostart launch --vmm cloud-hypervisor --memory size=4G,source=pool --firmware",
            )
        );
    }

    /// The direct starts, built by options::vmm_cmd from the scenario:
    /// QEMU TCG on a prefaulted hugetlb memfd, cloud-hypervisor, and
    /// Firecracker with its config file written into the work dir.
    #[test]
    fn direct_commands_come_from_the_builder() {
        let (dir, s) = direct(
            "vmm = \"qemu\"\nkernel = \"k\"\ninitramfs = \"i\"\ncmdline = \"console=ttyS0 quiet\"\n\
             memory = \"256M\"\nbacking = \"hugetlb\"\nprefault = true\nvcpus = 2\nbinary = \"q\"\n\
             extra_args = [\"-S\"]",
            &["k", "i", "q"],
        );
        let c = command(&s, &dir.path().join("q"), dir.path(), 0).unwrap();
        let mut want: Vec<String> = "-machine pc,memory-backend=ram -accel tcg,thread=multi -cpu max -smp 2 \
             -m 256M -object memory-backend-memfd,id=ram,size=256M,hugetlb=on,hugetlbsize=2M,prealloc=on \
             -nodefaults -no-user-config -display none -no-reboot -serial stdio -kernel k -initrd i -append"
            .split_whitespace()
            .map(String::from)
            .collect();
        want.extend(["console=ttyS0 quiet".into(), "-S".into()]);
        assert_eq!(argv(&c, dir.path()), want);

        let (dir, s) = direct(
            "vmm = \"cloud-hypervisor\"\nkernel = \"k\"\ncmdline = \"c\"\nmemory = \"1G\"\nbinary = \"ch\"",
            &["k", "ch"],
        );
        let c = command(&s, &dir.path().join("ch"), dir.path(), 0).unwrap();
        assert_eq!(
            argv(&c, dir.path()),
            [
                "--cpus",
                "boot=1",
                "--memory",
                "size=1024M",
                "--kernel",
                "k",
                "--cmdline",
                "c",
                "--serial",
                "tty",
                "--console",
                "off"
            ]
        );

        let (dir, s) = direct(
            "vmm = \"firecracker\"\nkernel = \"k\"\ncmdline = \"c\"\nmemory = \"128M\"\nbinary = \"fc\"",
            &["k", "fc"],
        );
        let c = command(&s, &dir.path().join("fc"), dir.path(), 4).unwrap();
        assert_eq!(
            argv(&c, dir.path()),
            ["--no-api", "--config-file", "s-4.firecracker.json"]
        );
        let cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("s-4.firecracker.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(cfg["machine-config"]["mem_size_mib"], 128);
        assert!(cfg["boot-source"]["kernel_image_path"]
            .as_str()
            .unwrap()
            .ends_with("/k"));
    }

    /// QEMU through the launcher: none of the memory arguments the
    /// launcher adds itself (it refuses them), no `-M pc` (it needs q35),
    /// and the launcher's options from the scenario.
    #[test]
    fn qemu_launch_leaves_memory_and_machine_to_the_launcher() {
        let (dir, s) = scenario(
            "vmm = \"qemu\"\nlaunch = \"pool:/run/p.sock\"\nfirmware = \"OVMF.fd\"\n\
             kernel = \"k\"\nmemory = \"512M\"\nbinary = \"qemu\"\nextra_args = [\"-S\"]",
            &["OVMF.fd", "k", "qemu"],
        );
        let l = s.launch.as_ref().unwrap();
        let c = launch_command(
            &s,
            l,
            Path::new("z"),
            &dir.path().join("qemu"),
            dir.path(),
            0,
        )
        .unwrap();
        let a = argv(&c, dir.path());
        let dash = a.iter().position(|x| x == "--").unwrap();
        assert_eq!(
            a[..dash - 2],
            [
                "launch",
                "--vmm",
                "qemu",
                "--vmm-binary",
                "qemu",
                "--memory",
                "size=512M,source=pool:/run/p.sock",
                "--firmware",
                "OVMF.fd",
            ]
        );
        let vmm = &a[dash + 1..];
        for bad in ["-m", "-M", "-mem-prealloc", "-object", "-bios"] {
            assert!(!vmm.iter().any(|x| x == bad), "{bad} in {vmm:?}");
        }
        // q35 (what the launcher needs), with no memory backend of its own.
        assert!(vmm.windows(2).any(|w| w == ["-machine", "q35"]));
        assert_eq!(vmm.iter().filter(|x| *x == "-machine").count(), 1);
        assert_eq!(vmm.last().unwrap(), "-S");
        assert!(vmm.windows(2).any(|w| w == ["-kernel", "k"]));

        // 4 KiB shmem, prefaulted by the launcher.
        let (dir, s) = scenario(
            "vmm = \"qemu\"\nlaunch = \"prefault\"\nbacking = \"anon\"\nfirmware = \"OVMF.fd\"\n\
             kernel = \"k\"\nmemory = \"256M\"",
            &["OVMF.fd", "k"],
        );
        let l = s.launch.as_ref().unwrap();
        let q = Path::new("/usr/bin/qemu-system-x86_64");
        let c = launch_command(&s, l, Path::new("z"), q, dir.path(), 0).unwrap();
        let a = argv(&c, dir.path());
        assert!(a.contains(&"size=256M,source=prefault,hugepages=off".to_string()));
        assert!(!a.contains(&"--vmm-binary".to_string()));
    }

    /// tests/slo/microvm.toml as shipped, its report path pointed at
    /// `report` (the config names `${ROOT}/target/microvm/report.json`).
    fn microvm_config(dir: &Path, report: &Path) -> Config {
        let text = include_str!("../../../tests/slo/microvm.toml").replace(
            "${ROOT}/target/microvm/report.json",
            &report.display().to_string(),
        );
        assert!(text.contains(&report.display().to_string()));
        Config::parse(&text, &dir.join("microvm.toml")).unwrap()
    }

    /// What `tests/nested-host/run.py microvm` writes: this file is the
    /// output of its own `microvm.row()` (and cmd_microvm's envelope) over
    /// synthetic L2 consoles built as in tests/nested-host/test_microvm.py,
    /// so its shape is the harness's: `scenarios[]` with `name`, `vmm`,
    /// `passed`, `failures`, `phases_ms` and the `timeline` the runner
    /// reads. memory_ready, multi_user_reached and app_ready of (a) and (b)
    /// and app_ready of (c) are the e5d1753 run's; the other times are
    /// plausible, not measured.
    fn microvm_fixture() -> serde_json::Value {
        serde_json::from_str(include_str!("../testdata/microvm-report.json")).unwrap()
    }

    fn microvm_run<'a>(doc: &'a mut serde_json::Value, name: &str) -> &'a mut serde_json::Value {
        doc["scenarios"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["name"] == name)
            .unwrap()
    }

    /// Sets (or with `None` drops) one phase of a run, in its timeline and
    /// its phases_ms alike, as the harness would have written it.
    fn set_phase(run: &mut serde_json::Value, phase: &str, t_ms: Option<f64>) {
        let tl = run["timeline"].as_array_mut().unwrap();
        tl.retain(|e| e["name"] != phase);
        match t_ms {
            Some(t) => {
                tl.push(serde_json::json!({"name": phase, "t_ms": t}));
                run["phases_ms"][phase] = serde_json::json!(t);
            }
            None => run["phases_ms"][phase] = serde_json::Value::Null,
        }
    }

    /// Judges a microvm report with tests/slo/microvm.toml, as
    /// `make test-microvm` does after the harness.
    fn judge_microvm(doc: &serde_json::Value) -> (Config, crate::report::Report) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        let c = microvm_config(dir.path(), &path);
        let scenarios = c
            .scenarios
            .iter()
            .map(|s| {
                crate::report::ScenarioReport::evaluate(
                    s,
                    path.display().to_string(),
                    read_nested(s),
                )
            })
            .collect();
        let r = crate::report::Report::new("microvm.toml".into(), 0, scenarios);
        (c, r)
    }

    /// The shipped config has one scenario per way the harness boots the
    /// real VM and bounds every phase it reports; each is read from the
    /// run's timeline with the value the harness put in phases_ms, and
    /// judged against its bound.
    #[test]
    fn microvm_report_every_phase_is_judged() {
        let doc = microvm_fixture();
        let (c, report) = judge_microvm(&doc);
        let ways: Vec<&str> = c.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            ways,
            ["microvm-zerostart", "microvm-launch", "microvm-stock"]
        );
        for s in &report.scenarios {
            let run = &doc["scenarios"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == s.name.as_str())
                .unwrap();
            let want = run["phases_ms"].as_object().unwrap();
            assert_eq!(want.len(), 5, "{}: {want:?}", s.name);
            assert_eq!(s.reps.len(), 1);
            assert!(s.reps[0].ok, "{}: {:?}", s.name, s.reps[0].error);
            let bounded: Vec<&str> = s.slos.iter().map(|r| r.slo.phase.name()).collect();
            for (phase, t) in want {
                let p = Phase::parse(phase).unwrap();
                assert_eq!(s.reps[0].phases.get(&p), t.as_f64().as_ref(), "{phase}");
                assert!(
                    bounded.contains(&phase.as_str()),
                    "{}: {phase} unbounded",
                    s.name
                );
            }
            for r in &s.slos {
                assert!(r.pass && !r.skipped, "{}: {}: {}", s.name, r.label, r.note);
                assert_eq!(r.samples, 1);
                assert_eq!(r.value_ms, want[r.slo.phase.name()].as_f64());
            }
        }
        assert!(report.pass);
        assert_eq!(report.counts.evaluated, 15);
    }

    /// A phase past its bound fails that SLO and only that one, for every
    /// phase of every way.
    #[test]
    fn microvm_report_a_slow_phase_fails() {
        let base = microvm_fixture();
        let (c, _) = judge_microvm(&base);
        for s in &c.scenarios {
            for slo in &s.slos {
                let mut doc = base.clone();
                let phase = slo.phase.name();
                set_phase(
                    microvm_run(&mut doc, &s.name),
                    phase,
                    Some(slo.max_ms + 1.0),
                );
                let (_, report) = judge_microvm(&doc);
                assert!(!report.pass);
                assert_eq!(report.counts.failed, 1, "{} {phase}", s.name);
                let r = report
                    .scenarios
                    .iter()
                    .find(|x| x.name == s.name)
                    .unwrap()
                    .slos
                    .iter()
                    .find(|r| r.slo.phase == slo.phase)
                    .unwrap();
                assert!(!r.pass);
                assert_eq!(
                    r.note,
                    format!("{:.1} ms > {} ms", slo.max_ms + 1.0, slo.max_ms)
                );
            }
        }
    }

    /// A way missing from the report, a phase missing from a run and a run
    /// the harness judged failed each fail their SLOs, never pass silently.
    #[test]
    fn microvm_report_missing_scenario_phase_or_failed_run_fails() {
        let mut doc = microvm_fixture();
        doc["scenarios"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["name"] != "microvm-stock");
        let (_, report) = judge_microvm(&doc);
        assert!(!report.pass);
        assert_eq!(report.counts.failed, 5);
        let stock = report
            .scenarios
            .iter()
            .find(|s| s.name == "microvm-stock")
            .unwrap();
        let e = stock.reps[0].error.as_deref().unwrap();
        assert!(
            e.contains("has no run of microvm-stock (it has: microvm-zerostart, microvm-launch)"),
            "{e}"
        );
        assert!(
            e.contains("tests/nested-host/run.py microvm --only microvm-stock"),
            "{e}"
        );
        assert!(stock.slos.iter().all(|r| !r.pass && !r.skipped));

        let mut doc = microvm_fixture();
        set_phase(microvm_run(&mut doc, "microvm-launch"), "network_up", None);
        let (_, report) = judge_microvm(&doc);
        assert_eq!(report.counts.failed, 1);
        let r = report.scenarios[1].slos.iter().find(|r| !r.pass).unwrap();
        assert_eq!(r.slo.phase, Phase::NetworkUp);
        assert_eq!(r.note, "only 0 of 1 boots reached network_up");

        let mut doc = microvm_fixture();
        let run = microvm_run(&mut doc, "microvm-zerostart");
        run["passed"] = serde_json::json!(false);
        run["failures"] = serde_json::json!(["disk check: zsapp: disk FAIL mismatched_bytes=5"]);
        let (_, report) = judge_microvm(&doc);
        assert_eq!(report.counts.failed, 5);
        assert!(report.scenarios[0].slos[0].note.contains("disk check"));
    }

    /// Without a report, the hint names the command that writes it: the
    /// real VM's harness for microvm-*, e2e's for the others; and where
    /// each harness puts its console log.
    #[test]
    fn nested_missing_report_names_its_harness() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("target/microvm/report.json");
        let c = microvm_config(dir.path(), &missing);
        let reps = read_nested(&c.scenarios[1]);
        let e = reps[0].error.as_deref().unwrap();
        assert!(
            e.starts_with(&format!("no nested host report {} (", missing.display())),
            "{e}"
        );
        assert!(e.ends_with(
            "run `tests/nested-host/run.py microvm --only microvm-launch` first \
             (make test-microvm does; it writes target/microvm/report.json)"
        ));
        assert_eq!(
            reps[0].serial_log,
            dir.path().join("target/microvm/console.log")
        );

        let text =
            "[[scenario]]\nname = \"n\"\nvmm = \"nested\"\nnested_scenario = \"zs-prezero-1g\"\n\
                    nested_report = \"r/n.json\"\nrepetitions = 2\n\
                    [[scenario.slo]]\nphase = \"exit\"\nstat = \"max\"\nmax_ms = 1\n";
        let c = Config::parse(text, &dir.path().join("slo.toml")).unwrap();
        let reps = read_nested(&c.scenarios[0]);
        assert_eq!(reps.len(), 2);
        let e = reps[0].error.as_deref().unwrap();
        assert!(
            e.contains(
                "run `tests/nested-host/run.py e2e --only zs-prezero-1g --repeat 2 --report "
            ),
            "{e}"
        );
        assert!(e.ends_with("r/n.json` first (make slo-nested does)"), "{e}");
        assert!(reps[0].serial_log.ends_with("r/n.console.log"));

        // run.py microvm runs each way once.
        let path = dir.path().join("report.json");
        std::fs::write(&path, microvm_fixture().to_string()).unwrap();
        let mut s = microvm_config(dir.path(), &path).scenarios.remove(0);
        s.repetitions = 2;
        let reps = read_nested(&s);
        assert!(reps[0].ok);
        assert_eq!(
            reps[1].error.as_deref(),
            Some("the nested host reported 1 of 2 runs of microvm-zerostart; run.py microvm runs each scenario once: set repetitions = 1")
        );
    }
}
