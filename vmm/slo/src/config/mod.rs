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
//!
//! The parts: `model`'s types are what the runner and report read;
//! `raw` is the TOML schema as written; `context` expands paths and
//! words errors; `scenario` validates one `[[scenario]]` table, with
//! `launch`, `boot`, `slo` and `nested` for the keys whose meaning
//! depends on each other.

use std::path::{Path, PathBuf};

mod boot;
mod context;
mod launch;
mod model;
mod nested;
mod raw;
mod scenario;
mod slo;

pub use model::{
    real_vm_scenario, Backing, Config, ConfigError, Launch, LaunchSource, Nested, Scenario, Slo,
    Stat, Vmm,
};

use context::{workspace_root, Ctx};
use raw::{toml_error, RawConfig};

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
}

/// Shared by the tests of each part: a config parsed from a temporary
/// directory holding a kernel `k`, and a good config to vary.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub(crate) fn parse(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k"), b"x").unwrap();
        Config::parse(text, &dir.path().join("slo.toml")).map_err(|e| e.to_string())
    }

    pub(crate) const OK: &str = r#"
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
}

#[cfg(test)]
mod tests {
    use super::test_support::{parse, OK};
    use super::*;

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
    fn duplicate_names_and_empty_configs_are_refused() {
        let twice = format!("{OK}{OK}");
        assert!(parse(&twice).unwrap_err().contains("is used twice"));
        assert!(parse("")
            .unwrap_err()
            .contains("add at least one [[scenario]]"));
        let no_slo = OK.split("[[scenario.slo]]").next().unwrap();
        assert!(parse(no_slo).unwrap_err().contains("has no SLOs"));
    }
}
