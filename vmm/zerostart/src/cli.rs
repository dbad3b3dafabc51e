//! Command line: `zerostart run ...` with cloud-hypervisor style
//! comma-separated `key=value` option lists.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::hint::CorruptHint;
pub use options::Error;
use options::OptionList;

/// Default kernel command line (Firecracker's): serial console, reboot via
/// the keyboard controller (which ends the VM), reboot on panic.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0 reboot=k panic=1";

/// zerostart: boot a Linux VM on KVM from pre-zeroed memory.
#[derive(Debug, Parser)]
#[command(name = "zerostart", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Boot a kernel in a new VM and run it until it powers off or reboots.
    Run(Box<RunArgs>),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The pre-zeroed memory pool: serve, status, lease (docs/pool.md).
    Pool(pool::cli::PoolArgs),
    /// Boot scenarios repeatedly and check boot-time SLOs (docs/slo.md).
    Slo(slo::cli::SloArgs),
    /// Start QEMU, cloud-hypervisor or Firecracker on pre-zeroed memory
    /// with the zero hint (docs/launch.md).
    Launch(Box<crate::launch::LaunchArgs>),
    /// Stand in for QEMU where a management tool starts it (libvirt's
    /// <emulator>, Kata's QEMU path): probes pass through, a start gets
    /// pool memory and the hint, what cannot be served starts unchanged
    /// with a warning (docs/fleet.md). Also answers as `zerostart-qemu`.
    QemuDropin(crate::launch::dropin::DropinArgs),
    /// Print the command line of a VMM start described by a JSON spec
    /// (options::vmm_cmd::Spec): {"argv": [...], "files": {...}}, or one
    /// shell line with --shell.
    VmmArgv(crate::vmm_argv::VmmArgvArgs),
}

/// `zerostart bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Zeroing engine against memset and kernel prefault, in one run.
    Zero(zerobench::BenchZeroArgs),
    /// The engine and the pool at this host's core count and memory: one
    /// table, JSON and PNG under --out (docs/pool.md, "Host scale").
    Host(zerobench::BenchHostArgs),
}

/// `zerostart run` options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kernel image: a Linux bzImage (64-bit boot protocol). Optional with
    /// --firmware, which then boots whatever it finds.
    #[arg(long, value_name = "PATH", required_unless_present = "firmware")]
    pub kernel: Option<PathBuf>,
    /// Boot through firmware: a PVH ELF image (EDK2 CLOUDHV.fd). The kernel,
    /// initramfs, command line and the zero hint reach it over fw_cfg.
    #[arg(long, value_name = "PATH")]
    pub firmware: Option<PathBuf>,
    /// With --firmware: send the hint as a zero hint, or as a scrub request
    /// (the firmware zeroes those ranges itself before publishing them).
    #[arg(long, value_enum, default_value = "zero", requires = "firmware")]
    pub firmware_hint: FirmwareHint,
    /// initramfs (cpio, optionally compressed) loaded for the kernel.
    #[arg(long, value_name = "PATH")]
    pub initramfs: Option<PathBuf>,
    /// Kernel command line.
    #[arg(long, default_value = DEFAULT_CMDLINE)]
    pub cmdline: String,
    /// vCPUs: boot=N (1..=32).
    #[arg(long, default_value = "boot=1", value_name = "boot=N")]
    pub cpus: String,
    /// Guest memory: size=512M,hugepages=on|off,hugepage_size=2M|1G,
    /// file=PATH (hugetlbfs),thp=on|off,prefault=on|off,
    /// prefault_method=auto|nt|populate,hint=on|off,zero_engine=auto|<backend>,
    /// prezero=pool[:SOCKET],threads=N. hint= says whether the guest is told
    /// which RAM is zero; zero_engine= zeroes only with prefault_method=nt.
    /// prezero=off|auto|<backend> is the old spelling of hint=/zero_engine=.
    /// prezero=pool leases known-zero memory from `zerostart pool`.
    #[arg(long, default_value = "size=512M", value_name = "size=...,...")]
    pub memory: String,
    /// Guest serial console (COM1): tty (this terminal), off, or file=PATH.
    #[arg(long, default_value = "tty", value_name = "tty|off|file=PATH")]
    pub serial: String,
    /// A virtio-blk disk on virtio-mmio: path=PATH[,readonly=on], a raw
    /// image (repeat the option for several disks: /dev/vda, /dev/vdb, ...).
    #[arg(long, value_name = "path=PATH[,readonly=on]")]
    pub disk: Vec<String>,
    /// A virtio-net device on virtio-mmio on an existing host tap:
    /// tap=NAME[,mac=MAC][,vhost=on|off] (vhost-net when /dev/vhost-net
    /// exists, else the VMM moves the frames; repeat for several).
    #[arg(long, value_name = "tap=NAME[,mac=MAC][,vhost=on|off]")]
    pub net: Vec<String>,
    /// A vhost-vsock device with guest CID N; the guest reports its boot
    /// phases over it (port 5300) into the --timeline.
    #[arg(long, value_name = "cid=N")]
    pub vsock: Option<String>,
    /// ACPI tables (hardware-reduced FADT, MADT, DSDT with _S5_) so the
    /// guest can power off; off leaves only the MP table.
    #[arg(long, value_enum, default_value = "on")]
    pub acpi: OnOff,
    /// Firmware debug console (port 0x402, where EDK2 DEBUG builds log):
    /// append its output to this file.
    #[arg(long, value_name = "PATH")]
    pub debugcon: Option<PathBuf>,
    /// Write the boot timeline as JSON to this file.
    #[arg(long, value_name = "PATH.json")]
    pub timeline: Option<PathBuf>,
    /// Before starting the guest, re-read every byte the hint claims zero
    /// and refuse to boot if one is not (costs a full read of guest RAM).
    #[arg(long)]
    pub verify_hint: bool,
    /// KVM device node (tests point it at a missing file).
    #[arg(
        long,
        hide = true,
        env = "ZEROSTART_KVM_DEVICE",
        default_value = "/dev/kvm"
    )]
    pub kvm_device: PathBuf,
    /// Test only: corrupt the hint so the guest checker must reject it
    /// (checksum) or find non-zero memory inside it (dirty). Refused unless
    /// ZEROSTART_TEST_SWITCHES=1 is set, so it cannot reach a real tenant.
    #[arg(long, hide = true, value_enum)]
    pub test_corrupt_hint: Option<CorruptHint>,
}

/// A switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// How `--firmware` passes the hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FirmwareHint {
    /// A zero hint: the ranges read zero at the first instruction.
    Zero,
    /// A scrub request: the firmware must zero the ranges itself.
    Scrub,
}

/// `--cpus` parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpusConfig {
    /// vCPUs started at boot.
    pub boot: u8,
}

impl CpusConfig {
    /// Parses `boot=N`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let list = OptionList::parse("cpus", s, &["boot"], "boot=2")?;
        let mut boot = 1u8;
        if let Some(v) = list.get("boot") {
            boot = v
                .parse::<u8>()
                .ok()
                .filter(|n| (1..=arch::mptable::MAX_VCPUS).contains(n))
                .ok_or(Error::BadValue {
                    opt: "cpus",
                    key: "boot",
                    value: v.to_string(),
                    hint: "the number of vCPUs must be 1..=32",
                })?;
        }
        Ok(CpusConfig { boot })
    }
}

/// `--serial` parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SerialOpt {
    /// This terminal (stdout).
    Tty,
    /// Discarded.
    Off,
    /// Appended to a file.
    File(PathBuf),
}

impl SerialOpt {
    /// Parses `tty`, `off` or `file=PATH` (the one key=value form goes
    /// through the common grammar).
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s {
            "tty" => return Ok(SerialOpt::Tty),
            "off" | "null" => return Ok(SerialOpt::Off),
            _ => {}
        }
        let bad = || Error::BadValue {
            opt: "serial",
            key: "mode",
            value: s.to_string(),
            hint: "use tty, off or file=PATH",
        };
        if !s.contains('=') {
            return Err(bad());
        }
        let list = OptionList::parse("serial", s, &["file"], "file=PATH")?;
        match list.get("file") {
            Some(p) if !p.is_empty() => Ok(SerialOpt::File(PathBuf::from(p))),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clap_error_is_one_line_with_its_fix() {
        let e = Cli::try_parse_from(["zerostart", "pool", "serve", "--size", "lots"]).unwrap_err();
        let line = options::clap_one_line(&e.render().to_string());
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("error: invalid value 'lots' for '--size"),
            "{line}"
        );
        assert!(line.contains("e.g. 4G"), "{line}");
        let e = Cli::try_parse_from(["zerostart", "run", "--no-such-flag"]).unwrap_err();
        let line = options::clap_one_line(&e.render().to_string());
        assert!(
            line.contains("unexpected argument '--no-such-flag'") && !line.contains("Usage"),
            "{line}"
        );
    }

    #[test]
    fn cpus() {
        assert_eq!(CpusConfig::parse("boot=4").unwrap().boot, 4);
        assert!(CpusConfig::parse("boot=0")
            .unwrap_err()
            .to_string()
            .contains("1..=32"));
        assert!(CpusConfig::parse("boot=33").is_err());
        assert!(CpusConfig::parse("max=2").is_err());
    }

    #[test]
    fn serial() {
        assert_eq!(SerialOpt::parse("tty").unwrap(), SerialOpt::Tty);
        assert_eq!(SerialOpt::parse("off").unwrap(), SerialOpt::Off);
        assert_eq!(
            SerialOpt::parse("file=/tmp/x").unwrap(),
            SerialOpt::File("/tmp/x".into())
        );
        assert!(SerialOpt::parse("file=").is_err());
        assert!(SerialOpt::parse("pty").is_err());
    }
}
