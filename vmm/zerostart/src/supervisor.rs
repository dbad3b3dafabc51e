//! Runs a built VM to its end: starts one thread per vCPU, watches them
//! (guest exits, SIGINT/SIGTERM, every vCPU halted with interrupts off),
//! then stops the vCPUs and the devices' own threads before guest RAM may
//! go. `main` only plans, builds, runs and reports.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::Context;
use timeline::Timeline;

use crate::builder::Vm;
use crate::tty;
use crate::vstate::vcpu::{self, Vcpu, VmEvent};

/// How a VM run ended.
#[derive(Debug)]
pub struct Ended {
    /// Why it stopped.
    pub event: VmEvent,
    /// When the supervisor saw it.
    pub exit_at: Instant,
    /// vCPU threads that did not stop in time.
    pub stuck: usize,
    /// Devices whose threads did not stop in time.
    pub devices_left: usize,
}

impl Ended {
    /// True if a thread may still write guest RAM: then guest RAM must
    /// stay mapped (and a pool lease unreturned) until the process exits.
    pub fn threads_left(&self) -> bool {
        self.stuck > 0 || self.devices_left > 0
    }

    /// Puts the run's points on `tl`: the boot vCPU's first KVM_RUN, the
    /// guest's boot-timer markers, its first serial output, a crash, and
    /// the exit.
    pub fn mark(&self, vm: &Vm, tl: &mut Timeline) {
        if let Some(t) = vm.first_run.get() {
            tl.mark_at("first_kvm_run", *t);
        }
        if let Ok(timer) = vm.timer.try_lock() {
            for m in timer.markers() {
                tl.mark_at(&m.name, m.at);
            }
        }
        // try_lock: a vCPU thread that did not stop may hold COM1 forever
        // (an output nobody reads); the summary must not wait for it.
        if let Some(t) = vm.serial.try_lock().ok().and_then(|s| s.first_output()) {
            tl.mark_at("first_serial_output", t);
        }
        if let VmEvent::Crash(what) = &self.event {
            // Its own point in the timeline: a crash is not a reboot.
            tl.mark_at(&what.replace(' ', "_"), self.exit_at);
        }
        tl.mark_at("exit", self.exit_at);
    }
}

/// Every HALT_ROUND, ask the vCPUs whether they can still run; two rounds
/// in a row of "all halted with interrupts off" end the VM (see
/// [`vcpu::HaltWatch`]). A kick costs a vCPU one KVM_RUN exit per round.
const HALT_ROUND: Duration = Duration::from_millis(500);
/// How long stopping the vCPUs may take before they count as stuck.
const VCPU_STOP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long stopping the devices' threads may take.
const DEVICE_STOP_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs `vm` until it ends. `tty`: COM1 is this terminal, which goes into
/// raw mode (restored before returning) and feeds the guest's input.
///
/// Returns the VM without its vCPUs (guest RAM, devices and the hint for
/// the report) and how it ended. If a vCPU thread cannot be started, the
/// ones already running are stopped first; guest RAM is leaked when one
/// of them does not stop, since it may still write there.
pub fn run(mut vm: Vm, tty: bool) -> anyhow::Result<(Vm, Ended)> {
    vcpu::install_kick_handler().context("installing the vCPU kick signal handler")?;
    vcpu::install_terminate_handlers().context("installing SIGINT/SIGTERM handlers")?;

    // Raw mode before any vCPU runs; the guard restores the terminal when
    // dropped: right after the vCPUs stopped below, or on any early return.
    let (raw_stdin, stdin_thread) = if tty {
        let raw = tty::RawStdin::enter().context("putting the terminal in raw mode")?;
        (raw, Some(vm.serial.clone()))
    } else {
        (None, None)
    };

    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    let fds = std::mem::take(&mut vm.vcpus);
    let watch = Arc::new(vcpu::HaltWatch::new(fds.len()));
    for (index, fd) in fds.into_iter().enumerate() {
        let v = Vcpu {
            index: index as u8,
            fd,
            bus: vm.bus.clone(),
            mmio: vm.mmio.clone(),
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
                let stuck = vcpu::stop_all(&vm.stop, threads, VCPU_STOP_TIMEOUT);
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

    let event = watch_until_end(&rx, &watch, &threads);
    let exit_at = Instant::now();
    let stuck = vcpu::stop_all(&vm.stop, threads, VCPU_STOP_TIMEOUT);
    // Devices write guest memory from their own threads too (fw_cfg DMA):
    // stop and join them before guest RAM can be unmapped or truncated.
    let mut devices_left = vm.bus.stop_devices(DEVICE_STOP_TIMEOUT);
    // virtio device threads (I/O threads, tap RX, vhost relays), then
    // the vhost backends themselves (the kernel's workers use guest RAM
    // too).
    for w in &mut vm.workers {
        if !w.stop(DEVICE_STOP_TIMEOUT) {
            devices_left += 1;
        }
    }
    devices_left += vm.mmio.stop_devices(DEVICE_STOP_TIMEOUT);
    drop(raw_stdin);
    Ok((
        vm,
        Ended {
            event,
            exit_at,
            stuck,
            devices_left,
        },
    ))
}

/// Waits for the first of: a vCPU's event, a terminating signal, two
/// halt rounds in a row with every vCPU stuck, or all vCPU threads gone.
fn watch_until_end(
    rx: &mpsc::Receiver<VmEvent>,
    watch: &vcpu::HaltWatch,
    threads: &[std::thread::JoinHandle<()>],
) -> VmEvent {
    let mut round = 0;
    let mut round_at = Instant::now();
    let mut stuck_rounds = 0;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => return ev,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(sig) = vcpu::terminate_requested() {
                    return VmEvent::Signal(sig);
                }
                if round_at.elapsed() >= HALT_ROUND {
                    if round > 0 {
                        stuck_rounds = if watch.stuck(round) {
                            stuck_rounds + 1
                        } else {
                            0
                        };
                        if stuck_rounds >= 2 {
                            return VmEvent::Poweroff(
                                "halted: every vCPU stopped with interrupts off",
                            );
                        }
                    }
                    round = watch.ask();
                    round_at = Instant::now();
                    vcpu::kick_all(threads);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return VmEvent::Error("all vCPU threads ended without a reason".into())
            }
        }
    }
}
