//! The vCPUs: created and set up for boot (CPUID, MSRs, LAPIC, the boot
//! vCPU's entry state), then the run loop: one thread per vCPU, KVM_RUN
//! until the guest or the VMM ends the VM.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::virtio::MmioBus;
use devices::{ExitRequest, PioBus};
use kvm_bindings::{
    kvm_run, KVM_MP_STATE_HALTED, KVM_MP_STATE_INIT_RECEIVED, KVM_MP_STATE_UNINITIALIZED,
    KVM_SYSTEM_EVENT_CRASH, KVM_SYSTEM_EVENT_RESET, KVM_SYSTEM_EVENT_SHUTDOWN,
};
use kvm_bindings::{kvm_sregs, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuExit, VcpuFd, VmFd};

use super::{kvm_err, Error};
use crate::guest::PreparedGuest;

/// `n` vCPUs with filtered CPUID, the boot MSRs and LINT0/LINT1 set up;
/// index = APIC id.
pub fn create_all(kvm: &Kvm, vm_fd: &VmFd, n: u8) -> Result<Vec<VcpuFd>, Error> {
    let base_cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    let msr_list = kvm
        .get_msr_index_list()
        .map_err(kvm_err("KVM_GET_MSR_INDEX_LIST"))?;
    let msrs = msr_list.as_slice().to_vec();
    let mut vcpus = Vec::with_capacity(n as usize);
    for i in 0..n {
        let v = vm_fd
            .create_vcpu(u64::from(i))
            .map_err(kvm_err("KVM_CREATE_VCPU"))?;
        let mut cpuid = base_cpuid.clone();
        arch::cpuid::filter_cpuid(&mut cpuid, i, n)?;
        v.set_cpuid2(&cpuid).map_err(kvm_err("KVM_SET_CPUID2"))?;
        arch::msr::setup_msrs(&v, &msrs)?;
        arch::interrupts::setup_lint(&v)?;
        vcpus.push(v);
    }
    Ok(vcpus)
}

/// The special registers KVM gave a fresh vCPU: the base every boot path
/// builds its entry segments on.
pub fn initial_sregs(v: &VcpuFd) -> Result<kvm_sregs, Error> {
    v.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))
}

/// The boot vCPU's registers, segments and FPU at the entry point.
pub fn configure_boot(v0: &VcpuFd, guest: &PreparedGuest) -> Result<(), Error> {
    v0.set_sregs(&guest.sregs)
        .map_err(kvm_err("KVM_SET_SREGS"))?;
    v0.set_regs(&guest.regs).map_err(kvm_err("KVM_SET_REGS"))?;
    v0.set_fpu(&arch::regs::boot_fpu())
        .map_err(kvm_err("KVM_SET_FPU"))?;
    Ok(())
}

/// Why the VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmEvent {
    /// A reset the guest asked for: i8042 0xFE, ACPI reset register, KVM
    /// reset event. Ends the run successfully (zerostart never reboots a
    /// VM).
    Reset(&'static str),
    /// Guest powered off.
    Poweroff(&'static str),
    /// The guest crashed: a triple fault (KVM_EXIT_SHUTDOWN) or a KVM crash
    /// event. Not a clean end: a harness must not mistake a guest that
    /// faulted its way out for one that rebooted.
    Crash(&'static str),
    /// A VMM failure, or something KVM cannot run.
    Error(String),
    /// The VMM was asked to stop (SIGINT, SIGTERM, SIGHUP).
    Signal(i32),
}

/// Exit code of a run whose guest crashed ([`VmEvent::Crash`]); 1 stays
/// the VMM's own errors so a harness can tell the two apart.
pub const EXIT_GUEST_CRASH: i32 = 2;

impl VmEvent {
    /// Short reason for the timeline JSON.
    pub fn reason(&self) -> String {
        match self {
            VmEvent::Reset(r) | VmEvent::Poweroff(r) | VmEvent::Crash(r) => r.to_string(),
            VmEvent::Error(e) => e.clone(),
            VmEvent::Signal(s) => format!("terminated by signal {s}"),
        }
    }

    /// What kind of end this was, for the timeline JSON (`exit.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            VmEvent::Reset(_) => "reset",
            VmEvent::Poweroff(_) => "poweroff",
            VmEvent::Crash(_) => "guest_crash",
            VmEvent::Error(_) => "error",
            VmEvent::Signal(_) => "signal",
        }
    }

    /// Process exit code (documented in docs/vmm.md): 0 for a reset or
    /// poweroff the guest asked for, 1 for a VMM error, 2 for a guest
    /// crash, 128 + signal when stopped by a signal (the shell convention).
    pub fn code(&self) -> i32 {
        match self {
            VmEvent::Reset(_) | VmEvent::Poweroff(_) => 0,
            VmEvent::Error(_) => 1,
            VmEvent::Crash(_) => EXIT_GUEST_CRASH,
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

/// What a vCPU said when the [`HaltWatch`] last asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuState {
    /// Runnable, or halted with interrupts on (a device or timer wakes it).
    Running = 1,
    /// Halted with interrupts off: only an NMI, INIT or SMI could wake it,
    /// and nothing but another vCPU could send one.
    HaltedIrqsOff = 2,
    /// Waiting for INIT/SIPI: a secondary vCPU the guest never started.
    NotStarted = 3,
}

/// Notices a guest that can never run again: every vCPU halted with
/// interrupts off, or never started. That is how Linux powers off without
/// ACPI (`--acpi off`, or a kernel built without it) and how a bare-metal
/// test ends with `cli; hlt`. With the in-kernel irqchip KVM handles HLT
/// itself and no exit reaches the VMM, so without this zerostart would
/// wait forever.
///
/// The main thread opens a round now and then ([`HaltWatch::ask`]) and
/// kicks every vCPU thread out of KVM_RUN; each answers from its own
/// thread (KVM_GET_MP_STATE and RFLAGS.IF), then goes back into KVM_RUN.
/// A thread that misses a kick simply does not answer, and a round without
/// every answer decides nothing, so the watch can only err on the side of
/// waiting.
pub struct HaltWatch {
    round: AtomicU64,
    /// Per vCPU: `round << 8 | VcpuState`, 0 before the first answer.
    answers: Vec<AtomicU64>,
}

impl HaltWatch {
    /// A watch over `vcpus` vCPUs, no round open.
    pub fn new(vcpus: usize) -> Self {
        HaltWatch {
            round: AtomicU64::new(0),
            answers: (0..vcpus).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Opens a new round and returns its number; kick the vCPU threads
    /// after this so that they answer.
    pub fn ask(&self) -> u64 {
        self.round.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Records vCPU `index`'s answer for the open round, unless it has
    /// already answered it.
    pub fn answer_with(&self, index: usize, state: impl FnOnce() -> VcpuState) {
        let round = self.round.load(Ordering::Acquire);
        let Some(slot) = self.answers.get(index) else {
            return;
        };
        if round == 0 || slot.load(Ordering::Acquire) >> 8 >= round {
            return;
        }
        slot.store(round << 8 | state() as u64, Ordering::Release);
    }

    /// True if every vCPU answered `round` and none can run again: at
    /// least one halted with interrupts off and the rest so, or never
    /// started.
    pub fn stuck(&self, round: u64) -> bool {
        let mut halted = false;
        for slot in &self.answers {
            let a = slot.load(Ordering::Acquire);
            if a >> 8 != round {
                return false;
            }
            match a & 0xff {
                x if x == VcpuState::HaltedIrqsOff as u64 => halted = true,
                x if x == VcpuState::NotStarted as u64 => {}
                _ => return false,
            }
        }
        halted
    }
}

/// This vCPU's state, read from its own thread between two KVM_RUNs.
fn vcpu_state(fd: &VcpuFd) -> VcpuState {
    const RFLAGS_IF: u64 = 1 << 9;
    match fd.get_mp_state().map(|m| m.mp_state) {
        Ok(KVM_MP_STATE_HALTED) => match fd.get_regs() {
            Ok(r) if r.rflags & RFLAGS_IF == 0 => VcpuState::HaltedIrqsOff,
            _ => VcpuState::Running,
        },
        Ok(KVM_MP_STATE_UNINITIALIZED | KVM_MP_STATE_INIT_RECEIVED) => VcpuState::NotStarted,
        _ => VcpuState::Running,
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
    /// MMIO devices (virtio-mmio windows).
    pub mmio: Arc<MmioBus>,
    /// Where stop reasons go.
    pub events: Sender<VmEvent>,
    /// Set by the VMM to end the loop.
    pub stop: Arc<AtomicBool>,
    /// Set by the boot vCPU right before its first KVM_RUN.
    pub first_run: Arc<OnceLock<Instant>>,
    /// Port writes no device claimed (guests probe legacy ports).
    pub unmapped: Arc<AtomicU64>,
    /// Asks, now and then, whether this vCPU can still run.
    pub watch: Arc<HaltWatch>,
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
            let fd = &self.fd;
            self.watch
                .answer_with(self.index as usize, || vcpu_state(fd));
            // The kvm_run page, to read the element size of a port-I/O exit
            // (kvm-ioctls hands over only the port and size x count bytes).
            let run_page: *const kvm_run = self.fd.get_kvm_run();
            let io_size = || {
                // SAFETY: `run_page` points at this vCPU's kvm_run mapping,
                // which lives as long as `self.fd`; it is only read after
                // KVM_RUN returned KVM_EXIT_IO, so `io` is the union member
                // KVM filled, and nothing writes it until the next KVM_RUN.
                usize::from(unsafe {
                    std::ptr::read_volatile(std::ptr::addr_of!(
                        (*run_page).__bindgen_anon_1.io.size
                    ))
                })
            };
            let ev = match self.fd.run() {
                Ok(exit) => match exit {
                    // String I/O (`rep insb`/`rep outsb`) exits once with
                    // size x count bytes; the bus delivers each element as
                    // its own access.
                    VcpuExit::IoOut(port, data) => match self.bus.write_string(port, io_size(), data) {
                        Ok(Some(ExitRequest::Reset(by))) => Some(VmEvent::Reset(by)),
                        Ok(Some(ExitRequest::Poweroff)) => Some(VmEvent::Poweroff("acpi poweroff")),
                        Ok(None) => None,
                        Err(devices::Error::Unmapped { .. }) => {
                            self.unmapped.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(e) => Some(VmEvent::Error(format!("port I/O: {e}"))),
                    },
                    VcpuExit::IoIn(port, data) => {
                        self.bus.read_string(port, io_size(), data);
                        None
                    }
                    // Outside the virtio-mmio windows: reads see open
                    // bus, writes vanish.
                    VcpuExit::MmioRead(addr, data) => {
                        if !self.mmio.read(addr, data) {
                            data.fill(0xff);
                        }
                        None
                    }
                    VcpuExit::MmioWrite(addr, data) => {
                        self.mmio.write(addr, data);
                        None
                    }
                    VcpuExit::Hlt => Some(VmEvent::Poweroff("hlt")),
                    VcpuExit::Shutdown => Some(VmEvent::Crash("triple fault")),
                    VcpuExit::SystemEvent(kind, _) => Some(match kind {
                        KVM_SYSTEM_EVENT_SHUTDOWN => VmEvent::Poweroff("system event shutdown"),
                        KVM_SYSTEM_EVENT_RESET => VmEvent::Reset("system event reset"),
                        KVM_SYSTEM_EVENT_CRASH => VmEvent::Crash("system event crash"),
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

/// Kicks one vCPU thread out of KVM_RUN (a no-op for a thread that has
/// ended).
fn kick(t: &JoinHandle<()>) {
    use std::os::unix::thread::JoinHandleExt;
    if !t.is_finished() {
        // SAFETY: the handle is a live, joinable thread we own.
        unsafe { libc::pthread_kill(t.as_pthread_t(), kick_signal()) };
    }
}

/// Kicks every vCPU thread out of KVM_RUN once (the thread goes back in
/// after looking at its flags).
pub fn kick_all(threads: &[JoinHandle<()>]) {
    threads.iter().for_each(kick);
}

/// Stops all vCPU threads: sets `stop`, then signals each thread until it
/// has left KVM_RUN (re-sending covers a signal that lands just before a
/// thread enters KVM_RUN). Gives up on a thread after `timeout`.
pub fn stop_all(stop: &AtomicBool, threads: Vec<JoinHandle<()>>, timeout: Duration) -> usize {
    stop.store(true, Ordering::Release);
    let deadline = Instant::now() + timeout;
    let mut stuck = 0;
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            kick(&t);
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

#[cfg(test)]
mod tests {
    use super::{HaltWatch, VcpuState};

    /// Answers `states` for the open round, one per vCPU.
    fn answer(w: &HaltWatch, states: &[VcpuState]) {
        for (i, s) in states.iter().enumerate() {
            w.answer_with(i, || *s);
        }
    }

    /// The verdict on one round of a fresh watch whose vCPUs answer `states`.
    fn stuck_after(states: &[VcpuState]) -> bool {
        let w = HaltWatch::new(states.len());
        let r = w.ask();
        answer(&w, states);
        w.stuck(r)
    }

    #[test]
    fn no_round_no_verdict() {
        let w = HaltWatch::new(2);
        answer(&w, &[VcpuState::HaltedIrqsOff, VcpuState::HaltedIrqsOff]);
        assert!(!w.stuck(0), "answers before any round must not count");
    }

    #[test]
    fn all_halted_or_never_started_is_stuck() {
        use VcpuState::*;
        assert!(stuck_after(&[HaltedIrqsOff, NotStarted, HaltedIrqsOff]));
    }

    #[test]
    fn one_running_vcpu_keeps_the_vm() {
        use VcpuState::*;
        assert!(!stuck_after(&[HaltedIrqsOff, Running]));
    }

    #[test]
    fn nobody_halted_is_not_stuck() {
        use VcpuState::*;
        // Secondary vCPUs waiting for SIPI while the boot vCPU runs.
        assert!(!stuck_after(&[Running, NotStarted]));
        // Only vCPUs that were never started: nothing halted, no verdict.
        assert!(!stuck_after(&[NotStarted]));
    }

    #[test]
    fn a_missing_answer_decides_nothing() {
        // A vCPU thread that missed its kick has not answered this round:
        // its answer from the round before must not count.
        let w = HaltWatch::new(2);
        let r1 = w.ask();
        answer(&w, &[VcpuState::HaltedIrqsOff, VcpuState::HaltedIrqsOff]);
        assert!(w.stuck(r1));
        let r2 = w.ask();
        w.answer_with(0, || VcpuState::HaltedIrqsOff);
        assert!(!w.stuck(r2));
    }

    #[test]
    fn one_answer_per_round() {
        let w = HaltWatch::new(1);
        let r = w.ask();
        w.answer_with(0, || VcpuState::HaltedIrqsOff);
        w.answer_with(0, || panic!("asked twice in one round"));
        assert!(w.stuck(r));
        w.answer_with(7, || panic!("no such vCPU"));
    }
}
