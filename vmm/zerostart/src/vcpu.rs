//! The vCPU run loop: one thread per vCPU, KVM_RUN until the guest or the
//! VMM ends the VM.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::{ExitRequest, PioBus};
use kvm_bindings::{KVM_SYSTEM_EVENT_CRASH, KVM_SYSTEM_EVENT_RESET, KVM_SYSTEM_EVENT_SHUTDOWN};
use kvm_ioctls::{VcpuExit, VcpuFd};

/// Why the VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmEvent {
    /// Guest reset: i8042 0xFE, KVM reset event or triple fault. Ends the run
    /// successfully (zerostart never reboots a VM).
    Reset(&'static str),
    /// Guest powered off.
    Poweroff(&'static str),
    /// Something the guest cannot recover from, or a VMM failure.
    Error(String),
    /// The VMM was asked to stop (SIGINT, SIGTERM, SIGHUP).
    Signal(i32),
}

impl VmEvent {
    /// Short reason for the timeline JSON.
    pub fn reason(&self) -> String {
        match self {
            VmEvent::Reset(r) | VmEvent::Poweroff(r) => r.to_string(),
            VmEvent::Error(e) => e.clone(),
            VmEvent::Signal(s) => format!("terminated by signal {s}"),
        }
    }

    /// Process exit code: 0 for a guest-initiated end, 128 + signal when
    /// stopped by a signal (the shell convention), 1 otherwise.
    pub fn code(&self) -> i32 {
        match self {
            VmEvent::Reset(_) | VmEvent::Poweroff(_) => 0,
            VmEvent::Error(_) => 1,
            VmEvent::Signal(s) => 128 + s,
        }
    }
}

/// Signal used to kick vCPU threads out of KVM_RUN.
pub fn kick_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN()
}

extern "C" fn noop_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// Installs the (empty) kick handler: its only job is to make KVM_RUN
/// return EINTR.
pub fn install_kick_handler() -> Result<(), vmm_sys_util::errno::Error> {
    vmm_sys_util::signal::register_signal_handler(kick_signal(), noop_handler)
}

/// The termination signal received, 0 if none.
static TERMINATE: AtomicI32 = AtomicI32::new(0);

extern "C" fn terminate_handler(sig: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    TERMINATE.store(sig, Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM and SIGHUP stop the VM cleanly (vCPU threads
/// joined, summary and timeline written) instead of killing the process.
pub fn install_terminate_handlers() -> Result<(), vmm_sys_util::errno::Error> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        vmm_sys_util::signal::register_signal_handler(sig, terminate_handler)?;
    }
    Ok(())
}

/// The termination signal received so far, if any.
pub fn terminate_requested() -> Option<i32> {
    match TERMINATE.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Everything a vCPU thread needs.
pub struct Vcpu {
    /// vCPU index (= APIC id).
    pub index: u8,
    /// The vCPU.
    pub fd: VcpuFd,
    /// Port-I/O devices.
    pub bus: Arc<PioBus>,
    /// Where stop reasons go.
    pub events: Sender<VmEvent>,
    /// Set by the VMM to end the loop.
    pub stop: Arc<AtomicBool>,
    /// Set by the boot vCPU right before its first KVM_RUN.
    pub first_run: Arc<OnceLock<Instant>>,
    /// Port writes no device claimed (guests probe legacy ports).
    pub unmapped: Arc<AtomicU64>,
}

impl Vcpu {
    /// Starts the vCPU in its own thread.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(format!("vcpu{}", self.index))
            .spawn(move || self.run())
    }

    fn run(mut self) {
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            if self.index == 0 {
                self.first_run.get_or_init(Instant::now);
            }
            let ev = match self.fd.run() {
                Ok(exit) => match exit {
                    VcpuExit::IoOut(port, data) => match self.bus.write(port, data) {
                        Ok(Some(ExitRequest::Reset)) => Some(VmEvent::Reset("i8042 reset")),
                        Ok(Some(ExitRequest::Poweroff)) => Some(VmEvent::Poweroff("acpi poweroff")),
                        Ok(None) => None,
                        Err(devices::Error::Unmapped { .. }) => {
                            self.unmapped.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(e) => Some(VmEvent::Error(format!("port I/O: {e}"))),
                    },
                    VcpuExit::IoIn(port, data) => {
                        self.bus.read(port, data);
                        None
                    }
                    // No MMIO devices: reads see open bus, writes vanish.
                    VcpuExit::MmioRead(_, data) => {
                        data.fill(0xff);
                        None
                    }
                    VcpuExit::MmioWrite(..) => None,
                    VcpuExit::Hlt => Some(VmEvent::Poweroff("hlt")),
                    VcpuExit::Shutdown => Some(VmEvent::Reset("triple fault")),
                    VcpuExit::SystemEvent(kind, _) => Some(match kind {
                        KVM_SYSTEM_EVENT_SHUTDOWN => VmEvent::Poweroff("system event shutdown"),
                        KVM_SYSTEM_EVENT_RESET => VmEvent::Reset("system event reset"),
                        KVM_SYSTEM_EVENT_CRASH => {
                            VmEvent::Error("guest crashed (KVM_SYSTEM_EVENT_CRASH)".into())
                        }
                        k => VmEvent::Error(format!("unknown KVM system event {k}")),
                    }),
                    VcpuExit::FailEntry(reason, cpu) => Some(VmEvent::Error(format!(
                        "KVM_EXIT_FAIL_ENTRY on vCPU {}: hardware entry failure reason {reason:#x} (host cpu {cpu})",
                        self.index
                    ))),
                    VcpuExit::InternalError => Some(VmEvent::Error(self.internal_error())),
                    VcpuExit::Intr => None,
                    other => Some(VmEvent::Error(format!(
                        "unexpected KVM exit on vCPU {}: {other:?}",
                        self.index
                    ))),
                },
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => None,
                Err(e) => Some(VmEvent::Error(format!(
                    "KVM_RUN failed on vCPU {}: {e}",
                    self.index
                ))),
            };
            if let Some(ev) = ev {
                // The receiver may be gone if another vCPU already ended the
                // VM; that is fine.
                let _ = self.events.send(ev);
                return;
            }
        }
    }

    fn internal_error(&mut self) -> String {
        let rip = self.fd.get_regs().map(|r| r.rip).unwrap_or(0);
        let run = self.fd.get_kvm_run();
        // SAFETY: the exit reason is KVM_EXIT_INTERNAL_ERROR, so the
        // `internal` member of the union is the one KVM filled.
        let (sub, n, data) = unsafe {
            let i = run.__bindgen_anon_1.internal;
            (i.suberror, i.ndata, i.data)
        };
        let data: Vec<String> = data
            .iter()
            .take((n as usize).min(data.len()))
            .map(|d| format!("{d:#x}"))
            .collect();
        format!(
            "KVM internal error on vCPU {} at rip {rip:#x}: suberror {sub} ({}) data [{}]; this host's KVM cannot run this guest",
            self.index,
            match sub {
                1 => "emulation failure",
                2 => "simultaneous exception",
                3 => "delivery event",
                _ => "other",
            },
            data.join(", ")
        )
    }
}

/// Stops all vCPU threads: sets `stop`, then signals each thread until it
/// has left KVM_RUN (re-sending covers a signal that lands just before a
/// thread enters KVM_RUN). Gives up on a thread after `timeout`.
pub fn stop_all(stop: &AtomicBool, threads: Vec<JoinHandle<()>>, timeout: Duration) -> usize {
    use std::os::unix::thread::JoinHandleExt;
    stop.store(true, Ordering::Release);
    let deadline = Instant::now() + timeout;
    let mut stuck = 0;
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            // SAFETY: the handle is a live, joinable thread we own.
            unsafe { libc::pthread_kill(t.as_pthread_t(), kick_signal()) };
            std::thread::sleep(Duration::from_millis(2));
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            stuck += 1;
        }
    }
    stuck
}
