//! Builds a ready-to-run VM from the `run` options: KVM, guest memory,
//! devices, boot state and the zero hint (Firecracker's builder split).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arch::boot::{self, BootParamsConfig, SetupData};
use devices::virtio::MmioBus;
use devices::{BootTimer, PioBus, SerialDevice};
use kvm_bindings::kvm_sregs;
use kvm_ioctls::VcpuFd;
use timeline::Timeline;
use vm_memory::GuestAddress;
use zerohint::Hint;

use crate::cli::{CpusConfig, RunArgs, SerialOpt};
use crate::device_manager::{self, DeviceList, DeviceManager, LegacyConfig, VirtioConfig};
use crate::guest::Entry;
pub use crate::guest::{GuestInputs, PreparedGuest};
use crate::guest_memory::{self, GuestRam, MemoryConfig, Tracked};
use crate::hint;
use crate::kernel::{self, Format, Kernel};
use crate::netplan::plan_nets;
use crate::vstate::{self, vcpu};

/// Everything that can stop a VM from being built; every message names the
/// problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad option value.
    #[error(transparent)]
    Cli(#[from] crate::cli::Error),
    /// Kernel image problem.
    #[error(transparent)]
    Kernel(#[from] kernel::Error),
    /// initramfs problem.
    #[error("cannot read initramfs {path}: {err}; check the --initramfs path")]
    Initramfs {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// KVM: the device, the VM, its memory slots and vCPUs.
    #[error(transparent)]
    Vstate(#[from] vstate::Error),
    /// Size exceeds host RAM.
    #[error("--memory size={size_mib}M exceeds this host's memory ({host_mib} MiB); choose a smaller size")]
    TooMuchMemory {
        /// Requested MiB.
        size_mib: u64,
        /// Host MiB.
        host_mib: u64,
    },
    /// Guest memory (options, host checks, mapping, tracking).
    #[error(transparent)]
    Ram(#[from] guestmem::Error),
    /// Size not page aligned.
    #[error("--memory size={0} is not a multiple of 4 KiB; round it to whole pages (e.g. 512M)")]
    UnalignedSize(u64),
    /// `--verify-hint` found non-zero memory in the hint.
    #[error("--verify-hint: {0}; refusing to boot with a false hint")]
    VerifyFailed(guestmem::Error),
    /// Attaching the devices.
    #[error(transparent)]
    Devices(#[from] device_manager::Error),
    /// Boot data.
    #[error(transparent)]
    Boot(#[from] boot::Error),
    /// Platform tables and entry state (crate::guest).
    #[error(transparent)]
    Platform(#[from] crate::guest::PlatformError),
    /// Memory write.
    #[error("writing guest memory: {0}")]
    Memory(#[from] vm_memory::GuestMemoryError),
    /// `--firmware` boot.
    #[error(transparent)]
    Firmware(#[from] crate::firmware::Error),
    /// Computing, publishing or freezing the hint (crate::hint).
    #[error(transparent)]
    Hint(#[from] crate::hint::Error),
    /// A `--net` plan (backend, tap, MAC).
    #[error(transparent)]
    Net(#[from] crate::netplan::Error),
    /// `--vsock` without the kernel backend.
    #[error("--vsock: {dev} does not exist; load the module (modprobe vhost_vsock) on the host", dev = devices::virtio::vhost::VHOST_VSOCK_DEV)]
    NoVhostVsock,
    /// `--test-corrupt-hint` deliberately hands the guest a false or broken
    /// hint; an operator must never get that by a typo or a copied command.
    #[error("--test-corrupt-hint is a test-only switch that gives the guest a false hint; set {}=1 in the environment of a test run to allow it", hint::TEST_SWITCH_ENV)]
    TestSwitchLocked,
}

/// Host RAM in bytes (MemTotal).
fn host_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Checked options, before anything heavy is done.
#[derive(Debug)]
pub struct Plan {
    /// vCPUs.
    pub cpus: CpusConfig,
    /// Memory.
    pub memory: MemoryConfig,
    /// Serial.
    pub serial: SerialOpt,
    /// `--vsock` (its device is in [`Opened::devices`] with the disks and
    /// nets; the phase listener needs the CID before the VM exists).
    pub vsock: Option<options::VsockConfig>,
}

/// What the boot vCPU enters: a kernel directly, or firmware that gets the
/// kernel over fw_cfg.
#[derive(Debug)]
pub enum Boot {
    /// `--kernel` without `--firmware`.
    Direct(Kernel),
    /// `--firmware` (with or without `--kernel`).
    Firmware(Box<crate::firmware::FirmwareBoot>),
}

/// What `plan` opened, handed to `build` as owned files so nothing is
/// opened twice: the boot images and the virtio devices' taps and disks.
pub struct Opened {
    /// The kernel or firmware (and its inputs).
    pub boot: Boot,
    /// The virtio devices.
    pub devices: DeviceList,
}

/// Parses and checks every option and input file; allocates nothing.
pub fn plan(args: &RunArgs) -> Result<(Plan, Opened), Error> {
    if args.test_corrupt_hint.is_some() && !hint::test_switches_unlocked() {
        return Err(Error::TestSwitchLocked);
    }
    let cpus = CpusConfig::parse(&args.cpus)?;
    let memory = options::memory(&args.memory)?;
    if !memory.size.is_multiple_of(4096) {
        return Err(Error::UnalignedSize(memory.size));
    }
    let serial = SerialOpt::parse(&args.serial)?;
    let disks = args
        .disk
        .iter()
        .map(|d| options::disk(d))
        .collect::<Result<Vec<_>, _>>()?;
    let nets = args
        .net
        .iter()
        .map(|n| options::net(n))
        .collect::<Result<Vec<_>, _>>()?;
    let vsock = args.vsock.as_deref().map(options::vsock).transpose()?;
    let count = disks.len() + nets.len() + usize::from(vsock.is_some());
    if count > devices::virtio::mmio::MAX_DEVICES {
        return Err(device_manager::Error::TooMany(count).into());
    }
    let nets = plan_nets(
        &nets,
        Path::new(devices::virtio::vhost::VHOST_NET_DEV).exists(),
    )?;
    if vsock.is_some() && !Path::new(devices::virtio::vhost::VHOST_VSOCK_DEV).exists() {
        return Err(Error::NoVhostVsock);
    }
    // Each tap and disk is opened here, once, so a bad one fails before
    // any memory is mapped; `build` attaches these.
    let devices = DeviceList::open(&VirtioConfig {
        disks: &disks,
        nets: &nets,
        vsock: vsock.as_ref(),
    })?;
    if let Some(host) = host_memory() {
        if memory.size > host {
            return Err(Error::TooMuchMemory {
                size_mib: memory.size >> 20,
                host_mib: host >> 20,
            });
        }
    }
    // Before anything is allocated: a shortage must be an error now, not a
    // SIGBUS when the guest first touches a page.
    // A named hugetlbfs file's own pages count: they are freed when it is
    // truncated before use.
    guestmem::check_backing_hugepages(&memory.backing, memory.size)?;
    let kernel = match (&args.firmware, &args.kernel) {
        (Some(fw), k) => Boot::Firmware(Box::new(crate::firmware::FirmwareBoot::open(
            fw,
            k.as_deref(),
            args.initramfs.as_deref(),
            args.firmware_hint,
            memory.prezero == guestmem::Prezero::Off,
            args.verify_hint,
        )?)),
        (None, Some(k)) => Boot::Direct(Kernel::open(k)?),
        (None, None) => return Err(kernel::Error::NotFound(PathBuf::from("(none)")).into()),
    };
    if let Some(p) = &args.initramfs {
        File::open(p).map_err(|err| Error::Initramfs {
            path: p.clone(),
            err,
        })?;
    }
    Ok((
        Plan {
            cpus,
            memory,
            serial,
            vsock,
        },
        Opened {
            boot: kernel,
            devices,
        },
    ))
}

/// A built VM, ready to start its vCPUs.
pub struct Vm {
    /// Keeps the VM (irqchip, memory slots, irqfds) alive until the vCPUs
    /// are gone; never read.
    #[allow(dead_code)]
    pub kvm_vm: vstate::Vm,
    /// vCPU file descriptors, index = APIC id.
    pub vcpus: Vec<VcpuFd>,
    /// Port-I/O devices.
    pub bus: Arc<PioBus>,
    /// MMIO devices (the virtio-mmio windows).
    pub mmio: Arc<MmioBus>,
    /// COM1.
    pub serial: Arc<Mutex<SerialDevice>>,
    /// Boot-timer port.
    pub timer: Arc<Mutex<BootTimer>>,
    /// Guest RAM.
    pub ram: GuestRam,
    /// The hint passed to the guest (before any test corruption).
    pub hint: Option<Hint>,
    /// Bytes checked by `--verify-hint`.
    pub verified_bytes: u64,
    /// How the kernel was entered (PVH carries no hint).
    pub format: Format,
    /// Stop flag shared with vCPU threads.
    pub stop: Arc<AtomicBool>,
    /// Boot vCPU's first KVM_RUN.
    pub first_run: Arc<OnceLock<Instant>>,
    /// Unclaimed port writes.
    pub unmapped: Arc<AtomicU64>,
    /// Device threads (I/O threads, tap RX, vhost call relays): stopped
    /// before guest RAM goes.
    pub workers: Vec<devices::virtio::Worker>,
}

/// Builds the VM, as a recipe of named steps (Firecracker's
/// `build_microvm_for_boot`): KVM first (cheap checks), then guest memory
/// (mapped, its layout read back once, registered as KVM slots), the
/// interrupt controllers, the devices, the vCPUs, the guest's boot data
/// with the hint, and the boot vCPU's entry state; records `memory_ready`
/// on `timeline`.
pub fn build(
    args: &RunArgs,
    plan: &Plan,
    opened: Opened,
    timeline: &mut Timeline,
) -> Result<Vm, Error> {
    let Opened {
        boot,
        devices: list,
    } = opened;
    let kvm_vm = vstate::Vm::create(&args.kvm_device)?;
    let vm_fd = kvm_vm.fd();

    let mut ram = guest_memory::create(&plan.memory)?;
    timeline.mark("memory_ready");
    let layout = guest_memory::layout(&ram);

    kvm_vm.setup_irqchip()?;
    kvm_vm.register_memory(&ram, &layout)?;

    // The stop flag is the VM's: COM1 gives up on an output nobody reads
    // once it is set (see SerialDevice::with_stop).
    let stop = Arc::new(AtomicBool::new(false));
    let acpi = args.acpi == crate::cli::OnOff::On;
    let mut devices = DeviceManager::with_legacy(
        vm_fd,
        &LegacyConfig {
            serial: &plan.serial,
            acpi,
            debugcon: args.debugcon.as_deref(),
        },
        stop.clone(),
    )?;
    devices.attach_virtio(vm_fd, &ram, list)?;
    let virtio_acpi = devices.acpi_devices();
    let cmdline = devices.cmdline(&args.cmdline, acpi);

    let vcpus = kvm_vm.create_vcpus(plan.cpus.boot)?;
    let base_sregs = vcpu::initial_sregs(&vcpus[0])?;
    let inputs = GuestInputs {
        initramfs: args.initramfs.as_deref(),
        cmdline: &cmdline,
        layout: &layout,
        cpus: plan.cpus.boot,
        corrupt: args.test_corrupt_hint,
        acpi,
        virtio: &virtio_acpi,
    };
    let guest = load_guest(&mut ram, boot, &inputs, base_sregs, &mut devices)?;
    vcpu::configure_boot(&vcpus[0], &guest)?;
    let verified_bytes = seal_hint(&mut ram, guest.hint.as_ref(), args.verify_hint)?;

    Ok(Vm {
        kvm_vm,
        vcpus,
        bus: Arc::new(devices.pio),
        mmio: Arc::new(devices.mmio),
        serial: devices.serial,
        timer: devices.timer,
        ram,
        hint: guest.hint,
        verified_bytes,
        format: guest.format,
        stop,
        first_run: Arc::new(OnceLock::new()),
        unmapped: Arc::new(AtomicU64::new(0)),
        workers: devices.workers,
    })
}

/// Writes the guest's boot data and publishes the hint: directly
/// ([`prepare_guest`], setup_data) or through firmware
/// ([`crate::firmware::prepare`], fw_cfg, whose device `devices`
/// attaches).
fn load_guest(
    ram: &mut GuestRam,
    boot: Boot,
    inputs: &GuestInputs<'_>,
    base_sregs: kvm_sregs,
    devices: &mut DeviceManager,
) -> Result<PreparedGuest, Error> {
    match boot {
        Boot::Direct(mut kernel) => prepare_guest(ram, &mut kernel, inputs, base_sregs),
        Boot::Firmware(mut fw) => {
            let (guest, fw_cfg) = crate::firmware::prepare(ram, &mut fw, inputs, base_sregs)?;
            devices.attach_fw_cfg(fw_cfg)?;
            Ok(guest)
        }
    }
}

/// `--verify-hint` re-reads every hinted byte (returns how many); then the
/// last check before any vCPU exists to run: nothing written through
/// vm-memory since the freeze (which only its dirty bitmap sees) lies in
/// the hint, else HintInvalidated and no boot.
fn seal_hint(ram: &mut GuestRam, hint: Option<&Hint>, verify: bool) -> Result<u64, Error> {
    let verified_bytes = match (hint, verify) {
        (Some(h), true) => ram.verify_zero(h).map_err(Error::VerifyFailed)?,
        _ => 0,
    };
    if hint.is_some() {
        ram.finalize_hint()?;
    }
    Ok(verified_bytes)
}

/// Writes everything the guest needs into `ram` — kernel, initramfs,
/// command line, MP table, page tables and GDT, then the hint (computed
/// from everything written so far, with the first MiB always excluded) as
/// setup_data and `boot_params` — and returns the entry state.
///
/// Every write goes through `ram`'s tracker. As a last line of defence the
/// hint is recomputed after the final writes and the boot is refused if it
/// changed.
pub fn prepare_guest(
    ram: &mut GuestRam,
    kernel: &mut Kernel,
    inputs: &GuestInputs<'_>,
    base_sregs: kvm_sregs,
) -> Result<PreparedGuest, Error> {
    // Guest memory contents. Every write below is recorded in `ram`
    // (explicitly, and by vm-memory's dirty bitmap as a second net).
    let k = kernel.load(ram.memory())?;
    ram.mark_written(k.load_addr, k.end - k.load_addr.0)?;
    // The kernel's working window (`init_size` from the load address:
    // decompression buffer, bss, early stack) is written by the guest
    // before it can read any hint, so it is never hinted.
    ram.mark_written(k.load_addr, k.footprint())?;
    // A relocatable bzImage runs (and writes init_size bytes) at its
    // runtime address, 16 MiB for a stock kernel loaded at 1 MiB, not at
    // the load address: that window is never hinted either.
    if k.format == Format::BzImage {
        for (start, len) in boot::kernel_runtime_windows(&k.header, k.load_addr.0) {
            ram.mark_written(GuestAddress(start), len)?;
        }
    }
    let initrd = match &inputs.initramfs {
        Some(p) => {
            let data = std::fs::read(p).map_err(|err| Error::Initramfs {
                path: p.to_path_buf(),
                err,
            })?;
            let at =
                boot::initrd_addr(inputs.layout, data.len() as u64, k.initrd_addr_max(), k.end)?;
            ram.write_tracked(&data, at)?;
            Some((at, data.len() as u64))
        }
        None => None,
    };
    let cmdline_len = boot::write_cmdline(&mut Tracked(ram), inputs.cmdline, k.cmdline_size())?;
    let entry = match k.format {
        // PVH: no boot_params, so no setup_data and no hint.
        Format::Elf => Entry::Pvh {
            entry: k.entry,
            initrd,
            rsdp_in_start_info: false,
        },
        _ => Entry::LongMode { entry: k.entry },
    };
    let state = crate::guest::write_platform(ram, inputs, entry, base_sregs)?;
    if k.format == Format::Elf {
        return Ok(PreparedGuest {
            regs: state.regs,
            sregs: state.sregs,
            hint: None,
            format: Format::Elf,
        });
    }

    // The hint: everything not written so far, published as the first
    // setup_data entry (transport a), then frozen.
    let published = hint::publish(ram, hint::Mode::Zero, inputs.corrupt, |ram, blob| {
        let setup: Vec<SetupData> = blob
            .map(|b| SetupData {
                kind: zerohint::SETUP_TYPE,
                data: b.to_vec(),
            })
            .into_iter()
            .collect();
        let mut mem = Tracked(ram);
        let setup_addr = boot::write_setup_data(&mut mem, &setup)?;
        let params = boot::build_boot_params(&BootParamsConfig {
            header: Some(k.header),
            layout: inputs.layout,
            cmdline_len,
            initrd,
            setup_data: setup_addr,
            acpi_rsdp: state.rsdp.unwrap_or(0),
        })?;
        boot::write_boot_params(&mut mem, &params)?;
        Ok::<(), Error>(())
    })?;
    let hint = published.zero;

    Ok(PreparedGuest {
        regs: state.regs,
        sregs: state.sregs,
        hint,
        format: Format::BzImage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::CorruptHint;
    use std::io::Write;
    use vm_memory::Bytes;

    const MIB: u64 = 1 << 20;

    fn ram(size: u64) -> GuestRam {
        guest_memory::create(&MemoryConfig {
            size,
            backing: guestmem::Backing::Anonymous { thp: false },
            ..Default::default()
        })
        .unwrap()
    }

    /// Fills all RAM with `pattern` (untracked, when `fill`), prepares a
    /// guest with a kernel and an initramfs, and returns the RAM and hint.
    fn prepare_over(
        pattern: Option<u8>,
        corrupt: Option<CorruptHint>,
        size: u64,
    ) -> (GuestRam, Hint) {
        let mut ram = ram(size);
        if let Some(pattern) = pattern {
            fill(&ram, pattern);
        }
        let hint = prepare_on(&mut ram, corrupt);
        (ram, hint)
    }

    /// Fills all RAM with `pattern`, untracked (as if it had always been
    /// there).
    fn fill(ram: &GuestRam, pattern: u8) {
        let fill = vec![pattern; MIB as usize];
        for &(start, len) in guest_memory::layout(ram).regions() {
            for off in (0..len).step_by(MIB as usize) {
                guest_memory::write_untracked(ram, &fill, GuestAddress(start.0 + off)).unwrap();
            }
        }
    }

    /// Prepares a guest (kernel, initramfs, boot data, hint) on `ram`.
    fn prepare_on(ram: &mut GuestRam, corrupt: Option<CorruptHint>) -> Hint {
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let kimg = kernel::test_image(0x20f, 1, &payload);
        let mut k = Kernel::open(kimg.path()).unwrap();
        let mut initrd = tempfile::NamedTempFile::new().unwrap();
        initrd
            .write_all(
                &(0..1_000_000u32)
                    .map(|i| (i * 13 + 1) as u8)
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        let layout = guest_memory::layout(ram);
        let p = prepare_guest(
            ram,
            &mut k,
            &GuestInputs {
                initramfs: Some(initrd.path()),
                cmdline: "console=ttyS0 reboot=k panic=1",
                layout: &layout,
                cpus: 4,
                corrupt,
                acpi: true,
                // A DSDT device, so the hint test covers its table bytes.
                virtio: &[arch::acpi::VirtioMmio {
                    base: 0xd000_0000,
                    size: 0x1000,
                    gsi: 5,
                }],
            },
            kvm_sregs::default(),
        )
        .unwrap();
        p.hint.expect("hint=on (the default) gives a hint")
    }

    /// Bytes in hinted ranges that differ from `pattern`.
    fn changed_in_hint(ram: &GuestRam, hint: &Hint, pattern: u8) -> u64 {
        let mut changed = 0;
        let mut buf = vec![0u8; MIB as usize];
        for e in &hint.entries {
            let mut at = e.start;
            while at < e.start + e.length {
                let n = (e.start + e.length - at).min(MIB) as usize;
                ram.memory()
                    .read_slice(&mut buf[..n], GuestAddress(at))
                    .unwrap();
                changed += buf[..n].iter().filter(|&&b| b != pattern).count() as u64;
                at += n as u64;
            }
        }
        changed
    }

    /// The security property: nothing the VMM writes lands in the hint.
    /// RAM is pre-filled with two different patterns so a write of any
    /// value is visible in at least one run.
    #[test]
    fn nothing_written_is_hinted() {
        let size = 64 * MIB;
        for pattern in [0xaa, 0x55] {
            let (ram, hint) = prepare_over(Some(pattern), None, size);
            assert_eq!(changed_in_hint(&ram, &hint, pattern), 0);
            // The hint is not trivially empty: all RAM but the first MiB,
            // the kernel and the initramfs.
            let expect_min = size - MIB - 2 * MIB;
            assert!(hint.total_bytes() >= expect_min, "{}", hint.total_bytes());
            // And the VMM did write: the kernel is at 1 MiB.
            let b: u8 = ram.memory().read_obj(GuestAddress(0x10_0000 + 1)).unwrap();
            assert_eq!(b, 10);
        }
    }

    /// Above 3 GiB the hint follows the e820 map around the MMIO hole and
    /// never claims anything outside usable RAM.
    #[test]
    fn hint_stays_inside_e820_ram() {
        let size = 3 * 1024 * MIB + 64 * MIB;
        let (_ram, hint) = prepare_over(None, None, size);
        let ram_map: Vec<_> = arch::boot::e820_map(&arch::layout::RamLayout::new(size))
            .into_iter()
            .filter(|e| e.kind == arch::boot::E820_RAM)
            .collect();
        for e in &hint.entries {
            assert!(
                ram_map
                    .iter()
                    .any(|r| e.start >= r.addr && e.start + e.length <= r.addr + r.size),
                "{e:x?} outside e820 RAM"
            );
        }
        assert!(hint
            .entries
            .iter()
            .any(|e| e.start == arch::layout::MMIO_GAP_END));
        assert!(hint.total_bytes() >= size - 3 * MIB);
    }

    /// The check above can fail: the dirty self-test writes into the hint.
    #[test]
    fn dirty_self_test_is_caught() {
        let (ram, hint) = prepare_over(Some(0), Some(CorruptHint::Dirty), 64 * MIB);
        assert_eq!(changed_in_hint(&ram, &hint, 0), 1);
    }

    /// The hint reaches the guest as the first setup_data entry.
    #[test]
    fn hint_is_in_setup_data() {
        let (ram, hint) = prepare_over(Some(0), None, 64 * MIB);
        let m = ram.memory();
        let bp = arch::layout::ZERO_PAGE_START;
        let sd: u64 = m.read_obj(GuestAddress(bp + 0x250)).unwrap();
        let kind: u32 = m.read_obj(GuestAddress(sd + 8)).unwrap();
        let len: u32 = m.read_obj(GuestAddress(sd + 12)).unwrap();
        assert_eq!(kind, zerohint::SETUP_TYPE);
        let mut blob = vec![0u8; len as usize];
        m.read_slice(&mut blob, GuestAddress(sd + 16)).unwrap();
        assert_eq!(blob, hint.encode().unwrap());
        let (ram2, _) = prepare_over(Some(0), Some(CorruptHint::Checksum), 64 * MIB);
        let mut blob2 = vec![0u8; len as usize];
        ram2.memory()
            .read_slice(&mut blob2, GuestAddress(sd + 16))
            .unwrap();
        assert_ne!(blob, blob2);
        assert!(zerohint::decode(&blob2).is_err());
    }
    /// docs/security.md section 4: building every virtio device (a disk,
    /// a net device on a real tap, vhost-vsock where the host has it) and
    /// preparing the guest writes no byte the hint covers: RAM pre-filled
    /// with a pattern, devices attached to a real KVM VM exactly as
    /// `build` does (irqfds, ioeventfds, I/O and RX threads), then the
    /// guest's boot data and hint; every hinted byte must still be the
    /// pattern (and every queue's notify is an ioeventfd). The
    /// control shows the check sees device writes: the guest (register
    /// writes through the MMIO bus, rings by plain stores) asks the disk
    /// for a read into a hinted page, and that page changes. SKIPs without
    /// /dev/kvm or root (the tap lives in a network namespace of its own).
    #[test]
    fn virtio_devices_write_nothing_before_boot() {
        use devices::virtio::mmio::{reg, MMIO_BASE};
        if !Path::new("/dev/kvm").exists() {
            testsupport::skip("KVM", "no /dev/kvm (modprobe kvm_intel or kvm_amd)");
            return;
        }
        // SAFETY: plain libc query.
        if unsafe { libc::geteuid() } != 0 {
            testsupport::skip("TAP", "the tap in a network namespace needs root");
            return;
        }
        let ns = format!("zsnet-hint-{}", std::process::id());
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["netns", "add", &ns]) {
            testsupport::skip("TAP", "`ip netns add` failed (install iproute2)");
            return;
        }
        struct Del(String);
        impl Drop for Del {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &self.0])
                    .status();
            }
        }
        let _del = Del(ns.clone());
        assert!(ip(&["-n", &ns, "tuntap", "add", "zst0", "mode", "tap"]));
        assert!(ip(&["-n", &ns, "link", "set", "zst0", "up"]));

        let pattern = 0xa5u8;
        let mut img = tempfile::NamedTempFile::new().unwrap();
        img.write_all(&[0x11u8; 64 * 512]).unwrap();
        img.flush().unwrap();
        let vsock = Path::new(devices::virtio::vhost::VHOST_VSOCK_DEV)
            .exists()
            .then(|| options::vsock("cid=77").unwrap());
        if vsock.is_none() {
            testsupport::skip(
                "VHOST_VSOCK",
                "the vsock part: no /dev/vhost-vsock here (modprobe vhost_vsock)",
            );
        }
        let disks = vec![options::disk(&format!("path={}", img.path().display())).unwrap()];
        let nets = plan_nets(
            &[options::net("tap=zst0").unwrap()],
            Path::new(devices::virtio::vhost::VHOST_NET_DEV).exists(),
        )
        .unwrap();
        let kvm_vm = vstate::Vm::create(Path::new("/dev/kvm")).unwrap();
        let vm_fd = kvm_vm.fd();
        let mut ram = ram(64 * MIB);
        fill(&ram, pattern);
        let layout = guest_memory::layout(&ram);
        kvm_vm.setup_irqchip().unwrap();
        kvm_vm.register_memory(&ram, &layout).unwrap();
        let nsfile = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
        let mut dm = DeviceManager::with_legacy(
            vm_fd,
            &LegacyConfig {
                serial: &SerialOpt::Off,
                acpi: false,
                debugcon: None,
            },
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                use std::os::fd::AsRawFd;
                // SAFETY: this thread only.
                let r = unsafe { libc::setns(nsfile.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0);
                let list = DeviceList::open(&VirtioConfig {
                    disks: &disks,
                    nets: &nets,
                    vsock: vsock.as_ref(),
                })
                .unwrap();
                dm.attach_virtio(vm_fd, &ram, list).unwrap()
            })
            .join()
            .unwrap()
        });
        assert_eq!(dm.virtio_count(), 2 + usize::from(vsock.is_some()));
        // Every queue's QueueNotify is taken by an ioeventfd (the disk's
        // one queue, the net device's two): KVM refuses a second one with
        // the same address and datamatch. Queue 2 of the net device has
        // none, the control.
        let notify = |window: u64, q: u32| {
            let evt = vmm_sys_util::eventfd::EventFd::new(0).unwrap();
            let at = kvm_ioctls::IoEventAddress::Mmio(MMIO_BASE + window + reg::QUEUE_NOTIFY);
            vm_fd
                .register_ioevent(&evt, &at, q)
                .map(|_| vm_fd.unregister_ioevent(&evt, &at, q).unwrap())
                .map_err(|e| e.errno())
        };
        assert_eq!(notify(0, 0), Err(libc::EEXIST), "virtio-blk queue 0");
        assert_eq!(notify(0x1000, 0), Err(libc::EEXIST), "virtio-net RX");
        assert_eq!(notify(0x1000, 1), Err(libc::EEXIST), "virtio-net TX");
        assert_eq!(notify(0x1000, 2), Ok(()), "control: no queue 2");
        let hint = prepare_on(&mut ram, None);
        assert_eq!(
            changed_in_hint(&ram, &hint, pattern),
            0,
            "a device wrote hinted RAM"
        );
        // Control: the guest reads sector 0 of the disk into a hinted page.
        let buf = 40 * MIB;
        assert!(hint
            .entries
            .iter()
            .any(|e| e.start <= buf && buf + 4096 <= e.start + e.length));
        let (desc, avail, used, hdr) = (
            48 * MIB,
            48 * MIB + 0x1000,
            48 * MIB + 0x2000,
            48 * MIB + 0x3000,
        );
        let put =
            |a: u64, b: &[u8]| guest_memory::write_untracked(&ram, b, GuestAddress(a)).unwrap();
        put(avail, &[0; 0x3000]);
        let d = |a: u64, l: u32, f: u16, n: u16| {
            [
                a.to_le_bytes().as_slice(),
                &l.to_le_bytes(),
                &f.to_le_bytes(),
                &n.to_le_bytes(),
            ]
            .concat()
        };
        put(
            desc,
            &[d(hdr, 16, 1, 1), d(buf, 512, 3, 2), d(hdr + 16, 1, 2, 0)].concat(),
        );
        put(hdr, &[0u8; 17]);
        put(avail, &[0, 0, 1, 0, 0, 0]);
        let w = |off: u64, v: u32| assert!(dm.mmio.write(MMIO_BASE + off, &v.to_le_bytes()));
        w(reg::STATUS, 3);
        w(reg::DRIVER_FEATURES_SEL, 1);
        w(reg::DRIVER_FEATURES, 1);
        w(reg::STATUS, 0xb);
        w(reg::QUEUE_NUM, 16);
        w(reg::QUEUE_DESC_LOW, desc as u32);
        w(reg::QUEUE_AVAIL_LOW, avail as u32);
        w(reg::QUEUE_USED_LOW, used as u32);
        w(reg::QUEUE_READY, 1);
        w(reg::STATUS, 0xf);
        // The guest's own stores (rings, header) are in the hint too.
        let before = changed_in_hint(&ram, &hint, pattern);
        w(reg::QUEUE_NOTIFY, 0);
        let mut got = [0u8; 512];
        ram.memory()
            .read_slice(&mut got, GuestAddress(buf))
            .unwrap();
        assert_eq!(got, [0x11; 512], "the read reached the hinted page");
        assert_eq!(
            changed_in_hint(&ram, &hint, pattern) - before,
            512,
            "the check must see the device's write"
        );
        for wk in &mut dm.workers {
            assert!(wk.stop(std::time::Duration::from_secs(2)));
        }
        assert_eq!(dm.mmio.stop_devices(std::time::Duration::from_secs(1)), 0);
    }
}
