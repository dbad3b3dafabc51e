//! `slo.toml`: scenarios (which VMM boots what, how often) and their SLOs.
//!
//! ```toml
//! [defaults]                 # optional
//! repetitions = 5
//! warmup = 0                 # boots run first and reported, not counted
//! timeout_s = 120
//!
//! [[scenario]]
//! name = "zerostart-probe"
//! vmm = "zerostart"          # zerostart | qemu | cloud-hypervisor | firecracker
//! launch = "pool"            # qemu / cloud-hypervisor through `zerostart launch`:
//!                            # pool[:SOCKET] | prefault | none (needs `firmware`)
//! firmware = "OVMF.fd"       # with `launch`: OVMF.fd or CLOUDHV.fd (ZeroStartPkg)
//! kernel = "${ROOT}/target/probe/probe.bzImage"
//! initramfs = "..."          # optional
//! disk = "esp.img"           # cloud-hypervisor with `launch` only, instead of
//!                            # kernel/initramfs/cmdline: the disk its firmware
//!                            # boots (a UKI on an EFI system partition,
//!                            # tests/lib/mkesp.sh)
//! cmdline = "console=ttyS0 reboot=k panic=1"
//! memory = "256M"
//! backing = "thp"            # anon | thp | hugetlb
//! prefault = false
//! vcpus = 1
//! expect = "^ZSPROBE: PASS"  # a serial line every repetition must print
//! [scenario.markers]         # serial line regexes for phases (non-timeline VMMs)
//! init_started = "^ZSPROBE: start"
//! [[scenario.slo]]
//! phase = "init_started"     # launch -> this phase
//! stat = "p95"               # min p50 p90 p95 p99 max mean
//! max_ms = 500
//! ```
//!
//! Paths may use `${VAR}` (environment), `${ROOT}` (the directory holding
//! the config file's nearest `Cargo.toml` workspace, else the config's
//! directory) and are relative to the config file. Every error is one line
//! naming the file, scenario and key, and what to write instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::phase::Phase;

/// A config problem: one line naming where and the fix.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {place}`{key}`: {problem}; {fix}")]
pub struct ConfigError {
    /// Config file.
    pub file: String,
    /// `scenario 'name' ` or empty.
    pub place: String,
    /// The key.
    pub key: String,
    /// What is wrong.
    pub problem: String,
    /// What to do.
    pub fix: String,
}

/// Which VMM boots a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vmm {
    /// This project's VMM (phases from its `--timeline`).
    Zerostart,
    /// `qemu-system-x86_64`.
    Qemu,
    /// `cloud-hypervisor`.
    CloudHypervisor,
    /// `firecracker`.
    Firecracker,
    /// A scenario of the nested test host (`tests/nested-host/run.py`):
    /// zerostart or QEMU on real KVM inside an L2 Linux under QEMU TCG.
    Nested,
}

impl Vmm {
    /// Name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            Vmm::Zerostart => "zerostart",
            Vmm::Qemu => "qemu",
            Vmm::CloudHypervisor => "cloud-hypervisor",
            Vmm::Firecracker => "firecracker",
            Vmm::Nested => "nested",
        }
    }

    /// Default program name looked up on PATH.
    pub fn program(self) -> &'static str {
        match self {
            Vmm::Zerostart => "zerostart",
            Vmm::Qemu => "qemu-system-x86_64",
            Vmm::CloudHypervisor => "cloud-hypervisor",
            Vmm::Firecracker => "firecracker",
            Vmm::Nested => "python3",
        }
    }
}

/// Host memory behind guest RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backing {
    /// Anonymous 4K pages.
    Anon,
    /// Anonymous with transparent huge pages.
    Thp,
    /// 2M hugetlb.
    Hugetlb,
    /// 2M hugetlb leased from a running `zerostart pool` (zerostart only).
    Pool,
}

/// Where `zerostart launch` takes guest RAM from (its `--memory source=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchSource {
    /// A lease from a running `zerostart pool serve`; `None`: the
    /// launcher's default socket.
    Pool(Option<PathBuf>),
    /// A memfd the launcher populates before the VMM starts.
    Prefault,
    /// A memfd left unpopulated (the guest's first touch faults).
    None,
}

impl LaunchSource {
    /// The launcher's `source=` value.
    pub fn arg(&self) -> String {
        match self {
            LaunchSource::Pool(None) => "pool".into(),
            LaunchSource::Pool(Some(p)) => format!("pool:{}", p.display()),
            LaunchSource::Prefault => "prefault".into(),
            LaunchSource::None => "none".into(),
        }
    }
}

/// A qemu or cloud-hypervisor scenario started through `zerostart launch`,
/// the path operators use: the launcher takes the memory, publishes the
/// hint over fw_cfg and runs the VMM as its child, so boot SLOs measure
/// what they run (and memory_ready comes from the launcher's timeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Guest RAM source.
    pub source: LaunchSource,
    /// OVMF.fd (QEMU) or CLOUDHV.fd (cloud-hypervisor) with ZeroStartPkg:
    /// the launcher publishes the hint over fw_cfg, which only this
    /// firmware turns into the table the guest reads.
    pub firmware: PathBuf,
    /// 4 KiB shmem instead of 2M hugetlb (`backing = "anon"`).
    pub small_pages: bool,
}

/// The statistic an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// Smallest sample.
    Min,
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// Largest sample.
    Max,
    /// Mean.
    Mean,
}

impl Stat {
    const NAMES: &'static str = "min, p50, p90, p95, p99, max, mean";

    fn parse(s: &str) -> Option<Stat> {
        Some(match s {
            "min" => Stat::Min,
            "p50" | "median" => Stat::P50,
            "p90" => Stat::P90,
            "p95" => Stat::P95,
            "p99" => Stat::P99,
            "max" | "p100" => Stat::Max,
            "mean" => Stat::Mean,
            _ => return None,
        })
    }

    /// Name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            Stat::Min => "min",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P95 => "p95",
            Stat::P99 => "p99",
            Stat::Max => "max",
            Stat::Mean => "mean",
        }
    }
}

/// One SLO: `stat` of launch→`phase` ≤ `max_ms`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slo {
    /// Phase measured from launch.
    pub phase: Phase,
    /// Statistic over the repetitions.
    pub stat: Stat,
    /// Bound in milliseconds.
    pub max_ms: f64,
}

impl Slo {
    /// `p95(launch→init_started) ≤ 500 ms`.
    pub fn label(&self) -> String {
        format!(
            "{}(launch->{}) <= {} ms",
            self.stat.name(),
            self.phase.name(),
            self.max_ms
        )
    }
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Unique name.
    pub name: String,
    /// VMM.
    pub vmm: Vmm,
    /// VMM binary (default: looked up on PATH).
    pub binary: Option<PathBuf>,
    /// Kernel image (empty for `nested`: the nested host picks its L3
    /// kernel; and for cloud-hypervisor through `launch`, which boots `disk`).
    pub kernel: PathBuf,
    /// The boot disk of cloud-hypervisor through `launch`: its firmware
    /// takes the kernel from the disk, because cloud-hypervisor refuses
    /// `--kernel` beside `--firmware` and so cannot pass one over fw_cfg.
    pub disk: Option<PathBuf>,
    /// For `vmm = "nested"`: the nested host's scenario.
    pub nested: Option<Nested>,
    /// initramfs.
    pub initramfs: Option<PathBuf>,
    /// Kernel command line.
    pub cmdline: String,
    /// Guest RAM as written (`256M`).
    pub memory: String,
    /// Guest RAM in bytes.
    pub memory_bytes: u64,
    /// Backing.
    pub backing: Backing,
    /// Populate guest RAM before boot.
    pub prefault: bool,
    /// The pool's socket for `backing = "pool"`.
    pub pool_socket: Option<PathBuf>,
    /// Started through `zerostart launch` (qemu, cloud-hypervisor).
    pub launch: Option<Launch>,
    /// vCPUs.
    pub vcpus: u32,
    /// Boots.
    pub repetitions: u32,
    /// Boots run before the measured ones: reported (their phases and any
    /// failure), never in a statistic. Why a scenario wants one: the first
    /// boot after a hugetlb pool is grown faults the pool's pages in
    /// beneath a cloud VM whose free memory was reported to its host
    /// (virtio-balloon free page reporting), seconds that no later boot
    /// pays. A failed warm-up boot still fails every SLO of the scenario.
    pub warmup: u32,
    /// Per-boot limit; the VMM is killed after it.
    pub timeout: Duration,
    /// QEMU accelerator (`tcg` or `kvm`).
    pub accel: String,
    /// Extra VMM arguments, appended as given.
    pub extra_args: Vec<String>,
    /// A serial line every boot must print to count as successful.
    pub expect: Option<Regex>,
    /// Serial-line regexes that mark phases.
    pub markers: Vec<(Phase, Regex)>,
    /// SLOs.
    pub slos: Vec<Slo>,
}

/// A scenario run through the nested test host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nested {
    /// Scenario name in `tests/nested-host/run.py` (e.g. `zs-prezero-1g`;
    /// `microvm-zerostart`, `microvm-launch`, `microvm-stock` for the real
    /// cloud VM of `run.py microvm`).
    pub scenario: String,
    /// The VMM every run of it must have used (`zerostart` or `qemu`).
    pub vmm: Option<String>,
    /// The nested harness's report.json to read the runs from. Why a file
    /// and not a run of the harness: this crate judges SLOs; running the
    /// test bed under `tests/` is make's job (`make slo-nested` runs
    /// `tests/nested-host/run.py e2e --only NAME --repeat N --report PATH`
    /// first; `make test-microvm` runs `run.py microvm`, which writes
    /// `target/microvm/report.json`).
    pub report: PathBuf,
}

/// Whether a nested scenario name is one of the real cloud VM's
/// (`microvm-*`): `tests/nested-host/run.py microvm` writes its report
/// (always `target/microvm/report.json`, each scenario once), not
/// `run.py e2e`, so hints must name that harness.
pub fn real_vm_scenario(name: &str) -> bool {
    name.starts_with("microvm-")
}

/// A validated config.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// Scenarios in file order.
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    repetitions: Option<u32>,
    warmup: Option<u32>,
    timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlo {
    phase: String,
    stat: String,
    max_ms: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    vmm: String,
    kernel: Option<String>,
    initramfs: Option<String>,
    disk: Option<String>,
    nested_scenario: Option<String>,
    nested_vmm: Option<String>,
    nested_report: Option<String>,
    cmdline: Option<String>,
    memory: Option<String>,
    backing: Option<String>,
    prefault: Option<bool>,
    pool_socket: Option<String>,
    launch: Option<String>,
    firmware: Option<String>,
    vcpus: Option<u32>,
    repetitions: Option<u32>,
    warmup: Option<u32>,
    timeout_s: Option<u64>,
    binary: Option<String>,
    accel: Option<String>,
    #[serde(default)]
    extra_args: Vec<String>,
    expect: Option<String>,
    #[serde(default)]
    markers: BTreeMap<String, String>,
    #[serde(default)]
    slo: Vec<RawSlo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    scenario: Vec<RawScenario>,
}

/// Parses `512M`, `4G` or bytes (the workspace's one size grammar,
/// `hostmem::parse_size`).
pub fn parse_size(v: &str) -> Option<u64> {
    hostmem::parse_size(v).ok()
}

struct Ctx<'a> {
    file: &'a str,
    dir: &'a Path,
    root: &'a Path,
}

impl Ctx<'_> {
    fn err(&self, place: &str, key: &str, problem: String, fix: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            place: if place.is_empty() {
                String::new()
            } else {
                format!("scenario '{place}' ")
            },
            key: key.to_string(),
            problem,
            fix: fix.into(),
        }
    }

    /// Expands `${VAR}` and resolves relative to the config directory.
    fn path(
        &self,
        place: &str,
        key: &str,
        v: &str,
        must_exist: bool,
    ) -> Result<PathBuf, ConfigError> {
        let mut out = String::new();
        let mut rest = v;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let Some(j) = rest[i..].find('}') else {
                return Err(self.err(
                    place,
                    key,
                    format!("'{v}' has an unclosed ${{"),
                    "write ${NAME}",
                ));
            };
            let name = &rest[i + 2..i + j];
            let val = match name {
                "ROOT" => self.root.display().to_string(),
                "CONFIG_DIR" => self.dir.display().to_string(),
                "ZEROSTART_CACHE" => std::env::var(name).unwrap_or_else(|_| {
                    format!(
                        "{}/.cache/zerostart",
                        std::env::var("HOME").unwrap_or_default()
                    )
                }),
                _ => std::env::var(name).map_err(|_| {
                    self.err(
                        place,
                        key,
                        format!("'{v}' uses ${{{name}}}, which is not set"),
                        format!("export {name} or write the path out"),
                    )
                })?,
            };
            out.push_str(&val);
            rest = &rest[i + j + 1..];
        }
        out.push_str(rest);
        let p = self.dir.join(out);
        if must_exist && !p.exists() {
            return Err(self.err(
                place,
                key,
                format!("{} does not exist", p.display()),
                "build it first (make probe; tests/slo/prepare.sh for the Linux guest) or fix the path",
            ));
        }
        Ok(p)
    }
}

fn workspace_root(dir: &Path) -> PathBuf {
    let mut d = Some(dir);
    while let Some(x) = d {
        if let Ok(t) = std::fs::read_to_string(x.join("Cargo.toml")) {
            if t.contains("[workspace]") {
                return x.to_path_buf();
            }
        }
        d = x.parent();
    }
    dir.to_path_buf()
}

/// Turns a TOML error into one line: `file:LINE: message`.
fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].lines().count().max(1))
        .unwrap_or(0);
    let msg = e.message().replace('\n', " ");
    ConfigError {
        file: format!("{file}:{line}"),
        place: String::new(),
        key: "toml".into(),
        problem: msg.trim().to_string(),
        fix: "see tests/slo/example.toml or docs/slo.md for the keys".into(),
    }
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            place: String::new(),
            key: "--config".into(),
            problem: format!("cannot read it ({e})"),
            fix: "pass an existing slo.toml, e.g. tests/slo/example.toml".into(),
        })?;
        Config::parse(&text, path)
    }

    /// Validates config text as if read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(&file, text, &e))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let root = workspace_root(&dir);
        let cx = Ctx {
            file: &file,
            dir: &dir,
            root: &root,
        };
        if raw.scenario.is_empty() {
            return Err(cx.err(
                "",
                "scenario",
                "no scenarios".into(),
                "add at least one [[scenario]] table",
            ));
        }
        let mut scenarios: Vec<Scenario> = Vec::new();
        for s in raw.scenario {
            scenarios.push(Self::scenario(&cx, &raw.defaults, s, &scenarios)?);
        }
        Ok(Config {
            path: path.to_path_buf(),
            scenarios,
        })
    }

    /// Validates `launch` (and `firmware`, `pool_socket`, `backing`,
    /// `prefault`, which it changes the meaning of).
    fn launch(
        cx: &Ctx<'_>,
        n: &str,
        vmm: Vmm,
        s: &RawScenario,
        l: &str,
        backing: Backing,
    ) -> Result<Launch, ConfigError> {
        if !matches!(vmm, Vmm::Qemu | Vmm::CloudHypervisor) {
            return Err(cx.err(
                n,
                "launch",
                format!(
                    "`zerostart launch` starts qemu or cloud-hypervisor, not {}",
                    vmm.name()
                ),
                match vmm {
                    Vmm::Zerostart => {
                        "drop launch: zerostart takes pool memory itself with backing = \"pool\""
                    }
                    _ => "drop launch, or set vmm = \"qemu\" or \"cloud-hypervisor\"",
                },
            ));
        }
        let source = match l {
            "prefault" => LaunchSource::Prefault,
            "none" => LaunchSource::None,
            "pool" => LaunchSource::Pool(
                s.pool_socket
                    .as_deref()
                    .map(|p| cx.path(n, "pool_socket", p, false))
                    .transpose()?,
            ),
            p if p.starts_with("pool:") && p.len() > 5 => {
                if s.pool_socket.is_some() {
                    return Err(cx.err(
                        n,
                        "pool_socket",
                        "names a second socket next to launch = \"pool:SOCKET\"".into(),
                        "keep one: launch = \"pool\" with pool_socket, or launch = \"pool:SOCKET\" alone",
                    ));
                }
                LaunchSource::Pool(Some(cx.path(n, "launch", &p[5..], false)?))
            }
            _ => {
                return Err(cx.err(
                    n,
                    "launch",
                    format!("'{l}' is not a memory source of `zerostart launch`"),
                    "use pool, pool:SOCKET, prefault or none",
                ))
            }
        };
        let Some(fw) = s.firmware.as_deref() else {
            let (which, why) = match vmm {
                Vmm::Qemu => ("OVMF.fd", "QEMU's hint goes over fw_cfg, which only ZeroStartPkg turns into the guest's table"),
                _ => ("CLOUDHV.fd", "cloud-hypervisor's direct kernel boot cannot carry the hint"),
            };
            return Err(cx.err(
                n,
                "firmware",
                format!("is missing (launch needs it: {why})"),
                format!("set firmware = \"<dir of `firmware/build.sh --print-dir`>/{which}\" (make firmware)"),
            ));
        };
        let firmware = cx.path(n, "firmware", fw, true)?;
        if s.prefault.is_some() {
            return Err(cx.err(
                n,
                "prefault",
                "does not apply with `launch`".into(),
                "drop it: launch = \"prefault\" populates the memory, \"pool\" and \"none\" do not",
            ));
        }
        let small_pages = match backing {
            Backing::Hugetlb => false,
            Backing::Anon if !matches!(source, LaunchSource::Pool(_)) => true,
            Backing::Anon => {
                return Err(cx.err(
                    n,
                    "backing",
                    "does not apply with launch = \"pool\"".into(),
                    "drop it: the pool's page size decides",
                ))
            }
            Backing::Thp | Backing::Pool => return Err(cx.err(
                n,
                "backing",
                format!(
                    "'{}' is not a memory of `zerostart launch`",
                    if backing == Backing::Thp {
                        "thp"
                    } else {
                        "pool"
                    }
                ),
                "use hugetlb (the default with launch) or anon (4 KiB shmem), or launch = \"pool\"",
            )),
        };
        Ok(Launch {
            source,
            firmware,
            small_pages,
        })
    }

    fn scenario(
        cx: &Ctx<'_>,
        d: &RawDefaults,
        s: RawScenario,
        before: &[Scenario],
    ) -> Result<Scenario, ConfigError> {
        let n = s.name.clone();
        let name_ok = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return Err(cx.err(
                &n,
                "name",
                format!("'{n}' is not a usable name"),
                "use letters, digits, - _ .",
            ));
        }
        if before.iter().any(|b| b.name == n) {
            return Err(cx.err(
                &n,
                "name",
                "is used twice".into(),
                "give each scenario its own name",
            ));
        }
        let vmm = match s.vmm.as_str() {
            "zerostart" => Vmm::Zerostart,
            "qemu" => Vmm::Qemu,
            "cloud-hypervisor" => Vmm::CloudHypervisor,
            "firecracker" => Vmm::Firecracker,
            "nested" => Vmm::Nested,
            v => {
                return Err(cx.err(
                    &n,
                    "vmm",
                    format!("'{v}' is not a supported VMM"),
                    "use zerostart, qemu, cloud-hypervisor, firecracker or nested",
                ))
            }
        };
        let memory = s.memory.clone().unwrap_or_else(|| "512M".into());
        let memory_bytes = parse_size(&memory).ok_or_else(|| {
            cx.err(
                &n,
                "memory",
                format!("'{memory}' is not a size"),
                "write e.g. 256M or 4G",
            )
        })?;
        if memory_bytes < 16 << 20 || memory_bytes % (2 << 20) != 0 {
            return Err(cx.err(
                &n,
                "memory",
                format!("'{memory}' is too small or not a multiple of 2M"),
                "use at least 16M, in whole MiB pairs, e.g. 256M",
            ));
        }
        let backing =
            match s
                .backing
                .as_deref()
                .unwrap_or(if s.launch.is_some() { "hugetlb" } else { "thp" })
            {
                "anon" => Backing::Anon,
                "thp" => Backing::Thp,
                "hugetlb" => Backing::Hugetlb,
                "pool" => Backing::Pool,
                b => {
                    return Err(cx.err(
                        &n,
                        "backing",
                        format!("'{b}' is not a backing"),
                        "use anon, thp, hugetlb or pool",
                    ))
                }
            };
        if backing == Backing::Pool && vmm != Vmm::Zerostart {
            return Err(cx.err(
                &n,
                "backing",
                "'pool' needs vmm = \"zerostart\"".into(),
                if s.launch.is_some() {
                    "drop it: launch = \"pool\" already leases from the pool"
                } else {
                    "use anon, thp or hugetlb for other VMMs, or launch = \"pool\" (qemu, cloud-hypervisor)"
                },
            ));
        }
        let launch = match &s.launch {
            None => {
                if s.firmware.is_some() {
                    return Err(cx.err(
                        &n,
                        "firmware",
                        "only applies with `launch`".into(),
                        "drop it, or set launch = \"pool\" | \"prefault\" | \"none\" (qemu, cloud-hypervisor)",
                    ));
                }
                None
            }
            Some(l) => Some(Self::launch(cx, &n, vmm, &s, l, backing)?),
        };
        let pool_socket = match (backing, s.pool_socket.as_deref()) {
            (Backing::Pool, Some(p)) => Some(cx.path(&n, "pool_socket", p, false)?),
            (Backing::Pool, None) => {
                return Err(cx.err(
                    &n,
                    "pool_socket",
                    "is missing".into(),
                    "name the socket of a running `zerostart pool serve` (backing = \"pool\")",
                ))
            }
            (_, Some(_))
                if matches!(
                    launch,
                    Some(Launch {
                        source: LaunchSource::Pool(_),
                        ..
                    })
                ) =>
            {
                None
            }
            (_, Some(_)) => {
                return Err(cx.err(
                    &n,
                    "pool_socket",
                    "is set but backing is not \"pool\"".into(),
                    "set backing = \"pool\" (zerostart) or launch = \"pool\" (qemu, cloud-hypervisor), or drop pool_socket",
                ))
            }
            (_, None) => None,
        };
        let vcpus = s.vcpus.unwrap_or(1);
        if !(1..=32).contains(&vcpus) {
            return Err(cx.err(
                &n,
                "vcpus",
                format!("{vcpus} is out of range"),
                "use 1..=32",
            ));
        }
        let repetitions = s.repetitions.or(d.repetitions).unwrap_or(5);
        if !(1..=10_000).contains(&repetitions) {
            return Err(cx.err(
                &n,
                "repetitions",
                format!("{repetitions} is out of range"),
                "use 1..=10000",
            ));
        }
        let warmup = s.warmup.or(d.warmup).unwrap_or(0);
        if warmup > 100 {
            return Err(cx.err(
                &n,
                "warmup",
                format!("{warmup} is out of range"),
                "use 0..=100",
            ));
        }
        let timeout_s = s.timeout_s.or(d.timeout_s).unwrap_or(120);
        if !(1..=86_400).contains(&timeout_s) {
            return Err(cx.err(
                &n,
                "timeout_s",
                format!("{timeout_s} is out of range"),
                "use 1..=86400 seconds",
            ));
        }
        let accel = s.accel.clone().unwrap_or_else(|| "tcg".into());
        if vmm == Vmm::Qemu && !["tcg", "kvm"].contains(&accel.as_str()) {
            return Err(cx.err(
                &n,
                "accel",
                format!("'{accel}' is not a QEMU accelerator here"),
                "use tcg or kvm",
            ));
        }
        let re = |key: &str, v: &str| {
            Regex::new(v).map_err(|e| {
                cx.err(
                    &n,
                    key,
                    format!(
                        "'{v}' is not a regex ({})",
                        e.to_string().lines().last().unwrap_or("")
                    ),
                    "fix the pattern (Rust regex syntax)",
                )
            })
        };
        let expect = s.expect.as_deref().map(|v| re("expect", v)).transpose()?;
        let mut markers = Vec::new();
        for (k, v) in &s.markers {
            let phase = Phase::parse(k)
                .filter(|p| p.from_serial_marker())
                .ok_or_else(|| {
                    cx.err(
                        &n,
                        &format!("markers.{k}"),
                        "is not a phase a serial line can mark".into(),
                        "use init_started or test_done",
                    )
                })?;
            markers.push((phase, re(&format!("markers.{k}"), v)?));
        }
        let mut slos = Vec::new();
        for (i, r) in s.slo.iter().enumerate() {
            let key = |k: &str| format!("slo[{i}].{k}");
            let phase = Phase::parse(&r.phase)
                .filter(|p| *p != Phase::Launch)
                .ok_or_else(|| {
                    cx.err(
                        &n,
                        &key("phase"),
                        format!("'{}' is not a phase", r.phase),
                        format!("use one of {}", Phase::SLO_NAMES),
                    )
                })?;
            if phase.real_vm_only() && vmm != Vmm::Nested {
                return Err(cx.err(
                    &n,
                    &key("phase"),
                    format!("{} is reported only by the nested host's real VM", phase.name()),
                    "use it with vmm = \"nested\" and a microvm-* nested_scenario (make test-microvm)",
                ));
            }
            let timeline = matches!(vmm, Vmm::Zerostart | Vmm::Nested);
            if phase == Phase::MemoryReady && !timeline && launch.is_none() {
                return Err(cx.err(
                    &n,
                    &key("phase"),
                    format!("memory_ready is not observable for {}", vmm.name()),
                    "use it only with vmm = \"zerostart\" or with launch = \"...\" (qemu, cloud-hypervisor), or bound first_output",
                ));
            }
            if phase.from_serial_marker() && !timeline && !markers.iter().any(|(p, _)| *p == phase)
            {
                return Err(cx.err(
                    &n,
                    &key("phase"),
                    format!("{} has no serial marker for {}", phase.name(), vmm.name()),
                    format!(
                        "add [scenario.markers] {} = \"<regex of the guest's line>\"",
                        phase.name()
                    ),
                ));
            }
            let stat = Stat::parse(&r.stat).ok_or_else(|| {
                cx.err(
                    &n,
                    &key("stat"),
                    format!("'{}' is not a statistic", r.stat),
                    format!("use one of {}", Stat::NAMES),
                )
            })?;
            if !(r.max_ms.is_finite() && r.max_ms > 0.0) {
                return Err(cx.err(
                    &n,
                    &key("max_ms"),
                    format!("{} is not a positive time", r.max_ms),
                    "write milliseconds, e.g. 500",
                ));
            }
            slos.push(Slo {
                phase,
                stat,
                max_ms: r.max_ms,
            });
        }
        if slos.is_empty() {
            return Err(cx.err(
                &n,
                "slo",
                "has no SLOs".into(),
                "add [[scenario.slo]] phase = \"exit\", stat = \"p95\", max_ms = ...",
            ));
        }
        let nested = match (vmm, &s.nested_scenario) {
            (Vmm::Nested, Some(name)) => {
                let Some(report) = s.nested_report.as_deref() else {
                    return Err(cx.err(
                        &n,
                        "nested_report",
                        "is missing".into(),
                        if real_vm_scenario(name) {
                            "name the report.json of `tests/nested-host/run.py microvm`: \"${ROOT}/target/microvm/report.json\" (make test-microvm writes it)"
                        } else {
                            "name the report.json of `tests/nested-host/run.py e2e --report PATH` (make slo-nested writes it)"
                        },
                    ));
                };
                let v = s.nested_vmm.clone();
                if let Some(x) = v.as_deref().filter(|x| !["zerostart", "qemu"].contains(x)) {
                    return Err(cx.err(
                        &n,
                        "nested_vmm",
                        format!("'{x}' is not a VMM of the nested host"),
                        "use zerostart or qemu",
                    ));
                }
                Some(Nested {
                    scenario: name.clone(),
                    vmm: v,
                    // Written by the harness after the config is read: not checked here.
                    report: cx.path(&n, "nested_report", report, false)?,
                })
            }
            (Vmm::Nested, None) => {
                return Err(cx.err(
                    &n,
                    "nested_scenario",
                    "is missing".into(),
                    "name a scenario of tests/nested-host/run.py, e.g. zs-prezero-1g",
                ))
            }
            (_, Some(_)) => {
                return Err(cx.err(
                    &n,
                    "nested_scenario",
                    "only applies to vmm = \"nested\"".into(),
                    "drop it or set vmm = \"nested\"",
                ))
            }
            (_, None) => {
                if s.nested_report.is_some() {
                    return Err(cx.err(
                        &n,
                        "nested_report",
                        "only applies to vmm = \"nested\"".into(),
                        "drop it or set vmm = \"nested\"",
                    ));
                }
                None
            }
        };
        if vmm == Vmm::Nested {
            let set = [
                ("initramfs", s.initramfs.is_some()),
                ("cmdline", s.cmdline.is_some()),
                ("memory", s.memory.is_some()),
                ("backing", s.backing.is_some()),
                ("prefault", s.prefault.is_some()),
                ("vcpus", s.vcpus.is_some()),
                ("warmup", s.warmup.is_some()),
                ("binary", s.binary.is_some()),
                ("accel", s.accel.is_some()),
                ("extra_args", !s.extra_args.is_empty()),
                ("expect", s.expect.is_some()),
                ("markers", !s.markers.is_empty()),
            ];
            if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
                return Err(cx.err(
                    &n,
                    key,
                    "does not apply to vmm = \"nested\"".into(),
                    "drop it: the nested host's scenario (tests/nested-host/run.py) fixes the guest",
                ));
            }
        }
        // cloud-hypervisor through the launcher boots firmware, which
        // cannot get a kernel from it (it refuses --kernel beside
        // --firmware): the kernel comes from `disk`.
        let disk_boot = vmm == Vmm::CloudHypervisor && s.launch.is_some();
        let disk = match (&s.disk, disk_boot) {
            (Some(d), true) => Some(cx.path(&n, "disk", d, true)?),
            (None, true) => {
                return Err(cx.err(
                    &n,
                    "disk",
                    "is missing (cloud-hypervisor's firmware boots the kernel from a disk: it refuses --kernel beside --firmware)".into(),
                    "set disk = \"<raw image with the kernel as a UKI on an EFI system partition>\" (tests/lib/mkesp.sh makes one)",
                ))
            }
            (Some(_), false) => {
                return Err(cx.err(
                    &n,
                    "disk",
                    "only applies to vmm = \"cloud-hypervisor\" with `launch`".into(),
                    "drop it, or pass a disk in extra_args",
                ))
            }
            (None, false) => None,
        };
        if disk_boot {
            for (key, set) in [
                ("kernel", s.kernel.is_some()),
                ("initramfs", s.initramfs.is_some()),
                ("cmdline", s.cmdline.is_some()),
            ] {
                if set {
                    return Err(cx.err(
                        &n,
                        key,
                        "cannot be passed to cloud-hypervisor through `launch` (it refuses --kernel beside --firmware, and ignores initramfs and cmdline without it)".into(),
                        "drop it and put it in the UKI on `disk` (tests/lib/mkesp.sh KERNEL INITRD CMDLINE OUT)",
                    ));
                }
            }
        }
        let kernel = match (&s.kernel, vmm) {
            _ if disk_boot => PathBuf::new(),
            (Some(k), Vmm::Nested) => {
                return Err(cx.err(
                    &n,
                    "kernel",
                    format!("'{k}' cannot be chosen for vmm = \"nested\""),
                    "drop it (the nested host boots its own L3 kernel; see docs/e2e.md)",
                ))
            }
            (Some(k), _) => cx.path(&n, "kernel", k, true)?,
            (None, Vmm::Nested) => PathBuf::new(),
            (None, _) => {
                return Err(cx.err(
                    &n,
                    "kernel",
                    "is missing".into(),
                    "name the guest kernel image",
                ))
            }
        };
        let memory = match &nested {
            Some(x) => x.scenario.clone(),
            None => memory,
        };
        Ok(Scenario {
            kernel,
            disk,
            nested,
            initramfs: s
                .initramfs
                .as_deref()
                .map(|p| cx.path(&n, "initramfs", p, true))
                .transpose()?,
            binary: s
                .binary
                .as_deref()
                .map(|p| cx.path(&n, "binary", p, true))
                .transpose()?,
            name: n,
            vmm,
            cmdline: s
                .cmdline
                .unwrap_or_else(|| "console=ttyS0 reboot=k panic=1".into()),
            memory,
            memory_bytes,
            backing,
            prefault: s.prefault.unwrap_or(false),
            pool_socket,
            launch,
            vcpus,
            repetitions,
            // A nested scenario's boots come from the harness's report:
            // nothing to warm here (a [defaults] warmup does not apply).
            warmup: if vmm == Vmm::Nested { 0 } else { warmup },
            timeout: Duration::from_secs(timeout_s),
            accel,
            extra_args: s.extra_args,
            expect,
            markers,
            slos,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k"), b"x").unwrap();
        Config::parse(text, &dir.path().join("slo.toml")).map_err(|e| e.to_string())
    }

    const OK: &str = r#"
[[scenario]]
name = "a"
vmm = "qemu"
kernel = "k"
memory = "256M"
markers = { init_started = "^init" }
[[scenario.slo]]
phase = "init_started"
stat = "p95"
max_ms = 500
"#;

    #[test]
    fn a_good_config_parses() {
        let c = parse(OK).unwrap();
        let s = &c.scenarios[0];
        assert_eq!(s.vmm, Vmm::Qemu);
        assert_eq!(s.memory_bytes, 256 << 20);
        assert_eq!(s.repetitions, 5);
        assert_eq!(s.warmup, 0);
        assert_eq!(s.slos[0].label(), "p95(launch->init_started) <= 500 ms");
    }

    #[test]
    fn warmup_comes_from_the_scenario_or_the_defaults() {
        let with = |t: &str| OK.replace("memory = \"256M\"\n", &format!("memory = \"256M\"\n{t}"));
        assert_eq!(parse(&with("warmup = 1\n")).unwrap().scenarios[0].warmup, 1);
        let d = format!("[defaults]\nwarmup = 2\n{OK}");
        assert_eq!(parse(&d).unwrap().scenarios[0].warmup, 2);
        let e = parse(&with("warmup = 101\n")).unwrap_err();
        assert!(
            e.contains("`warmup`: 101 is out of range; use 0..=100"),
            "{e}"
        );
    }

    /// cloud-hypervisor through the launcher boots a disk: its firmware
    /// cannot get a kernel from it (v53.0 refuses --kernel beside
    /// --firmware), so `kernel`, `initramfs` and `cmdline` are refused
    /// there, `disk` is required, and `disk` means nothing elsewhere.
    #[test]
    fn cloud_hypervisor_launch_boots_a_disk() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["CLOUDHV.fd", "esp.img", "k"] {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let base = "[[scenario]]\nname = \"c\"\nvmm = \"cloud-hypervisor\"\nlaunch = \"pool\"\n\
                    firmware = \"CLOUDHV.fd\"\nmemory = \"256M\"\n";
        let slo = "[[scenario.slo]]\nphase = \"exit\"\nstat = \"max\"\nmax_ms = 1\n";
        let parse_in = |t: &str| {
            let t = format!("{t}{slo}");
            let t = t.as_str();
            let p = dir.path().join("slo.toml");
            std::fs::write(&p, t).unwrap();
            Config::parse(t, &p).map_err(|e| e.to_string())
        };
        let c = parse_in(&format!("{base}disk = \"esp.img\"\n")).unwrap();
        assert_eq!(c.scenarios[0].disk, Some(dir.path().join("esp.img")));
        for (extra, want) in [
            ("", "`disk`: is missing"),
            (
                "disk = \"esp.img\"\nkernel = \"k\"\n",
                "`kernel`: cannot be passed",
            ),
            (
                "disk = \"esp.img\"\ninitramfs = \"k\"\n",
                "`initramfs`: cannot be passed",
            ),
            (
                "disk = \"esp.img\"\ncmdline = \"quiet\"\n",
                "`cmdline`: cannot be passed",
            ),
        ] {
            let e = parse_in(&format!("{base}{extra}")).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{extra:?}: {e}");
        }
        let q = "[[scenario]]\nname = \"q\"\nvmm = \"qemu\"\nkernel = \"k\"\ndisk = \"esp.img\"\n";
        let e = parse_in(q).unwrap_err();
        assert!(e.contains("`disk`: only applies"), "{e}");
    }

    /// Each bad value gives one line naming the key and a fix.
    #[test]
    fn bad_configs_name_the_key_and_the_fix() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "vmm = \"qemu\"",
                "vmm = \"kvmtool\"",
                "`vmm`: 'kvmtool' is not a supported VMM; use zerostart",
            ),
            (
                "memory = \"256M\"",
                "memory = \"lots\"",
                "`memory`: 'lots' is not a size; write e.g. 256M",
            ),
            (
                "stat = \"p95\"",
                "stat = \"p97\"",
                "`slo[0].stat`: 'p97' is not a statistic; use one of",
            ),
            (
                "max_ms = 500",
                "max_ms = -1",
                "`slo[0].max_ms`: -1 is not a positive time",
            ),
            (
                "phase = \"init_started\"",
                "phase = \"boot\"",
                "`slo[0].phase`: 'boot' is not a phase; use one of",
            ),
            (
                "phase = \"init_started\"",
                "phase = \"memory_ready\"",
                "memory_ready is not observable for qemu",
            ),
            (
                "phase = \"init_started\"",
                "phase = \"app_ready\"",
                "app_ready is reported only by the nested host's real VM; use it with vmm = \"nested\"",
            ),
            ("kernel = \"k\"", "kernel = \"missing\"", "`kernel`: "),
            (
                "kernel = \"k\"",
                "kernel = \"${NO_SUCH_VAR_ZS}/k\"",
                "${NO_SUCH_VAR_ZS}, which is not set; export NO_SUCH_VAR_ZS",
            ),
            (
                "markers = { init_started = \"^init\" }",
                "markers = { init_started = \"(\" }",
                "`markers.init_started`: '(' is not a regex",
            ),
            (
                "markers = { init_started = \"^init\" }",
                "markers = {}",
                "init_started has no serial marker for qemu; add [scenario.markers]",
            ),
            (
                "memory = \"256M\"",
                "memroy = \"256M\"",
                "unknown field `memroy`",
            ),
            (
                "memory = \"256M\"",
                "memory = \"256M\"\nbacking = \"pool\"",
                "'pool' needs vmm = \"zerostart\"",
            ),
            (
                "memory = \"256M\"",
                "memory = \"256M\"\npool_socket = \"/s\"",
                "`pool_socket`: is set but backing is not",
            ),
            (
                "vmm = \"qemu\"",
                "vmm = \"zerostart\"\nbacking = \"pool\"",
                "`pool_socket`: is missing",
            ),
        ];
        for (from, to, want) in cases {
            let text = OK.replace(from, to);
            assert_ne!(text, OK, "{from}");
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{to}: got {e}");
            assert!(!e.contains('\n'), "multi-line: {e}");
            assert!(e.contains("slo.toml"), "{e}");
        }
    }

    /// `launch`: only for qemu and cloud-hypervisor, with firmware, and
    /// none of the keys whose job the launcher takes over.
    #[test]
    fn launch_scenarios() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["k", "OVMF.fd"] {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let parse =
            |t: &str| Config::parse(t, &dir.path().join("slo.toml")).map_err(|e| e.to_string());
        let base = OK
            .replace(
                "vmm = \"qemu\"",
                "vmm = \"qemu\"\nlaunch = \"pool\"\nfirmware = \"OVMF.fd\"",
            )
            .replace("phase = \"init_started\"", "phase = \"memory_ready\"");
        let c = parse(&base).unwrap();
        let l = c.scenarios[0].launch.clone().unwrap();
        assert_eq!(l.source, LaunchSource::Pool(None));
        assert!(l.firmware.ends_with("OVMF.fd"));
        assert!(!l.small_pages);
        let sock =
            parse(&base.replace("launch = \"pool\"", "launch = \"pool:${HOME}/p.sock\"")).unwrap();
        assert_eq!(
            sock.scenarios[0].launch.as_ref().unwrap().source.arg(),
            format!("pool:{}/p.sock", std::env::var("HOME").unwrap())
        );
        let with_key = parse(&base.replace(
            "memory = \"256M\"",
            "memory = \"256M\"\npool_socket = \"/s\"",
        ))
        .unwrap();
        assert_eq!(
            with_key.scenarios[0].launch.as_ref().unwrap().source,
            LaunchSource::Pool(Some("/s".into()))
        );
        for (from, to, want) in [
            (
                "vmm = \"qemu\"",
                "vmm = \"zerostart\"",
                "`launch`: `zerostart launch` starts qemu or cloud-hypervisor, not zerostart; drop launch: zerostart takes pool memory itself with backing = \"pool\"",
            ),
            (
                "vmm = \"qemu\"",
                "vmm = \"firecracker\"",
                "`launch`: `zerostart launch` starts qemu or cloud-hypervisor, not firecracker; drop launch, or set vmm = \"qemu\"",
            ),
            (
                "firmware = \"OVMF.fd\"",
                "",
                "`firmware`: is missing (launch needs it: QEMU's hint goes over fw_cfg, which only ZeroStartPkg turns into the guest's table); set firmware = ",
            ),
            (
                "vmm = \"qemu\"",
                "vmm = \"cloud-hypervisor\"",
                "",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pmem\"",
                "`launch`: 'pmem' is not a memory source of `zerostart launch`; use pool, pool:SOCKET, prefault or none",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool:/a\"\npool_socket = \"/b\"",
                "`pool_socket`: names a second socket",
            ),
            (
                "launch = \"pool\"",
                "launch = \"prefault\"\nprefault = true",
                "`prefault`: does not apply with `launch`",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool\"\nbacking = \"thp\"",
                "`backing`: 'thp' is not a memory of `zerostart launch`",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool\"\nbacking = \"anon\"",
                "`backing`: does not apply with launch = \"pool\"",
            ),
            (
                "launch = \"pool\"",
                "launch = \"pool\"\nbacking = \"pool\"",
                "drop it: launch = \"pool\" already leases",
            ),
            (
                "launch = \"pool\"\n",
                "",
                "`firmware`: only applies with `launch`",
            ),
            (
                "firmware = \"OVMF.fd\"",
                "firmware = \"nope.fd\"",
                "`firmware`: ",
            ),
        ] {
            let text = base.replace(from, to);
            assert_ne!(text, base, "{from}");
            if want.is_empty() {
                // cloud-hypervisor: the same fix, naming its firmware.
                let t = text.replace("firmware = \"OVMF.fd\"\n", "");
                let e = parse(&t).unwrap_err();
                assert!(e.contains("cloud-hypervisor's direct kernel boot cannot carry the hint); set firmware = \"<dir of `firmware/build.sh --print-dir`>/CLOUDHV.fd\""), "{e}");
                assert!(!e.contains('\n'), "{e}");
                continue;
            }
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{to}: got {e}");
            assert!(!e.contains('\n'), "multi-line: {e}");
        }
        // Without launch, memory_ready stays unobservable for qemu.
        let e =
            parse(&OK.replace("phase = \"init_started\"", "phase = \"memory_ready\"")).unwrap_err();
        assert!(e.contains("or with launch = "), "{e}");
    }

    #[test]
    fn duplicate_names_and_empty_configs_are_refused() {
        let twice = format!("{OK}{OK}");
        assert!(parse(&twice).unwrap_err().contains("is used twice"));
        assert!(parse("")
            .unwrap_err()
            .contains("add at least one [[scenario]]"));
        let no_slo = OK.split("[[scenario.slo]]").next().unwrap();
        assert!(parse(no_slo).unwrap_err().contains("has no SLOs"));
    }

    #[test]
    fn nested_scenarios() {
        let base = r#"
[[scenario]]
name = "n"
vmm = "nested"
nested_scenario = "zs-prezero-1g"
nested_report = "${ROOT}/target/n.json"
[[scenario.slo]]
phase = "memory_ready"
stat = "max"
max_ms = 1000
"#;
        let c = parse(base).unwrap();
        let s = &c.scenarios[0];
        assert_eq!(s.nested.as_ref().unwrap().scenario, "zs-prezero-1g");
        // A [defaults] warmup leaves the nested host's runs alone.
        let d = parse(&format!("[defaults]\nwarmup = 1\n{base}")).unwrap();
        assert_eq!(d.scenarios[0].warmup, 0);
        // The real VM's phases are bounds of nested scenarios.
        let real = base
            .replace("zs-prezero-1g", "microvm-zerostart")
            .replace("memory_ready", "app_ready");
        assert_eq!(
            parse(&real).unwrap().scenarios[0].slos[0].phase,
            Phase::AppReady
        );
        assert!(s.nested.as_ref().unwrap().report.ends_with("target/n.json"));
        for (from, to, want) in [
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nkernel = \"k\"",
                "cannot be chosen for vmm = \"nested\"",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nmemory = \"1G\"",
                "`memory`: does not apply to vmm = \"nested\"",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nwarmup = 1",
                "`warmup`: does not apply to vmm = \"nested\"",
            ),
            (
                "nested_scenario = \"zs-prezero-1g\"",
                "",
                "`nested_scenario`: is missing",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"nested\"\nnested_vmm = \"kvmtool\"",
                "use zerostart or qemu",
            ),
            (
                "vmm = \"nested\"",
                "vmm = \"qemu\"",
                "`nested_scenario`: only applies",
            ),
            (
                "nested_report = \"${ROOT}/target/n.json\"",
                "",
                "`nested_report`: is missing; name the report.json of `tests/nested-host/run.py e2e",
            ),
            (
                "zs-prezero-1g\"\nnested_report = \"${ROOT}/target/n.json\"",
                "microvm-stock\"",
                "`nested_report`: is missing; name the report.json of `tests/nested-host/run.py microvm`: \"${ROOT}/target/microvm/report.json\" (make test-microvm writes it)",
            ),
        ] {
            let e = parse(&base.replace("memory_ready", "exit").replace(from, to)).unwrap_err();
            assert!(e.contains(want), "{to}: {e}");
        }
        let no_kernel = OK.replace("kernel = \"k\"\n", "");
        assert!(parse(&no_kernel)
            .unwrap_err()
            .contains("`kernel`: is missing"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("256m"), Some(256 << 20));
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("x"), None);
    }
}
