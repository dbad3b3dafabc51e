//! The validated config: what the runner boots and the report names.

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;
use serde::Serialize;

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
