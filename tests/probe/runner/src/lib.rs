//! Boots the probe bzImage on `/dev/kvm` the way a VMM boots Linux through
//! the x86 64-bit boot protocol, with a boot_params, e820 map, command line
//! and `setup_data` list the caller chooses, and reports what the probe
//! printed, which boot-timer markers it wrote and how it stopped.
//!
//! It exists so the probe has a regression harness of its own: every
//! verdict the probe can give (pass, invalid hint, dirty memory, VMM bugs)
//! can be provoked here on purpose, independent of the zerostart VMM.
//! Deliberately small: one vCPU, one memory slot, no devices beyond the
//! ports the probe uses (COM1, the boot-timer port, the i8042 reset).
#![deny(missing_docs)]

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_fpu, kvm_segment, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuExit};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params};
use linux_loader::loader::{BzImage, KernelLoader};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use zerohint::Entry;

/// Guest-physical layout of what the runner writes (the Firecracker one).
pub mod layout {
    /// GDT.
    pub const GDT: u64 = 0x500;
    /// boot_params ("zero page").
    pub const BOOT_PARAMS: u64 = 0x7000;
    /// Initial stack pointer (the protocol promises none; the probe sets
    /// its own).
    pub const STACK: u64 = 0x8ff0;
    /// PML4; the PDPT and the PD follow at +0x1000, +0x2000.
    pub const PML4: u64 = 0x9000;
    /// First setup_data node; nodes follow, 16-byte aligned.
    pub const SETUP_DATA: u64 = 0x1_0000;
    /// Command line.
    pub const CMDLINE: u64 = 0x2_0000;
    /// End of everything the runner writes below 1 MiB.
    pub const LOW_WRITTEN_END: u64 = 0x3_0000;
    /// End of low usable RAM in the default e820 (the EBDA follows).
    pub const LOW_RAM_END: u64 = 0x9_fc00;
    /// Start of high RAM.
    pub const HIGH_RAM: u64 = 0x10_0000;
    /// Memory the VMM's identity mapping covers (first GiB, 2 MiB pages).
    pub const IDENTITY_MAPPED: u64 = 1 << 30;
}

/// e820 type of usable RAM.
pub const E820_RAM: u32 = 1;
/// e820 type of reserved memory.
pub const E820_RESERVED: u32 = 2;

/// What the runner hands the probe as a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// No hint node.
    Absent,
    /// The ranges a correct VMM would hint: usable RAM minus everything
    /// the runner wrote and minus the kernel's `init_size` window.
    Correct,
    /// These zero-hint entries, as given (the runner does not check them:
    /// tests hand over wrong hints on purpose).
    Entries(Vec<Entry>),
    /// Raw bytes for the hint node.
    Raw(Vec<u8>),
}

/// A boot to run.
#[derive(Debug, Clone)]
pub struct Boot {
    /// Guest RAM size in bytes.
    pub memory: u64,
    /// Command line.
    pub cmdline: String,
    /// Where to load the protected-mode part; `None` = the image's
    /// `code32_start` (what Linux loaders do for a non-relocatable kernel).
    pub load_addr: Option<u64>,
    /// The e820 map; `None` = [`Boot::default_e820`].
    pub e820: Option<Vec<(u64, u64, u32)>>,
    /// The hint.
    pub hint: Hint,
    /// Flip one bit of the encoded hint's checksum field.
    pub corrupt_checksum: bool,
    /// Other setup_data nodes placed before the hint: `(type, data)`.
    pub extra_setup_data: Vec<(u32, Vec<u8>)>,
    /// Make the last setup_data node point back to the first.
    pub setup_data_loop: bool,
    /// Bytes written into guest memory after loading: `(gpa, bytes)`.
    pub pokes: Vec<(u64, Vec<u8>)>,
    /// Wall-clock limit for the run.
    pub timeout: Duration,
}

impl Boot {
    /// A boot with `memory` bytes of RAM, the default e820, a correct hint
    /// and the command line `console=ttyS0`.
    pub fn new(memory: u64) -> Boot {
        Boot {
            memory,
            cmdline: "console=ttyS0".into(),
            load_addr: None,
            e820: None,
            hint: Hint::Correct,
            corrupt_checksum: false,
            extra_setup_data: Vec::new(),
            setup_data_loop: false,
            pokes: Vec::new(),
            timeout: Duration::from_secs(60),
        }
    }

    /// Low RAM up to the EBDA, the EBDA and BIOS area reserved, then RAM
    /// from 1 MiB to the end.
    pub fn default_e820(&self) -> Vec<(u64, u64, u32)> {
        use layout::*;
        vec![
            (0, LOW_RAM_END, E820_RAM),
            (LOW_RAM_END, 0xa_0000 - LOW_RAM_END, E820_RESERVED),
            (0xf_0000, 0x1_0000, E820_RESERVED),
            (HIGH_RAM, self.memory - HIGH_RAM, E820_RAM),
        ]
    }

    /// The zero ranges a correct VMM hints for this boot: low RAM above
    /// what the runner wrote, and high RAM above the kernel's `init_size`
    /// window (rounded up to 2 MiB).
    pub fn correct_ranges(&self, load: u64, init_size: u64) -> Vec<Entry> {
        use layout::*;
        let high = (load + init_size).next_multiple_of(2 << 20);
        let mut v = vec![Entry::zeroed(
            LOW_WRITTEN_END,
            (LOW_RAM_END & !0xfff) - LOW_WRITTEN_END,
            12,
        )];
        if high < self.memory {
            v.push(Entry::zeroed(high, (self.memory - high) & !0xfff, 21));
        }
        v
    }

    /// Runs the probe in `kernel` and returns what happened.
    pub fn run(&self, kernel: &Path) -> Result<Outcome, Error> {
        run(self, kernel)
    }
}

/// How the guest stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The i8042 reset (0xfe to port 0x64): the probe's normal end.
    Reset,
    /// HLT with nothing to wake it.
    Hlt,
    /// Triple fault.
    Shutdown,
    /// The wall-clock limit passed.
    Timeout,
    /// KVM could not run the guest (entry failure, internal error, other
    /// exits): the description says which.
    Kvm(String),
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Everything written to COM1's transmit register.
    pub serial: String,
    /// Boot-timer markers in order, with the time since the vCPU started.
    pub markers: Vec<(u16, Duration)>,
    /// How the guest stopped.
    pub exit: Exit,
    /// The load address used.
    pub load_addr: u64,
    /// The image's `init_size`.
    pub init_size: u64,
    /// The hint entries handed over (empty for no hint or a raw hint).
    pub hint_entries: Vec<Entry>,
    /// Reads of guest-physical addresses no memory backs.
    pub unbacked_reads: u64,
}

impl Outcome {
    /// The verdict lines (`ZSPROBE: PASS …` / `ZSPROBE: FAIL …`); a correct
    /// probe prints exactly one.
    pub fn verdicts(&self) -> Vec<&str> {
        self.serial
            .lines()
            .filter(|l| l.starts_with("ZSPROBE: PASS") || l.starts_with("ZSPROBE: FAIL"))
            .collect()
    }

    /// The single verdict line, or `None` if there is not exactly one.
    pub fn verdict(&self) -> Option<&str> {
        match self.verdicts()[..] {
            [v] => Some(v),
            _ => None,
        }
    }

    /// Time from marker `from` to marker `to` (first occurrences).
    pub fn between(&self, from: u16, to: u16) -> Option<Duration> {
        let t = |id| self.markers.iter().find(|m| m.0 == id).map(|m| m.1);
        Some(t(to)?.saturating_sub(t(from)?))
    }
}

/// Why a run could not be done (as opposed to a probe FAIL).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// /dev/kvm is missing or unusable.
    #[error("cannot use /dev/kvm ({0}): the probe runner needs KVM; run on a machine with /dev/kvm readable and writable")]
    Kvm(#[source] kvm_ioctls::Error),
    /// A KVM ioctl failed while setting up the VM.
    #[error("KVM setup failed at {0}: {1}")]
    Setup(&'static str, #[source] kvm_ioctls::Error),
    /// Guest memory could not be allocated or written.
    #[error("guest memory: {0}")]
    Memory(String),
    /// The kernel file could not be opened.
    #[error("cannot open kernel {path}: {source} (build it with make probe)")]
    Kernel {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// linux-loader rejected the image.
    #[error("linux-loader rejected the bzImage: {0}")]
    Load(#[source] linux_loader::loader::Error),
    /// The configuration cannot be laid out.
    #[error("bad boot configuration: {0}")]
    Config(String),
    /// A hint could not be encoded.
    #[error("cannot encode hint: {0}")]
    Hint(zerohint::Error),
}

fn mem_err(e: impl std::fmt::Display) -> Error {
    Error::Memory(e.to_string())
}

fn segment(selector: u16, type_: u8, long: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: u8::from(!long),
        s: 1,
        l: u8::from(long),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Writes the GDT and the boot protocol's identity mapping (first GiB with
/// 2 MiB pages, like Firecracker).
fn write_cpu_tables(mem: &GuestMemoryMmap) -> Result<(), Error> {
    use layout::*;
    let gdt: [u64; 4] = [0, 0, 0x00af_9b00_0000_ffff, 0x00cf_9300_0000_ffff];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(*d, GuestAddress(GDT + 8 * i as u64))
            .map_err(mem_err)?;
    }
    mem.write_obj((PML4 + 0x1000) | 3, GuestAddress(PML4))
        .map_err(mem_err)?;
    mem.write_obj((PML4 + 0x2000) | 3, GuestAddress(PML4 + 0x1000))
        .map_err(mem_err)?;
    for i in 0..512u64 {
        mem.write_obj((i << 21) | 0x83, GuestAddress(PML4 + 0x2000 + 8 * i))
            .map_err(mem_err)?;
    }
    Ok(())
}

/// A hint node's bytes and the entries they encode (none for raw bytes).
type EncodedHint = (Vec<u8>, Vec<Entry>);

/// Encodes the hint node's bytes.
fn hint_bytes(boot: &Boot, load: u64, init_size: u64) -> Result<Option<EncodedHint>, Error> {
    let entries = match &boot.hint {
        Hint::Absent => return Ok(None),
        Hint::Raw(b) => return Ok(Some((b.clone(), Vec::new()))),
        Hint::Correct => boot.correct_ranges(load, init_size),
        Hint::Entries(v) => v.clone(),
    };
    let mut out = vec![0; zerohint::encoded_size(entries.len())];
    if let Err(e) = zerohint::encode_into(0, &entries, &mut out) {
        // Tests hand over invalid entries on purpose: encode them anyway,
        // with a correct checksum, so the probe's own validation is tested.
        if matches!(boot.hint, Hint::Correct) {
            return Err(Error::Hint(e));
        }
        encode_unchecked(&entries, &mut out);
    }
    Ok(Some((out, entries)))
}

/// Encodes entries without validating them (for hints that must fail).
fn encode_unchecked(entries: &[Entry], out: &mut [u8]) {
    out.fill(0);
    out[..8].copy_from_slice(&zerohint::MAGIC);
    out[8..10].copy_from_slice(&zerohint::VERSION.to_le_bytes());
    out[10..12].copy_from_slice(&(zerohint::HEADER_SIZE as u16).to_le_bytes());
    out[12..14].copy_from_slice(&(zerohint::ENTRY_SIZE as u16).to_le_bytes());
    out[16..20].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    for (e, c) in entries
        .iter()
        .zip(out[zerohint::HEADER_SIZE..].chunks_exact_mut(zerohint::ENTRY_SIZE))
    {
        c[0..8].copy_from_slice(&e.start.to_le_bytes());
        c[8..16].copy_from_slice(&e.length.to_le_bytes());
        c[16..20].copy_from_slice(&e.flags.to_le_bytes());
        c[20] = e.page_shift;
    }
    let crc = zerohint::crc32(out);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// Links the setup_data nodes from [`layout::SETUP_DATA`]; returns the
/// first node's address (0 for none).
fn write_setup_data(
    mem: &GuestMemoryMmap,
    nodes: &[(u32, Vec<u8>)],
    make_loop: bool,
) -> Result<u64, Error> {
    use layout::*;
    let mut addrs = Vec::new();
    let mut at = SETUP_DATA;
    for (_, data) in nodes {
        addrs.push(at);
        at = (at + 16 + data.len() as u64).next_multiple_of(16);
    }
    if at > CMDLINE {
        return Err(Error::Config(format!(
            "setup_data needs {} bytes, only {} fit below the command line",
            at - SETUP_DATA,
            CMDLINE - SETUP_DATA
        )));
    }
    for (i, (kind, data)) in nodes.iter().enumerate() {
        let next = match addrs.get(i + 1) {
            Some(&a) => a,
            None if make_loop => addrs[0],
            None => 0,
        };
        let a = addrs[i];
        mem.write_obj(next, GuestAddress(a)).map_err(mem_err)?;
        mem.write_obj(*kind, GuestAddress(a + 8)).map_err(mem_err)?;
        mem.write_obj(data.len() as u32, GuestAddress(a + 12))
            .map_err(mem_err)?;
        mem.write_slice(data, GuestAddress(a + 16))
            .map_err(mem_err)?;
    }
    Ok(addrs.first().copied().unwrap_or(0))
}

struct Watchdog {
    done: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

extern "C" fn kick(_: libc::c_int) {}

impl Watchdog {
    /// Interrupts KVM_RUN on this thread (EINTR) once `timeout` passed:
    /// a hung guest must end the run, not the test suite. The signal is
    /// repeated because one sent between two KVM_RUN calls is lost.
    fn start(timeout: Duration) -> Watchdog {
        // SAFETY: installs a no-op handler without SA_RESTART so the
        // signal interrupts the KVM_RUN ioctl; the handler is async-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = kick as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
        }
        // SAFETY: pthread_self has no preconditions.
        let target = unsafe { libc::pthread_self() };
        let done = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let (d, f) = (done.clone(), fired.clone());
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            while !d.load(Ordering::Acquire) {
                if start.elapsed() >= timeout {
                    f.store(true, Ordering::Release);
                    // SAFETY: the target thread outlives this one: it
                    // joins it in Drop before returning.
                    unsafe { libc::pthread_kill(target, libc::SIGUSR2) };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Watchdog {
            done,
            fired,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(boot: &Boot, kernel: &Path) -> Result<Outcome, Error> {
    use layout::*;
    if boot.memory < 4 << 20 || !boot.memory.is_multiple_of(4096) {
        return Err(Error::Config(format!(
            "memory {:#x} must be a multiple of 4 KiB and at least 4 MiB",
            boot.memory
        )));
    }
    let kvm = Kvm::new().map_err(Error::Kvm)?;
    let vm = kvm
        .create_vm()
        .map_err(|e| Error::Setup("KVM_CREATE_VM", e))?;
    let size =
        usize::try_from(boot.memory).map_err(|_| Error::Config("memory too large".into()))?;
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size)]).map_err(mem_err)?;
    let host = mem.get_host_address(GuestAddress(0)).map_err(mem_err)?;
    // Transparent huge pages, like the VMM's default backing: a 4 GiB
    // guest's first read of every 4 KiB page would otherwise dominate the
    // scan time. Advice only; its failure changes nothing but speed.
    // SAFETY: the range is exactly `mem`'s own anonymous mapping.
    unsafe { libc::madvise(host.cast(), size, libc::MADV_HUGEPAGE) };
    let region = kvm_userspace_memory_region {
        slot: 0,
        flags: 0,
        guest_phys_addr: 0,
        memory_size: boot.memory,
        userspace_addr: host as u64,
    };
    // SAFETY: the region is `mem`'s mapping, which outlives the VM (both
    // are dropped at the end of this function, the VM first).
    unsafe { vm.set_user_memory_region(region) }
        .map_err(|e| Error::Setup("KVM_SET_USER_MEMORY_REGION", e))?;

    let mut file = File::open(kernel).map_err(|source| Error::Kernel {
        path: kernel.display().to_string(),
        source,
    })?;
    let loaded = BzImage::load(&mem, boot.load_addr.map(GuestAddress), &mut file, None)
        .map_err(Error::Load)?;
    let mut hdr = loaded
        .setup_header
        .ok_or_else(|| Error::Config("linux-loader returned no setup header".into()))?;
    let load = loaded.kernel_load.0;
    let init_size = u64::from(hdr.init_size);

    write_cpu_tables(&mem)?;

    let cmdline = boot.cmdline.as_bytes();
    let max = { hdr.cmdline_size } as usize;
    if cmdline.len() > max || cmdline.contains(&0) {
        return Err(Error::Config(format!(
            "command line must be at most {max} bytes without NULs"
        )));
    }
    mem.write_slice(cmdline, GuestAddress(CMDLINE))
        .map_err(mem_err)?;
    mem.write_obj(0u8, GuestAddress(CMDLINE + cmdline.len() as u64))
        .map_err(mem_err)?;

    let mut nodes = boot.extra_setup_data.clone();
    let hint = hint_bytes(boot, load, init_size)?;
    let mut hint_entries = Vec::new();
    if let Some((mut bytes, entries)) = hint {
        if boot.corrupt_checksum && bytes.len() >= 28 {
            bytes[24] ^= 1;
        }
        nodes.push((zerohint::SETUP_TYPE, bytes));
        hint_entries = entries;
    }
    let first_node = write_setup_data(&mem, &nodes, boot.setup_data_loop)?;

    let e820 = boot.e820.clone().unwrap_or_else(|| boot.default_e820());
    let mut params = boot_params::default();
    hdr.type_of_loader = 0xff;
    hdr.boot_flag = 0xaa55;
    hdr.cmd_line_ptr = CMDLINE as u32;
    hdr.setup_data = first_node;
    params.hdr = hdr;
    if e820.len() > params.e820_table.len() {
        return Err(Error::Config(format!(
            "{} e820 entries, at most 128",
            e820.len()
        )));
    }
    params.e820_entries = e820.len() as u8;
    for (slot, &(addr, size, kind)) in params.e820_table.iter_mut().zip(&e820) {
        *slot = boot_e820_entry {
            addr,
            size,
            r#type: kind,
        };
    }
    mem.write_obj(params, GuestAddress(BOOT_PARAMS))
        .map_err(mem_err)?;
    for (gpa, bytes) in &boot.pokes {
        mem.write_slice(bytes, GuestAddress(*gpa))
            .map_err(mem_err)?;
    }

    let mut vcpu = vm
        .create_vcpu(0)
        .map_err(|e| Error::Setup("KVM_CREATE_VCPU", e))?;
    let cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(|e| Error::Setup("KVM_GET_SUPPORTED_CPUID", e))?;
    vcpu.set_cpuid2(&cpuid)
        .map_err(|e| Error::Setup("KVM_SET_CPUID2", e))?;
    let fpu = kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    };
    vcpu.set_fpu(&fpu)
        .map_err(|e| Error::Setup("KVM_SET_FPU", e))?;
    let mut sregs = vcpu
        .get_sregs()
        .map_err(|e| Error::Setup("KVM_GET_SREGS", e))?;
    sregs.gdt.base = GDT;
    sregs.gdt.limit = 4 * 8 - 1;
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cs = segment(0x10, 0xb, true);
    let data = segment(0x18, 0x3, false);
    (sregs.ds, sregs.es, sregs.fs, sregs.gs, sregs.ss) = (data, data, data, data, data);
    sregs.tr = kvm_segment {
        limit: 0xffff,
        type_: 0xb,
        present: 1,
        ..Default::default()
    };
    sregs.ldt = kvm_segment {
        limit: 0xffff,
        type_: 0x2,
        present: 1,
        ..Default::default()
    };
    sregs.cr0 = 0x8000_0011; // PG | ET | PE
    sregs.cr3 = PML4;
    sregs.cr4 = 0x20; // PAE
    sregs.efer = 0x500; // LMA | LME
    vcpu.set_sregs(&sregs)
        .map_err(|e| Error::Setup("KVM_SET_SREGS", e))?;
    let regs = kvm_bindings::kvm_regs {
        rflags: 2,
        rip: load + 0x200,
        rsi: BOOT_PARAMS,
        rsp: STACK,
        ..Default::default()
    };
    vcpu.set_regs(&regs)
        .map_err(|e| Error::Setup("KVM_SET_REGS", e))?;

    let mut serial = Vec::new();
    let mut markers = Vec::new();
    let mut dlab = false;
    let mut unbacked_reads = 0;
    let watchdog = Watchdog::start(boot.timeout);
    let start = Instant::now();
    let exit = loop {
        match vcpu.run() {
            Ok(VcpuExit::IoOut(port, data)) => match (port, data) {
                (0x3f8, [b]) if !dlab => serial.push(*b),
                (0x3fb, [lcr]) => dlab = lcr & 0x80 != 0,
                (boottimer::TIMER_PORT, [a, b, c, d]) => {
                    if let Some(id) =
                        boottimer::marker::from_port_value(u32::from_le_bytes([*a, *b, *c, *d]))
                    {
                        markers.push((id, start.elapsed()));
                    }
                }
                (0x64, [0xfe]) => break Exit::Reset,
                _ => {}
            },
            Ok(VcpuExit::IoIn(port, data)) => {
                let v = match port {
                    0x3fd => 0x60, // LSR: transmitter empty
                    0x3f8..=0x3ff => 0,
                    _ => 0xff,
                };
                data.fill(v);
            }
            Ok(VcpuExit::MmioRead(_, data)) => {
                unbacked_reads += 1;
                data.fill(0xff);
            }
            Ok(VcpuExit::MmioWrite(..)) => {}
            Ok(VcpuExit::Hlt) => break Exit::Hlt,
            Ok(VcpuExit::Shutdown) => break Exit::Shutdown,
            Ok(VcpuExit::InternalError) => {
                let rip = vcpu.get_regs().map(|r| r.rip).unwrap_or(0);
                let (cr0, cr4, efer) = vcpu
                    .get_sregs()
                    .map(|s| (s.cr0, s.cr4, s.efer))
                    .unwrap_or_default();
                // SAFETY: after KVM_EXIT_INTERNAL_ERROR the `internal`
                // member of the run structure's exit union is the valid one.
                let (sub, n, data) = unsafe {
                    let i = &vcpu.get_kvm_run().__bindgen_anon_1.internal;
                    (i.suberror, i.ndata, i.data)
                };
                let data = &data[..(n as usize).min(data.len())];
                break Exit::Kvm(format!(
                    "internal error suberror {sub} at rip {rip:#x} (cr0 {cr0:#x} cr4 {cr4:#x} efer {efer:#x}), data {data:x?}"
                ));
            }
            Ok(other) => break Exit::Kvm(format!("{other:?}")),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                if watchdog.fired.load(Ordering::Acquire) {
                    break Exit::Timeout;
                }
            }
            Err(e) => break Exit::Kvm(format!("KVM_RUN: {e}")),
        }
    };
    drop(watchdog);
    Ok(Outcome {
        serial: String::from_utf8_lossy(&serial).into_owned(),
        markers,
        exit,
        load_addr: load,
        init_size,
        hint_entries,
        unbacked_reads,
    })
}
