//! zerostart: a KVM VMM that boots Linux from pre-zeroed memory, passes the
//! guest a hint of which RAM is already zero, and times every boot phase.
//!
//! `zerostart run --kernel bzImage [--memory size=4G,hugepages=on] ...`;
//! see `docs/vmm.md`.

mod builder;
mod cli;
mod device_manager;
mod firmware;
mod guest;
mod guest_memory;
mod hint;
mod kernel;
mod launch;
mod netplan;
mod phases;
mod supervisor;
mod tty;
mod vmm_argv;
mod vstate;

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use timeline::Timeline;

use crate::cli::{BenchCommand, Cli, Command, RunArgs};
use crate::vstate::vcpu::VmEvent;

fn main() {
    // Time zero of the boot timeline: as early as Rust code runs.
    let start = Instant::now();
    // Installed (or linked) as `zerostart-qemu`: every argument is QEMU's.
    let mut argv = std::env::args();
    let me = argv.next().unwrap_or_default();
    if std::path::Path::new(&me).file_name() == Some(launch::dropin::DROPIN_NAME.as_ref()) {
        let a = launch::dropin::DropinArgs::from_env(argv.collect());
        std::process::exit(launch::dropin::run(&a, start));
    }
    let cli: Cli = options::parse_command_line("zerostart");
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
        Command::Bench(BenchCommand::Host(args)) => match zerobench::host::run(&args) {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("zerostart: bench host: {e}");
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
                e.exit_code()
            }
        },
        Command::QemuDropin(args) => launch::dropin::run(&args, start),
        Command::VmmArgv(args) => match vmm_argv::run(&args) {
            Ok(out) => {
                println!("{out}");
                0
            }
            Err(e) => {
                eprintln!("zerostart vmm-argv: {e}");
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
    let (plan, opened) = builder::plan(args)?;
    // Listening before the guest exists, so no phase line is missed; a
    // listener that cannot start costs the phases, not the VM.
    let listener = match &plan.vsock {
        Some(v) => match phases::PhaseListener::vsock(v.cid, start) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("zerostart: warning: {e}");
                None
            }
        },
        None => None,
    };
    let vm = builder::build(args, &plan, opened, &mut tl)?;
    let tty = matches!(plan.serial, cli::SerialOpt::Tty);
    let (vm, ended) = supervisor::run(vm, tty)?;
    ended.mark(&vm, &mut tl);
    let guest_phases = listener.map(|l| l.finish()).unwrap_or_default();
    let event = &ended.event;

    let hint = vm.hint.as_ref();
    match event {
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
            let report = guest_memory::prezero_report(&vm.ram, hint, vm.verified_bytes);
            write_timeline(path, &tl, &plan, report, event, guest_phases)
        }
        None => Ok(()),
    };
    if ended.threads_left() {
        // A thread we could not stop may still write guest RAM. Unmapping
        // it would crash that thread's write (SIGSEGV), truncating a named
        // hugetlbfs file under it would kill the VMM by SIGBUS, and a pool
        // lease must not go back while written. So keep all of it until
        // the process exits, which ends the threads before the mappings.
        // A named file then keeps the guest's data until the next
        // zerostart on it truncates it, as after a VMM that was killed.
        eprintln!(
            "zerostart: warning: {} vCPU thread(s) and {} device(s) did not stop in time; \
             guest RAM stays mapped (a named file is not truncated) until the process exits",
            ended.stuck, ended.devices_left
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
    prezero: timeline::PrezeroReport,
    event: &VmEvent,
    guest_phases: Vec<timeline::GuestPhase>,
) -> anyhow::Result<()> {
    let doc = timeline::RunTimeline {
        exit: timeline::RunExit {
            code: event.code(),
            kind: event.kind().to_string(),
            reason: event.reason(),
        },
        guest_phases,
        memory_bytes: plan.memory.size,
        phases: tl.phases(),
        prezero,
        vcpus: plan.cpus.boot,
    };
    std::fs::write(path, timeline::to_file_text(&doc))
        .with_context(|| format!("writing --timeline {}", path.display()))?;
    Ok(())
}
