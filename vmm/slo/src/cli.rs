//! `zerostart slo --config slo.toml [--out DIR]`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{Config, ConfigError};
use crate::report::{Report, ScenarioReport};
use crate::runner;

/// `zerostart slo` options.
#[derive(Debug, Args)]
pub struct SloArgs {
    /// Scenarios and SLOs (see tests/slo/example.toml, docs/slo.md).
    #[arg(long, value_name = "slo.toml")]
    pub config: PathBuf,
    /// Output directory: report.json, junit.xml, chart.png, logs/.
    #[arg(long, value_name = "DIR", default_value = "slo-report")]
    pub out: PathBuf,
    /// Run only these scenarios (repeatable).
    #[arg(long, value_name = "NAME")]
    pub only: Vec<String>,
    /// Override every scenario's repetitions.
    #[arg(long, value_name = "N")]
    pub repetitions: Option<u32>,
}

/// Why `zerostart slo` did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Output could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was being written.
        what: String,
        /// OS error.
        source: std::io::Error,
    },
    /// The chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] crate::chart::ChartError),
    /// A bad command-line value.
    #[error("{0}")]
    Usage(String),
    /// Some SLO does not hold.
    #[error("{failed} of {evaluated} SLOs failed; details in {report}")]
    Failed {
        /// Failed SLOs.
        failed: usize,
        /// Evaluated SLOs.
        evaluated: usize,
        /// report.json path.
        report: String,
    },
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// Runs every scenario and writes the reports. `Ok` only when every SLO
/// of every scenario that ran holds.
pub fn run(args: &SloArgs) -> Result<Report, Error> {
    let mut config = Config::load(&args.config)?;
    if !args.only.is_empty() {
        for o in &args.only {
            if !config.scenarios.iter().any(|s| &s.name == o) {
                return Err(Error::Usage(format!(
                    "--only {o}: no such scenario in {}; names: {}",
                    args.config.display(),
                    config
                        .scenarios
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        config.scenarios.retain(|s| args.only.contains(&s.name));
    }
    if let Some(n) = args.repetitions {
        if n == 0 {
            return Err(Error::Usage("--repetitions 0: use at least 1".into()));
        }
        for s in &mut config.scenarios {
            s.repetitions = n;
        }
    }
    let logs = args.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    let plan: Vec<_> = config
        .scenarios
        .iter()
        .map(|s| (s, runner::find_binary(s)))
        .collect();
    let total: u64 = plan
        .iter()
        .filter(|(_, b)| b.is_ok())
        .map(|(s, _)| (s.warmup + s.repetitions) as u64)
        .sum();
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .expect("valid template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };

    let mut reports = Vec::new();
    for (s, bin) in plan {
        let bin = match bin {
            Ok(b) => b,
            Err(why) => {
                bar.suspend(|| eprintln!("zerostart slo: SKIP {}: {why}", s.name));
                reports.push(ScenarioReport::skipped(s, why));
                continue;
            }
        };
        if s.nested.is_some() {
            bar.set_message(format!(
                "{} x{} from the nested host's report",
                s.name, s.repetitions
            ));
            let reps = runner::read_nested(s);
            bar.inc(s.repetitions as u64);
            reports.push(ScenarioReport::evaluate(s, bin.display().to_string(), reps));
            continue;
        }
        // Boots are numbered in the order they ran (their logs too):
        // the warm-up boots first, then the measured ones.
        let mut warmup = Vec::new();
        let mut reps = Vec::new();
        for i in 0..s.warmup + s.repetitions {
            let warm = i < s.warmup;
            let (what, k, n) = if warm {
                ("warm-up boot", i + 1, s.warmup)
            } else {
                ("boot", i - s.warmup + 1, s.repetitions)
            };
            bar.set_message(format!("{} {what} {k}/{n}", s.name));
            let r = runner::run_rep(s, &bin, &logs, i);
            if !tty {
                eprintln!(
                    "zerostart slo: {} {what} {k}/{n}{}: {}",
                    s.name,
                    if warm { " (in no statistic)" } else { "" },
                    match &r.error {
                        None => format!(
                            "ok, exit at {:.1} ms",
                            r.phases
                                .get(&crate::phase::Phase::Exit)
                                .copied()
                                .unwrap_or(0.0)
                        ),
                        Some(e) => format!("FAILED: {e}"),
                    }
                );
            }
            bar.inc(1);
            if warm {
                warmup.push(r);
            } else {
                reps.push(r);
            }
        }
        reports.push(ScenarioReport::evaluate_warmed(
            s,
            bin.display().to_string(),
            warmup,
            reps,
        ));
    }
    bar.finish_and_clear();

    let report = Report::new(args.config.display().to_string(), started, reports);
    let json = args.out.join("report.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&report).expect("report serializes") + "\n",
    )
    .map_err(io(format!("writing {}", json.display())))?;
    let junit = args.out.join("junit.xml");
    std::fs::write(&junit, report.junit()).map_err(io(format!("writing {}", junit.display())))?;
    let png = args.out.join("chart.png");
    crate::chart::draw(&report, &png)?;
    print!("{}", report.table());
    println!(
        "reports: {}, {}, {}",
        json.display(),
        junit.display(),
        png.display()
    );
    if !report.pass {
        return Err(Error::Failed {
            failed: report.counts.failed,
            evaluated: report.counts.evaluated,
            report: json.display().to_string(),
        });
    }
    Ok(report)
}
