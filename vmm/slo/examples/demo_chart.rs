//! `make demo`'s chart: reads target/demo/report.json (written by
//! tests/nested-host/demo.py) and draws, per phase, the three ways of
//! starting the same guest side by side at each size.
//!
//! Usage: `demo_chart REPORT.json OUT.png`

use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;
use slo::chart::{draw_grouped, Panel};

const CONFIGS: [(&str, &str); 3] = [
    ("stock", "stock QEMU prealloc"),
    ("launch", "QEMU + zerostart launch"),
    ("zerostart", "zerostart VMM"),
];
const PHASES: [&str; 3] = ["memory_ready", "init_started", "app_ready"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, report, out] = args.as_slice() else {
        eprintln!("demo_chart: usage: demo_chart REPORT.json OUT.png");
        return ExitCode::from(2);
    };
    let rep: Value = match std::fs::read_to_string(report)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("demo_chart: cannot read {report}: {e}; run `make demo` first");
            return ExitCode::FAILURE;
        }
    };
    let rows = rep["scenarios"].as_array().cloned().unwrap_or_default();
    let mut sizes: Vec<u64> = rows
        .iter()
        .filter_map(|r| r["memory_bytes"].as_u64())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let value = |config: &str, size: u64, phase: &str| {
        rows.iter()
            .find(|r| r["config"] == config && r["memory_bytes"].as_u64() == Some(size))
            .and_then(|r| r["phases_ms"][phase].as_f64())
            .map(|ms| ms / 1000.0)
    };
    let panels: Vec<Panel> = PHASES
        .iter()
        .map(|ph| Panel {
            title: (*ph).to_string(),
            values: sizes
                .iter()
                .map(|&s| CONFIGS.iter().map(|(c, _)| value(c, s, ph)).collect())
                .collect(),
        })
        .collect();
    let labels: Vec<String> = sizes.iter().map(|s| format!("{} GiB", s >> 30)).collect();
    let series: Vec<String> = CONFIGS.iter().map(|(_, l)| (*l).to_string()).collect();
    match draw_grouped(
        "the same guest, 75 % of RAM touched: seconds from launch (nested KVM test host)",
        &labels,
        &series,
        &panels,
        Path::new(out),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo_chart: {e}");
            ExitCode::FAILURE
        }
    }
}
