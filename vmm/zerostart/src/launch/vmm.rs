//! What the launcher adds to each VMM's command line, which of the user's
//! own arguments it refuses, and the hint ranges each VMM allows.

use options::vmm_cmd;
use std::path::{Path, PathBuf};

use super::firecracker::{self as fc, FcConfig};
use super::layout::{self, RamRange};
use super::Error;

/// Id of the memory object/zone the launcher adds.
pub const MEMORY_ID: &str = "zerostart-ram";

/// The name of item `i` of `n` the launcher adds (a memory backend or
/// zone, a placeholder descriptor): `base` alone for one, so a guest of
/// one file keeps the names it always had; `base` + `i` for several.
pub fn numbered(base: &str, i: usize, n: usize) -> String {
    match n {
        1 => base.to_string(),
        _ => format!("{base}{i}"),
    }
}

/// The external VMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VmmKind {
    /// QEMU (`qemu-system-x86_64`), machine q35, firmware OVMF with ZeroStartPkg.
    Qemu,
    /// cloud-hypervisor: a PVH `vmlinux` booted directly (the hint on
    /// `--cmdline`; every release binary), or firmware CLOUDHV.fd with the
    /// hint over fw_cfg (builds with its `fw_cfg` feature, ≥ v48).
    CloudHypervisor,
    /// Firecracker (x86_64): its `--config-file` rewritten with the hint on
    /// `boot_args`; it allocates its own guest memory (launch/firecracker.rs).
    Firecracker,
}

impl VmmKind {
    /// The binary looked up on PATH.
    pub fn default_binary(self) -> &'static str {
        match self {
            VmmKind::Qemu => "qemu-system-x86_64",
            VmmKind::CloudHypervisor => "cloud-hypervisor",
            VmmKind::Firecracker => fc::DEFAULT_BINARY,
        }
    }

    /// Name in messages and reports.
    pub fn name(self) -> &'static str {
        match self {
            VmmKind::Qemu => "qemu",
            VmmKind::CloudHypervisor => "cloud-hypervisor",
            VmmKind::Firecracker => "firecracker",
        }
    }

    /// The pool's label for this VMM in launch reports.
    pub fn pool_label(self) -> pool::proto::Vmm {
        match self {
            VmmKind::Qemu => pool::proto::Vmm::Qemu,
            VmmKind::CloudHypervisor => pool::proto::Vmm::CloudHypervisor,
            VmmKind::Firecracker => pool::proto::Vmm::Firecracker,
        }
    }
}

/// One external VMM as the launcher drives it: each VMM's facts live
/// behind these four questions, so `launch::run` asks them the same way
/// for every VMM and adding one is one more implementation.
pub trait Driver: Sync {
    /// How the user's command line boots the guest (with or without the
    /// launcher's `--firmware`), which decides the hint's transport.
    fn boot(&self, user: &[String], firmware: bool) -> Boot;
    /// The VMM's full argument list for the launcher's inputs (the hint in
    /// the transport of that boot), its guest RAM layout and the ranges it
    /// never writes before the first instruction; the user's arguments that
    /// would break the hint are refused here.
    fn build(&self, user: &[String], inp: &Inputs, firmware_image: &[u8]) -> Result<Built, Error>;
    /// How the binary carries a hint to firmware on this boot: over fw_cfg,
    /// or (cloud-hypervisor without its fw_cfg feature, as released) in an
    /// SMBIOS OEM string; fw_cfg when there is nothing to check.
    fn probe(&self, binary: &Path, boot: Boot, hint: bool) -> Result<FirmwareChannel, Error>;
    /// Whether the launcher provides guest RAM (a pool lease or its own
    /// memfd); Firecracker allocates its own.
    fn takes_memory(&self) -> bool {
        true
    }
    /// How many files the VMM maps one after another as one guest's RAM,
    /// so how many whole pool regions one lease may take: QEMU's one
    /// `memory-backend=` is one file (several backends are NUMA nodes or
    /// DIMMs, a different guest), cloud-hypervisor lays out its memory
    /// zones one after another.
    fn max_pieces(&self) -> usize {
        1
    }
}

struct QemuDriver;
struct ChvDriver;
struct FirecrackerDriver;

impl Driver for QemuDriver {
    fn boot(&self, user: &[String], firmware: bool) -> Boot {
        qemu_boot(user, firmware)
    }
    fn build(&self, user: &[String], inp: &Inputs, _: &[u8]) -> Result<Built, Error> {
        qemu(user, inp)
    }
    fn probe(&self, _: &Path, _: Boot, _: bool) -> Result<FirmwareChannel, Error> {
        Ok(FirmwareChannel::FwCfg)
    }
}

impl Driver for ChvDriver {
    fn boot(&self, user: &[String], firmware: bool) -> Boot {
        chv_boot(user, firmware)
    }
    fn build(&self, user: &[String], inp: &Inputs, firmware_image: &[u8]) -> Result<Built, Error> {
        cloud_hypervisor(user, inp, firmware_image)
    }
    fn probe(&self, binary: &Path, boot: Boot, hint: bool) -> Result<FirmwareChannel, Error> {
        match hint && boot == Boot::Uefi {
            true => chv_firmware_channel(binary),
            false => Ok(FirmwareChannel::FwCfg),
        }
    }
    fn max_pieces(&self) -> usize {
        pool::proto::MAX_PIECES
    }
}

impl Driver for FirecrackerDriver {
    fn boot(&self, _: &[String], _: bool) -> Boot {
        Boot::Direct
    }
    fn build(&self, user: &[String], inp: &Inputs, _: &[u8]) -> Result<Built, Error> {
        firecracker(user, inp)
    }
    fn probe(&self, _: &Path, _: Boot, _: bool) -> Result<FirmwareChannel, Error> {
        Ok(FirmwareChannel::FwCfg)
    }
    fn takes_memory(&self) -> bool {
        false
    }
}

impl VmmKind {
    /// The driver that knows this VMM.
    pub fn driver(self) -> &'static dyn Driver {
        match self {
            VmmKind::Qemu => &QemuDriver,
            VmmKind::CloudHypervisor => &ChvDriver,
            VmmKind::Firecracker => &FirecrackerDriver,
        }
    }
}

/// How the guest boots, which decides how the hint reaches it./// How the guest boots, which decides how the hint reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boot {
    /// The VMM loads the kernel itself (QEMU `-kernel` without
    /// `--firmware`): the hint rides on the kernel command line, the one
    /// channel every VMM passes to the kernel unchanged.
    Direct,
    /// Firmware boots the guest (`--firmware`): the hint goes to the
    /// firmware, which claims the memory and publishes the EFI table that
    /// the kernel trusts on an EFI boot.
    Uefi,
}

impl Boot {
    /// Name in reports and messages (`boot` in the timeline).
    pub fn name(self) -> &'static str {
        match self {
            Boot::Direct => "direct",
            Boot::Uefi => "uefi",
        }
    }
}

/// How a VMM hands the hint to firmware (docs/hint-abi.md transports (b)
/// and (e); ZeroStartPkg reads fw_cfg first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirmwareChannel {
    /// The blob as a fw_cfg file.
    FwCfg,
    /// The text form in an SMBIOS type 11 OEM string.
    Smbios,
}

/// The hint as the VMM carries it to the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carrier {
    /// No hint.
    None,
    /// The blob as a file the VMM serves over fw_cfg (`/proc/self/fd/N`),
    /// for the firmware.
    FwCfg(String),
    /// The text form (docs/hint-abi.md "Text form"), for the kernel
    /// command line.
    Text(String),
    /// The text form in an SMBIOS OEM string, for the firmware.
    Smbios(String),
}

impl Carrier {
    /// Transport name in reports: `fw_cfg`, `cmdline`, `smbios` or `none`.
    pub fn transport(&self) -> &'static str {
        match self {
            Carrier::None => "none",
            Carrier::FwCfg(_) => "fw_cfg",
            Carrier::Text(_) => "cmdline",
            Carrier::Smbios(_) => "smbios",
        }
    }

    /// The same transport carrying TEXT, for the two that carry text
    /// (None for the others).
    pub fn with_text(&self, text: String) -> Option<Carrier> {
        match self {
            Carrier::Text(_) => Some(Carrier::Text(text)),
            Carrier::Smbios(_) => Some(Carrier::Smbios(text)),
            _ => None,
        }
    }
}

/// The boot path of a QEMU command line: direct when it names `-kernel`
/// and the launcher got no `--firmware` (QEMU then runs SeaBIOS, whose
/// linuxboot option ROM starts the kernel), else a firmware boot.
pub fn qemu_boot(user: &[String], firmware: bool) -> Boot {
    if !firmware && user.iter().any(|a| qemu_opt(a) == Some("kernel")) {
        Boot::Direct
    } else {
        Boot::Uefi
    }
}

/// One file of guest RAM as the VMM opens it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemFile {
    /// The path the VMM opens (`/proc/self/fd/N` of a region the VMM
    /// inherits).
    pub path: String,
    /// Offset of guest RAM in the file.
    pub offset: u64,
    /// Bytes of guest RAM in the file.
    pub size: u64,
}

/// What the launcher hands the VMM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    /// Guest RAM bytes.
    pub size: u64,
    /// The files the VMM maps for guest RAM, in guest order: one, one per
    /// guest NUMA node of [`QemuRam::numa_nodes`] (QEMU), or one per
    /// piece of a pool lease of several regions (cloud-hypervisor's
    /// memory zones, up to [`Driver::max_pieces`]).
    pub mem: Vec<MemFile>,
    /// Whether the file is on hugetlbfs (and its page size).
    pub hugepage_bytes: Option<u64>,
    /// The hint, in the form the boot path carries.
    pub hint: Carrier,
    /// Firmware image given with `--firmware`.
    pub firmware: Option<PathBuf>,
    /// The VMM arguments load the firmware (the drop-in's libvirt
    /// `<loader>`): a firmware boot gets the fw_cfg hint without one.
    pub firmware_in_args: bool,
    /// How QEMU's guest RAM is shaped beyond its size (the drop-in keeps
    /// what the management tool asked for).
    pub qemu_ram: QemuRam,
    /// `--disk`, `--net`, `--vsock`.
    pub devices: DeviceOpts,
    /// Firecracker: the `--config-file` path it is given, the launcher's
    /// rewritten copy (`/proc/self/fd/N`); `None` names a placeholder.
    pub vmm_config: Option<String>,
}

/// The launcher's `--disk` / `--net` / `--vsock`, in zerostart run's
/// grammar, to be mapped onto the VMM's own devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceOpts {
    /// Raw disk images.
    pub disks: Vec<options::DiskConfig>,
    /// Taps, with MAC and vhost decided.
    pub nets: Vec<crate::netplan::NetPlan>,
    /// vsock.
    pub vsock: Option<options::VsockConfig>,
}

/// The launcher's devices as the VMM command builder takes them
/// (`options::vmm_cmd`, where their QEMU and cloud-hypervisor spelling
/// lives).
#[allow(clippy::type_complexity)]
fn device_list(
    d: &DeviceOpts,
) -> (
    Vec<(std::path::PathBuf, bool)>,
    Vec<(String, String, bool)>,
    Option<(u32, Option<&std::path::Path>)>,
) {
    (
        d.disks
            .iter()
            .map(|x| (x.path.clone(), x.readonly))
            .collect(),
        d.nets
            .iter()
            .map(|n| (n.tap.clone(), options::format_mac(&n.mac), n.vhost))
            .collect(),
        d.vsock.as_ref().map(|v| (v.cid, v.socket.as_deref())),
    )
}

/// QEMU's devices for `d`: `options::vmm_cmd::qemu_devices` (virtio-pci
/// disk, NIC and vsock, or virtio-mmio ones with `mmio`; its doc says how
/// each is spelled and why).
pub fn qemu_devices(d: &DeviceOpts, mmio: bool) -> Result<Vec<String>, Error> {
    let (disks, nets, vsock) = device_list(d);
    options::vmm_cmd::qemu_devices(&disks, &nets, vsock, mmio).map_err(Error::BadDevice)
}

/// What QEMU's microvm appends to the kernel command line per virtio-mmio
/// device with a backend (`microvm_fix_kernel_cmdline`: `
/// virtio_mmio.device=512@0xfeb00e00:12`, 37 characters), rounded up: the
/// hint text must leave room for it within `COMMAND_LINE_SIZE`, or the
/// kernel would get a truncated hint (refused, so the hint would be lost).
pub const MICROVM_CMDLINE_PER_DEVICE: usize = 40;

/// The virtio-mmio devices a microvm command line names (`-device
/// virtio-*` / `vhost-*` on the mmio bus, `-nic`), each of which QEMU
/// announces on the kernel command line unless `auto-kernel-cmdline=off`.
fn microvm_mmio_devices(args: &[String]) -> usize {
    args.iter()
        .enumerate()
        .filter(|&(i, a)| match qemu_opt(a) {
            Some("device") => {
                let (v, _) = option_value(args, i);
                let driver = v.split(',').next().unwrap_or("");
                (driver.starts_with("virtio-") || driver.starts_with("vhost-"))
                    && !driver.ends_with("-pci")
                    && !driver.ends_with("-ccw")
            }
            Some("nic") => true,
            _ => false,
        })
        .count()
}

/// cloud-hypervisor's devices for `d`: `options::vmm_cmd::chv_devices`.
pub fn chv_devices(d: &DeviceOpts) -> Result<Vec<String>, Error> {
    let (disks, nets, vsock) = device_list(d);
    options::vmm_cmd::chv_devices(&disks, &nets, vsock).map_err(Error::BadDevice)
}

/// How the launcher's RAM backend is wired into QEMU, as the drop-in
/// found it in a management tool's command line (default: the machine's
/// `memory-backend=`, plain `-m`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QemuRam {
    /// Guest NUMA nodes that hold RAM (Kata's one `-numa node,memdev=`,
    /// libvirt's one per `<cell>`), in guest order: each `-numa` value
    /// with [`NUMA_MEMDEV`] where its memdev was, and its bytes. Each gets
    /// a region of its own. Empty: the machine's `memory-backend=` (QEMU
    /// refuses it beside NUMA nodes).
    pub numa_nodes: Vec<NumaNode>,
    /// Without guest NUMA nodes: the host NUMA node guest RAM is bound
    /// to (libvirt's `<numatune><memory>`), leased there.
    pub host_node: Option<usize>,
    /// What followed the size on `-m` (`,slots=N,maxmem=M`: memory
    /// hotplug; hotplugged memory is QEMU's own, outside the hint).
    pub m_extra: String,
}

/// One guest NUMA node's RAM ([`QemuRam::numa_nodes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// Its `-numa` value, [`NUMA_MEMDEV`] where the memdev goes.
    pub arg: String,
    /// Its RAM in bytes.
    pub size: u64,
    /// The host NUMA node its RAM is bound to (libvirt's `<numatune>
    /// <memnode>`): its region is leased there.
    pub host_node: Option<usize>,
}

impl QemuRam {
    /// Guest RAM bytes of each region, in guest order, for a guest of
    /// `size` bytes.
    pub fn part_sizes(&self, size: u64) -> Vec<u64> {
        match self.numa_nodes.as_slice() {
            [] => vec![size],
            nodes => nodes.iter().map(|n| n.size).collect(),
        }
    }

    /// The host NUMA node of each region of [`QemuRam::part_sizes`]
    /// (`None`: any).
    pub fn host_nodes(&self) -> Vec<Option<usize>> {
        match self.numa_nodes.as_slice() {
            [] => vec![self.host_node],
            nodes => nodes.iter().map(|n| n.host_node).collect(),
        }
    }
}

/// Placeholder of the backend id in [`NumaNode::arg`].
pub const NUMA_MEMDEV: &str = "{memdev}";

/// The VMM arguments with the launcher's additions, and the guest layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// Full argument list (without the binary).
    pub args: Vec<String>,
    /// Guest RAM and where each piece is in the memory file.
    pub ram: Vec<RamRange>,
    /// Guest-physical ranges the VMM and firmware never write before the
    /// first instruction: the hint.
    pub hint_ranges: Vec<(u64, u64)>,
    /// The boot path.
    pub boot: Boot,
    /// For a hint on the kernel command line: the characters its text may
    /// take, so the whole line stays within x86's `COMMAND_LINE_SIZE`.
    pub text_budget: Option<usize>,
}

fn conflict(vmm: VmmKind, arg: &str, why: &str) -> Error {
    Error::Conflict {
        vmm: vmm.name(),
        arg: arg.to_string(),
        why: why.to_string(),
    }
}

/// The value of the option at `user[i]`: after its `=`, else the next
/// argument, with that argument's index (`None` for the `opt=value` form).
fn option_value(user: &[String], i: usize) -> (String, Option<usize>) {
    match user[i].split_once('=') {
        Some((_, v)) => (v.to_string(), None),
        None => (user.get(i + 1).cloned().unwrap_or_default(), Some(i + 1)),
    }
}

/// The kernel command line the user gave a direct-boot VMM (QEMU
/// `-append`, cloud-hypervisor `--cmdline`): its value and the argv index
/// of that value (`None` for the `opt=value` form).
struct KernelLine {
    value: String,
    at: Option<usize>,
}

impl KernelLine {
    /// Option `a`'s line, refused when the hint cannot be added to it
    /// (someone else's `prezero.hint`, an open quote, a NUL).
    fn take(k: VmmKind, a: &str, value: String, at: Option<usize>) -> Result<Self, Error> {
        if let Err(e) = zerohint::cmdline_text_budget(&value) {
            let why = match e {
                zerohint::CmdlineError::HasHint => {
                    "the launcher adds the prezero.hint parameter itself".to_string()
                }
                e => format!("the launcher cannot add the hint to it: {e}"),
            };
            return Err(conflict(k, &format!("{a} {value}"), &why));
        }
        Ok(KernelLine { value, at })
    }
}

/// The hint's text on the kernel command line of a direct boot: the
/// user's `line` (option `opt`) gets ` prezero.hint=<text>` in `args`, or
/// `opt` is added with it. Returns the text's budget on a direct boot
/// (`None` on a firmware boot); a carrier the boot has no transport for
/// is a launcher bug.
fn carry_text(
    k: VmmKind,
    opt: &str,
    line: Option<&KernelLine>,
    boot: Boot,
    hint: &Carrier,
    args: &mut Vec<String>,
) -> Result<Option<usize>, Error> {
    let value = line.map_or("", |l| l.value.as_str());
    match (hint, boot) {
        (Carrier::Text(t), Boot::Direct) => {
            let with = zerohint::cmdline_with_text(value, t).map_err(|e| {
                conflict(
                    k,
                    &format!("{opt} {value}"),
                    &format!("the launcher cannot add the hint to it: {e}"),
                )
            })?;
            match line.map(|l| l.at) {
                Some(Some(at)) => args[at] = with,
                Some(None) => {
                    return Err(conflict(
                        k,
                        &format!("{opt}={value}"),
                        &format!("write {opt} and its value as two arguments"),
                    ))
                }
                None => args.extend([opt.to_string(), with]),
            }
        }
        (Carrier::Text(_), Boot::Uefi)
        | (Carrier::FwCfg(_), Boot::Direct)
        | (Carrier::Smbios(_), Boot::Direct) => {
            return Err(Error::HintTransport(format!(
                "{} {} boot cannot take the hint as {}",
                k.name(),
                boot.name(),
                hint.transport()
            )))
        }
        _ => {}
    }
    // Checked by KernelLine::take: the user's line takes a hint.
    Ok((boot == Boot::Direct).then(|| zerohint::cmdline_text_budget(value).unwrap_or(0)))
}

/// QEMU option name of `a` (`-m`, `--m` and `-m=...` style alike).
pub(super) fn qemu_opt(a: &str) -> Option<&str> {
    let s = a.strip_prefix("--").or_else(|| a.strip_prefix('-'))?;
    Some(s.split('=').next().unwrap_or(s))
}

/// The first `n` bytes of a file (fewer if it is shorter).
fn file_head(path: &str, n: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(path)?.take(n).read_to_end(&mut v)?;
    Ok(v)
}

/// The QEMU machines whose guest layout the launcher knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QemuMachine {
    /// q35 (`pc-q35-*`): OVMF, or SeaBIOS for a direct kernel boot.
    Q35,
    /// microvm: qboot boots a `-kernel` directly; no PCI, no UEFI.
    Microvm,
}

/// QEMU: adds `-machine q35` (when no machine is named), `-machine
/// memory-backend=`, `-m`, `-object memory-backend-file,...,share=on`,
/// `-fw_cfg name=opt/org.zerostart/prezeroed,file=` and `-bios`.
///
/// On a direct kernel boot (`-kernel`, no `--firmware`) the hint goes on
/// `-append` instead (added when the user gave none) and no `-bios` is
/// added: QEMU's own SeaBIOS (q35) or qboot (`-machine microvm`) starts
/// the kernel.
pub fn qemu(user: &[String], inp: &Inputs) -> Result<Built, Error> {
    let k = VmmKind::Qemu;
    let mut machine_named = None;
    // microvm's auto-kernel-cmdline (default on): QEMU appends its
    // virtio-mmio devices to the kernel command line.
    let mut auto_kernel_cmdline = true;
    let (mut kernel, mut initrd, mut append) = (None, None, None);
    for (i, a) in user.iter().enumerate() {
        let Some(opt) = qemu_opt(a) else { continue };
        let (val, val_at) = option_value(user, i);
        match opt {
            "kernel" => kernel = Some(val.clone()),
            "initrd" => initrd = Some(val.clone()),
            "append" => append = Some(KernelLine::take(k, a, val, val_at)?),
            "m" => return Err(conflict(k, a, "the launcher sets -m to --memory size=")),
            "mem-path" | "mem-prealloc" => {
                return Err(conflict(k, a, "guest RAM comes from the launcher's region"))
            }
            // Nodes come with their RAM ([`QemuRam::numa_nodes`], the
            // drop-in's); `-numa dist|cpu|hmat-*` describe them and stay.
            "numa" if val.split(',').next() == Some("node") => {
                return Err(conflict(
                    k,
                    a,
                    "NUMA nodes need their own memory backends, which the launcher provides only through the drop-in (zerostart qemu-dropin)",
                ))
            }
            "object" if val.starts_with("memory-backend") => {
                return Err(conflict(
                    k,
                    &format!("{a} {val}"),
                    "the launcher adds the memory backend",
                ))
            }
            "incoming" | "loadvm" => return Err(conflict(
                k,
                a,
                "restoring a VM writes guest RAM before its first instruction, so no hint can hold",
            )),
            "device" if val.starts_with("loader") => {
                return Err(conflict(
                    k,
                    &format!("{a} {val}"),
                    "the generic loader writes guest RAM before the first instruction",
                ))
            }
            "fw_cfg" if val.contains("opt/org.zerostart/") => {
                return Err(conflict(
                    k,
                    &format!("{a} {val}"),
                    "the launcher serves the hint itself",
                ))
            }
            "bios" | "pflash" if inp.firmware.is_some() => {
                return Err(conflict(k, a, "--firmware already sets the firmware"))
            }
            "drive" if inp.firmware.is_some() && val.contains("if=pflash") => {
                return Err(conflict(
                    k,
                    &format!("{a} {val}"),
                    "--firmware already sets the firmware",
                ))
            }
            "machine" | "M" => {
                for item in val.split(',') {
                    let (key, v) = item.split_once('=').unwrap_or(("type", item));
                    match key {
                        "type" => {
                            machine_named = Some(if v == "q35" || v.starts_with("pc-q35-") {
                                QemuMachine::Q35
                            } else if v == "microvm" {
                                QemuMachine::Microvm
                            } else {
                                return Err(conflict(
                                    k,
                                    &format!("{a} {val}"),
                                    "the hint layout is derived for q35 and microvm only; use -machine q35 (or microvm with -kernel)",
                                ));
                            });
                        }
                        "memory-backend" => {
                            return Err(conflict(
                                k,
                                &format!("{a} {val}"),
                                "the launcher sets the machine's memory backend",
                            ))
                        }
                        "auto-kernel-cmdline" => auto_kernel_cmdline = v != "off",
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if !inp.size.is_multiple_of(1 << 20) {
        return Err(Error::BadMemory(format!(
            "size={} is not a whole number of MiB; QEMU's -m takes MiB",
            inp.size
        )));
    }
    let boot = qemu_boot(user, inp.firmware.is_some() || inp.firmware_in_args);
    let machine = machine_named.unwrap_or(QemuMachine::Q35);
    if machine == QemuMachine::Microvm && boot == Boot::Uefi {
        return Err(conflict(
            k,
            "-machine microvm",
            "the launcher boots microvm only directly (qboot and -kernel, the hint on -append); give -kernel and no --firmware, or use -machine q35 for a firmware boot",
        ));
    }
    if boot == Boot::Uefi
        && inp.firmware.is_none()
        && !inp.firmware_in_args
        && inp.hint != Carrier::None
    {
        return Err(Error::QemuNeedsFirmware);
    }
    if let Carrier::Smbios(_) = inp.hint {
        return Err(Error::HintTransport(
            "QEMU hands the firmware the hint over fw_cfg only".into(),
        ));
    }
    let mut args: Vec<String> = user.to_vec();
    let text_budget = carry_text(
        k,
        vmm_cmd::qemu::APPEND,
        append.as_ref(),
        boot,
        &inp.hint,
        &mut args,
    )?;
    if machine_named.is_none() {
        args.extend([vmm_cmd::qemu::MACHINE.into(), "q35".into()]);
    }
    let nodes = &inp.qemu_ram.numa_nodes;
    let sizes = inp.qemu_ram.part_sizes(inp.size);
    let file_sizes: Vec<u64> = inp.mem.iter().map(|f| f.size).collect();
    if sizes.iter().sum::<u64>() != inp.size || file_sizes != sizes {
        return Err(Error::BadMemory(format!(
            "memory files of {file_sizes:?} bytes for guest NUMA nodes of {sizes:?} bytes and size={}; give one region per node, the nodes adding up to the size",
            inp.size
        )));
    }
    if sizes.len() > 1 && inp.mem.iter().any(|f| f.offset != 0) {
        return Err(Error::BadMemory(
            "guest NUMA nodes on regions at an offset of their file; use a pool with one file per region".into(),
        ));
    }
    // One backend keeps its old id; several are numbered in guest order.
    let id = |i: usize| numbered(MEMORY_ID, i, sizes.len());
    if nodes.is_empty() {
        args.extend([
            vmm_cmd::qemu::MACHINE.into(),
            format!("memory-backend={MEMORY_ID}"),
        ]);
    }
    for (i, n) in nodes.iter().enumerate() {
        args.extend([
            vmm_cmd::qemu::NUMA.into(),
            n.arg.replace(NUMA_MEMDEV, &id(i)),
        ]);
    }
    args.extend([
        vmm_cmd::qemu::MEMORY.into(),
        format!("{}M{}", inp.size >> 20, inp.qemu_ram.m_extra),
    ]);
    for (i, f) in inp.mem.iter().enumerate() {
        args.extend([
            vmm_cmd::qemu::OBJECT.into(),
            format!(
                "memory-backend-file,id={},size={},mem-path={},share=on,prealloc=off{}",
                id(i),
                f.size,
                f.path,
                if f.offset != 0 {
                    format!(",offset={}", f.offset)
                } else {
                    String::new()
                }
            ),
        ]);
    }
    if let Carrier::FwCfg(h) = &inp.hint {
        args.extend([
            vmm_cmd::qemu::FW_CFG.into(),
            format!("name={},file={h}", zerohint::FW_CFG_NAME),
        ]);
    }
    if let Some(fw) = &inp.firmware {
        args.extend([vmm_cmd::qemu::BIOS.into(), fw.display().to_string()]);
    }
    // virtio-pci devices write no guest RAM before the first instruction
    // either (their option ROMs, disabled for net anyway, are ROM BARs the
    // firmware copies into memory it allocates).
    args.extend(qemu_devices(&inp.devices, machine == QemuMachine::Microvm)?);
    let text_budget = match machine {
        QemuMachine::Microvm if auto_kernel_cmdline => text_budget
            .map(|b| b.saturating_sub(MICROVM_CMDLINE_PER_DEVICE * microvm_mmio_devices(&args))),
        _ => text_budget,
    };
    let (ram, fw_data) = match machine {
        QemuMachine::Q35 => (layout::qemu_q35(inp.size), layout::QEMU_PC_FW_DATA),
        QemuMachine::Microvm => (layout::qemu_microvm(inp.size), 0),
    };
    // QEMU itself writes no guest RAM on a q35 + OVMF boot: the firmware
    // is a ROM above RAM, ACPI, SMBIOS, e820 and the -kernel/-initrd/
    // -append data are fw_cfg items in QEMU's memory that the firmware
    // copies into memory it allocates (never claimed by ZeroStartPei).
    // What the launcher refuses above (-device loader, -incoming, -loadvm)
    // is what would write it. The floor covers the rest.
    let exclude = match boot {
        Boot::Uefi => vec![],
        Boot::Direct => {
            let size = |opt: &'static str, path: &Option<String>| -> Result<u64, Error> {
                let Some(p) = path else { return Ok(0) };
                std::fs::metadata(p)
                    .map(|m| m.len())
                    .map_err(|err| Error::BootFile {
                        opt,
                        path: p.into(),
                        err,
                    })
            };
            let kernel_err = |p: &String, err| Error::BootFile {
                opt: "-kernel",
                path: p.into(),
                err,
            };
            // The kernel's setup header (or ELF header) decides where the
            // initrd goes and whether segments are loaded one by one.
            let header = match &kernel {
                None => Vec::new(),
                Some(p) => file_head(p, 0x400).map_err(|e| kernel_err(p, e))?,
            };
            let format = layout::kernel_format(&header);
            // Anything else (a multiboot image) is loaded, with its
            // modules, where neither rule below says.
            if let (Some(p), None) = (&kernel, format) {
                if inp.hint != Carrier::None {
                    return Err(Error::UnknownKernelFormat(p.into()));
                }
            }
            let initrd =
                layout::qemu_initrd(&header, ram[0].len, fw_data, size("-initrd", &initrd)?);
            let mut w = layout::qemu_direct_writes(ram[0].len, size("-kernel", &kernel)?, initrd);
            // An ELF kernel (PVH) is loaded segment by segment at its
            // physical addresses instead. Only then is the whole file read:
            // the usual bzImage needs its header alone, and this runs on the
            // launch path, more than once.
            if let (Some(p), Some(layout::KernelFormat::Elf)) = (&kernel, format) {
                let image = std::fs::read(p).map_err(|e| kernel_err(p, e))?;
                if let Some(segs) = layout::elf_load_segments(&image) {
                    w.extend(segs.iter().map(|&(s, e)| (s, e - s)));
                }
            }
            w
        }
    };
    let hint_ranges = layout::hint_ranges(&ram, &exclude);
    Ok(Built {
        args,
        ram,
        hint_ranges,
        boot,
        text_budget,
    })
}

/// cloud-hypervisor's option name of `a` (`--memory` and `--memory=...`).
fn chv_opt(a: &str) -> Option<&str> {
    let s = a.strip_prefix("--")?;
    Some(s.split('=').next().unwrap_or(s))
}

/// The boot path of a cloud-hypervisor command line: direct when it names
/// `--kernel` and the launcher got no `--firmware`, else a firmware boot.
pub fn chv_boot(user: &[String], firmware: bool) -> Boot {
    if !firmware && user.iter().any(|a| chv_opt(a) == Some("kernel")) {
        Boot::Direct
    } else {
        Boot::Uefi
    }
}

/// cloud-hypervisor: adds `--memory size=0` and `--memory-zone
/// id=,size=,file=,shared=on[,hugepages=on,hugepage_size=]`; then for a
/// firmware boot `--firmware` and, with a hint, `--fw-cfg-config
/// e820=off,kernel=off,cmdline=off,initramfs=off,acpi_table=off,items=[...]`
/// or, for a binary without fw_cfg (every release binary:
/// [`chv_firmware_channel`] asks its `--help`), `--platform
/// oem_strings=[prezero.hint=<text>]` (merged into the user's
/// `--platform`), which ZeroStartPkg reads when there is no fw_cfg file;
/// and for a direct kernel boot (`--kernel`, no `--firmware`) the hint on
/// `--cmdline`.
///
/// `e820=off`: on this command line (`--memory size=0` plus a zone)
/// cloud-hypervisor computes fw_cfg's `etc/e820` as `0 - HIGH_RAM_START`
/// (v53.0 `devices/src/legacy/fw_cfg.rs`), a ~16 EiB RAM entry in a release
/// build and a panic in a debug one; ZeroStartPkg never reads it.
/// `acpi_table=off`: the firmware finds the tables in guest memory as it
/// does without fw_cfg. `hint=off` needs neither the firmware nor fw_cfg.
///
/// A firmware boot takes the guest kernel from a disk the firmware boots
/// (an EFI system partition, as in every cloud image), never from
/// `--kernel`: cloud-hypervisor refuses `--firmware` beside `--kernel`
/// (`FirmwarePlusOtherPayloads`, v53.0 `PayloadConfig::validate`), and its
/// fw_cfg `kernel=on` serves only `--kernel`'s own file, so there is no way
/// to hand the firmware a separate kernel over fw_cfg as QEMU's `-kernel`
/// does. `--kernel`, `--initramfs` and `--cmdline` beside `--firmware` are
/// refused here with that reason, before cloud-hypervisor would refuse them
/// with less.
///
/// `firmware_image` is the firmware's bytes: its PT_LOAD segments are
/// written into guest RAM before the first instruction. On a direct boot
/// the kernel (a PVH ELF: its segments, read from the file), the
/// initramfs at the top of the first RAM region and the low structures
/// below 1 MiB are what cloud-hypervisor writes.
pub fn cloud_hypervisor(
    user: &[String],
    inp: &Inputs,
    firmware_image: &[u8],
) -> Result<Built, Error> {
    let k = VmmKind::CloudHypervisor;
    let boot = chv_boot(user, inp.firmware.is_some());
    if boot == Boot::Uefi && inp.firmware.is_none() && inp.hint != Carrier::None {
        return Err(Error::ChvNeedsFirmware);
    }
    let (mut kernel, mut initramfs, mut cmdline, mut platform) = (None, None, None, None);
    for (i, a) in user.iter().enumerate() {
        let Some(opt) = chv_opt(a) else { continue };
        let (val, val_at) = option_value(user, i);
        match opt {
            "memory" | "memory-zone" => {
                return Err(conflict(k, a, "the launcher adds the memory zone"))
            }
            "platform" if val.contains(zerohint::TEXT_PREFIX) => {
                return Err(conflict(
                    k,
                    a,
                    "the launcher adds the prezero.hint= OEM string",
                ))
            }
            "platform" => platform = Some((i, val, val_at)),
            "fw-cfg-config" => {
                return Err(conflict(
                    k,
                    a,
                    "the launcher adds --fw-cfg-config with the hint item",
                ))
            }
            "firmware" => {
                return Err(conflict(
                    k,
                    a,
                    "pass the firmware as the launcher's --firmware",
                ))
            }
            "restore" => return Err(conflict(
                k,
                a,
                "restoring a VM writes guest RAM before its first instruction, so no hint can hold",
            )),
            "numa" => {
                return Err(conflict(
                    k,
                    a,
                    "NUMA nodes would name memory zones the launcher does not create",
                ))
            }
            "disk" if !inp.devices.disks.is_empty() => {
                return Err(conflict(k, a, "pass every disk as the launcher's --disk"))
            }
            "net" if !inp.devices.nets.is_empty() => {
                return Err(conflict(k, a, "pass every tap as the launcher's --net"))
            }
            "vsock" if inp.devices.vsock.is_some() => {
                return Err(conflict(k, a, "the launcher's --vsock adds it"))
            }
            "kernel" | "cmdline" | "initramfs" if inp.firmware.is_some() => {
                return Err(conflict(
                    k,
                    a,
                    "cloud-hypervisor refuses --firmware beside --kernel (FirmwarePlusOtherPayloads) and ignores --cmdline/--initramfs without one, so the firmware cannot get a kernel from it; boot the kernel from a --disk with an EFI system partition (a UKI at /EFI/BOOT/BOOTX64.EFI, as cloud images have), or drop --firmware for a direct kernel boot",
                ))
            }
            "kernel" => kernel = Some(val),
            "initramfs" => initramfs = Some(val),
            "cmdline" => cmdline = Some(KernelLine::take(k, a, val, val_at)?),
            _ => {}
        }
    }
    // One zone per file, laid out one after another from guest address
    // 0 around the 32-bit hole as one zone of their total size would be
    // (v53.0 `MemoryManager::create_memory_regions_from_zones`: each zone
    // fills the RAM ranges where the one before it stopped, its file
    // offset continuing across the hole), so the layout, the hint and the
    // file offsets do not depend on how many pieces the lease has.
    if inp.mem.is_empty() || inp.mem.iter().map(|f| f.size).sum::<u64>() != inp.size {
        return Err(Error::BadMemory(format!(
            "memory files of {:?} bytes for size={}; the launcher's regions must add up to the guest's RAM",
            inp.mem.iter().map(|f| f.size).collect::<Vec<_>>(),
            inp.size
        )));
    }
    if let Some(f) = inp.mem.iter().find(|f| f.offset != 0) {
        return Err(Error::BadMemory(format!(
            "the region starts at offset {} of its file, but cloud-hypervisor's --memory-zone file= maps from offset 0; use a pool with one file per region",
            f.offset
        )));
    }
    let page = match inp.hugepage_bytes {
        Some(p) => format!(",hugepages=on,hugepage_size={}M", p >> 20),
        None => ",hugepages=off".into(),
    };
    // One zone keeps its old id; several are numbered in guest order.
    let zones: Vec<String> = inp
        .mem
        .iter()
        .enumerate()
        .map(|(i, f)| {
            format!(
                "id={},size={},file={},shared=on{page}",
                numbered(MEMORY_ID, i, inp.mem.len()),
                f.size,
                f.path
            )
        })
        .collect();
    let mut args: Vec<String> = user.to_vec();
    let text_budget = match inp.hint {
        // An OEM string has no line to share: only the text's own limit.
        Carrier::Smbios(_) => Some(zerohint::TEXT_MAX_CHARS),
        _ => carry_text(
            k,
            vmm_cmd::chv::CMDLINE,
            cmdline.as_ref(),
            boot,
            &inp.hint,
            &mut args,
        )?,
    };
    args.extend([vmm_cmd::chv::MEMORY.into(), "size=0".into()]);
    for z in zones {
        args.extend([vmm_cmd::chv::MEMORY_ZONE.into(), z]);
    }
    let ram = layout::cloud_hypervisor(inp.size);
    let exclude: Vec<(u64, u64)> = match (boot, &inp.firmware) {
        (Boot::Uefi, Some(fw)) => {
            let segs = layout::elf_load_segments(firmware_image)
                .ok_or_else(|| Error::ChvFirmwareNotElf(fw.clone()))?;
            args.extend([vmm_cmd::chv::FIRMWARE.into(), fw.display().to_string()]);
            match &inp.hint {
                Carrier::FwCfg(h) => args.extend([
                    vmm_cmd::chv::FW_CFG_CONFIG.into(),
                    format!(
                        "e820=off,kernel=off,cmdline=off,initramfs=off,acpi_table=off,items=[name={},file={h}]",
                        zerohint::FW_CFG_NAME
                    ),
                ]),
                Carrier::Smbios(t) => chv_oem_string(&mut args, platform, t),
                _ => {}
            }
            segs.iter().map(|&(s, e)| (s, e - s)).collect()
        }
        (Boot::Uefi, None) => vec![],
        (Boot::Direct, _) => {
            let read = |opt: &'static str, p: &str| {
                std::fs::read(p).map_err(|err| Error::BootFile {
                    opt,
                    path: p.into(),
                    err,
                })
            };
            let image = read("--kernel", kernel.as_deref().unwrap_or_default())?;
            let mut w: Vec<(u64, u64)> = match layout::elf_load_segments(&image) {
                Some(segs) => segs.iter().map(|&(s, e)| (s, e - s)).collect(),
                // Not a PVH ELF (cloud-hypervisor will say so): wherever
                // it would go from 1 MiB.
                None => vec![(1 << 20, image.len() as u64)],
            };
            let initramfs_bytes = match &initramfs {
                Some(p) => std::fs::metadata(p)
                    .map_err(|err| Error::BootFile {
                        opt: "--initramfs",
                        path: p.into(),
                        err,
                    })?
                    .len(),
                None => 0,
            };
            w.extend(layout::chv_direct_writes(ram[0].len, initramfs_bytes));
            w
        }
    };
    args.extend(chv_devices(&inp.devices)?);
    let hint_ranges = layout::hint_ranges(&ram, &exclude);
    Ok(Built {
        args,
        ram,
        hint_ranges,
        boot,
        text_budget,
    })
}

/// The user's Firecracker config file, parsed (from its `--config-file`).
fn fc_config(user: &[String]) -> Result<(fc::FcArgs, FcConfig), Error> {
    let parsed = fc::check_args(user)?;
    let text = std::fs::read_to_string(&parsed.config_file).map_err(|err| Error::BootFile {
        opt: "--config-file",
        path: parsed.config_file.clone().into(),
        err,
    })?;
    Ok((parsed, FcConfig::parse(&text)?))
}

/// Firecracker: its own `--config-file` replaced by the launcher's copy
/// ([`firecracker_config`]), `--no-api` unless the user gave an API socket;
/// the layout from the config, the kernel ELF and the initrd
/// (launch/firecracker.rs). Always a direct boot: Firecracker has no
/// firmware path. The launcher's `--disk`/`--net`/`--vsock` are refused:
/// Firecracker takes its devices from the config file.
pub fn firecracker(user: &[String], inp: &Inputs) -> Result<Built, Error> {
    let k = VmmKind::Firecracker;
    let (parsed, cfg) = fc_config(user)?;
    if inp.firmware.is_some() {
        return Err(conflict(
            k,
            "--firmware",
            "Firecracker has no firmware boot; it loads the kernel itself",
        ));
    }
    if inp.devices != DeviceOpts::default() {
        return Err(conflict(
            k,
            "--disk/--net/--vsock",
            "Firecracker takes its devices from the config file (drives, network-interfaces, vsock)",
        ));
    }
    fc::check_size(&cfg, inp.size)?;
    let budget = fc::text_budget(&cfg)?;
    let kernel = std::fs::read(cfg.kernel_image_path()).map_err(|err| Error::BootFile {
        opt: "kernel_image_path",
        path: cfg.kernel_image_path().into(),
        err,
    })?;
    let initrd_bytes = match cfg.initrd_path() {
        Some(p) => std::fs::metadata(p)
            .map_err(|err| Error::BootFile {
                opt: "initrd_path",
                path: p.into(),
                err,
            })?
            .len(),
        None => 0,
    };
    let lay = fc::guest_layout(&cfg, &kernel, initrd_bytes)?;
    if let Carrier::FwCfg(_) | Carrier::Smbios(_) = inp.hint {
        return Err(Error::HintTransport(
            "Firecracker takes the hint on boot_args only".into(),
        ));
    }
    let path = inp
        .vmm_config
        .clone()
        .unwrap_or_else(|| "/proc/self/fd/CONFIG_FD".into());
    Ok(Built {
        args: fc::args_with_config(user, &parsed, &path),
        ram: lay.ram,
        hint_ranges: lay.hint_ranges,
        boot: Boot::Direct,
        text_budget: Some(budget),
    })
}

/// Adds `prezero.hint=TEXT` to cloud-hypervisor's SMBIOS OEM strings: into
/// the user's `--platform` (PLATFORM: its index, value and the index of a
/// separate value argument), before the strings it lists, or as a new
/// `--platform oem_strings=[...]`. The text is base64url, so it needs no
/// quoting inside cloud-hypervisor's `[a,b]` list.
fn chv_oem_string(
    args: &mut Vec<String>,
    platform: Option<(usize, String, Option<usize>)>,
    text: &str,
) {
    let oem = format!("{}{text}", zerohint::TEXT_PREFIX);
    let Some((i, value, val_at)) = platform else {
        args.extend([
            vmm_cmd::chv::PLATFORM.into(),
            format!("oem_strings=[{oem}]"),
        ]);
        return;
    };
    let with = match value.find("oem_strings=[") {
        Some(at) => {
            let cut = at + "oem_strings=[".len();
            let sep = if value[cut..].starts_with(']') {
                ""
            } else {
                ","
            };
            format!("{}{oem}{sep}{}", &value[..cut], &value[cut..])
        }
        None if value.is_empty() => format!("oem_strings=[{oem}]"),
        None => format!("{value},oem_strings=[{oem}]"),
    };
    match val_at {
        Some(v) => args[v] = with,
        None => args[i] = format!("--platform={with}"),
    }
}

/// The config file the launcher hands Firecracker: the user's, with
/// ` prezero.hint=<text>` added to `boot_args` when there is a hint.
pub fn firecracker_config(user: &[String], hint: &Carrier) -> Result<String, Error> {
    let (_, cfg) = fc_config(user)?;
    match hint {
        Carrier::Text(t) => Ok(fc::with_hint(&cfg, t)?),
        _ => Ok(serde_json::to_string_pretty(cfg.json()).unwrap_or_default()),
    }
}

/// Whether a cloud-hypervisor binary has the fw_cfg device: builds without
/// the `fw_cfg` Cargo feature do not list `--fw-cfg-config` in `--help`.
pub fn chv_has_fw_cfg(help: &str) -> bool {
    help.contains("--fw-cfg-config")
}

/// Runs `binary --help` and checks it for fw_cfg support.
pub fn chv_firmware_channel(binary: &Path) -> Result<FirmwareChannel, Error> {
    let out = std::process::Command::new(binary)
        .arg("--help")
        .output()
        .map_err(|e| Error::VmmBinary {
            path: binary.to_path_buf(),
            err: e.to_string(),
        })?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok(match chv_has_fw_cfg(&text) {
        true => FirmwareChannel::FwCfg,
        false => FirmwareChannel::Smbios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn inputs(size: u64) -> Inputs {
        Inputs {
            size,
            mem: vec![MemFile {
                path: "/proc/self/fd/7".into(),
                offset: 0,
                size,
            }],
            hugepage_bytes: Some(2 * MIB),
            hint: Carrier::FwCfg("/proc/self/fd/8".into()),
            firmware: Some("/fw/CLOUDHV.fd".into()),
            firmware_in_args: false,
            qemu_ram: QemuRam::default(),
            devices: DeviceOpts::default(),
            vmm_config: None,
        }
    }

    /// A PVH-style ELF64 with one PT_LOAD at 1 MiB..5 MiB, like CloudHv.
    fn cloudhv_like() -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[18..20].copy_from_slice(&3u16.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        b[64..68].copy_from_slice(&1u32.to_le_bytes());
        b[64 + 24..64 + 32].copy_from_slice(&MIB.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&(4 * MIB).to_le_bytes());
        b[64 + 40..64 + 48].copy_from_slice(&(4 * MIB).to_le_bytes());
        b
    }

    #[test]
    fn chv_arguments_match_the_reference() {
        let user = s(&[
            "--cpus",
            "boot=2",
            "--disk",
            "path=/img/esp.raw",
            "--serial",
            "tty",
            "--console",
            "off",
        ]);
        let b = cloud_hypervisor(&user, &inputs(GIB), &cloudhv_like()).unwrap();
        let tail = &b.args[user.len()..];
        assert_eq!(
            tail,
            s(&[
                "--memory",
                "size=0",
                "--memory-zone",
                "id=zerostart-ram,size=1073741824,file=/proc/self/fd/7,shared=on,hugepages=on,hugepage_size=2M",
                "--firmware",
                "/fw/CLOUDHV.fd",
                "--fw-cfg-config",
                "e820=off,kernel=off,cmdline=off,initramfs=off,acpi_table=off,items=[name=opt/org.zerostart/prezeroed,file=/proc/self/fd/8]",
            ])
        );
        // Item names are at most 56 bytes (the reference).
        assert!(zerohint::FW_CFG_NAME.len() <= 56);
        // shared=on always: without it the zone is MAP_PRIVATE and guest
        // writes would never reach the pool's file.
        assert!(b.args.iter().any(|a| a.contains("shared=on")));
        assert_eq!(b.hint_ranges, vec![(32 * MIB, GIB - 32 * MIB)]);
        let mut i = inputs(GIB);
        i.hugepage_bytes = None;
        i.hint = Carrier::None;
        let b = cloud_hypervisor(&[], &i, &cloudhv_like()).unwrap();
        assert!(b.args.contains(
            &"id=zerostart-ram,size=1073741824,file=/proc/self/fd/7,shared=on,hugepages=off"
                .to_string()
        ));
        // hint=off needs no fw_cfg at all (release binaries have none).
        assert!(!b.args.iter().any(|a| a.contains("fw-cfg")), "{:?}", b.args);
    }

    #[test]
    fn chv_release_binary_carries_the_hint_in_an_oem_string() {
        let mut i = inputs(GIB);
        i.hint = Carrier::Smbios("ABC".into());
        let b = cloud_hypervisor(&s(&["--cpus", "boot=2"]), &i, &cloudhv_like()).unwrap();
        assert!(!b.args.iter().any(|a| a.contains("fw-cfg")), "{:?}", b.args);
        let tail = &b.args[b.args.len() - 2..];
        assert_eq!(tail, s(&["--platform", "oem_strings=[prezero.hint=ABC]"]));
        // Only the text's own limit: no kernel command line to share.
        assert_eq!(b.text_budget, Some(zerohint::TEXT_MAX_CHARS));
        // The same ranges as over fw_cfg: the firmware claims them alike.
        assert_eq!(b.hint_ranges, vec![(32 * MIB, GIB - 32 * MIB)]);
        // Merged into the user's --platform, in both argument forms.
        for (user, want) in [
            (
                s(&["--platform", "serial_number=42"]),
                "serial_number=42,oem_strings=[prezero.hint=ABC]",
            ),
            (
                s(&["--platform", "oem_strings=[a,b],uuid=u"]),
                "oem_strings=[prezero.hint=ABC,a,b],uuid=u",
            ),
            (
                s(&["--platform", "oem_strings=[]"]),
                "oem_strings=[prezero.hint=ABC]",
            ),
            (
                s(&["--platform=num_pci_segments=2"]),
                "--platform=num_pci_segments=2,oem_strings=[prezero.hint=ABC]",
            ),
        ] {
            let b = cloud_hypervisor(&user, &i, &cloudhv_like()).unwrap();
            assert!(b.args.contains(&want.to_string()), "{want}: {:?}", b.args);
            assert_eq!(b.args.iter().filter(|a| a.contains("platform")).count(), 1);
        }
        // The user's own hint string would be a second one (Duplicate).
        let e = cloud_hypervisor(
            &s(&["--platform", "oem_strings=[prezero.hint=XYZ]"]),
            &i,
            &cloudhv_like(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("adds the prezero.hint= OEM string"),
            "{e}"
        );
        // Neither QEMU nor Firecracker has this channel to firmware.
        assert!(matches!(
            qemu(&s(&["-kernel", "/k"]), &i),
            Err(Error::HintTransport(_))
        ));
    }

    #[test]
    fn chv_refusals() {
        let fw = cloudhv_like();
        for bad in [
            "--memory",
            "--memory=size=1G",
            "--memory-zone",
            "--fw-cfg-config",
            "--firmware",
            "--restore",
            "--kernel",
            "--cmdline",
            "--initramfs",
        ] {
            let e = cloud_hypervisor(&s(&[bad, "x"]), &inputs(GIB), &fw).unwrap_err();
            assert!(
                e.to_string().contains(bad.split('=').next().unwrap()),
                "{e}"
            );
        }
        // The kernel refusal says why and what to do instead.
        let e = cloud_hypervisor(&s(&["--kernel", "/k/bzImage"]), &inputs(GIB), &fw)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("FirmwarePlusOtherPayloads") && e.contains("EFI system partition"),
            "{e}"
        );
        let mut i = inputs(GIB);
        i.firmware = None;
        let e = cloud_hypervisor(&[], &i, &fw).unwrap_err().to_string();
        assert!(
            e.contains("--kernel vmlinux") && e.contains("--firmware CLOUDHV.fd"),
            "{e}"
        );
        // Without a hint there is nothing to carry: no firmware needed.
        i.hint = Carrier::None;
        assert!(cloud_hypervisor(&[], &i, &fw).is_ok());
        let e = cloud_hypervisor(&[], &inputs(GIB), b"MZ")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an ELF"), "{e}");
        let mut i = inputs(GIB);
        i.mem[0].offset = 4096;
        assert!(cloud_hypervisor(&[], &i, &fw).is_err());
    }

    /// A PVH ELF kernel with one PT_LOAD at 16 MiB..(16 + mib) MiB.
    fn vmlinux_like(mib: u64) -> Vec<u8> {
        let mut b = cloudhv_like();
        b[64 + 24..64 + 32].copy_from_slice(&(16 * MIB).to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&(mib * MIB).to_le_bytes());
        b[64 + 40..64 + 48].copy_from_slice(&(mib * MIB).to_le_bytes());
        b
    }

    #[test]
    fn chv_direct_boot_carries_the_hint_on_cmdline() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("vmlinux");
        std::fs::write(&kernel, vmlinux_like(40)).unwrap();
        let kernel = kernel.display().to_string();
        let initramfs = sized_file(dir.path(), "initramfs", 3 * MIB);
        let mut i = inputs(GIB);
        i.firmware = None;
        i.hint = Carrier::Text("ABC".into());
        let user = s(&[
            "--kernel",
            &kernel,
            "--initramfs",
            &initramfs,
            "--cmdline",
            "console=ttyS0",
        ]);
        let b = cloud_hypervisor(&user, &i, &[]).unwrap();
        assert_eq!(b.boot, Boot::Direct);
        assert_eq!(b.args[5], "console=ttyS0 prezero.hint=ABC");
        // No firmware, no fw_cfg: what every release binary can run.
        assert!(
            !b.args
                .iter()
                .any(|a| a.contains("firmware") || a.contains("fw-cfg")),
            "{:?}",
            b.args
        );
        assert_eq!(
            b.text_budget,
            Some(2047 - "console=ttyS0 prezero.hint=".len())
        );
        // The kernel's segment [16, 56) MiB and the initramfs at the top of
        // low RAM (3 MiB: 4 + 2 MiB) are left out.
        assert_eq!(b.hint_ranges, vec![(56 * MIB, GIB - 6 * MIB - 56 * MIB)]);
        // No --cmdline: the launcher adds one.
        let b = cloud_hypervisor(&s(&["--kernel", &kernel]), &i, &[]).unwrap();
        let n = b.args.iter().position(|a| a == "--cmdline").unwrap();
        assert_eq!(b.args[n + 1], "prezero.hint=ABC");
        // A hint already on the line is someone else's.
        let e = cloud_hypervisor(
            &s(&["--kernel", &kernel, "--cmdline", "prezero.hint=x"]),
            &i,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("prezero.hint parameter itself"), "{e}");
        let e = cloud_hypervisor(&s(&["--kernel", "/no/such/vmlinux"]), &i, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--kernel /no/such/vmlinux"), "{e}");
        assert_eq!(chv_boot(&s(&["--kernel", &kernel]), false), Boot::Direct);
        assert_eq!(chv_boot(&s(&["--kernel", &kernel]), true), Boot::Uefi);
    }

    #[test]
    fn firecracker_takes_the_hint_in_its_config() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("vmlinux");
        std::fs::write(&kernel, vmlinux_like(20)).unwrap();
        let cfg = dir.path().join("vm.json");
        std::fs::write(
            &cfg,
            format!(
                r#"{{"boot-source": {{"kernel_image_path": "{}", "boot_args": "console=ttyS0"}},
                    "machine-config": {{"vcpu_count": 1, "mem_size_mib": 1024}}, "x-unknown": 1}}"#,
                kernel.display()
            ),
        )
        .unwrap();
        let user = s(&["--config-file", &cfg.display().to_string()]);
        let mut i = inputs(GIB);
        i.firmware = None;
        i.hint = Carrier::Text("ABC".into());
        i.vmm_config = Some("/proc/self/fd/9".into());
        let b = firecracker(&user, &i).unwrap();
        assert_eq!(b.boot, Boot::Direct);
        assert_eq!(b.args, s(&["--config-file", "/proc/self/fd/9", "--no-api"]));
        // The kernel's segment [16, 36) MiB is left out, the floor too.
        assert_eq!(b.hint_ranges, vec![(36 * MIB, GIB - 36 * MIB)]);
        let json = firecracker_config(&user, &i.hint).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v["boot-source"]["boot_args"],
            "console=ttyS0 prezero.hint=ABC"
        );
        assert_eq!(v["x-unknown"], 1);
        // Firecracker has no firmware, no fw_cfg, and its own devices.
        i.hint = Carrier::FwCfg("/proc/self/fd/8".into());
        assert!(firecracker(&user, &i)
            .unwrap_err()
            .to_string()
            .contains("internal"));
        i.hint = Carrier::None;
        i.firmware = Some("/fw/CLOUDHV.fd".into());
        assert!(firecracker(&user, &i)
            .unwrap_err()
            .to_string()
            .contains("firmware"));
        i.firmware = None;
        i.size = 2 * GIB;
        i.mem[0].size = i.size;
        assert!(firecracker(&user, &i)
            .unwrap_err()
            .to_string()
            .contains("mem_size_mib"));
    }

    #[test]
    fn each_vmm_answers_through_its_driver() {
        let k = s(&["-kernel", "/k"]);
        assert_eq!(VmmKind::Qemu.driver().boot(&k, false), Boot::Direct);
        assert_eq!(VmmKind::Qemu.driver().boot(&k, true), Boot::Uefi);
        let k = s(&["--kernel", "/k"]);
        assert_eq!(
            VmmKind::CloudHypervisor.driver().boot(&k, false),
            Boot::Direct
        );
        assert_eq!(VmmKind::Firecracker.driver().boot(&[], false), Boot::Direct);
        assert!(VmmKind::Qemu.driver().takes_memory());
        assert!(!VmmKind::Firecracker.driver().takes_memory());
        // Only a cloud-hypervisor firmware boot with a hint needs fw_cfg: a
        // binary that cannot even run is refused then, and only then.
        let none = Path::new("/no/such/cloud-hypervisor");
        let chv = VmmKind::CloudHypervisor.driver();
        assert!(chv.probe(none, Boot::Uefi, true).is_err());
        assert!(chv.probe(none, Boot::Direct, true).is_ok());
        assert!(chv.probe(none, Boot::Uefi, false).is_ok());
        // QEMU without a firmware or a kernel cannot carry the hint.
        let mut i = inputs(GIB);
        i.firmware = None;
        let e = VmmKind::Qemu
            .driver()
            .build(&[], &i, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("-kernel"), "{e}");
    }

    #[test]
    fn chv_fw_cfg_detection() {
        assert!(chv_has_fw_cfg(
            "  --fw-cfg-config <fw_cfg_config>  QEMU fw_cfg ..."
        ));
        assert!(!chv_has_fw_cfg("  --firmware <firmware>  Path to firmware"));
    }

    #[test]
    fn chv_hint_skips_the_hole_and_the_firmware() {
        let b = cloud_hypervisor(&[], &inputs(5 * GIB), &cloudhv_like()).unwrap();
        assert_eq!(
            b.hint_ranges,
            vec![(32 * MIB, 3 * GIB - 32 * MIB), (4 * GIB, 2 * GIB)]
        );
    }

    /// A pool lease of several regions: one `--memory-zone` per file in
    /// guest order, numbered ids, the same layout and hint as one zone of
    /// the total (cloud-hypervisor lays zones out one after another; a
    /// zone may straddle the 32-bit hole, its file offset continuing).
    #[test]
    fn chv_several_regions_are_one_zone_each() {
        let region = 640 * MIB;
        let size = 5 * region;
        let mut i = inputs(size);
        i.mem = (0..5)
            .map(|k| MemFile {
                path: format!("/proc/self/fd/{}", 10 + k),
                offset: 0,
                size: region,
            })
            .collect();
        let b = cloud_hypervisor(&[], &i, &cloudhv_like()).unwrap();
        let zones: Vec<&String> = b
            .args
            .iter()
            .zip(b.args.iter().skip(1))
            .filter(|(o, _)| *o == "--memory-zone")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(zones.len(), 5, "{:?}", b.args);
        for (k, z) in zones.iter().enumerate() {
            assert_eq!(
                **z,
                format!(
                    "id=zerostart-ram{k},size={region},file=/proc/self/fd/{},shared=on,hugepages=on,hugepage_size=2M",
                    10 + k
                )
            );
        }
        assert_eq!(
            b.args.iter().filter(|a| *a == "--memory").count(),
            1,
            "{:?}",
            b.args
        );
        // The layout and hint of one zone of the same size: zone 4
        // ([2560, 3200) MiB of guest RAM) straddles the hole at 3 GiB.
        let one = cloud_hypervisor(&[], &inputs(size), &cloudhv_like()).unwrap();
        assert_eq!(b.hint_ranges, one.hint_ranges);
        assert_eq!(b.ram, one.ram);
        assert_eq!(
            b.hint_ranges,
            vec![(32 * MIB, 3 * GIB - 32 * MIB), (4 * GIB, size - 3 * GIB)]
        );
        // A last piece holding the rest.
        let mut short = i.clone();
        short.size = size - region / 2;
        short.mem[4].size = region / 2;
        let b = cloud_hypervisor(&[], &short, &cloudhv_like()).unwrap();
        assert!(b
            .args
            .contains(&format!("id=zerostart-ram4,size={},file=/proc/self/fd/14,shared=on,hugepages=on,hugepage_size=2M", region / 2)));
        // Files that do not add up to the guest, or start inside their
        // file, are refused (a guest on part of its RAM, or a zone on the
        // wrong bytes).
        let mut bad = i.clone();
        bad.mem.pop();
        let e = cloud_hypervisor(&[], &bad, &cloudhv_like())
            .unwrap_err()
            .to_string();
        assert!(e.contains("must add up to the guest's RAM"), "{e}");
        let mut bad = i.clone();
        bad.mem[2].offset = 2 * MIB;
        let e = cloud_hypervisor(&[], &bad, &cloudhv_like())
            .unwrap_err()
            .to_string();
        assert!(e.contains("maps from offset 0"), "{e}");
    }

    /// How many files each VMM maps as one guest: a pool lease of several
    /// regions only for cloud-hypervisor.
    #[test]
    fn only_cloud_hypervisor_maps_several_files() {
        assert_eq!(VmmKind::Qemu.driver().max_pieces(), 1);
        assert_eq!(
            VmmKind::CloudHypervisor.driver().max_pieces(),
            pool::proto::MAX_PIECES
        );
        assert_eq!(VmmKind::Firecracker.driver().max_pieces(), 1);
    }

    #[test]
    fn qemu_arguments() {
        let mut i = inputs(GIB);
        i.firmware = Some("/fw/OVMF.fd".into());
        let user = s(&["-accel", "kvm", "-kernel", "/k/bzImage"]);
        let b = qemu(&user, &i).unwrap();
        assert_eq!(
            &b.args[user.len()..],
            s(&[
                "-machine",
                "q35",
                "-machine",
                "memory-backend=zerostart-ram",
                "-m",
                "1024M",
                "-object",
                "memory-backend-file,id=zerostart-ram,size=1073741824,mem-path=/proc/self/fd/7,share=on,prealloc=off",
                "-fw_cfg",
                "name=opt/org.zerostart/prezeroed,file=/proc/self/fd/8",
                "-bios",
                "/fw/OVMF.fd",
            ])
        );
        assert_eq!(b.hint_ranges, vec![(32 * MIB, GIB - 32 * MIB)]);
        // An explicit q35 is kept, not doubled.
        let b = qemu(&s(&["-machine", "q35,accel=kvm"]), &i).unwrap();
        assert_eq!(b.args.iter().filter(|a| *a == "q35").count(), 0);
        // 3 GiB: low RAM ends at 2 GiB, 1 GiB from 4 GiB.
        let b = qemu(&[], &inputs(3 * GIB)).unwrap();
        assert_eq!(
            b.hint_ranges,
            vec![(32 * MIB, 2 * GIB - 32 * MIB), (4 * GIB, GIB)]
        );
    }

    /// A file of `len` bytes (sparse) for -kernel / -initrd.
    fn sized_file(dir: &Path, name: &str, len: u64) -> String {
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().set_len(len).unwrap();
        p.display().to_string()
    }

    /// A file of `len` bytes with an x86 boot protocol 2.15 setup header:
    /// a 64-bit kernel's (`XLF_CAN_BE_LOADED_ABOVE_4G`) when `above_4g`,
    /// else one that keeps its initrd below `initrd_addr_max`.
    fn bzimage_like(
        dir: &Path,
        name: &str,
        len: u64,
        above_4g: bool,
        initrd_addr_max: u32,
    ) -> String {
        let p = sized_file(dir, name, len);
        let h =
            layout::test_setup_header(0x020f, if above_4g { 0x3 } else { 0x1 }, initrd_addr_max);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &h, 0).unwrap();
        p
    }

    /// A 10 MiB 64-bit bzImage, a 3 MiB initrd and 1 GiB inputs for a
    /// direct boot with the hint text `ABC` (no firmware).
    fn direct_boot(dir: &Path) -> (String, String, Inputs) {
        let kernel = bzimage_like(dir, "bzImage", 10 * MIB, true, 0x7fff_ffff);
        let initrd = sized_file(dir, "initrd", 3 * MIB);
        let mut i = inputs(GIB);
        i.firmware = None;
        i.hint = Carrier::Text("ABC".into());
        (kernel, initrd, i)
    }

    #[test]
    fn qemu_direct_boot_carries_the_hint_on_append() {
        let dir = tempfile::tempdir().unwrap();
        let (kernel, initrd, i) = direct_boot(dir.path());
        let user = s(&[
            "-kernel",
            &kernel,
            "-initrd",
            &initrd,
            "-append",
            "console=ttyS0",
        ]);
        let b = qemu(&user, &i).unwrap();
        assert_eq!(b.boot, Boot::Direct);
        assert_eq!(b.args[5], "console=ttyS0 prezero.hint=ABC");
        assert!(
            !b.args.iter().any(|a| a == "-bios" || a == "-fw_cfg"),
            "{:?}",
            b.args
        );
        // The whole line stays within COMMAND_LINE_SIZE.
        assert_eq!(
            b.text_budget,
            Some(2047 - "console=ttyS0 prezero.hint=".len())
        );
        // The kernel at 1 MiB is under the floor; the initrd (3 MiB, so 4)
        // and SeaBIOS's 64 MiB come off the top of low RAM.
        assert_eq!(b.hint_ranges, vec![(32 * MIB, GIB - 68 * MIB - 32 * MIB)]);
        // A kernel larger than the floor is left out where QEMU puts it.
        let big = bzimage_like(dir.path(), "big", 40 * MIB, true, 0x7fff_ffff);
        let b = qemu(&s(&["-kernel", &big]), &i).unwrap();
        assert_eq!(b.hint_ranges, vec![(41 * MIB, GIB - 64 * MIB - 41 * MIB)]);
        // An ELF kernel is left out where its segments go ([16, 56) MiB).
        let elf = dir.path().join("vmlinux");
        std::fs::write(&elf, vmlinux_like(40)).unwrap();
        let e = qemu(&s(&["-kernel", &elf.display().to_string()]), &i).unwrap();
        assert_eq!(e.hint_ranges, vec![(56 * MIB, GIB - 64 * MIB - 56 * MIB)]);
        // No -append: the launcher adds one.
        let n = b.args.iter().position(|a| a == "-append").unwrap();
        assert_eq!(b.args[n + 1], "prezero.hint=ABC");
        assert_eq!(b.text_budget, Some(2047 - "prezero.hint=".len()));
        // 3 GiB: low RAM ends at 2 GiB; the high GiB is all hinted.
        let mut i3 = i.clone();
        i3.size = 3 * GIB;
        i3.mem[0].size = i3.size;
        let b = qemu(&s(&["-kernel", &kernel]), &i3).unwrap();
        assert_eq!(
            b.hint_ranges,
            vec![(32 * MIB, 2 * GIB - 64 * MIB - 32 * MIB), (4 * GIB, GIB)]
        );
    }

    #[test]
    fn qemu_microvm_boots_directly_with_its_own_layout() {
        let dir = tempfile::tempdir().unwrap();
        let (kernel, initrd, i) = direct_boot(dir.path());
        let user = |m: &str, k: &str| {
            s(&[
                "-machine",
                m,
                "-kernel",
                k,
                "-initrd",
                &initrd,
                "-append",
                "console=ttyS0",
            ])
        };
        let b = qemu(&user("microvm,x-option-roms=off,rtc=on", &kernel), &i).unwrap();
        assert_eq!(b.boot, Boot::Direct);
        assert!(!b.args.iter().any(|a| a == "q35"), "{:?}", b.args);
        assert!(b.args.iter().any(|a| a == "console=ttyS0 prezero.hint=ABC"));
        // 1 GiB: all low RAM; the initrd and qboot's tables off the top.
        assert_eq!(b.hint_ranges, vec![(32 * MIB, GIB - 68 * MIB - 32 * MIB)]);
        // 8 GiB: low RAM ends at 3 GiB (q35: 2 GiB), 5 GiB from 4 GiB.
        let mut i8 = i.clone();
        i8.size = 8 * GIB;
        i8.mem[0].size = i8.size;
        let b = qemu(&user("microvm", &kernel), &i8).unwrap();
        assert_eq!(
            b.ram,
            vec![
                layout::RamRange {
                    gpa: 0,
                    len: 3 * GIB,
                    file_offset: 0
                },
                layout::RamRange {
                    gpa: 4 * GIB,
                    len: 5 * GIB,
                    file_offset: 3 * GIB
                },
            ]
        );
        assert_eq!(
            b.hint_ranges,
            vec![
                (32 * MIB, 3 * GIB - 68 * MIB - 32 * MIB),
                (4 * GIB, 5 * GIB)
            ]
        );
        // A kernel whose header keeps the initrd below 2 GiB gets it there,
        // in the middle of microvm's low RAM: left out where it lands.
        let low = bzimage_like(dir.path(), "bzImage-2g", 10 * MIB, false, 0x7fff_ffff);
        let b = qemu(&user("microvm", &low), &i8).unwrap();
        let at = (0x7fff_ffff - 3 * MIB) & !0xfff;
        assert_eq!(
            b.hint_ranges,
            vec![
                (32 * MIB, at - 32 * MIB),
                (at + 3 * MIB, 3 * GIB - 68 * MIB - at - 3 * MIB),
                (4 * GIB, 5 * GIB)
            ]
        );
        // Each virtio-mmio device costs room on the line (QEMU announces
        // it there), the launcher's own devices are virtio-mmio ones, and
        // auto-kernel-cmdline=off gives the room back.
        let plain = qemu(&user("microvm", &kernel), &i)
            .unwrap()
            .text_budget
            .unwrap();
        let mut rng = user("microvm", &kernel);
        rng.extend(s(&[
            "-device",
            "virtio-rng-device",
            "-device",
            "virtio-rng-pci",
        ]));
        let b = qemu(&rng, &i).unwrap();
        assert_eq!(b.text_budget, Some(plain - MICROVM_CMDLINE_PER_DEVICE));
        let mut j = i.clone();
        j.devices.vsock = Some(options::VsockConfig {
            cid: 3,
            socket: None,
        });
        let b = qemu(&rng, &j).unwrap();
        assert!(
            b.args.iter().any(|a| a == "vhost-vsock-device,guest-cid=3"),
            "{:?}",
            b.args
        );
        assert_eq!(b.text_budget, Some(plain - 2 * MICROVM_CMDLINE_PER_DEVICE));
        let off = user("microvm,auto-kernel-cmdline=off", &kernel);
        assert_eq!(qemu(&off, &j).unwrap().text_budget, Some(plain));
        // Only the machine's option says so, not the words anywhere else.
        let mut words = user("microvm", &kernel);
        words.extend(s(&["-name", "auto-kernel-cmdline=off"]));
        assert_eq!(
            qemu(&words, &j).unwrap().text_budget,
            Some(plain - MICROVM_CMDLINE_PER_DEVICE)
        );
        // microvm has no firmware boot here: refused with the way out.
        for (args, fw) in [
            (s(&["-machine", "microvm"]), None),
            (user("microvm", &kernel), Some(PathBuf::from("OVMF.fd"))),
        ] {
            let mut j = i.clone();
            j.firmware = fw;
            j.hint = Carrier::None;
            let e = qemu(&args, &j).unwrap_err().to_string();
            assert!(e.contains("microvm") && e.contains("give -kernel"), "{e}");
        }
    }

    #[test]
    fn qemu_direct_boot_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = bzimage_like(dir.path(), "bzImage", MIB, true, 0x7fff_ffff);
        let mut i = inputs(GIB);
        i.firmware = None;
        i.hint = Carrier::Text("ABC".into());
        // Someone else's hint on the line: ours would make it a Duplicate.
        for append in [
            "prezero.hint=XYZ",
            "quiet prezero.hint",
            "a prezero.hint=x prezero.hint=y",
        ] {
            let e = qemu(&s(&["-kernel", &kernel, "-append", append]), &i)
                .unwrap_err()
                .to_string();
            assert!(e.contains("prezero.hint parameter itself"), "{append}: {e}");
        }
        // After "--" it is init's argument, not a kernel parameter, and
        // the hint goes before the "--".
        let b = qemu(
            &s(&["-kernel", &kernel, "-append", "quiet -- prezero.hint=x"]),
            &i,
        )
        .unwrap();
        assert_eq!(b.args[3], "quiet prezero.hint=ABC -- prezero.hint=x");
        let e = qemu(&s(&["-kernel", &kernel, "-append", "dyndbg=\"x"]), &i)
            .unwrap_err()
            .to_string();
        assert!(e.contains("double quotes"), "{e}");
        let e = qemu(&s(&["-kernel", "/no/such/bzImage"]), &i)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("-kernel /no/such/bzImage") && e.contains("check the path"),
            "{e}"
        );
        // A kernel of no format the launcher knows (a multiboot image):
        // refused with a hint, fine without one.
        let other = sized_file(dir.path(), "multiboot.elf32", MIB);
        let e = qemu(&s(&["-kernel", &other]), &i).unwrap_err().to_string();
        assert!(
            e.contains("neither a bzImage nor an ELF") && e.contains("hint=off"),
            "{e}"
        );
        let mut off = i.clone();
        off.hint = Carrier::None;
        assert!(qemu(&s(&["-kernel", &other]), &off).is_ok());
        // The firmware's transport on a direct boot is a launcher bug.
        i.hint = Carrier::FwCfg("/proc/self/fd/8".into());
        let e = qemu(&s(&["-kernel", &kernel]), &i).unwrap_err().to_string();
        assert!(e.contains("internal"), "{e}");
        // With --firmware, -kernel is OVMF's to load: a firmware boot.
        assert_eq!(qemu_boot(&s(&["-kernel", &kernel]), true), Boot::Uefi);
        assert_eq!(qemu_boot(&s(&["-kernel", &kernel]), false), Boot::Direct);
        assert_eq!(qemu_boot(&s(&["-hda", "x.img"]), false), Boot::Uefi);
    }

    #[test]
    fn qemu_refusals() {
        let i = inputs(GIB);
        for bad in [
            vec!["-m", "2G"],
            vec!["--m", "2G"],
            vec!["-object", "memory-backend-ram,id=x,size=1G"],
            vec!["-machine", "pc"],
            vec!["-M", "q35,memory-backend=x"],
            vec!["-mem-path", "/dev/hugepages"],
            vec!["-mem-prealloc"],
            vec!["-numa", "node"],
            vec!["-bios", "x.fd"],
            vec!["-drive", "if=pflash,file=x.fd"],
            vec!["-device", "loader,file=x,addr=0x1000000"],
            vec!["-incoming", "tcp:0:4444"],
            vec!["-fw_cfg", "name=opt/org.zerostart/prezeroed,file=x"],
        ] {
            let e = qemu(&s(&bad), &i).unwrap_err().to_string();
            assert!(e.contains("conflicts"), "{bad:?}: {e}");
        }
        let mut i = inputs(GIB + 4096);
        i.firmware = None;
        assert!(qemu(&[], &i).is_err());
    }
    fn devices() -> DeviceOpts {
        DeviceOpts {
            disks: vec![
                options::disk("path=/img/root.img").unwrap(),
                options::disk("path=/img/seed.img,readonly=on").unwrap(),
            ],
            nets: crate::netplan::plan_nets(
                &[
                    options::net("tap=zstap0,vhost=on").unwrap(),
                    options::net("tap=zstap1,mac=0a:00:00:00:00:09,vhost=off").unwrap(),
                ],
                true,
            )
            .unwrap(),
            vsock: Some(options::launch_vsock("cid=7").unwrap()),
        }
    }

    /// `--disk` / `--net` / `--vsock` onto QEMU: virtio-blk-pci drives
    /// (raw, cache=none, read-only when asked), tap netdevs with vhost as
    /// decided and the MAC (the default one derived from the index),
    /// vhost-vsock-pci with the CID; the hint is unchanged by devices.
    #[test]
    fn qemu_device_arguments() {
        let mut inp = inputs(GIB);
        let plain = qemu(&[], &inp).unwrap();
        inp.devices = devices();
        let b = qemu(&[], &inp).unwrap();
        assert_eq!(&b.args[..plain.args.len()], &plain.args[..]);
        assert_eq!(
            &b.args[plain.args.len()..],
            s(&[
                "-drive",
                "file=/img/root.img,format=raw,if=none,id=zs-disk0,cache=none",
                "-device",
                "virtio-blk-pci,drive=zs-disk0",
                "-drive",
                "file=/img/seed.img,format=raw,if=none,id=zs-disk1,cache=none,readonly=on",
                "-device",
                "virtio-blk-pci,drive=zs-disk1",
                "-netdev",
                "tap,id=zs-net0,ifname=zstap0,script=no,downscript=no,vhost=on",
                "-device",
                "virtio-net-pci,netdev=zs-net0,mac=0a:5a:53:00:00:00,romfile=",
                "-netdev",
                "tap,id=zs-net1,ifname=zstap1,script=no,downscript=no,vhost=off",
                "-device",
                "virtio-net-pci,netdev=zs-net1,mac=0a:00:00:00:00:09,romfile=",
                "-device",
                "vhost-vsock-pci,guest-cid=7",
            ])
        );
        assert_eq!(
            b.hint_ranges, plain.hint_ranges,
            "devices write no guest RAM"
        );
        // Refused: a comma QEMU would split, and CH's socket=.
        let mut bad = inputs(GIB);
        bad.devices.disks = vec![options::disk("path=\"/a,b.img\"").unwrap()];
        let e = qemu(&[], &bad).unwrap_err().to_string();
        assert!(e.contains("comma") && e.contains("rename"), "{e}");
        let mut bad = inputs(GIB);
        bad.devices.vsock = Some(options::launch_vsock("cid=3,socket=/s").unwrap());
        let e = qemu(&[], &bad).unwrap_err().to_string();
        assert!(e.contains("socket=") && e.contains("give only cid="), "{e}");
    }

    /// The same options onto cloud-hypervisor's documented CLI.
    #[test]
    fn chv_device_arguments() {
        let mut inp = inputs(GIB);
        let plain = cloud_hypervisor(&[], &inp, &cloudhv_like()).unwrap();
        let mut d = devices();
        for n in &mut d.nets {
            n.vhost = false;
        }
        d.disks[0] = options::disk("path=\"/img/a,b.img\"").unwrap();
        d.vsock = Some(options::launch_vsock("cid=7,socket=/run/vm.vsock").unwrap());
        inp.devices = d.clone();
        let b = cloud_hypervisor(&[], &inp, &cloudhv_like()).unwrap();
        assert_eq!(
            &b.args[plain.args.len()..],
            s(&[
                "--disk",
                "path=\"/img/a,b.img\"",
                "path=/img/seed.img,readonly=on",
                "--net",
                "tap=zstap0,mac=0a:5a:53:00:00:00",
                "tap=zstap1,mac=0a:00:00:00:00:09",
                "--vsock",
                "cid=7,socket=/run/vm.vsock",
            ])
        );
        assert_eq!(b.hint_ranges, plain.hint_ranges);
        // Refusals: vhost=on, a vsock without its socket, and the user's
        // own --disk next to the launcher's.
        let mut bad = inp.clone();
        bad.devices.nets[0].vhost = true;
        let e = cloud_hypervisor(&[], &bad, &cloudhv_like())
            .unwrap_err()
            .to_string();
        assert!(e.contains("vhost=off"), "{e}");
        let mut bad = inp.clone();
        bad.devices.vsock = Some(options::launch_vsock("cid=7").unwrap());
        let e = cloud_hypervisor(&[], &bad, &cloudhv_like())
            .unwrap_err()
            .to_string();
        assert!(e.contains("add socket=PATH"), "{e}");
        let e = cloud_hypervisor(&s(&["--disk", "path=/x"]), &inp, &cloudhv_like())
            .unwrap_err()
            .to_string();
        assert!(e.contains("launcher's --disk"), "{e}");
        // Without launcher devices the user's own pass through.
        let own = s(&["--disk", "path=/x"]);
        let b = cloud_hypervisor(&own, &inputs(GIB), &cloudhv_like()).unwrap();
        assert_eq!(&b.args[..2], &own[..]);
    }
}
