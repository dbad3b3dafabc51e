//! The command line of every VMM this project starts, built in one place.
//!
//! A [`Spec`] says what guest to start and how (which VMM, its binary,
//! CPUs, memory and its backing, kernel, initrd, command line, firmware,
//! disks, taps, vsock, serial, QEMU's debug console and log); [`build`]
//! turns it into the argv (and, for Firecracker, the config file it
//! reads). The SLO runner (`vmm/slo`), `zerostart vmm-argv` (which the
//! Python harness of the nested host asks for the L2 command lines) and
//! the launcher's device and flag spellings all come from here, so a VMM's
//! flag changes in this file only.
//!
//! Why in `options`: it already owns every spelling of zerostart's own
//! command line (`--memory`, `--disk`, `--net`, `--vsock`), and a
//! `zerostart run` or `zerostart launch` line is one of the commands
//! built here; serde is the one new dependency (the spec is JSON because
//! the Python harness writes it).
//!
//! Each flag is spelled once: the constants of [`qemu`], [`chv`],
//! [`firecracker`] and [`zerostart`] are the flags, the functions below
//! the only places that put them together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// QEMU's flags (`qemu-system-x86_64`).
pub mod qemu {
    /// Firmware and option ROM directory.
    pub const DATA_DIR: &str = "-L";
    /// Machine type and its properties.
    pub const MACHINE: &str = "-machine";
    /// Accelerator.
    pub const ACCEL: &str = "-accel";
    /// CPU model.
    pub const CPU: &str = "-cpu";
    /// vCPU count.
    pub const SMP: &str = "-smp";
    /// RAM size.
    pub const MEMORY: &str = "-m";
    /// A backend object (memory).
    pub const OBJECT: &str = "-object";
    /// Preallocate anonymous RAM.
    pub const MEM_PREALLOC: &str = "-mem-prealloc";
    /// Firmware image.
    pub const BIOS: &str = "-bios";
    /// No default devices.
    pub const NODEFAULTS: &str = "-nodefaults";
    /// No user config files.
    pub const NO_USER_CONFIG: &str = "-no-user-config";
    /// Display.
    pub const DISPLAY: &str = "-display";
    /// No display, the serial port and monitor multiplexed on stdio unless
    /// given elsewhere (with `-nodefaults` and `-serial stdio`: as
    /// `-display none`).
    pub const NOGRAPHIC: &str = "-nographic";
    /// The human monitor's backend.
    pub const MONITOR: &str = "-monitor";
    /// An SMBIOS table entry.
    pub const SMBIOS: &str = "-smbios";
    /// Exit on guest reset instead of rebooting.
    pub const NO_REBOOT: &str = "-no-reboot";
    /// Serial port backend.
    pub const SERIAL: &str = "-serial";
    /// ISA debug console backend.
    pub const DEBUGCON: &str = "-debugcon";
    /// A device property.
    pub const GLOBAL: &str = "-global";
    /// The debug console at port 0x402 (OVMF's).
    pub const DEBUGCON_IOBASE: &str = "isa-debugcon.iobase=0x402";
    /// Log items.
    pub const LOG_ITEMS: &str = "-d";
    /// A trace event.
    pub const TRACE: &str = "-trace";
    /// Log file.
    pub const LOG_FILE: &str = "-D";
    /// How a guest ended and no more (the harness's boots, zstest.qemu's
    /// how_it_ended): every CPU reset (a triple fault says so) and the
    /// power-off trace event, without guest errors, which a whole nested
    /// host under TCG would pour into the file.
    pub const END_LOG_WHAT: [&str; 4] =
        ["cpu_reset", TRACE, "qemu_system_shutdown_request", LOG_FILE];
    /// What the nested harness logs: every CPU reset and guest error, and
    /// the trace event that fires on a guest's power-off only (under
    /// `-no-reboot` a reset or a triple fault exits 0 too).
    pub const LOG_WHAT: [&str; 4] = [
        "cpu_reset,guest_errors",
        TRACE,
        "qemu_system_shutdown_request",
        LOG_FILE,
    ];
    /// Direct-boot kernel.
    pub const KERNEL: &str = "-kernel";
    /// Direct-boot initrd.
    pub const INITRD: &str = "-initrd";
    /// Direct-boot kernel command line.
    pub const APPEND: &str = "-append";
    /// A block backend.
    pub const DRIVE: &str = "-drive";
    /// A device.
    pub const DEVICE: &str = "-device";
    /// A network backend.
    pub const NETDEV: &str = "-netdev";
    /// A guest NUMA node.
    pub const NUMA: &str = "-numa";
    /// A fw_cfg file.
    pub const FW_CFG: &str = "-fw_cfg";
    /// A NIC with its backend in one option.
    pub const NIC: &str = "-nic";
    /// The boot order.
    pub const BOOT: &str = "-boot";
    /// The memory backend's id every command here names (`memory-backend=ram`).
    pub const RAM_ID: &str = "ram";
}

/// cloud-hypervisor's flags.
pub mod chv {
    /// vCPUs (`boot=N`).
    pub const CPUS: &str = "--cpus";
    /// RAM (`size=`, or `size=0` with zones).
    pub const MEMORY: &str = "--memory";
    /// A RAM zone (a file-backed region).
    pub const MEMORY_ZONE: &str = "--memory-zone";
    /// Firmware (CLOUDHV.fd).
    pub const FIRMWARE: &str = "--firmware";
    /// fw_cfg items (builds with the fw_cfg feature).
    pub const FW_CFG_CONFIG: &str = "--fw-cfg-config";
    /// SMBIOS platform strings.
    pub const PLATFORM: &str = "--platform";
    /// Direct-boot kernel.
    pub const KERNEL: &str = "--kernel";
    /// Direct-boot initramfs.
    pub const INITRAMFS: &str = "--initramfs";
    /// Direct-boot kernel command line.
    pub const CMDLINE: &str = "--cmdline";
    /// Disks (one flag, several values).
    pub const DISK: &str = "--disk";
    /// NICs (one flag, several values).
    pub const NET: &str = "--net";
    /// vsock.
    pub const VSOCK: &str = "--vsock";
    /// Serial port.
    pub const SERIAL: &str = "--serial";
    /// virtio console.
    pub const CONSOLE: &str = "--console";
}

/// Firecracker's flags.
pub mod firecracker {
    /// The VM's whole configuration.
    pub const CONFIG_FILE: &str = "--config-file";
    /// No API socket (the config file is all).
    pub const NO_API: &str = "--no-api";
}

/// zerostart's own subcommands and flags (`zerostart run`, `zerostart
/// launch`), whose values are this crate's grammars.
pub mod zerostart {
    /// zerostart's own VMM.
    pub const RUN: &str = "run";
    /// An external VMM on pool memory.
    pub const LAUNCH: &str = "launch";
    /// Which VMM the launcher starts.
    pub const VMM: &str = "--vmm";
    /// Where that VMM's binary is.
    pub const VMM_BINARY: &str = "--vmm-binary";
    /// Kernel.
    pub const KERNEL: &str = "--kernel";
    /// Initramfs.
    pub const INITRAMFS: &str = "--initramfs";
    /// Firmware.
    pub const FIRMWARE: &str = "--firmware";
    /// Kernel command line.
    pub const CMDLINE: &str = "--cmdline";
    /// vCPUs (`boot=N`).
    pub const CPUS: &str = "--cpus";
    /// Memory (`crate::memory`'s grammar, or the launcher's).
    pub const MEMORY: &str = "--memory";
    /// Serial port.
    pub const SERIAL: &str = "--serial";
    /// The timeline document.
    pub const TIMELINE: &str = "--timeline";
    /// A disk (`crate::disk`).
    pub const DISK: &str = "--disk";
    /// A NIC (`crate::net`).
    pub const NET: &str = "--net";
    /// vsock (`crate::vsock`).
    pub const VSOCK: &str = "--vsock";
    /// The end of the launcher's options; the VMM's arguments follow.
    pub const END: &str = "--";
}

/// Which program a [`Spec`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vmm {
    /// `qemu-system-x86_64`.
    Qemu,
    /// `cloud-hypervisor`.
    CloudHypervisor,
    /// `firecracker`.
    Firecracker,
    /// `zerostart run`.
    ZerostartRun,
    /// `zerostart launch` starting the VMM of [`Spec::launch`].
    ZerostartLaunch,
}

impl Vmm {
    /// The spelling in a spec (and, for the external VMMs, the launcher's
    /// `--vmm` value).
    pub fn name(self) -> &'static str {
        match self {
            Vmm::Qemu => "qemu",
            Vmm::CloudHypervisor => "cloud-hypervisor",
            Vmm::Firecracker => "firecracker",
            Vmm::ZerostartRun => "zerostart-run",
            Vmm::ZerostartLaunch => "zerostart-launch",
        }
    }
}

impl std::fmt::Display for Vmm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Guest RAM and what backs it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "backing", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Memory {
    /// No memory arguments: the launcher supplies the memory.
    #[default]
    None,
    /// Anonymous (4K or THP) memory, optionally preallocated.
    Anonymous {
        /// Size in MiB.
        size_mib: u64,
        /// Touch every page before the guest starts.
        #[serde(default)]
        prealloc: bool,
    },
    /// A hugetlb memfd of 2M pages.
    MemfdHugetlb {
        /// Size in MiB.
        size_mib: u64,
        /// Touch every page before the guest starts.
        #[serde(default)]
        prealloc: bool,
    },
    /// A file on a hugetlbfs mount, shared (QEMU as operators run it).
    Hugetlbfs {
        /// Size in MiB.
        size_mib: u64,
        /// The mount (`/dev/hugepages`).
        path: PathBuf,
        /// Touch every page before the guest starts.
        #[serde(default)]
        prealloc: bool,
        /// Threads that preallocate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prealloc_threads: Option<u32>,
    },
    /// A private copy-on-write mapping of a file (QEMU's
    /// `memory-backend-file,share=off`): the guest starts on the file's
    /// bytes, and its writes never reach the file (the firmware tests fill
    /// RAM with a pattern this way).
    File {
        /// Size in MiB.
        size_mib: u64,
        /// The file, at least `size_mib` long.
        path: PathBuf,
        /// Touch every page before the guest starts.
        #[serde(default)]
        prealloc: bool,
    },
    /// zerostart's own `--memory` value (`zerostart run`'s grammar,
    /// [`crate::memory`], or the launcher's `size=,source=`), as written.
    Zerostart {
        /// The option list.
        value: String,
    },
}

impl Memory {
    fn name(&self) -> &'static str {
        match self {
            Memory::None => "none",
            Memory::Anonymous { .. } => "anonymous",
            Memory::MemfdHugetlb { .. } => "memfd-hugetlb",
            Memory::Hugetlbfs { .. } => "hugetlbfs",
            Memory::File { .. } => "file",
            Memory::Zerostart { .. } => "zerostart",
        }
    }
}

/// Where the guest's serial console goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Serial {
    /// No serial argument.
    #[default]
    None,
    /// The VMM's stdout (QEMU `-serial stdio`).
    Stdio,
    /// The VMM's terminal (cloud-hypervisor, zerostart: `--serial tty`).
    Tty,
    /// A file.
    File(PathBuf),
}

/// A raw disk image as a virtio-blk device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disk {
    /// Image file or block device.
    pub path: PathBuf,
    /// Read-only.
    #[serde(default)]
    pub readonly: bool,
    /// QEMU only: the guest's writes go to a temporary overlay and the
    /// image is never written (`snapshot=on`), so that a cached image
    /// serves many boots.
    #[serde(default, skip_serializing_if = "is_false")]
    pub snapshot: bool,
    /// QEMU only: how the host caches the image.
    #[serde(default, skip_serializing_if = "is_default")]
    pub cache: DiskCache,
    /// QEMU only: `path` is a directory that QEMU serves as a FAT disk
    /// (its vvfat driver, `file=fat:DIR`): an EFI system partition made
    /// of plain files.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fat_dir: bool,
}

impl Disk {
    /// An image as every VMM takes it: none of QEMU's own drive options.
    pub fn raw(path: PathBuf, readonly: bool) -> Disk {
        Disk {
            path,
            readonly,
            snapshot: false,
            cache: DiskCache::None,
            fat_dir: false,
        }
    }

    /// Whether it uses a QEMU-only option (the other VMMs have no word
    /// for them, so they are refused rather than dropped).
    fn qemu_only(&self) -> bool {
        self.snapshot || self.fat_dir || self.cache != DiskCache::None
    }
}

/// QEMU's host cache mode of a disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskCache {
    /// `cache=none`: O_DIRECT, as cloud VMs run (the launcher's mapping),
    /// so the image must be on a file system that supports it (not tmpfs,
    /// not a vvfat directory).
    #[default]
    None,
    /// `cache=writeback`, QEMU's own default: through the host's page
    /// cache, for a throwaway test boot or a file system without O_DIRECT.
    Writeback,
}

impl DiskCache {
    fn name(self) -> &'static str {
        match self {
            DiskCache::None => "none",
            DiskCache::Writeback => "writeback",
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

/// A virtio-net device on a host tap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Net {
    /// The tap interface.
    pub tap: String,
    /// The guest MAC (`aa:bb:cc:dd:ee:ff`); zerostart derives one when
    /// absent, QEMU gets [`crate::default_mac`] of the device index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// vhost-net; QEMU needs it said, zerostart decides when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vhost: Option<bool>,
}

/// A virtio-vsock device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vsock {
    /// Guest context ID.
    pub cid: u32,
    /// cloud-hypervisor's hybrid vsock socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
}

/// QEMU's machine type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Machine {
    /// q35 (UEFI firmware with `firmware`, or a direct kernel boot).
    #[default]
    Q35,
    /// i440fx.
    Pc,
    /// microvm without option ROMs, with an RTC (without a CMOS the
    /// guest's rtc_cmos probe spins ~16 s under nested TCG); boots with
    /// qboot (`firmware: "qboot.rom"`).
    Microvm,
    /// microvm with its option ROMs and an RTC, for SeaBIOS's
    /// `bios-microvm.bin` (`firmware`), QEMU's default microvm firmware:
    /// unlike qboot it starts a `-kernel` through the linuxboot_dma
    /// option ROM, which `x-option-roms=off` would leave out.
    MicrovmSeabios,
}

impl Machine {
    /// Either microvm: no PCI bus, devices on virtio-mmio, its own BIOS.
    pub fn is_microvm(self) -> bool {
        matches!(self, Machine::Microvm | Machine::MicrovmSeabios)
    }
}

/// QEMU's accelerator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accel {
    /// KVM.
    #[default]
    Kvm,
    /// TCG, in the thread mode of [`QemuOptions::tcg_thread`].
    Tcg,
}

/// TCG's thread mode (`-accel tcg,thread=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcgThread {
    /// One host thread per vCPU.
    #[default]
    Multi,
    /// All vCPUs on one host thread: the correctness suites' choice, where
    /// multi-threaded TCG's cross-modifying-code race crashed guests.
    Single,
}

/// QEMU's display.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Display {
    /// `-display none`.
    #[default]
    None,
    /// `-nographic`, as the guest kernel tests have always run: with
    /// `-nodefaults` and a serial backend given it is `-display none`.
    Nographic,
}

/// Where QEMU's human monitor listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Monitor {
    /// `-monitor none`: no monitor at all.
    None,
    /// On QEMU's stdin and stdout.
    Stdio,
    /// A unix socket QEMU listens on without waiting for a client (the
    /// harness connects when it wants a snapshot of a stuck guest).
    Unix(PathBuf),
}

/// A file QEMU copies into guest RAM at an address before the guest runs
/// (its generic `loader` device, raw: no ELF or image parsing), as the
/// guest kernel tests plant a hint or a byte pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loader {
    /// The file.
    pub file: PathBuf,
    /// The guest-physical address of its first byte.
    pub addr: u64,
}

/// A fw_cfg file the guest's firmware or kernel reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FwCfg {
    /// Its name (`opt/...`).
    pub name: String,
    /// The host file with its contents.
    pub file: PathBuf,
}

/// A network boot through the option ROM of QEMU's virtio-net NIC (iPXE)
/// from QEMU's own user-mode TFTP server: a real boot loader in the guest
/// between the firmware and the kernel, as the guest kernel tests need to
/// show that a hint behind a boot loader is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetBoot {
    /// The directory the TFTP server serves.
    pub tftp_dir: PathBuf,
    /// The file the NIC's ROM boots (an iPXE script starting `#!ipxe`).
    pub bootfile: String,
}

/// What only QEMU has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QemuOptions {
    /// `-L`: where its firmware and option ROMs are, searched in this
    /// order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_dirs: Vec<PathBuf>,
    /// Machine type.
    #[serde(default)]
    pub machine: Machine,
    /// Accelerator.
    #[serde(default)]
    pub accel: Accel,
    /// TCG's thread mode (multi when absent); TCG only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcg_thread: Option<TcgThread>,
    /// Display.
    #[serde(default, skip_serializing_if = "is_default")]
    pub display: Display,
    /// The human monitor (QEMU's default, none under `-nodefaults`, when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<Monitor>,
    /// `-cpu` (`host` on KVM, `max` on TCG, or none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// `-no-reboot`: a reset ends QEMU.
    #[serde(default)]
    pub no_reboot: bool,
    /// The firmware's debug console (0x402) into this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debugcon: Option<PathBuf>,
    /// QEMU's log (resets, guest errors, power-off) into this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    /// How the guest ended (resets, power-off: [`qemu::END_LOG_WHAT`])
    /// into this file; not with `log` (QEMU has one log file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_log: Option<PathBuf>,
    /// fw_cfg files, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fw_cfg: Vec<FwCfg>,
    /// SMBIOS OEM strings (type 11), one entry each, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oem_strings: Vec<String>,
    /// Files planted in guest RAM, in order, after the other devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaders: Vec<Loader>,
    /// Boot from the network (iPXE over QEMU's TFTP), not a direct kernel
    /// boot: no `kernel` with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_boot: Option<NetBoot>,
}

/// What only Firecracker has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirecrackerOptions {
    /// Where its config file is to be written (it is in [`Built::files`]).
    pub config_path: PathBuf,
    /// `--no-api` (the launcher adds it itself).
    #[serde(default)]
    pub no_api: bool,
}

/// One guest start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The program.
    pub vmm: Vmm,
    /// Its binary (for the VMM under `zerostart-launch`: the launcher's
    /// `--vmm-binary`, else it looks on PATH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<PathBuf>,
    /// vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// RAM and its backing.
    #[serde(default)]
    pub memory: Memory,
    /// Direct-boot kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<PathBuf>,
    /// Its initrd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initrd: Option<PathBuf>,
    /// Its command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// Firmware (`zerostart-launch`: the launcher's `--firmware`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<PathBuf>,
    /// Disks (`zerostart-launch`: the launcher maps them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    /// NICs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nets: Vec<Net>,
    /// vsock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsock: Option<Vsock>,
    /// Serial console.
    #[serde(default)]
    pub serial: Serial,
    /// zerostart's `--timeline` document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<PathBuf>,
    /// QEMU only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qemu: Option<QemuOptions>,
    /// Firecracker only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firecracker: Option<FirecrackerOptions>,
    /// `zerostart-launch` only: the VMM it starts (QEMU, cloud-hypervisor
    /// or Firecracker; `memory` none but for Firecracker, whose config
    /// file carries its size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Box<Spec>>,
    /// Appended as given (the launcher's: before its `--`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

/// A spec that cannot be built; each message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not a spec at all.
    #[error(
        "vmm spec: {0}; write one JSON object with `vmm` and the fields of options::vmm_cmd::Spec"
    )]
    Json(String),
    /// A field the VMM needs.
    #[error("vmm {vmm}: `{field}` is missing; {fix}")]
    Missing {
        /// The VMM.
        vmm: Vmm,
        /// The field.
        field: &'static str,
        /// What to give.
        fix: &'static str,
    },
    /// A field this VMM has no argument for.
    #[error("vmm {vmm}: `{field}` does not apply; remove it ({why})")]
    NotApplicable {
        /// The VMM.
        vmm: Vmm,
        /// The field.
        field: &'static str,
        /// Why not.
        why: &'static str,
    },
    /// A value the VMM cannot take.
    #[error("vmm {vmm}: `{field}` {problem}; {fix}")]
    Invalid {
        /// The VMM.
        vmm: Vmm,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
        /// What to give instead.
        fix: String,
    },
}

/// A built command: its argv (program first) and the files it reads
/// that the spec describes (path -> contents: a Firecracker config).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Built {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Files to write before starting it.
    pub files: BTreeMap<String, String>,
}

impl Built {
    /// The argv as one POSIX shell line ([`shell_quote`] of each word).
    pub fn shell_line(&self) -> String {
        shell_line(&self.argv)
    }
}

/// Parses a spec from JSON.
pub fn parse(json: &str) -> Result<Spec, SpecError> {
    serde_json::from_str(json).map_err(|e| SpecError::Json(e.to_string()))
}

/// `s` as one POSIX shell word: bare if it holds only characters no
/// shell treats specially, else single-quoted (`'` as `'\''`).
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '-' | '_' | '.' | '/' | ':' | ',' | '=' | '+' | '@' | '%')
        });
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Words as one POSIX shell line.
pub fn shell_line<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|a| shell_quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// A net's MAC: given (checked), or [`crate::default_mac`] of its index.
fn mac_of(vmm: Vmm, i: usize, n: &Net) -> Result<String, SpecError> {
    match &n.mac {
        None => Ok(crate::format_mac(&crate::default_mac(i))),
        Some(m) => crate::parse_mac(m)
            .map(|m| crate::format_mac(&m))
            .map_err(|e| SpecError::Invalid {
                vmm,
                field: "nets[].mac",
                problem: format!("'{m}' is not a MAC"),
                fix: e.to_string(),
            }),
    }
}

/// QEMU's virtio-pci devices (the launcher maps its `--disk`, `--net`
/// and `--vsock` through this too): per disk `-drive file=,format=raw,
/// if=none,id=zs-diskN,cache=none[,readonly=on]` + `-device
/// virtio-blk-pci,drive=zs-diskN` (cache=none: O_DIRECT, as cloud VMs
/// run, so the image must be on a file system that supports it, not
/// tmpfs); per tap `-netdev tap,id=zs-netN,ifname=,script=no,
/// downscript=no,vhost=on|off` + `-device virtio-net-pci,netdev=,mac=,
/// romfile=` (no iPXE option ROM: the kernel is never booted from the
/// network); `-device vhost-vsock-pci,guest-cid=N`. With `mmio` (a
/// microvm, which has no PCI bus) the same devices on virtio-mmio:
/// `virtio-blk-device`, `virtio-net-device` (no option ROM to turn off),
/// `vhost-vsock-device`. `Err`: the problem and its fix, for the caller
/// to wrap.
pub fn qemu_devices(
    disks: &[(PathBuf, bool)],
    nets: &[(String, String, bool)],
    vsock: Option<(u32, Option<&Path>)>,
    mmio: bool,
) -> Result<Vec<String>, String> {
    let disks: Vec<Disk> = disks
        .iter()
        .map(|(p, readonly)| Disk::raw(p.clone(), *readonly))
        .collect();
    qemu_disk_devices(&disks, nets, vsock, mmio)
}

/// [`qemu_devices`] with each disk's QEMU-only options: `cache=` its
/// [`DiskCache`], `,snapshot=on`, `file=fat:DIR` for a [`Disk::fat_dir`].
fn qemu_disk_devices(
    disks: &[Disk],
    nets: &[(String, String, bool)],
    vsock: Option<(u32, Option<&Path>)>,
    mmio: bool,
) -> Result<Vec<String>, String> {
    let bus = if mmio { "device" } else { "pci" };
    let mut a = Vec::new();
    for (i, d) in disks.iter().enumerate() {
        let p = path(&d.path);
        if p.contains(',') {
            return Err(format!(
                "--disk path={p}: QEMU's -drive cannot take a comma in a file name; rename the image"
            ));
        }
        if d.fat_dir && d.cache == DiskCache::None {
            return Err(format!(
                "--disk path={p}: a FAT directory (vvfat) has no O_DIRECT; give it cache writeback"
            ));
        }
        a.extend([
            qemu::DRIVE.into(),
            format!(
                "file={}{p},format=raw,if=none,id=zs-disk{i},cache={}{}{}",
                if d.fat_dir { "fat:" } else { "" },
                d.cache.name(),
                if d.readonly { ",readonly=on" } else { "" },
                if d.snapshot { ",snapshot=on" } else { "" }
            ),
            qemu::DEVICE.into(),
            format!("virtio-blk-{bus},drive=zs-disk{i}"),
        ]);
    }
    for (i, (tap, mac, vhost)) in nets.iter().enumerate() {
        a.extend([
            qemu::NETDEV.into(),
            format!(
                "tap,id=zs-net{i},ifname={tap},script=no,downscript=no,vhost={}",
                on_off(*vhost)
            ),
            qemu::DEVICE.into(),
            if mmio {
                format!("virtio-net-device,netdev=zs-net{i},mac={mac}")
            } else {
                format!("virtio-net-pci,netdev=zs-net{i},mac={mac},romfile=")
            },
        ]);
    }
    if let Some((cid, socket)) = vsock {
        if socket.is_some() {
            return Err("--vsock socket= is cloud-hypervisor's hybrid vsock; QEMU uses the kernel's vhost-vsock, give only cid=".into());
        }
        a.extend([
            qemu::DEVICE.into(),
            format!("vhost-vsock-{bus},guest-cid={cid}"),
        ]);
    }
    Ok(a)
}

/// cloud-hypervisor's devices (its documented CLI): `--disk
/// path=[,readonly=on] ...`, `--net tap=,mac= ...` (its virtio-net is
/// user space; its vhost is vhost-user, another backend, so vhost=on is
/// refused), `--vsock cid=,socket=`. A value holding a comma is
/// double-quoted, as its option parser reads it.
pub fn chv_devices(
    disks: &[(PathBuf, bool)],
    nets: &[(String, String, bool)],
    vsock: Option<(u32, Option<&Path>)>,
) -> Result<Vec<String>, String> {
    let mut a = Vec::new();
    let quote = |s: String| {
        if s.contains(',') {
            format!("\"{s}\"")
        } else {
            s
        }
    };
    if !disks.is_empty() {
        a.push(chv::DISK.into());
        for (p, readonly) in disks {
            a.push(format!(
                "path={}{}",
                quote(path(p)),
                if *readonly { ",readonly=on" } else { "" }
            ));
        }
    }
    if !nets.is_empty() {
        a.push(chv::NET.into());
        for (tap, mac, vhost) in nets {
            if *vhost {
                return Err(format!("--net tap={tap},vhost=on: cloud-hypervisor moves tap frames in user space (its vhost is vhost-user, another backend); use vhost=off"));
            }
            a.push(format!("tap={tap},mac={mac}"));
        }
    }
    if let Some((cid, socket)) = vsock {
        let Some(sock) = socket else {
            return Err(format!("--vsock cid={cid}: cloud-hypervisor's vsock is a unix socket on the host; add socket=PATH"));
        };
        a.extend([
            chv::VSOCK.into(),
            format!("cid={cid},socket={}", quote(path(sock))),
        ]);
    }
    Ok(a)
}

/// zerostart's own `--disk`, `--net`, `--vsock` (this crate's grammars).
fn zerostart_devices(s: &Spec) -> Vec<String> {
    let mut a = Vec::new();
    for d in &s.disks {
        a.extend([
            zerostart::DISK.into(),
            format!(
                "path={}{}",
                path(&d.path),
                if d.readonly { ",readonly=on" } else { "" }
            ),
        ]);
    }
    for n in &s.nets {
        let mut v = format!("tap={}", n.tap);
        if let Some(m) = &n.mac {
            v.push_str(&format!(",mac={m}"));
        }
        if let Some(h) = n.vhost {
            v.push_str(&format!(",vhost={}", on_off(h)));
        }
        a.extend([zerostart::NET.into(), v]);
    }
    if let Some(v) = &s.vsock {
        let mut o = format!("cid={}", v.cid);
        if let Some(p) = &v.socket {
            o.push_str(&format!(",socket={}", path(p)));
        }
        a.extend([zerostart::VSOCK.into(), o]);
    }
    a
}

/// The spec's disks and nets as the device spellers take them, each MAC
/// decided; `need_vhost`: QEMU, whose `-netdev` needs vhost said.
#[allow(clippy::type_complexity)]
fn devices(
    s: &Spec,
    need_vhost: bool,
) -> Result<(Vec<(PathBuf, bool)>, Vec<(String, String, bool)>), SpecError> {
    if !need_vhost {
        refuse_qemu_disks(s)?;
    }
    let disks = s
        .disks
        .iter()
        .map(|d| (d.path.clone(), d.readonly))
        .collect();
    let mut nets = Vec::new();
    for (i, n) in s.nets.iter().enumerate() {
        let vhost = match (n.vhost, need_vhost) {
            (Some(v), _) => v,
            (None, false) => false,
            (None, true) => {
                return Err(SpecError::Missing {
                    vmm: s.vmm,
                    field: "nets[].vhost",
                    fix: "say true (the kernel's vhost-net) or false (QEMU moves the frames)",
                })
            }
        };
        nets.push((n.tap.clone(), mac_of(s.vmm, i, n)?, vhost));
    }
    Ok((disks, nets))
}

/// Refuses a disk with QEMU-only options for another VMM.
fn refuse_qemu_disks(s: &Spec) -> Result<(), SpecError> {
    refuse(
        s,
        &[(
            "disks[].snapshot/cache/fat_dir",
            s.disks.iter().any(Disk::qemu_only),
            "QEMU's drive options; this VMM has no word for them",
        )],
    )
}

fn device_error(vmm: Vmm, e: String) -> SpecError {
    let (problem, fix) = e.split_once("; ").unwrap_or((&e, "change the device"));
    SpecError::Invalid {
        vmm,
        field: "devices",
        problem: problem.to_string(),
        fix: fix.to_string(),
    }
}

/// Refuses the fields a VMM has no argument for.
fn refuse(s: &Spec, fields: &[(&'static str, bool, &'static str)]) -> Result<(), SpecError> {
    for &(field, set, why) in fields {
        if set {
            return Err(SpecError::NotApplicable {
                vmm: s.vmm,
                field,
                why,
            });
        }
    }
    Ok(())
}

fn need<'a, T>(
    s: &Spec,
    v: &'a Option<T>,
    field: &'static str,
    fix: &'static str,
) -> Result<&'a T, SpecError> {
    v.as_ref().ok_or(SpecError::Missing {
        vmm: s.vmm,
        field,
        fix,
    })
}

fn memory_refused(s: &Spec, fix: &str) -> SpecError {
    SpecError::Invalid {
        vmm: s.vmm,
        field: "memory",
        problem: format!("backing {} is not one this VMM takes", s.memory.name()),
        fix: fix.to_string(),
    }
}

/// Builds the command of `s`: its argv, program first, and the files it
/// reads.
pub fn build(s: &Spec) -> Result<Built, SpecError> {
    let mut b = Built::default();
    build_into(s, false, &mut b)?;
    Ok(b)
}

/// Appends the command of `s` to `b`; `launched`: `s` is the VMM under a
/// `zerostart launch` (no program word, the launcher supplies memory).
fn build_into(s: &Spec, launched: bool, b: &mut Built) -> Result<(), SpecError> {
    if !launched {
        let bin = need(s, &s.binary, "binary", "give the program's path")?;
        b.argv.push(path(bin));
    }
    if s.vmm != Vmm::Qemu && s.qemu.is_some() {
        return Err(SpecError::NotApplicable {
            vmm: s.vmm,
            field: "qemu",
            why: "QEMU's options",
        });
    }
    if s.vmm != Vmm::Firecracker && s.firecracker.is_some() {
        return Err(SpecError::NotApplicable {
            vmm: s.vmm,
            field: "firecracker",
            why: "Firecracker's options",
        });
    }
    if s.vmm != Vmm::ZerostartLaunch && s.launch.is_some() {
        return Err(SpecError::NotApplicable {
            vmm: s.vmm,
            field: "launch",
            why: "only zerostart-launch starts another VMM",
        });
    }
    let a = &mut b.argv;
    match s.vmm {
        Vmm::Qemu => build_qemu(s, launched, a)?,
        Vmm::CloudHypervisor => build_chv(s, launched, a)?,
        Vmm::Firecracker => build_firecracker(s, b)?,
        Vmm::ZerostartRun => build_run(s, a)?,
        Vmm::ZerostartLaunch => build_launch(s, b)?,
    }
    Ok(())
}

/// QEMU ends an option value at its first comma, so a file name or value
/// holding one would be cut there and the rest read as other options:
/// refused, naming the option value as QEMU would get it (SHOWN).
fn comma_free(
    vmm: Vmm,
    field: &'static str,
    values: &[&str],
    shown: &str,
    fix: &str,
) -> Result<(), SpecError> {
    if values.iter().any(|v| v.contains(',')) {
        return Err(SpecError::Invalid {
            vmm,
            field,
            problem: format!("{shown} holds a comma, which ends a QEMU option value"),
            fix: fix.into(),
        });
    }
    Ok(())
}

/// QEMU, in this order (the order of the nested host's commands):
/// `-L`..., `-machine`, `-accel`, `-cpu`, `-smp`, memory, `-bios`,
/// `-nodefaults -no-user-config`, `-display none` or `-nographic`,
/// `-no-reboot`, `-serial`, `-monitor`, debug console, log or end log,
/// `-fw_cfg`..., `-smbios`..., `-kernel`, `-initrd`, devices, loaders,
/// `-append`, extra.
fn build_qemu(s: &Spec, launched: bool, a: &mut Vec<String>) -> Result<(), SpecError> {
    let q = s.qemu.clone().unwrap_or_default();
    refuse(
        s,
        &[
            ("timeline", s.timeline.is_some(), "QEMU writes no timeline"),
            (
                "cmdline",
                s.cmdline.is_some() && s.kernel.is_none(),
                "-append needs a direct kernel boot: give `kernel` too",
            ),
            (
                "qemu.tcg_thread",
                q.tcg_thread.is_some() && q.accel != Accel::Tcg,
                "a thread mode is TCG's: give accel tcg or drop it",
            ),
            (
                "qemu.end_log",
                q.end_log.is_some() && q.log.is_some(),
                "QEMU has one log file and `log` already logs resets and the power-off",
            ),
        ],
    )?;
    for d in &q.data_dirs {
        a.extend([qemu::DATA_DIR.into(), path(d)]);
    }
    let backend = matches!(
        s.memory,
        Memory::MemfdHugetlb { .. } | Memory::Hugetlbfs { .. } | Memory::File { .. }
    );
    let mut machine = match q.machine {
        Machine::Q35 => "q35".to_string(),
        Machine::Pc => "pc".to_string(),
        Machine::Microvm => "microvm,x-option-roms=off,rtc=on".to_string(),
        Machine::MicrovmSeabios => "microvm,rtc=on".to_string(),
    };
    if backend {
        machine.push_str(&format!(",memory-backend={}", qemu::RAM_ID));
    }
    a.extend([qemu::MACHINE.into(), machine]);
    a.extend([
        qemu::ACCEL.into(),
        match q.accel {
            Accel::Kvm => "kvm".to_string(),
            Accel::Tcg => format!(
                "tcg,thread={}",
                match q.tcg_thread.unwrap_or_default() {
                    TcgThread::Multi => "multi",
                    TcgThread::Single => "single",
                }
            ),
        },
    ]);
    if let Some(c) = &q.cpu {
        a.extend([qemu::CPU.into(), c.clone()]);
    }
    if let Some(n) = s.cpus {
        a.extend([qemu::SMP.into(), n.to_string()]);
    }
    match &s.memory {
        Memory::None if launched => {}
        Memory::None => return Err(SpecError::Missing {
            vmm: s.vmm,
            field: "memory",
            fix: "give its size and backing (none only under zerostart-launch, which supplies it)",
        }),
        _ if launched => {
            return Err(memory_refused(
                s,
                "give backing none: the launcher supplies QEMU's memory",
            ))
        }
        Memory::Anonymous { size_mib, prealloc } => {
            a.extend([qemu::MEMORY.into(), format!("{size_mib}M")]);
            if *prealloc {
                a.push(qemu::MEM_PREALLOC.into());
            }
        }
        Memory::MemfdHugetlb { size_mib, prealloc } => a.extend([
            qemu::MEMORY.into(),
            format!("{size_mib}M"),
            qemu::OBJECT.into(),
            format!(
                "memory-backend-memfd,id={},size={size_mib}M,hugetlb=on,hugetlbsize=2M,prealloc={}",
                qemu::RAM_ID,
                on_off(*prealloc)
            ),
        ]),
        Memory::Hugetlbfs {
            size_mib,
            path: p,
            prealloc,
            prealloc_threads,
        } => a.extend([
            qemu::MEMORY.into(),
            format!("{size_mib}M"),
            qemu::OBJECT.into(),
            format!(
                "memory-backend-file,id={},size={size_mib}M,mem-path={},share=on,prealloc={}{}",
                qemu::RAM_ID,
                path(p),
                on_off(*prealloc),
                prealloc_threads
                    .map(|n| format!(",prealloc-threads={n}"))
                    .unwrap_or_default()
            ),
        ]),
        Memory::File {
            size_mib,
            path: p,
            prealloc,
        } => {
            let p = path(p);
            comma_free(
                s.vmm,
                "memory.path",
                &[&p],
                &format!("'{p}'"),
                "rename the file",
            )?;
            a.extend([
                qemu::MEMORY.into(),
                format!("{size_mib}M"),
                qemu::OBJECT.into(),
                format!(
                    "memory-backend-file,id={},size={size_mib}M,mem-path={p},share=off,prealloc={}",
                    qemu::RAM_ID,
                    on_off(*prealloc)
                ),
            ])
        }
        Memory::Zerostart { .. } => {
            return Err(memory_refused(
                s,
                "give anonymous, memfd-hugetlb or hugetlbfs",
            ))
        }
    }
    if let Some(fw) = &s.firmware {
        // A microvm boots directly through its own BIOS (qboot), which the
        // launcher passes on; its `firmware` is the UEFI one.
        if launched && !q.machine.is_microvm() {
            return Err(SpecError::NotApplicable {
                vmm: s.vmm,
                field: "firmware",
                why: "under zerostart-launch the launcher's `firmware` is QEMU's (-bios); only a microvm's BIOS (qboot.rom) goes here",
            });
        }
        a.extend([qemu::BIOS.into(), path(fw)]);
    }
    a.extend([qemu::NODEFAULTS.into(), qemu::NO_USER_CONFIG.into()]);
    match q.display {
        Display::None => a.extend([qemu::DISPLAY.into(), "none".into()]),
        Display::Nographic => a.push(qemu::NOGRAPHIC.into()),
    }
    if q.no_reboot {
        a.push(qemu::NO_REBOOT.into());
    }
    match &s.serial {
        Serial::None => {}
        Serial::Stdio => a.extend([qemu::SERIAL.into(), "stdio".into()]),
        Serial::File(p) => a.extend([qemu::SERIAL.into(), format!("file:{}", path(p))]),
        Serial::Tty => {
            return Err(SpecError::Invalid {
                vmm: s.vmm,
                field: "serial",
                problem: "tty is not a QEMU serial backend".into(),
                fix: "use \"stdio\" or {\"file\": PATH}".into(),
            })
        }
    }
    match &q.monitor {
        None => {}
        Some(Monitor::None) => a.extend([qemu::MONITOR.into(), "none".into()]),
        Some(Monitor::Stdio) => a.extend([qemu::MONITOR.into(), "stdio".into()]),
        Some(Monitor::Unix(p)) => a.extend([
            qemu::MONITOR.into(),
            format!("unix:{},server=on,wait=off", path(p)),
        ]),
    }
    if let Some(d) = &q.debugcon {
        a.extend([
            qemu::DEBUGCON.into(),
            format!("file:{}", path(d)),
            qemu::GLOBAL.into(),
            qemu::DEBUGCON_IOBASE.into(),
        ]);
    }
    if let Some(l) = &q.log {
        a.push(qemu::LOG_ITEMS.into());
        a.extend(qemu::LOG_WHAT.iter().map(|x| x.to_string()));
        a.push(path(l));
    }
    if let Some(l) = &q.end_log {
        a.push(qemu::LOG_ITEMS.into());
        a.extend(qemu::END_LOG_WHAT.iter().map(|x| x.to_string()));
        a.push(path(l));
    }
    for f in &q.fw_cfg {
        let file = path(&f.file);
        let opt = format!("name={},file={file}", f.name);
        comma_free(s.vmm, "qemu.fw_cfg", &[&f.name, &file], &opt, "rename it")?;
        a.extend([qemu::FW_CFG.into(), opt]);
    }
    for o in &q.oem_strings {
        // QEMU's option syntax: a comma inside a value is doubled.
        a.extend([
            qemu::SMBIOS.into(),
            format!("type=11,value={}", o.replace(',', ",,")),
        ]);
    }
    if let Some(n) = &q.net_boot {
        let dir = path(&n.tftp_dir);
        if s.kernel.is_some() {
            return Err(SpecError::Invalid {
                vmm: s.vmm,
                field: "qemu.net_boot",
                problem: "a network boot loads its kernel itself, and `kernel` is given too".into(),
                fix: "leave out `kernel`, `initrd` and `cmdline` (the boot script names them)"
                    .into(),
            });
        }
        comma_free(
            s.vmm,
            "qemu.net_boot",
            &[&dir, &n.bootfile],
            &format!("tftp={dir},bootfile={}", n.bootfile),
            "rename it",
        )?;
        a.extend([
            qemu::NIC.into(),
            format!(
                "user,model=virtio-net-pci,tftp={dir},bootfile={}",
                n.bootfile
            ),
            qemu::BOOT.into(),
            "order=n".into(),
        ]);
    }
    if let Some(k) = &s.kernel {
        a.extend([qemu::KERNEL.into(), path(k)]);
    }
    if let Some(i) = &s.initrd {
        if s.kernel.is_none() {
            return Err(SpecError::Missing {
                vmm: s.vmm,
                field: "kernel",
                fix: "an initrd is for a direct kernel boot: give `kernel` too",
            });
        }
        a.extend([qemu::INITRD.into(), path(i)]);
    }
    if launched {
        refuse(
            s,
            &[
                (
                    "disks",
                    !s.disks.is_empty(),
                    "give them to the launcher (its spec's `disks`), which maps them",
                ),
                ("nets", !s.nets.is_empty(), "give them to the launcher"),
                ("vsock", s.vsock.is_some(), "give it to the launcher"),
            ],
        )?;
    }
    let (_, nets) = devices(s, true)?;
    let vsock = s.vsock.as_ref().map(|v| (v.cid, v.socket.as_deref()));
    a.extend(
        qemu_disk_devices(&s.disks, &nets, vsock, q.machine.is_microvm())
            .map_err(|e| device_error(s.vmm, e))?,
    );
    for l in &q.loaders {
        let file = path(&l.file);
        comma_free(
            s.vmm,
            "qemu.loaders",
            &[&file],
            &format!("file={file}"),
            "rename it",
        )?;
        a.extend([
            qemu::DEVICE.into(),
            format!("loader,file={file},addr={},force-raw=on", l.addr),
        ]);
    }
    if let Some(c) = &s.cmdline {
        a.extend([qemu::APPEND.into(), c.clone()]);
    }
    a.extend(s.extra_args.iter().cloned());
    Ok(())
}

/// cloud-hypervisor: `--cpus`, `--memory`, `--firmware`, `--kernel`,
/// `--initramfs`, `--cmdline`, devices, `--serial` (and `--console off`),
/// extra.
fn build_chv(s: &Spec, launched: bool, a: &mut Vec<String>) -> Result<(), SpecError> {
    refuse(
        s,
        &[(
            "timeline",
            s.timeline.is_some(),
            "cloud-hypervisor writes no timeline",
        )],
    )?;
    if let Some(n) = s.cpus {
        a.extend([chv::CPUS.into(), format!("boot={n}")]);
    }
    match &s.memory {
        Memory::None if launched => {}
        Memory::None => return Err(SpecError::Missing {
            vmm: s.vmm,
            field: "memory",
            fix: "give its size and backing (none only under zerostart-launch, which supplies it)",
        }),
        _ if launched => {
            return Err(memory_refused(
                s,
                "give backing none: the launcher supplies cloud-hypervisor's memory",
            ))
        }
        Memory::Anonymous { size_mib, prealloc } | Memory::MemfdHugetlb { size_mib, prealloc } => {
            let mut m = format!("size={size_mib}M");
            if matches!(s.memory, Memory::MemfdHugetlb { .. }) {
                m.push_str(",hugepages=on");
            }
            if *prealloc {
                m.push_str(",prefault=on");
            }
            a.extend([chv::MEMORY.into(), m]);
        }
        _ => return Err(memory_refused(s, "give anonymous or memfd-hugetlb")),
    }
    if let Some(fw) = &s.firmware {
        if launched {
            return Err(SpecError::NotApplicable {
                vmm: s.vmm,
                field: "firmware",
                why: "under zerostart-launch the launcher's `firmware` is cloud-hypervisor's",
            });
        }
        a.extend([chv::FIRMWARE.into(), path(fw)]);
    }
    if let Some(k) = &s.kernel {
        a.extend([chv::KERNEL.into(), path(k)]);
    }
    if let Some(i) = &s.initrd {
        a.extend([chv::INITRAMFS.into(), path(i)]);
    }
    if let Some(c) = &s.cmdline {
        a.extend([chv::CMDLINE.into(), c.clone()]);
    }
    let (disks, nets) = devices(s, false)?;
    let vsock = s.vsock.as_ref().map(|v| (v.cid, v.socket.as_deref()));
    a.extend(chv_devices(&disks, &nets, vsock).map_err(|e| device_error(s.vmm, e))?);
    match &s.serial {
        Serial::None => {}
        Serial::Tty => a.extend([chv::SERIAL.into(), "tty".into()]),
        Serial::File(p) => a.extend([chv::SERIAL.into(), format!("file={}", path(p))]),
        Serial::Stdio => {
            return Err(SpecError::Invalid {
                vmm: s.vmm,
                field: "serial",
                problem: "stdio is QEMU's word".into(),
                fix: "use \"tty\" (cloud-hypervisor's stdout) or {\"file\": PATH}".into(),
            })
        }
    }
    if s.serial != Serial::None {
        // The serial port is the console; no second one on virtio.
        a.extend([chv::CONSOLE.into(), "off".into()]);
    }
    a.extend(s.extra_args.iter().cloned());
    Ok(())
}

/// The Firecracker config file's document.
#[derive(Serialize)]
struct FcConfig<'a> {
    #[serde(rename = "boot-source")]
    boot: FcBoot<'a>,
    drives: [(); 0],
    #[serde(rename = "machine-config")]
    machine: FcMachine,
}

#[derive(Serialize)]
struct FcBoot<'a> {
    kernel_image_path: &'a Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    initrd_path: Option<&'a Path>,
    boot_args: &'a str,
}

#[derive(Serialize)]
struct FcMachine {
    vcpu_count: u32,
    mem_size_mib: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    huge_pages: Option<&'static str>,
}

/// Firecracker: `[--no-api] --config-file PATH`, extra; the config file
/// (boot source, no drives, machine config) in [`Built::files`]. Its
/// memory is its own even under the launcher (it takes no file-backed
/// memory; the launcher checks the size agrees).
fn build_firecracker(s: &Spec, b: &mut Built) -> Result<(), SpecError> {
    let fc = need(
        s,
        &s.firecracker,
        "firecracker",
        "give {\"config_path\": PATH}, where its config file is written",
    )?;
    refuse(
        s,
        &[
            (
                "firmware",
                s.firmware.is_some(),
                "Firecracker boots kernels only",
            ),
            (
                "disks",
                !s.disks.is_empty(),
                "this builder writes no drives",
            ),
            (
                "nets",
                !s.nets.is_empty(),
                "this builder writes no network interfaces",
            ),
            ("vsock", s.vsock.is_some(), "this builder writes no vsock"),
            (
                "timeline",
                s.timeline.is_some(),
                "Firecracker writes no timeline",
            ),
            (
                "serial",
                s.serial != Serial::None,
                "its serial console is its stdout",
            ),
        ],
    )?;
    let kernel = need(s, &s.kernel, "kernel", "give the vmlinux it boots")?;
    let (mem, huge) =
        match &s.memory {
            Memory::Anonymous {
                size_mib,
                prealloc: false,
            } => (*size_mib, None),
            Memory::MemfdHugetlb {
                size_mib,
                prealloc: false,
            } => (*size_mib, Some("2M")),
            _ => return Err(memory_refused(
                s,
                "give anonymous or memfd-hugetlb without prealloc (its config file has no other)",
            )),
        };
    let cfg = FcConfig {
        boot: FcBoot {
            kernel_image_path: kernel,
            initrd_path: s.initrd.as_deref(),
            boot_args: s.cmdline.as_deref().unwrap_or_default(),
        },
        drives: [],
        machine: FcMachine {
            vcpu_count: s.cpus.unwrap_or(1),
            mem_size_mib: mem,
            huge_pages: huge,
        },
    };
    let text = serde_json::to_string(&cfg).map_err(|e| SpecError::Json(e.to_string()))?;
    b.files.insert(path(&fc.config_path), text);
    if fc.no_api {
        b.argv.push(firecracker::NO_API.into());
    }
    b.argv
        .extend([firecracker::CONFIG_FILE.into(), path(&fc.config_path)]);
    b.argv.extend(s.extra_args.iter().cloned());
    Ok(())
}

/// `zerostart run`: `--kernel`, `--initramfs`, `--firmware`, `--cmdline`,
/// `--cpus`, `--memory`, `--serial`, `--timeline`, devices, extra.
fn build_run(s: &Spec, a: &mut Vec<String>) -> Result<(), SpecError> {
    refuse_qemu_disks(s)?;
    a.push(zerostart::RUN.into());
    if let Some(k) = &s.kernel {
        a.extend([zerostart::KERNEL.into(), path(k)]);
    }
    if let Some(i) = &s.initrd {
        a.extend([zerostart::INITRAMFS.into(), path(i)]);
    }
    if let Some(f) = &s.firmware {
        a.extend([zerostart::FIRMWARE.into(), path(f)]);
    }
    if let Some(c) = &s.cmdline {
        a.extend([zerostart::CMDLINE.into(), c.clone()]);
    }
    if let Some(n) = s.cpus {
        a.extend([zerostart::CPUS.into(), format!("boot={n}")]);
    }
    match &s.memory {
        Memory::Zerostart { value } => {
            crate::memory(value).map_err(|e| SpecError::Invalid {
                vmm: s.vmm,
                field: "memory.value",
                problem: format!("'{value}' is not zerostart run's --memory"),
                fix: e.to_string(),
            })?;
            a.extend([zerostart::MEMORY.into(), value.clone()]);
        }
        _ => return Err(memory_refused(
            s,
            "give {\"backing\": \"zerostart\", \"value\": \"size=...\"} (zerostart run's --memory)",
        )),
    }
    match &s.serial {
        Serial::None => {}
        Serial::Tty => a.extend([zerostart::SERIAL.into(), "tty".into()]),
        Serial::File(p) => a.extend([zerostart::SERIAL.into(), format!("file={}", path(p))]),
        Serial::Stdio => {
            return Err(SpecError::Invalid {
                vmm: s.vmm,
                field: "serial",
                problem: "stdio is QEMU's word".into(),
                fix: "use \"tty\" (zerostart's stdout) or {\"file\": PATH}".into(),
            })
        }
    }
    if let Some(t) = &s.timeline {
        a.extend([zerostart::TIMELINE.into(), path(t)]);
    }
    a.extend(zerostart_devices(s));
    a.extend(s.extra_args.iter().cloned());
    Ok(())
}

/// `zerostart launch --vmm V [--vmm-binary B] --memory M [--firmware F]
/// [--timeline T] [devices] [extra] -- <the VMM's arguments>`.
fn build_launch(s: &Spec, b: &mut Built) -> Result<(), SpecError> {
    let inner = need(
        s,
        &s.launch,
        "launch",
        "give the spec of the VMM it starts (vmm qemu, cloud-hypervisor or firecracker)",
    )?;
    if !matches!(
        inner.vmm,
        Vmm::Qemu | Vmm::CloudHypervisor | Vmm::Firecracker
    ) {
        return Err(SpecError::Invalid {
            vmm: s.vmm,
            field: "launch.vmm",
            problem: format!("is {}", inner.vmm),
            fix: "the launcher starts qemu, cloud-hypervisor or firecracker".into(),
        });
    }
    refuse(
        s,
        &[
            (
                "kernel",
                s.kernel.is_some(),
                "give it to the VMM (launch.kernel)",
            ),
            (
                "initrd",
                s.initrd.is_some(),
                "give it to the VMM (launch.initrd)",
            ),
            (
                "cmdline",
                s.cmdline.is_some(),
                "give it to the VMM (launch.cmdline)",
            ),
            (
                "cpus",
                s.cpus.is_some(),
                "give them to the VMM (launch.cpus)",
            ),
            (
                "serial",
                s.serial != Serial::None,
                "give it to the VMM (launch.serial)",
            ),
        ],
    )?;
    refuse_qemu_disks(s)?;
    let a = &mut b.argv;
    a.extend([
        zerostart::LAUNCH.into(),
        zerostart::VMM.into(),
        inner.vmm.name().into(),
    ]);
    if let Some(vb) = &inner.binary {
        a.extend([zerostart::VMM_BINARY.into(), path(vb)]);
    }
    match &s.memory {
        Memory::Zerostart { value } => a.extend([zerostart::MEMORY.into(), value.clone()]),
        _ => {
            return Err(memory_refused(
                s,
                "give {\"backing\": \"zerostart\", \"value\": \"size=...,source=...\"} (the launcher's --memory)",
            ))
        }
    }
    if let Some(f) = &s.firmware {
        a.extend([zerostart::FIRMWARE.into(), path(f)]);
    }
    if let Some(t) = &s.timeline {
        a.extend([zerostart::TIMELINE.into(), path(t)]);
    }
    a.extend(zerostart_devices(s));
    a.extend(s.extra_args.iter().cloned());
    a.push(zerostart::END.into());
    build_into(inner, true, b)
}

#[cfg(test)]
mod tests;
