//! Stand-alone `bench zero` (the same code `zerostart bench zero` mounts):
//! `cargo run --release -p zerobench --example bench_zero -- --size 4G`.
//! `--check` also asserts the performance targets (for `make bench-check`).

use clap::Parser;

#[derive(Parser)]
#[command(about = "Measure the zeroing engine against memset and kernel prefault")]
struct Cli {
    #[command(flatten)]
    args: zerobench::BenchZeroArgs,
    /// Exit non-zero unless auto is >= 95% of the best backend at every
    /// thread count and (most threads) >= 4x hugetlb populate, in this run.
    #[arg(long)]
    check: bool,
    /// Exit non-zero unless auto's pick at every thread count follows
    /// its rule (tie band, scaling, pin): the rule, not speed (make test).
    #[arg(long)]
    check_picks: bool,
}

/// Errors are one line on stderr and exit code 1 (no backtrace even with
/// RUST_BACKTRACE set: they are expected outcomes, not bugs).
fn fail(msg: String) -> ! {
    eprintln!("bench_zero: {msg}");
    std::process::exit(1);
}

fn main() {
    let cli = Cli::parse();
    let report = zerobench::run(&cli.args).unwrap_or_else(|e| fail(e.to_string()));
    if cli.check_picks {
        let pinned = prezero::pinned().unwrap_or_else(|e| fail(e.to_string()));
        let pinned = pinned.map(|b| b.name());
        match zerobench::check_picks(&report, pinned) {
            Ok(s) => println!("check-picks: auto followed its rule: {s}"),
            Err(e) => fail(format!("check-picks: {e}")),
        }
    }
    if cli.check {
        match zerobench::check_targets(&report) {
            Ok(s) => println!("bench-check: targets met: {s}"),
            Err(e) => fail(format!("bench-check: targets missed: {e}")),
        }
    }
}
