//! `zerostart launch`: starts QEMU, cloud-hypervisor or Firecracker,
//! unpatched, on pre-zeroed memory with the zero hint (docs/launch.md).
//!
//! The launcher leases guest RAM from `zerostart pool` (or prefaults a
//! memfd; Firecracker allocates its own), adds the VMM's memory arguments,
//! publishes the hint (through [`crate::hint::publish`], like zerostart's
//! own boot paths) by the transport the boot path has: a sealed memfd the
//! VMM serves over fw_cfg to the firmware on a UEFI boot, the hint's text
//! on the kernel command line on a direct boot ([`vmm::Boot`]), runs the VMM
//! as its child with stdio untouched and signals forwarded, passes its exit
//! status through, and returns the region when the VMM exits.
//!
//! Lifetime of the lease (why it is safe when the launcher is SIGKILLed):
//! the lease lives as long as its pool connection is open anywhere. The
//! VMM inherits that connection (and the region's fd), so the lease ends
//! only when both the launcher and the VMM are gone; the kernel tears down
//! a dying process's mappings before it closes its files, so by then no
//! mapping of the region is left and the pool may scrub and re-lease it.
//! A killed launcher must not leave the VMM running unsupervised (nor the
//! lease held by it forever): the VMM gets `PR_SET_PDEATHSIG(SIGKILL)`.
//! That alone would not be enough (it is cleared by a set-uid exec and
//! races with the pool seeing the connection close), which is why the
//! connection's lifetime, not the signal, decides. Last net: the pool's
//! holder scan retires a region some process still maps or holds.

pub mod dropin;
pub mod firecracker;
pub mod layout;
pub mod memory;
pub mod vmm;

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use hostmem::PageSize;
use zerohint::Hint;

use crate::hint::CorruptHint;
use crate::hint::{self, HintSource};
use memory::{GuestRam, Source};
use options::OptionList;
use vmm::VmmKind;

/// `zerostart launch` options.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// The VMM to start.
    #[arg(long, value_enum)]
    pub vmm: VmmKind,
    /// Guest memory: size=S,source=pool[:SOCKET]|prefault|none[,hugepages=on|off]
    /// [,hugepage_size=2M|1G][,hint=on|off][,threads=N].
    #[arg(long, value_name = "size=S,source=...")]
    pub memory: String,
    /// Firmware: OVMF.fd (QEMU) or CLOUDHV.fd (cloud-hypervisor) built by
    /// firmware/build.sh with ZeroStartPkg, which turns the hint into the
    /// EFI table the guest kernel reads.
    #[arg(long, value_name = "PATH")]
    pub firmware: Option<PathBuf>,
    /// The VMM binary (default: qemu-system-x86_64, cloud-hypervisor or firecracker on PATH).
    #[arg(long, value_name = "PATH")]
    pub vmm_binary: Option<PathBuf>,
    /// Print the exact command line and the hint ranges; start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the launcher's phases (memory_ready, vmm_spawned, exit) as JSON.
    #[arg(long, value_name = "PATH.json")]
    pub timeline: Option<PathBuf>,
    /// Test only: break the hint (checksum) or plant a byte inside it
    /// (dirty). Refused unless ZEROSTART_TEST_SWITCHES=1.
    #[arg(long, hide = true, value_enum)]
    pub test_corrupt_hint: Option<CorruptHint>,
    /// Test only: fill every byte of guest RAM the hint leaves out with a
    /// pattern before the VMM starts, so a consumer that trusted more than
    /// the hint would see it. Refused unless ZEROSTART_TEST_SWITCHES=1.
    #[arg(long, hide = true)]
    pub test_poison_unhinted: bool,
    /// How long to wait for a clean pool region (or for the pool to
    /// answer) before --pool-fallback: 0, 500ms, 5s, 1m.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_wait)]
    pub pool_wait: Duration,
    /// When the pool cannot lease within --pool-wait: prefault (a memfd
    /// the launcher populates, as source=prefault: a slower start, the hint
    /// still holds), none (a memfd the guest faults in) or fail. The
    /// default starts the VM: a fleet must not lose VMs to an empty pool.
    #[arg(long, value_enum, default_value = "prefault")]
    pub pool_fallback: PoolFallback,
    /// Test only: no PR_SET_PDEATHSIG, so the VMM outlives a killed
    /// launcher (as a set-uid VMM would). Refused unless
    /// ZEROSTART_TEST_SWITCHES=1.
    #[arg(long, hide = true)]
    pub test_no_pdeathsig: bool,
    /// A raw disk image as the VMM's virtio-blk: path=PATH[,readonly=on]
    /// (repeatable; QEMU virtio-blk-pci with cache=none, cloud-hypervisor
    /// --disk).
    #[arg(long, value_name = "path=PATH[,readonly=on]")]
    pub disk: Vec<String>,
    /// A tap as the VMM's virtio-net: tap=NAME[,mac=MAC][,vhost=on|off]
    /// (repeatable; vhost defaults to on when /dev/vhost-net exists).
    #[arg(long, value_name = "tap=NAME[,mac=MAC][,vhost=on|off]")]
    pub net: Vec<String>,
    /// vsock: cid=N (QEMU vhost-vsock-pci) or cid=N,socket=PATH
    /// (cloud-hypervisor's hybrid vsock); the launcher records the guest's
    /// boot phases (port 5300) into --timeline.
    #[arg(long, value_name = "cid=N[,socket=PATH]")]
    pub vsock: Option<String>,
    /// The VMM's own arguments, after `--`.
    #[arg(last = true, value_name = "VMM ARGS")]
    pub vmm_args: Vec<String>,
    /// Become the VMM (exec) instead of running it as a child: the
    /// drop-in ([`dropin`]), whose caller (libvirt) supervises QEMU by
    /// pid and must keep the VM when it restarts itself (so no
    /// PR_SET_PDEATHSIG either). No timeline, no exit line.
    #[arg(skip)]
    pub exec: bool,
    /// The VMM arguments load the firmware themselves (a libvirt
    /// `<loader>`): a firmware boot carries the hint over fw_cfg without
    /// `--firmware`. Firmware without ZeroStartPkg ignores it, so no hint
    /// is taken; only the drop-in sets this.
    #[arg(skip)]
    pub firmware_in_args: bool,
    /// QEMU's RAM wiring as a management tool asked for it (the drop-in).
    #[arg(skip)]
    pub qemu_ram: vmm::QemuRam,
}

/// What the launcher does when the pool cannot lease (`--pool-fallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolFallback {
    /// A memfd the launcher prefaults (source=prefault).
    Prefault,
    /// A memfd the guest faults in (source=none).
    None,
    /// No VM: the launcher exits [`EXIT_LAUNCHER`].
    Fail,
}

impl PoolFallback {
    /// The launcher's own memory to fall back to (`None`: fail).
    fn source(self) -> Option<Source> {
        match self {
            PoolFallback::Prefault => Some(Source::Prefault),
            PoolFallback::None => Some(Source::None),
            PoolFallback::Fail => None,
        }
    }
}

/// Exit status of a launch the launcher itself could not start (bad
/// arguments, no memory, no hint): distinct from the VMM's own statuses,
/// which are passed through (QEMU and cloud-hypervisor exit 1 on their
/// errors). As `docker run` and `env` do: 126 the VMM binary cannot be
/// executed, 127 it is not there.
pub const EXIT_LAUNCHER: i32 = 125;
/// The VMM binary exists but cannot be executed.
pub const EXIT_VMM_NOT_EXECUTABLE: i32 = 126;
/// The VMM binary is not there.
pub const EXIT_VMM_NOT_FOUND: i32 = 127;

/// `--pool-wait`: `0`, `500ms`, `5s`, `1m` (seconds without a unit).
pub fn parse_wait(s: &str) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a duration; use e.g. 0, 500ms, 5s or 1m");
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(bad()),
    }
}

/// Launcher errors; each names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad `--memory`.
    #[error("--memory: {0}")]
    BadMemory(String),
    /// A `--memory` list the common option grammar refuses (not
    /// key=value, unknown or repeated key).
    #[error(transparent)]
    Options(#[from] options::Error),
    /// A user argument that conflicts with what the launcher adds.
    #[error("{vmm} argument '{arg}' conflicts with zerostart launch: {why}; remove it")]
    Conflict {
        /// VMM.
        vmm: &'static str,
        /// The argument.
        arg: String,
        /// Why.
        why: String,
    },
    /// cloud-hypervisor without `--firmware`.
    #[error("cloud-hypervisor can carry the hint only to a kernel it boots directly (--kernel vmlinux: the hint goes on --cmdline) or through --firmware CLOUDHV.fd (make firmware) with a --disk the firmware boots the kernel from (an EFI system partition, as cloud images have); pass one of them, or hint=off in --memory")]
    ChvNeedsFirmware,
    /// QEMU with neither `--firmware` nor `-kernel`.
    #[error("QEMU can carry the hint only to a kernel it boots directly (-kernel: the hint goes on its command line) or through --firmware OVMF.fd built with ZeroStartPkg (make firmware), which turns the fw_cfg hint into the EFI table the guest reads; pass one of them, or hint=off in --memory")]
    QemuNeedsFirmware,
    /// A boot path given a hint transport it does not have (a bug in the
    /// launcher, never the user's input).
    #[error("internal: {0}; please report this")]
    HintTransport(String),
    /// The Firecracker config or command line.
    #[error(transparent)]
    Firecracker(#[from] firecracker::FcError),
    /// A file the VMM loads into guest RAM that the launcher must measure.
    #[error("cannot read {opt} {path}: {err}; check the path")]
    BootFile {
        /// The VMM option.
        opt: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// A direct-boot kernel whose load addresses the launcher cannot know
    /// (QEMU loads a multiboot image and its modules elsewhere).
    #[error("-kernel {0} is neither a bzImage nor an ELF kernel, so the launcher cannot tell which guest memory QEMU writes for it; give a bzImage (or --memory ...,hint=off)")]
    UnknownKernelFormat(PathBuf),
    /// The firmware is not an ELF.
    #[error("{0} is not an ELF image; cloud-hypervisor takes CLOUDHV.fd (a PVH ELF), not OVMF.fd")]
    ChvFirmwareNotElf(PathBuf),
    /// The VMM binary cannot be run.
    #[error("cannot run {path}: {err}; install it or pass --vmm-binary PATH")]
    VmmBinary {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: String,
    },
    /// Firmware file.
    #[error("cannot read --firmware {path}: {err}; pass the path of OVMF.fd or CLOUDHV.fd (make firmware)")]
    Firmware {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// The pool refused or is unreachable.
    #[error("pool at {socket}: {err}")]
    Pool {
        /// Socket.
        socket: PathBuf,
        /// Cause.
        err: String,
    },
    /// The leased region is smaller than the guest.
    #[error("the pool's region has {region} bytes, less than size={size}; start the pool with --region-size of at least the guest's size")]
    RegionTooSmall {
        /// Region bytes.
        region: u64,
        /// Asked.
        size: u64,
    },
    /// Creating or populating the memory.
    #[error("guest memory: {0}")]
    Memory(String),
    /// Publishing the hint.
    #[error(transparent)]
    Hint(#[from] hint::Error),
    /// Test switch without the environment unlock.
    #[error("--test-* switches give the guest a false hint or an unsupervised VMM; set {}=1 in the environment of a test run to allow them", hint::TEST_SWITCH_ENV)]
    TestSwitchLocked,
    /// Starting the VMM.
    #[error("starting {path}: {err}; check --vmm-binary")]
    Spawn {
        /// Binary.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// A `--net` value.
    #[error(transparent)]
    Net(#[from] crate::netplan::Error),
    /// A device the chosen VMM cannot take as given.
    #[error("{0}")]
    BadDevice(String),
    /// Writing the timeline.
    #[error("writing --timeline {path}: {err}; check the path")]
    Timeline {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
}

impl Error {
    /// The launcher's exit status for this error ([`EXIT_LAUNCHER`],
    /// or 126/127 for a VMM binary that cannot run).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Spawn { err, .. } if err.kind() == std::io::ErrorKind::NotFound => {
                EXIT_VMM_NOT_FOUND
            }
            Error::Spawn { .. } => EXIT_VMM_NOT_EXECUTABLE,
            Error::VmmBinary { .. } => EXIT_VMM_NOT_FOUND,
            _ => EXIT_LAUNCHER,
        }
    }

    /// A pool that cannot lease now (unreachable, no clean region, a
    /// region too small): what --pool-wait and --pool-fallback are for.
    fn pool_unavailable(&self) -> bool {
        matches!(self, Error::Pool { .. } | Error::RegionTooSmall { .. })
    }
}

/// `--memory` parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOpts {
    /// Guest RAM bytes.
    pub size: u64,
    /// Where it comes from.
    pub source: Source,
    /// Page size: 2M or 1G hugetlb, or 4K shmem (`hugepages=off`).
    pub page: PageSize,
    /// Whether to publish a hint.
    pub hint: bool,
    /// Prefault threads (0 = all CPUs).
    pub threads: usize,
}

const MEMORY_KEYS: &[&str] = &[
    "size",
    "source",
    "hugepages",
    "hugepage_size",
    "hint",
    "threads",
];

impl MemoryOpts {
    /// Parses `size=4G,source=pool[:SOCKET]|prefault|none,...` with the
    /// same key=value splitter and size parser as `zerostart run`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let bad = |m: String| Error::BadMemory(m);
        let mut size = None;
        let mut source = None;
        let mut huge = true;
        let mut page = PageSize::Size2M;
        let mut hint = true;
        let mut threads = 0;
        let on_off = |k: &str, v: &str| options::on_off(k, v).map_err(|e| bad(e.to_string()));
        let list = OptionList::parse("memory", s, MEMORY_KEYS, "size=4G,source=pool")?;
        for (k, v) in list.items() {
            match k {
                "size" => size = Some(hostmem::parse_size(v).map_err(|e| bad(format!("{k}={e}")))?),
                "source" => {
                    source = Some(match v {
                        "prefault" => Source::Prefault,
                        "none" => Source::None,
                        "pool" => Source::Pool(options::DEFAULT_POOL_SOCKET.into()),
                        p if p.starts_with("pool:") && p.len() > 5 => Source::Pool(p[5..].into()),
                        _ => {
                            return Err(bad(format!(
                                "source='{v}' is invalid; use pool, pool:SOCKET, prefault or none"
                            )))
                        }
                    })
                }
                "hugepages" => huge = on_off(k, v)?,
                "hugepage_size" => {
                    page = match v.parse::<PageSize>() {
                        Ok(p) if p.is_huge() => p,
                        _ => {
                            return Err(bad(format!(
                            "hugepage_size='{v}' is invalid; use 2M or 1G (hugepages=off for 4K)"
                        )))
                        }
                    }
                }
                "hint" => hint = on_off(k, v)?,
                "threads" => {
                    threads = v.parse().map_err(|_| {
                        bad(format!(
                            "threads='{v}' is invalid; a thread count, 0 = all CPUs"
                        ))
                    })?
                }
                _ => return Err(list.unknown(k).into()),
            }
        }
        let size = size.ok_or_else(|| bad("size= is required, e.g. size=4G,source=pool".into()))?;
        let source = source
            .ok_or_else(|| bad("source= is required: pool[:SOCKET], prefault or none".into()))?;
        let page = if huge { page } else { PageSize::Size4K };
        if size % page.bytes() != 0 {
            return Err(bad(format!(
                "size={size} is not a multiple of the {page} page size; round it"
            )));
        }
        Ok(MemoryOpts {
            size,
            source,
            page,
            hint,
            threads,
        })
    }
}

/// The hint of an external VMM: ranges derived from its layout, frozen by
/// sealing the memfd it is served from; the test plant goes through a
/// mapping of the region.
struct External<'a> {
    ranges: Vec<(u64, u64)>,
    /// For a hint on the kernel command line: the characters it may take.
    text_budget: Option<usize>,
    recompute: &'a dyn Fn() -> Result<Vec<(u64, u64)>, Error>,
    ram: &'a [layout::RamRange],
    region: Option<&'a GuestRam>,
    file: Option<File>,
}

impl HintSource for External<'_> {
    fn zero_hint(&mut self) -> Result<Option<Hint>, hint::Error> {
        if self.ranges.is_empty() {
            return Ok(None);
        }
        let mut h = Hint::zeroed_from_ranges(&self.ranges, 12)?;
        // On the command line: drop the smallest ranges until the text
        // fits (docs/hint-abi.md "Text form"); none at all if none fits.
        if let Some(budget) = self.text_budget {
            if !h.fit_text(budget) {
                return Ok(None);
            }
        }
        Ok(Some(h))
    }

    fn freeze(&mut self) -> Result<Option<Hint>, hint::Error> {
        if let Some(f) = &self.file {
            memory::seal(f).map_err(|e| hint::Error::External(e.to_string()))?;
        }
        self.ranges = (self.recompute)().map_err(|e| hint::Error::External(e.to_string()))?;
        self.zero_hint()
    }

    fn plant(&mut self, addr: u64, byte: u8) -> Result<(), hint::Error> {
        let (Some(region), Some(off)) = (self.region, layout::file_offset(self.ram, addr)) else {
            return Err(hint::Error::External(format!(
                "cannot plant at {addr:#x}: not in the region"
            )));
        };
        region
            .fill(off, 1, byte)
            .map_err(|e| hint::Error::External(e.to_string()))
    }
}

/// Parses the launcher's `--disk`, `--net` and `--vsock` with zerostart/// Parses the launcher's `--disk`, `--net` and `--vsock` with zerostart
/// run's grammar (options crate) and the same MAC/vhost rule.
pub fn device_opts(a: &LaunchArgs) -> Result<vmm::DeviceOpts, Error> {
    let disks = a
        .disk
        .iter()
        .map(|d| options::disk(d))
        .collect::<Result<Vec<_>, _>>()?;
    let nets = a
        .net
        .iter()
        .map(|n| options::net(n))
        .collect::<Result<Vec<_>, _>>()?;
    let nets = crate::netplan::plan_nets(
        &nets,
        std::path::Path::new(devices::virtio::vhost::VHOST_NET_DEV).exists(),
    )?;
    let vsock = a.vsock.as_deref().map(options::launch_vsock).transpose()?;
    Ok(vmm::DeviceOpts { disks, nets, vsock })
}

/// What the launch will do, decided from its arguments before any memory
/// is taken: each of them parsed once, here.
struct Plan<'a> {
    a: &'a LaunchArgs,
    driver: &'static dyn vmm::Driver,
    opts: MemoryOpts,
    devices: vmm::DeviceOpts,
    binary: PathBuf,
    /// cloud-hypervisor's `--firmware`, read for its layout.
    fw_image: Vec<u8>,
    /// The boot path: decides the hint's transport.
    boot: vmm::Boot,
    /// On a firmware boot: fw_cfg, or an SMBIOS string where the binary
    /// has no fw_cfg (the probe's answer).
    channel: vmm::FirmwareChannel,
}

/// Where the VMM finds guest RAM: each file once the memory is taken.
struct Binding {
    files: Vec<vmm::MemFile>,
    hugepage_bytes: Option<u64>,
}

impl Binding {
    /// What a dry run shows and the layout is computed with: the layout
    /// does not depend on where guest RAM comes from. `sizes`: the guest
    /// bytes of each file (one per guest NUMA node the drop-in serves, or
    /// per pool region of a lease of several).
    fn placeholder(opts: &MemoryOpts, sizes: &[u64]) -> Binding {
        Binding {
            files: sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| vmm::MemFile {
                    path: vmm::numbered("/proc/self/fd/REGION_FD", i, sizes.len()),
                    offset: 0,
                    size,
                })
                .collect(),
            hugepage_bytes: opts.page.is_huge().then(|| opts.page.bytes()),
        }
    }

    /// The files the VMM inherits (none: Firecracker).
    fn of(ram: Option<&GuestRam>, size: u64) -> Binding {
        let files = ram.map(GuestRam::files).unwrap_or_default();
        Binding {
            files: match files.as_slice() {
                [] => vec![vmm::MemFile {
                    path: String::new(),
                    offset: 0,
                    size,
                }],
                _ => files
                    .iter()
                    .map(|f| vmm::MemFile {
                        path: format!("/proc/self/fd/{}", f.fd.as_raw_fd()),
                        offset: f.offset,
                        size: f.len,
                    })
                    .collect(),
            },
            hugepage_bytes: ram
                .and_then(|r| r.parts().first())
                .and_then(|r| r.hugepage_bytes()),
        }
    }
}

impl<'a> Plan<'a> {
    /// Step 1: every argument checked, nothing taken yet.
    fn new(a: &'a LaunchArgs) -> Result<Plan<'a>, Error> {
        let test_switch =
            a.test_corrupt_hint.is_some() || a.test_poison_unhinted || a.test_no_pdeathsig;
        if test_switch && !hint::test_switches_unlocked() {
            return Err(Error::TestSwitchLocked);
        }
        let driver = a.vmm.driver();
        let opts = MemoryOpts::parse(&a.memory)?;
        if !driver.takes_memory() {
            if !matches!(opts.source, Source::None) {
                return Err(Error::BadMemory(format!(
                    "source={}: Firecracker allocates its own guest memory and cannot map a region at boot (docs/launch.md, Firecracker); use source=none",
                    opts.source.name()
                )));
            }
            if a.test_poison_unhinted {
                return Err(Error::BadMemory(
                    "--test-poison-unhinted needs a region the launcher holds; Firecracker has none"
                        .into(),
                ));
            }
        }
        let binary = a
            .vmm_binary
            .clone()
            .unwrap_or_else(|| PathBuf::from(a.vmm.default_binary()));
        let fw_err = |p: &PathBuf| {
            let path = p.clone();
            move |err| Error::Firmware { path, err }
        };
        let fw_image = match (&a.firmware, a.vmm) {
            (Some(p), VmmKind::CloudHypervisor) => std::fs::read(p).map_err(fw_err(p))?,
            (Some(p), _) => {
                File::open(p).map_err(fw_err(p))?;
                Vec::new()
            }
            (None, _) => Vec::new(),
        };
        let boot = driver.boot(&a.vmm_args, a.firmware.is_some() || a.firmware_in_args);
        // What the binary can carry to firmware: asked before anything is
        // taken, in a dry run too; without --firmware there is none to ask
        // about (the layout names what is missing).
        let channel = match a.firmware {
            Some(_) => driver.probe(&binary, boot, opts.hint)?,
            None => vmm::FirmwareChannel::FwCfg,
        };
        Ok(Plan {
            a,
            driver,
            opts,
            devices: device_opts(a)?,
            binary,
            fw_image,
            boot,
            channel,
        })
    }

    /// [`Binding::placeholder`] for this guest's regions.
    fn placeholder_binding(&self) -> Binding {
        Binding::placeholder(&self.opts, &self.a.qemu_ram.part_sizes(self.opts.size))
    }

    /// The carrier of a hint that is not known yet: the placeholder a dry
    /// run and the layout name.
    fn placeholder(&self) -> vmm::Carrier {
        use vmm::{Boot, Carrier, FirmwareChannel};
        match (self.opts.hint, self.boot, self.channel) {
            (false, _, _) => Carrier::None,
            (true, Boot::Uefi, FirmwareChannel::FwCfg) => {
                Carrier::FwCfg("/proc/self/fd/HINT_FD".into())
            }
            (true, Boot::Uefi, FirmwareChannel::Smbios) => Carrier::Smbios("HINT_TEXT".into()),
            (true, Boot::Direct, _) => Carrier::Text("HINT_TEXT".into()),
        }
    }

    /// The VMM's arguments and guest layout: the one place they are built.
    fn args(
        &self,
        mem: &Binding,
        hint: vmm::Carrier,
        vmm_config: Option<String>,
    ) -> Result<vmm::Built, Error> {
        let inp = vmm::Inputs {
            size: self.opts.size,
            mem: mem.files.clone(),
            hugepage_bytes: mem.hugepage_bytes,
            hint,
            firmware: self.a.firmware.clone(),
            firmware_in_args: self.a.firmware_in_args,
            qemu_ram: self.a.qemu_ram.clone(),
            devices: self.devices.clone(),
            vmm_config,
        };
        self.driver.build(&self.a.vmm_args, &inp, &self.fw_image)
    }

    /// The hint of LAYOUT's ranges, fitted to the command line on a
    /// direct boot (None: it is off, or no range fits).
    fn text_hint(&self, layout: &vmm::Built) -> Result<Option<Hint>, Error> {
        let mut src = External {
            ranges: layout.hint_ranges.clone(),
            text_budget: layout.text_budget,
            recompute: &|| Ok(vec![]),
            ram: &layout.ram,
            region: None,
            file: None,
        };
        src.zero_hint().map_err(Error::Hint)
    }
}

/// Step 2, a dry run: the VMM's command line as it will be run, with the
/// descriptors the launcher would open named as placeholders; a hint on
/// the command line is shown as it will be (the layout does not depend on
/// the memory, so the text is known already).
fn dry_run(plan: &Plan<'_>, layout: vmm::Built) -> Result<i32, Error> {
    let a = plan.a;
    let text = match (plan.opts.hint, layout.text_budget) {
        (true, Some(_)) => Some(plan.text_hint(&layout)?),
        _ => None,
    };
    let carrier = match &text {
        Some(Some(h)) => {
            let t = zerohint::encode_text(&h.encode().map_err(|e| Error::Hint(e.into()))?);
            plan.placeholder()
                .with_text(t)
                .unwrap_or(vmm::Carrier::None)
        }
        Some(None) => vmm::Carrier::None,
        None => plan.placeholder(),
    };
    // The files a lease would bring: several pool regions for a VMM that
    // maps several (the pool's region size asked now), else as planned.
    let pool = match &plan.opts.source {
        Source::Pool(sock) => Some(pool::client::status(sock)),
        _ => None,
    };
    let pieces = match &pool {
        Some(Ok(st)) => piece_sizes(plan.opts.size, st, plan.driver.max_pieces()),
        _ => None,
    };
    let built = match (&text, &pieces) {
        (_, Some(sizes)) => plan.args(
            &Binding::placeholder(&plan.opts, sizes),
            carrier.clone(),
            None,
        )?,
        (Some(_), None) => plan.args(&plan.placeholder_binding(), carrier.clone(), None)?,
        (None, None) => layout,
    };
    let line: Vec<String> = std::iter::once(plan.binary.display().to_string())
        .chain(built.args.iter().cloned())
        .map(|s| shell_quote(&s))
        .collect();
    println!("{}", line.join(" "));
    if a.vmm == VmmKind::Firecracker {
        // CONFIG_FD is the launcher's sealed copy of the config: what
        // Firecracker will read from it.
        let cfg = firecracker::FcConfig::parse(&vmm::firecracker_config(&a.vmm_args, &carrier)?)?;
        println!(
            "# CONFIG_FD: the --config-file with mem_size_mib={} and boot_args={}",
            cfg.mem_size_mib(),
            shell_quote(cfg.boot_args().unwrap_or_default())
        );
    }
    let opts = &plan.opts;
    println!(
        "# memory: {} bytes, source={}{}; REGION_FD and HINT_FD are descriptors the launcher opens and the VMM inherits",
        opts.size,
        opts.source.name(),
        match &opts.source {
            Source::Pool(s) => format!(" ({})", s.display()),
            _ => String::new(),
        }
    );
    println!("# {}", vmm_binary_check(&plan.binary)?);
    if let Some(st) = pool {
        println!(
            "# {}",
            pool_check(st, opts.size, plan.driver.max_pieces(), plan.a)
        );
    }
    if !opts.hint {
        println!("# hint: off");
        return Ok(0);
    }
    let ranges: Vec<(u64, u64)> = match &text {
        Some(Some(h)) => h.entries.iter().map(|e| (e.start, e.length)).collect(),
        Some(None) => vec![],
        None => built.hint_ranges.clone(),
    };
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let via = match plan.placeholder() {
        vmm::Carrier::Smbios(_) => format!(
            "in an SMBIOS OEM string ({}...), the binary has no fw_cfg",
            zerohint::TEXT_PREFIX
        ),
        vmm::Carrier::Text(_) => {
            format!("on the kernel command line ({}...)", zerohint::TEXT_PREFIX)
        }
        _ => format!("over fw_cfg {}", zerohint::FW_CFG_NAME),
    };
    println!(
        "# boot: {}; hint {via}: {} ranges, {} bytes",
        built.boot.name(),
        ranges.len(),
        total
    );
    for (s, l) in &ranges {
        println!("#   [{s:#x}, {:#x}) {} MiB", s + l, l >> 20);
    }
    Ok(0)
}

/// A dry run's check of the VMM binary: found and executable (on PATH
/// when it is a bare name), else the error a real launch would end with.
fn vmm_binary_check(binary: &std::path::Path) -> Result<String, Error> {
    // `which` finds a bare name on PATH and checks a path as given, both
    // as a shell would (an executable file), so the dry run and exec agree.
    let path = which::which(binary).map_err(|e| Error::VmmBinary {
        path: binary.to_path_buf(),
        err: match e {
            which::Error::CannotFindBinaryPath if binary.components().count() == 1 => {
                "not found (on PATH)".to_string()
            }
            which::Error::CannotFindBinaryPath => {
                "not found, or not an executable file".to_string()
            }
            e => e.to_string(),
        },
    })?;
    Ok(format!("vmm binary: {}", path.display()))
}

/// The guest bytes of each pool region a lease of `size` would take for a
/// VMM that maps up to `max_pieces` files, by the pool's own rule
/// ([`pool::fit`]) over its clean regions, or over all of them when too
/// few are clean now (None: one region, or no `max_pieces` of them hold
/// it).
fn piece_sizes(size: u64, st: &pool::proto::Status, max_pieces: usize) -> Option<Vec<u64>> {
    let p = pool::fit::fit(&st.free_regions(true), size, max_pieces)
        .or_else(|| pool::fit::fit(&st.free_regions(false), size, max_pieces))?;
    (p.len() > 1).then(|| p.iter().map(|x| x.1).collect())
}

/// A dry run's word on the pool (its `status`, asked once): what it has
/// now and what the launch would do with it (it leases nothing).
fn pool_check(
    st: Result<pool::proto::Status, pool::Error>,
    size: u64,
    max_pieces: usize,
    a: &LaunchArgs,
) -> String {
    let fallback = match a.pool_fallback.source() {
        None => "fail".to_string(),
        Some(to) => format!("fall back to source={}", to.name()),
    };
    let st = match st {
        Err(e) => {
            return format!(
                "pool: {e}; the launch would wait {:?} (--pool-wait), then {fallback}",
                a.pool_wait
            )
        }
        Ok(st) => st,
    };
    let sizes = st.region_sizes();
    let clean: usize = sizes.iter().map(|c| c.clean).sum();
    let what = match sizes.as_slice() {
        [one] => format!("regions of {} bytes", one.bytes),
        _ => format!(
            "regions ({})",
            sizes
                .iter()
                .map(|c| format!("{} of {} bytes, {} clean", c.regions, c.bytes, c.clean))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    let Some(whole) = pool::fit::fit(&st.free_regions(false), size, max_pieces) else {
        return match max_pieces {
            1 => format!("pool: {what}, none as large as size={size}; the launch would {fallback}"),
            n => format!(
                "pool: {what}, no {n} of them as large as size={size}; the launch would {fallback}"
            ),
        };
    };
    let clean_regions = st.free_regions(true);
    let now = pool::fit::fit(&clean_regions, size, max_pieces);
    let lease = match now.as_ref().unwrap_or(&whole).len() {
        1 => "a lease".to_string(),
        n => format!("a lease of {n} regions"),
    };
    format!(
        "pool: {clean} of {} {what} clean, {} pages; {}",
        st.regions,
        st.page,
        match now {
            Some(p) => format!(
                "{lease} would be granted now ({} bytes held)",
                p.iter().map(|&(i, _)| clean_regions[i].1).sum::<u64>()
            ),
            None => format!(
                "{} clean: the launch would wait up to {:?}, then {fallback}",
                if clean == 0 { "none" } else { "too few" },
                a.pool_wait
            ),
        }
    )
}

/// Step 3: the guest's phases. QEMU's vhost-vsock-pci is the kernel's
/// vhost-vsock (AF_VSOCK, this VM's CID only); cloud-hypervisor's hybrid
/// vsock connects to `<socket>_5300`. Listening before the VMM exists, so
/// no line is missed; a listener that cannot start costs the phases, not
/// the VM.
fn listen_for_phases(plan: &Plan<'_>, start: Instant) -> Option<crate::phases::PhaseListener> {
    let v = plan.devices.vsock.as_ref()?;
    match (plan.a.vmm, &v.socket) {
        (VmmKind::CloudHypervisor, Some(s)) => {
            crate::phases::PhaseListener::unix(&crate::phases::chv_listen_path(s), start)
        }
        _ => crate::phases::PhaseListener::vsock(v.cid, start),
    }
    .map_err(|e| eprintln!("zerostart launch: warning: {e}"))
    .ok()
}

/// Step 4: guest RAM, leased from the pool or prefaulted; Firecracker
/// allocates its own (checked in [`Plan::new`]).
///
/// A pool that cannot lease is asked again until `--pool-wait` has passed,
/// then `--pool-fallback` decides: a memfd of the launcher's (zero as the
/// kernel hands it out, so the hint stays honest; one warning line names
/// why) or no VM. Returns the region and the source it came from.
fn take_memory(plan: &Plan<'_>) -> Result<(Option<GuestRam>, Source), Error> {
    let o = &plan.opts;
    if !plan.driver.takes_memory() {
        return Ok((None, o.source.clone()));
    }
    // One region, or one per guest NUMA node (all or none).
    let sizes = plan.a.qemu_ram.part_sizes(o.size);
    let nodes = plan.a.qemu_ram.host_nodes();
    let pieces = plan.driver.max_pieces();
    let deadline = Instant::now() + plan.a.pool_wait;
    loop {
        match GuestRam::acquire(&o.source, &sizes, &nodes, o.page, o.threads, pieces) {
            Ok(r) => return Ok((Some(r), o.source.clone())),
            Err(e) if e.pool_unavailable() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) if e.pool_unavailable() => {
                let Some(to) = plan.a.pool_fallback.source() else {
                    return Err(e);
                };
                eprintln!(
                    "zerostart launch: warning: {e}; after --pool-wait {:?}, falling back to source={} (--pool-fallback)",
                    plan.a.pool_wait,
                    to.name()
                );
                let r = GuestRam::acquire(&to, &sizes, &nodes, o.page, o.threads, pieces)?;
                return Ok((Some(r), to));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A launch's outcome for the pool it asked for memory
/// (docs/fleet.md, "Launch metrics"): `None` when no pool was asked.
fn outcome(asked: &Source, used: &Source) -> Option<pool::proto::Outcome> {
    use pool::proto::Outcome;
    match (asked, used) {
        (Source::Pool(_), Source::Pool(_)) => Some(Outcome::Leased),
        (Source::Pool(_), Source::Prefault) => Some(Outcome::FallbackPrefault),
        (Source::Pool(_), Source::None) => Some(Outcome::FallbackNone),
        _ => None,
    }
}

/// Reports a launch to the pool at `socket` on a new connection (not a
/// lease: a fallback, a pass-through, a failure). Without `retry`, one try
/// now: a pool that is not there is not counted. With `retry` (a launcher
/// that waits for its VMM), a pool that is not there now is asked again
/// every second on a thread until [`Reporter::finish`] (at the VMM's exit)
/// makes the last try, so a pool restarted meanwhile still counts the
/// launch. A refusal (an older daemon, a bad report) is one note line.
pub(crate) fn report_to_pool(
    socket: PathBuf,
    r: pool::proto::LaunchReport,
    retry: bool,
) -> Option<Reporter> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let attempt = move || {
        let mut last = !retry;
        loop {
            match pool::client::report(&socket, &r) {
                Ok(()) => return,
                Err(pool::Error::Connect { .. }) if !last => {
                    last = stopped.recv_timeout(Duration::from_secs(1))
                        != Err(std::sync::mpsc::RecvTimeoutError::Timeout);
                }
                Err(pool::Error::Connect { .. }) => return,
                Err(e) => return report_note(&e),
            }
        }
    };
    if !retry {
        attempt();
        return None;
    }
    match std::thread::Builder::new()
        .name("pool-report".into())
        .spawn(attempt)
    {
        Ok(thread) => Some(Reporter { stop, thread }),
        Err(e) => {
            eprintln!("zerostart launch: note: launch not counted on the pool's metrics: cannot start a thread: {e}");
            None
        }
    }
}

/// A launch report still being delivered ([`report_to_pool`] with retry).
pub(crate) struct Reporter {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Reporter {
    /// The last try (if not delivered yet), then done.
    fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

fn report_note(e: &pool::Error) {
    eprintln!("zerostart launch: note: launch not counted on the pool's metrics: {e}");
}

/// Reports a started launch that asked a pool for memory: a lease on its
/// own connection (now: the pool answered a moment ago), a fallback on a
/// new one (retried while the VMM runs when `retry`).
fn report_started(
    plan: &Plan<'_>,
    used: &Source,
    region: Option<&GuestRam>,
    ready_s: f64,
    retry: bool,
) -> Option<Reporter> {
    let Source::Pool(socket) = &plan.opts.source else {
        return None;
    };
    let outcome = outcome(&plan.opts.source, used)?;
    let r = pool::proto::LaunchReport {
        vmm: plan.a.vmm.pool_label(),
        outcome,
        bytes: plan.opts.size,
        memory_ready_s: Some(ready_s),
    };
    match region.and_then(|r| r.lease()) {
        Some(lease) => {
            if let Err(e) = lease.report(&r) {
                report_note(&e);
            }
            None
        }
        None => report_to_pool(socket.clone(), r, retry),
    }
}

/// The hint as it went out: what the VMM inherits to carry it.
struct Sent {
    published: Option<hint::Published>,
    carrier: vmm::Carrier,
    /// The sealed memfd served over fw_cfg.
    file: Option<File>,
    /// Firecracker's rewritten `--config-file`, sealed like the fw_cfg blob.
    vmm_config: Option<File>,
}

impl Sent {
    fn config_path(&self) -> Option<String> {
        self.vmm_config
            .as_ref()
            .map(|f| format!("/proc/self/fd/{}", f.as_raw_fd()))
    }
}

/// Step 5: the hint, published (a test corruption included) by the boot
/// path's transport: a memfd the VMM serves over fw_cfg, or its text on
/// the kernel command line. Frozen by re-deriving the layout, which must
/// come out the same.
fn publish_hint(
    plan: &Plan<'_>,
    layout: &vmm::Built,
    region: Option<&GuestRam>,
) -> Result<Sent, Error> {
    let a = plan.a;
    if let (true, Some(r)) = (a.test_poison_unhinted, region) {
        poison_unhinted(r, &layout.ram, &layout.hint_ranges)?;
    }
    let recompute = || {
        plan.args(&plan.placeholder_binding(), plan.placeholder(), None)
            .map(|b| b.hint_ranges)
    };
    let mut src = External {
        ranges: if plan.opts.hint {
            layout.hint_ranges.clone()
        } else {
            vec![]
        },
        text_budget: layout.text_budget,
        recompute: &recompute,
        ram: &layout.ram,
        region,
        file: None,
    };
    let placeholder = plan.placeholder();
    let mut text = None;
    let published = match plan.opts.hint {
        false => None,
        true => Some(hint::publish(
            &mut src,
            hint::Mode::Zero,
            a.test_corrupt_hint,
            |s: &mut External<'_>, blob| {
                match (blob, &placeholder) {
                    (Some(b), vmm::Carrier::FwCfg(_)) => s.file = Some(memory::hint_memfd(b)?),
                    (Some(b), c) => text = c.with_text(zerohint::encode_text(b)),
                    (None, _) => {}
                }
                Ok::<(), Error>(())
            },
        )?),
    };
    let file = src.file.take();
    let carrier = match (&file, text) {
        (Some(f), _) => vmm::Carrier::FwCfg(format!("/proc/self/fd/{}", f.as_raw_fd())),
        (None, Some(c)) => c,
        (None, None) => vmm::Carrier::None,
    };
    // Firecracker reads the hint in its config file: the launcher's copy,
    // sealed like the fw_cfg blob, is the --config-file it gets.
    let vmm_config = match a.vmm {
        VmmKind::Firecracker => {
            let f = memory::hint_memfd(vmm::firecracker_config(&a.vmm_args, &carrier)?.as_bytes())?;
            memory::seal(&f)?;
            Some(f)
        }
        _ => None,
    };
    Ok(Sent {
        published,
        carrier,
        file,
        vmm_config,
    })
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=,./:[]+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Child pid for the signal forwarder (0 before the VMM exists).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// Signals forwarded to the VMM.
const FORWARDED: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
];

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

fn sigset(sigs: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Runs `zerostart launch`; returns the exit code to pass on. A recipe of
/// named steps, like `builder::build`.
pub fn run(a: &LaunchArgs, start: Instant) -> Result<i32, Error> {
    let plan = Plan::new(a)?;
    // Argument checks and layout before any memory is taken.
    let layout = plan.args(&plan.placeholder_binding(), plan.placeholder(), None)?;
    if a.dry_run {
        return dry_run(&plan, layout);
    }
    let listener = listen_for_phases(&plan, start);
    let (region, source) = match take_memory(&plan) {
        Ok(taken) => taken,
        Err(e) => {
            // --pool-fallback fail: no VM. The drop-in (exec) starts QEMU
            // unchanged instead and reports that itself.
            if let (true, false, Source::Pool(socket)) =
                (e.pool_unavailable(), a.exec, &plan.opts.source)
            {
                let r = pool::proto::LaunchReport {
                    vmm: a.vmm.pool_label(),
                    outcome: pool::proto::Outcome::Failed,
                    bytes: plan.opts.size,
                    memory_ready_s: None,
                };
                report_to_pool(socket.clone(), r, false);
            }
            return Err(e);
        }
    };
    let memory_ready = Instant::now();
    let ready_s = timeline::ms_since(start, memory_ready) / 1000.0;
    let sent = publish_hint(&plan, &layout, region.as_ref())?;
    let built = plan.args(
        &Binding::of(region.as_ref(), plan.opts.size),
        sent.carrier.clone(),
        sent.config_path(),
    )?;
    let hint_ready = Instant::now();
    let parts = region.as_ref().map(GuestRam::parts).unwrap_or_default();
    let files = region.as_ref().map(GuestRam::files).unwrap_or_default();
    let inherit: Vec<RawFd> = files
        .iter()
        .map(|f| f.fd.as_raw_fd())
        .chain(sent.file.as_ref().map(|f| f.as_raw_fd()))
        .chain(sent.vmm_config.as_ref().map(|f| f.as_raw_fd()))
        .chain(
            parts
                .iter()
                .filter_map(|r| r.connection().map(|c| c.as_raw_fd())),
        )
        .collect();
    if a.exec {
        report_started(&plan, &source, region.as_ref(), ready_s, false);
        return Err(exec_vmm(&plan, &built, &inherit));
    }
    let child = spawn_vmm(&plan, &built, inherit)?;
    let vmm_spawned = Instant::now();
    // After the VMM started (off its start-up path); the VMM never uses
    // the lease connection it inherited, so the report may share it.
    let reporter = report_started(&plan, &source, region.as_ref(), ready_s, true);
    let status = wait(child);
    let exit = Instant::now();
    if let Some(r) = reporter {
        r.finish();
    }
    let guest_phases = listener.map(|l| l.finish()).unwrap_or_default();
    CHILD.store(0, Ordering::SeqCst);
    // The VMM is gone: the region goes back (lease closed; memfd freed).
    let lease_ids = region.as_ref().and_then(GuestRam::lease_ids);
    let held = region.as_ref().map_or(0, GuestRam::held_bytes);
    let regions = files.len();
    let lease_id = region.as_ref().and_then(GuestRam::lease).map(|l| l.id());
    let Sent {
        published,
        carrier,
        file,
        vmm_config,
    } = sent;
    drop((file, vmm_config, region));
    let (code, signal) = match status {
        Status::Exited(c) => (c, None),
        Status::Signaled(s) => (128 + s, Some(s)),
    };
    let zero = published.as_ref().and_then(|p| p.zero.as_ref());
    let ms = |at: Instant| timeline::ms_since(start, at);
    let opts = &plan.opts;
    eprintln!(
        "zerostart launch: vmm={} boot={} exit={} memory={}MiB source={}{} hint={} ({}) memory_ready={:.1}ms vmm_spawned={:.1}ms exit_at={:.1}ms",
        a.vmm.name(),
        built.boot.name(),
        match signal {
            Some(s) => format!("signal {s}"),
            None => format!("code {code}"),
        },
        opts.size >> 20,
        source.name(),
        lease_ids
            .map(|i| match regions {
                1 => format!(" lease={i} held={}MiB", held >> 20),
                n => format!(" lease={i} regions={n} held={}MiB", held >> 20),
            })
            .unwrap_or_default(),
        zero.map(|h| format!("{} ranges/{} MiB", h.entries.len(), h.total_bytes() >> 20))
            .unwrap_or_else(|| "off".into()),
        carrier.transport(),
        ms(memory_ready),
        ms(vmm_spawned),
        ms(exit),
    );
    if let Some(path) = &a.timeline {
        let phase = |name: &str, at: Instant| timeline::Phase {
            name: name.to_string(),
            t_ms: ms(at),
        };
        let doc = timeline::LaunchTimeline {
            argv: std::iter::once(plan.binary.display().to_string())
                .chain(built.args.iter().cloned())
                .collect(),
            boot: built.boot.name().to_string(),
            exit: timeline::LaunchExit { code, signal },
            guest_phases,
            hint: zero.map(|h| timeline::LaunchHint {
                bytes: h.total_bytes(),
                corrupt: a.test_corrupt_hint.map(|c| c.name().to_string()),
                ranges: h.entries.iter().map(|e| [e.start, e.length]).collect(),
            }),
            hint_transport: carrier.transport().to_string(),
            lease: lease_id,
            lease_held_bytes: lease_id.map(|_| held),
            memory_bytes: opts.size,
            memory_source: source.name().to_string(),
            memory_source_asked: opts.source.name().to_string(),
            phases: vec![
                phase("process_start", start),
                phase("memory_ready", memory_ready),
                phase("hint_ready", hint_ready),
                phase("vmm_spawned", vmm_spawned),
                phase("exit", exit),
            ],
            vmm: a.vmm.name().to_string(),
        };
        std::fs::write(path, timeline::to_file_text(&doc)).map_err(|err| Error::Timeline {
            path: path.clone(),
            err,
        })?;
    }
    if let Some(s) = signal {
        reraise(s);
    }
    Ok(code)
}

/// Step 6: the VMM, as the launcher's child with stdio untouched, the
/// fds in INHERIT kept open across exec, and (unless a test turns it off)
/// killed when the launcher dies. Returns its pid, with the signal
/// forwarder installed.
fn spawn_vmm(plan: &Plan<'_>, built: &vmm::Built, inherit: Vec<RawFd>) -> Result<i32, Error> {
    let pdeathsig = !plan.a.test_no_pdeathsig;
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut cmd = std::process::Command::new(&plan.binary);
    cmd.args(&built.args);
    // Signals that arrive while the child is being started wait (blocked)
    // and are forwarded once its pid is known.
    let set = sigset(&FORWARDED);
    // SAFETY: only async-signal-safe calls (sigprocmask, fcntl, prctl,
    // getppid) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The VMM starts with the signal mask its own caller would
            // give it, not the launcher's start-up block.
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            for &fd in &inherit {
                memory::inherit(fd)?;
            }
            if pdeathsig {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launcher died before the prctl: do not run orphaned.
                if libc::getppid() != me {
                    return Err(std::io::Error::other(
                        "the launcher exited before the VMM started",
                    ));
                }
            }
            Ok(())
        });
    }
    // SAFETY: changes this thread's signal mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(err) => {
            // SAFETY: restores the mask.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
            return Err(Error::Spawn {
                path: plan.binary.clone(),
                err,
            });
        }
    };
    let pid = child.id() as i32;
    CHILD.store(pid, Ordering::SeqCst);
    for &s in &FORWARDED {
        // SAFETY: installs an async-signal-safe handler.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
    }
    // SAFETY: restores the mask; pending signals now reach the forwarder.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    Ok(pid)
}

/// Step 6 of the drop-in: this process becomes the VMM, the fds in
/// INHERIT kept open across exec (the lease's connection among them, so
/// the lease lives exactly as long as the VMM). Returns only the error.
fn exec_vmm(plan: &Plan<'_>, built: &vmm::Built, inherit: &[RawFd]) -> Error {
    for &fd in inherit {
        if let Err(err) = memory::inherit(fd) {
            return Error::Spawn {
                path: plan.binary.clone(),
                err,
            };
        }
    }
    let err = std::process::Command::new(&plan.binary)
        .args(&built.args)
        .exec();
    Error::Spawn {
        path: plan.binary.clone(),
        err,
    }
}

/// Test only: fills all guest RAM outside the hint with a pattern.
fn poison_unhinted(
    region: &GuestRam,
    ram: &[layout::RamRange],
    hinted: &[(u64, u64)],
) -> Result<(), Error> {
    for r in ram {
        let mut at = r.gpa;
        let end = r.gpa + r.len;
        while at < end {
            // Next hinted range starting at or after `at`.
            let next = hinted
                .iter()
                .filter(|(s, l)| s + l > at)
                .map(|&(s, l)| (s.max(at), s + l))
                .min();
            let (stop, resume) = match next {
                Some((s, e)) if s < end => (s, e),
                _ => (end, end),
            };
            let (o0, o1) = (r.file_offset + (at - r.gpa), r.file_offset + (stop - r.gpa));
            region.fill(o0, o1 - o0, 0x5a)?;
            at = resume;
        }
    }
    Ok(())
}

enum Status {
    Exited(i32),
    Signaled(i32),
}

fn wait(pid: i32) -> Status {
    loop {
        let mut st = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            if libc::WIFEXITED(st) {
                return Status::Exited(libc::WEXITSTATUS(st));
            }
            if libc::WIFSIGNALED(st) {
                return Status::Signaled(libc::WTERMSIG(st));
            }
        } else if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Status::Exited(1);
        }
    }
}

/// Dies of the VMM's signal, so a caller sees the same status as if it had
/// run the VMM itself (falls back to exit 128 + signal).
fn reraise(sig: i32) {
    // SAFETY: default disposition, unblocked, then the signal to ourselves.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let set = sigset(&[sig]);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmm_binary_check_finds_what_a_shell_would_run() {
        assert!(vmm_binary_check(std::path::Path::new("sh"))
            .unwrap()
            .starts_with("vmm binary: /"));
        let e = vmm_binary_check(std::path::Path::new("zerostart-no-such-vmm"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not found (on PATH)") && e.contains("--vmm-binary"),
            "{e}"
        );
        // A file that exists but is not executable is refused, as exec would.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("qemu");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        let e = vmm_binary_check(&f).unwrap_err().to_string();
        assert!(e.contains("not an executable file"), "{e}");
    }

    #[test]
    fn memory_options() {
        let m = MemoryOpts::parse("size=4G,source=pool").unwrap();
        assert_eq!(m.size, 4 << 30);
        assert_eq!(m.source, Source::Pool(options::DEFAULT_POOL_SOCKET.into()));
        assert_eq!(m.page, PageSize::Size2M);
        assert!(m.hint);
        let m =
            MemoryOpts::parse("size=1G,source=pool:/tmp/p.sock,hugepages=off,hint=off").unwrap();
        assert_eq!(m.source, Source::Pool("/tmp/p.sock".into()));
        assert_eq!(m.page, PageSize::Size4K);
        assert!(!m.hint);
        assert_eq!(
            MemoryOpts::parse("size=2G,source=prefault,hugepage_size=1G")
                .unwrap()
                .page,
            PageSize::Size1G
        );
        for (bad, want) in [
            ("source=pool", "size= is required"),
            ("size=1G", "source= is required"),
            ("size=1G,source=disk", "source='disk'"),
            ("size=1G,source=pool:", "source='pool:'"),
            ("size=1G,source=none,color=red", "unknown key 'color'"),
            ("size=3M,source=none", "not a multiple of the 2M"),
            ("size=1X,source=none", "size"),
            ("size=1G,source=none,hint=maybe", "valid: on, off"),
            ("size", "key=value"),
            ("size=1G,source=none,size=2G", "at most once"),
            ("size=1G,source=none,hugepage_size=4K", "use 2M or 1G"),
        ] {
            let e = MemoryOpts::parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn poison_skips_exactly_the_hint() {
        let size = 64u64 << 20;
        let ram = layout::qemu_q35(size);
        let hinted = layout::hint_ranges(&ram, &[(40 << 20, 4096)]);
        // One region, and the same guest RAM as two guest NUMA nodes whose
        // boundary (36 MiB) falls inside the hint's gap: the same bytes.
        for sizes in [vec![size], vec![36 << 20, size - (36 << 20)]] {
            let region =
                GuestRam::acquire(&Source::None, &sizes, &[], PageSize::Size4K, 1, 1).unwrap();
            poison_unhinted(&region, &ram, &hinted).unwrap();
            let mut seen = vec![0u8; size as usize];
            region
                .each_map(|base, m| seen[base as usize..base as usize + m.len()].copy_from_slice(m))
                .unwrap();
            let pat = |o: usize| seen[o] == 0x5a;
            assert!(pat(0) && pat((32 << 20) - 1), "{sizes:?}");
            assert!(!pat(32 << 20) && !pat((40 << 20) - 1), "{sizes:?}");
            assert!(pat(40 << 20) && pat((40 << 20) + 4095), "{sizes:?}");
            assert!(
                !pat((40 << 20) + 4096) && !pat(size as usize - 1),
                "{sizes:?}"
            );
        }
    }

    #[test]
    fn the_hint_memfd_is_frozen() {
        use std::io::Write;
        let f = memory::hint_memfd(b"hint").unwrap();
        memory::seal(&f).unwrap();
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
            .unwrap();
        assert!(w.write_all(b"x").is_err());
        assert!(f.set_len(1).is_err());
        assert_eq!(
            std::fs::read(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap(),
            b"hint"
        );
    }
}
