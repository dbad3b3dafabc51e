//! zerostart: a KVM VMM that boots Linux from pre-zeroed memory, passes the
//! guest a hint of which RAM is already zero, and times every boot phase.
//!
//! `zerostart run --kernel bzImage [--memory size=4G,hugepages=on] ...`;
//! see `docs/vmm.md`.

mod builder;
mod cli;
mod debugcon;
mod firmware;
mod fw_platform;
mod guest;
mod hint;
mod kernel;
mod launch;
mod ram;
mod timeline;
mod tty;
mod vcpu;

use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use serde_json::json;

use crate::cli::{BenchCommand, Cli, Command, RunArgs};
use crate::timeline::Timeline;
use crate::vcpu::{Vcpu, VmEvent};

fn main() {
    // Time zero of the boot timeline: as early as Rust code runs.
    let start = Instant::now();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => match run(&args, start) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("zerostart: error: {e:#}");
                1
            }
        },
        Command::Bench(BenchCommand::Zero(args)) => match zerobench::run(&args) {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("zerostart: bench zero: {e}");
                1
            }
        },
        Command::Pool(args) => match pool::cli::run(&args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("zerostart pool: error: {e}");
                1
            }
        },
        Command::Launch(args) => match launch::run(&args, start) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("zerostart launch: error: {e}");
                1
            }
        },
        Command::Slo(args) => match slo::cli::run(&args) {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("zerostart slo: {e}");
                1
            }
        },
    };
    std::process::exit(code);
}

fn run(args: &RunArgs, start: Instant) -> anyhow::Result<i32> {
    let mut tl = Timeline::new(start);
    let (plan, kernel) = builder::plan(args)?;
    let vm = builder::build(args, &plan, kernel, &mut tl)?;
    vcpu::install_kick_handler().context("installing the vCPU kick signal handler")?;
    vcpu::install_terminate_handlers().context("installing SIGINT/SIGTERM handlers")?;

    // Raw mode before any vCPU runs; the guard restores the terminal when
    // dropped: right after the vCPUs stopped below, or on any early return.
    let (raw_stdin, stdin_thread) = if matches!(plan.serial, cli::SerialOpt::Tty) {
        let raw = tty::RawStdin::enter().context("putting the terminal in raw mode")?;
        (raw, Some(vm.serial.clone()))
    } else {
        (None, None)
    };

    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    let watch = Arc::new(vcpu::HaltWatch::new(vm.vcpus.len()));
    for (index, fd) in vm.vcpus.into_iter().enumerate() {
        let v = Vcpu {
            index: index as u8,
            fd,
            bus: vm.bus.clone(),
            events: tx.clone(),
            stop: vm.stop.clone(),
            first_run: vm.first_run.clone(),
            unmapped: vm.unmapped.clone(),
            watch: watch.clone(),
        };
        match v.spawn() {
            Ok(t) => threads.push(t),
            Err(e) => {
                // The vCPUs already running write guest RAM: stop them
                // before it goes.
                let stuck = vcpu::stop_all(&vm.stop, threads, Duration::from_secs(2));
                if stuck > 0 {
                    std::mem::forget(vm.ram);
                }
                return Err(e).context("starting a vCPU thread");
            }
        }
    }
    drop(tx);
    if let Some(stdin) = stdin_thread {
        devices::SerialDevice::spawn_stdin_thread(stdin);
    }

    // Every HALT_ROUND, ask the vCPUs whether they can still run; two
    // rounds in a row of "all halted with interrupts off" end the VM (see
    // vcpu::HaltWatch). A kick costs a vCPU one KVM_RUN exit per round.
    const HALT_ROUND: Duration = Duration::from_millis(500);
    let mut round = 0;
    let mut round_at = Instant::now();
    let mut stuck_rounds = 0;
    let event = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => break ev,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(sig) = vcpu::terminate_requested() {
                    break VmEvent::Signal(sig);
                }
                if round_at.elapsed() >= HALT_ROUND {
                    if round > 0 {
                        stuck_rounds = if watch.stuck(round) {
                            stuck_rounds + 1
                        } else {
                            0
                        };
                        if stuck_rounds >= 2 {
                            break VmEvent::Poweroff(
                                "halted: every vCPU stopped with interrupts off",
                            );
                        }
                    }
                    round = watch.ask();
                    round_at = Instant::now();
                    vcpu::kick_all(&threads);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break VmEvent::Error("all vCPU threads ended without a reason".into())
            }
        }
    };
    let exit_at = Instant::now();
    let stuck = vcpu::stop_all(&vm.stop, threads, Duration::from_secs(2));
    // Devices write guest memory from their own threads too (fw_cfg DMA):
    // stop and join them before guest RAM can be unmapped or truncated.
    let devices_left = vm.bus.stop_devices(Duration::from_millis(500));
    drop(raw_stdin);

    if let Some(t) = vm.first_run.get() {
        tl.mark_at("first_kvm_run", *t);
    }
    if let Ok(timer) = vm.timer.try_lock() {
        for m in timer.markers() {
            tl.mark_at(&m.name, m.at);
        }
    }
    // try_lock: a vCPU thread that did not stop may hold COM1 forever (an
    // output nobody reads); the summary must not wait for it.
    if let Some(t) = vm.serial.try_lock().ok().and_then(|s| s.first_output()) {
        tl.mark_at("first_serial_output", t);
    }
    if let VmEvent::Crash(what) = &event {
        // Its own point in the timeline: a crash is not a reboot.
        tl.mark_at(&what.replace(' ', "_"), exit_at);
    }
    tl.mark_at("exit", exit_at);

    let hint = vm.hint.as_ref();
    match &event {
        VmEvent::Error(reason) => eprintln!("zerostart: error: {reason}"),
        VmEvent::Crash(what) => eprintln!(
            "zerostart: error: the guest crashed ({what}); exit code {}",
            event.code()
        ),
        _ => {}
    }
    eprintln!(
        "zerostart: exit={} code={} memory={}MiB hint={} ranges/{} MiB {}",
        event.reason(),
        event.code(),
        plan.memory.size >> 20,
        hint.map(|h| h.entries.len()).unwrap_or(0),
        hint.map(|h| h.total_bytes()).unwrap_or(0) >> 20,
        tl.summary()
    );
    if vm.format == kernel::Format::Elf {
        eprintln!("zerostart: note: PVH boot carries no setup_data, so the guest got no zero hint");
    }
    let written = match &args.timeline {
        Some(path) => {
            let report = ram::Report::new(&vm.ram, hint, vm.verified_bytes);
            write_timeline(path, &tl, &plan, &report, &event)
        }
        None => Ok(()),
    };
    if stuck > 0 || devices_left > 0 {
        // A thread we could not stop may still write guest RAM. Unmapping
        // it would crash that thread's write (SIGSEGV), truncating a named
        // hugetlbfs file under it would kill the VMM by SIGBUS, and a pool
        // lease must not go back while written. So keep all of it until
        // the process exits, which ends the threads before the mappings.
        // A named file then keeps the guest's data until the next
        // zerostart on it truncates it, as after a VMM that was killed.
        eprintln!(
            "zerostart: warning: {stuck} vCPU thread(s) and {devices_left} device(s) did not stop in time; \
             guest RAM stays mapped (a named file is not truncated) until the process exits"
        );
        std::mem::forget(vm.ram);
    }
    written?;
    Ok(event.code())
}

fn write_timeline(
    path: &Path,
    tl: &Timeline,
    plan: &builder::Plan,
    report: &ram::Report,
    event: &VmEvent,
) -> anyhow::Result<()> {
    let doc = json!({
        "phases": tl.phases(),
        "memory_bytes": plan.memory.size,
        "vcpus": plan.cpus.boot,
        "prezero": report,
        "exit": {"reason": event.reason(), "kind": event.kind(), "code": event.code()},
    });
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(path, text + "\n")
        .with_context(|| format!("writing --timeline {}", path.display()))?;
    Ok(())
}
