//! Command line: `zerostart run ...` with cloud-hypervisor style
//! comma-separated `key=value` option lists.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
}

/// `zerostart run` options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kernel image: a Linux bzImage (64-bit boot protocol).
    #[arg(long, value_name = "PATH")]
    pub kernel: PathBuf,
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
    /// prefault=on|off,prezero=auto|off|<backend>.
    #[arg(long, default_value = "size=512M", value_name = "size=...,...")]
    pub memory: String,
    /// Guest serial console (COM1): tty (this terminal), off, or file=PATH.
    #[arg(long, default_value = "tty", value_name = "tty|off|file=PATH")]
    pub serial: String,
    /// Write the boot timeline as JSON to this file.
    #[arg(long, value_name = "PATH.json")]
    pub timeline: Option<PathBuf>,
    /// KVM device node (tests point it at a missing file).
    #[arg(
        long,
        hide = true,
        env = "ZEROSTART_KVM_DEVICE",
        default_value = "/dev/kvm"
    )]
    pub kvm_device: PathBuf,
    /// Test only: corrupt the hint so the guest checker must reject it
    /// (checksum) or find non-zero memory inside it (dirty).
    #[arg(long, hide = true, value_enum)]
    pub test_corrupt_hint: Option<CorruptHint>,
}

/// Test-only hint corruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CorruptHint {
    /// Flip a bit in the encoded blob: the guest must report it invalid.
    Checksum,
    /// Write a non-zero byte into a hinted range after building the hint:
    /// the guest must report non-zero memory.
    Dirty,
}

/// Errors in option values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// An option list item without `=`.
    #[error("--{opt}: '{item}' is not key=value; write e.g. --{opt} {example}")]
    NotKeyValue {
        /// Option name.
        opt: &'static str,
        /// The item.
        item: String,
        /// A valid example.
        example: &'static str,
    },
    /// An unknown key.
    #[error("--{opt}: unknown key '{key}'; valid keys: {valid}")]
    UnknownKey {
        /// Option name.
        opt: &'static str,
        /// The key.
        key: String,
        /// Valid keys.
        valid: &'static str,
    },
    /// A value that does not parse.
    #[error("--{opt}: {key}='{value}' is invalid; {hint}")]
    BadValue {
        /// Option name.
        opt: &'static str,
        /// Key.
        key: &'static str,
        /// Value.
        value: String,
        /// What is valid.
        hint: &'static str,
    },
}

/// Splits `a=1,b=2` into pairs.
fn pairs(
    opt: &'static str,
    s: &str,
    example: &'static str,
) -> Result<Vec<(String, String)>, Error> {
    s.split(',')
        .filter(|i| !i.is_empty())
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| Error::NotKeyValue {
                    opt,
                    item: item.to_string(),
                    example,
                })
        })
        .collect()
}

/// Parses a byte size: a number with an optional K/M/G/T suffix (binary
/// units, optional trailing `B`/`iB`).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 10),
        'm' | 'M' => (&t[..t.len() - 1], 20),
        'g' | 'G' => (&t[..t.len() - 1], 30),
        't' | 'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

fn on_off(opt: &'static str, key: &'static str, v: &str) -> Result<bool, Error> {
    match v {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(Error::BadValue {
            opt,
            key,
            value: v.to_string(),
            hint: "use on or off",
        }),
    }
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
        let mut boot = 1u8;
        for (k, v) in pairs("cpus", s, "boot=2")? {
            match k.as_str() {
                "boot" => {
                    boot = v
                        .parse::<u8>()
                        .ok()
                        .filter(|n| (1..=arch::mptable::MAX_VCPUS).contains(n))
                        .ok_or(Error::BadValue {
                            opt: "cpus",
                            key: "boot",
                            value: v.clone(),
                            hint: "the number of vCPUs must be 1..=32",
                        })?;
                }
                _ => {
                    return Err(Error::UnknownKey {
                        opt: "cpus",
                        key: k,
                        valid: "boot",
                    })
                }
            }
        }
        Ok(CpusConfig { boot })
    }
}

/// Hugepage size choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugepageSize {
    /// 2 MiB.
    Size2M,
    /// 1 GiB.
    Size1G,
}

impl HugepageSize {
    /// Bytes.
    pub fn bytes(self) -> u64 {
        match self {
            HugepageSize::Size2M => 2 << 20,
            HugepageSize::Size1G => 1 << 30,
        }
    }
}

/// `prezero=` choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prezero {
    /// Zero with the fastest backend; send the hint.
    Auto,
    /// No hint.
    Off,
    /// A named zeroing backend.
    Backend(String),
}

/// `--memory` parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOpts {
    /// Bytes of guest RAM.
    pub size: u64,
    /// hugetlb backing.
    pub hugepages: bool,
    /// hugetlb page size.
    pub hugepage_size: HugepageSize,
    /// Populate all memory before boot.
    pub prefault: bool,
    /// Pre-zeroing / hint.
    pub prezero: Prezero,
}

impl MemoryOpts {
    /// Parses `size=4G,hugepages=on,...`. Defaults: 512M, no hugepages,
    /// 2M pages, no prefault, prezero=auto.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let mut m = MemoryOpts {
            size: 512 << 20,
            hugepages: false,
            hugepage_size: HugepageSize::Size2M,
            prefault: false,
            prezero: Prezero::Auto,
        };
        let mut explicit_page_size = false;
        for (k, v) in pairs("memory", s, "size=1G,hugepages=on")? {
            match k.as_str() {
                "size" => {
                    m.size = parse_size(&v).filter(|&n| n > 0).ok_or(Error::BadValue {
                        opt: "memory",
                        key: "size",
                        value: v.clone(),
                        hint: "write a size like 512M, 4G or 1073741824",
                    })?;
                    if !m.size.is_multiple_of(4096) {
                        return Err(Error::BadValue {
                            opt: "memory",
                            key: "size",
                            value: v,
                            hint: "the size must be a multiple of 4 KiB",
                        });
                    }
                }
                "hugepages" => m.hugepages = on_off("memory", "hugepages", &v)?,
                "hugepage_size" => {
                    explicit_page_size = true;
                    m.hugepage_size = match parse_size(&v) {
                        Some(0x20_0000) => HugepageSize::Size2M,
                        Some(0x4000_0000) => HugepageSize::Size1G,
                        _ => {
                            return Err(Error::BadValue {
                                opt: "memory",
                                key: "hugepage_size",
                                value: v,
                                hint: "use 2M or 1G",
                            })
                        }
                    }
                }
                "prefault" => m.prefault = on_off("memory", "prefault", &v)?,
                "prezero" => {
                    m.prezero = match v.as_str() {
                        "auto" | "on" => Prezero::Auto,
                        "off" => Prezero::Off,
                        "" => {
                            return Err(Error::BadValue {
                                opt: "memory",
                                key: "prezero",
                                value: v,
                                hint: "use auto, off or a zeroing backend name",
                            })
                        }
                        b => Prezero::Backend(b.to_string()),
                    }
                }
                _ => {
                    return Err(Error::UnknownKey {
                        opt: "memory",
                        key: k,
                        valid: "size, hugepages, hugepage_size, prefault, prezero",
                    })
                }
            }
        }
        if explicit_page_size && !m.hugepages {
            // Asking for a page size implies hugepages, as in
            // cloud-hypervisor.
            m.hugepages = true;
        }
        if m.hugepages && !m.size.is_multiple_of(m.hugepage_size.bytes()) {
            return Err(Error::BadValue {
                opt: "memory",
                key: "size",
                value: m.size.to_string(),
                hint: "with hugepages the size must be a multiple of the hugepage size",
            });
        }
        Ok(m)
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
    /// Parses `tty`, `off` or `file=PATH`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s {
            "tty" => Ok(SerialOpt::Tty),
            "off" | "null" => Ok(SerialOpt::Off),
            _ => match s.strip_prefix("file=") {
                Some(p) if !p.is_empty() => Ok(SerialOpt::File(PathBuf::from(p))),
                _ => Err(Error::BadValue {
                    opt: "serial",
                    key: "mode",
                    value: s.to_string(),
                    hint: "use tty, off or file=PATH",
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("4GiB"), Some(4 << 30));
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("2k"), Some(2048));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    #[test]
    fn memory_defaults_and_keys() {
        let m = MemoryOpts::parse("size=512M").unwrap();
        assert_eq!(m.size, 512 << 20);
        assert!(!m.hugepages && !m.prefault);
        assert_eq!(m.prezero, Prezero::Auto);
        let m = MemoryOpts::parse("size=4G,hugepages=on,hugepage_size=1G,prefault=on,prezero=off")
            .unwrap();
        assert_eq!(
            (m.size, m.hugepages, m.hugepage_size, m.prefault, m.prezero),
            (4 << 30, true, HugepageSize::Size1G, true, Prezero::Off)
        );
        let m = MemoryOpts::parse("size=1G,prezero=avx512").unwrap();
        assert_eq!(m.prezero, Prezero::Backend("avx512".into()));
    }

    #[test]
    fn memory_errors_name_the_fix() {
        let e = MemoryOpts::parse("size=lots").unwrap_err();
        assert!(e.to_string().contains("512M"), "{e}");
        assert!(MemoryOpts::parse("size=0").is_err());
        assert!(MemoryOpts::parse("size=1000").is_err());
        assert!(MemoryOpts::parse("bogus=1")
            .unwrap_err()
            .to_string()
            .contains("valid keys"));
        assert!(MemoryOpts::parse("size").is_err());
        assert!(MemoryOpts::parse("hugepages=maybe").is_err());
        assert!(MemoryOpts::parse("hugepage_size=4M").is_err());
        assert!(MemoryOpts::parse("size=3M,hugepages=on").is_err());
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
