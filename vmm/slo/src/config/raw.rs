//! `slo.toml` as written: the serde schema, unknown keys refused, and a
//! TOML syntax error turned into one line.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) repetitions: Option<u32>,
    pub(super) warmup: Option<u32>,
    pub(super) timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlo {
    pub(super) phase: String,
    pub(super) stat: String,
    pub(super) max_ms: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) name: String,
    pub(super) vmm: String,
    pub(super) kernel: Option<String>,
    pub(super) initramfs: Option<String>,
    pub(super) disk: Option<String>,
    pub(super) nested_scenario: Option<String>,
    pub(super) nested_vmm: Option<String>,
    pub(super) nested_report: Option<String>,
    pub(super) cmdline: Option<String>,
    pub(super) memory: Option<String>,
    pub(super) backing: Option<String>,
    pub(super) prefault: Option<bool>,
    pub(super) pool_socket: Option<String>,
    pub(super) launch: Option<String>,
    pub(super) firmware: Option<String>,
    pub(super) vcpus: Option<u32>,
    pub(super) repetitions: Option<u32>,
    pub(super) warmup: Option<u32>,
    pub(super) timeout_s: Option<u64>,
    pub(super) binary: Option<String>,
    pub(super) accel: Option<String>,
    #[serde(default)]
    pub(super) extra_args: Vec<String>,
    pub(super) expect: Option<String>,
    #[serde(default)]
    pub(super) markers: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) slo: Vec<RawSlo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    #[serde(default)]
    pub(super) scenario: Vec<RawScenario>,
}

/// Turns a TOML error into one line: `file:LINE: message`.
pub(super) fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
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
