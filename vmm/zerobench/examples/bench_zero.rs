//! Stand-alone `bench zero` until (and besides) `zerostart bench zero`:
//! `cargo run --release -p zerobench --example bench_zero -- --size 4G`.
//! `--check` also asserts the performance targets (for `make bench-check`).

use clap::Parser;

#[derive(Parser)]
#[command(about = "Measure the zeroing engine against memset and kernel prefault")]
struct Cli {
    #[command(flatten)]
    args: zerobench::BenchZeroArgs,
    /// Exit non-zero unless auto (most threads) is >= 2x memset and >= 95%
    /// of the best backend in this run.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let report = zerobench::run(&cli.args)?;
    if cli.check {
        match zerobench::check_targets(&report) {
            Ok(s) => println!("bench-check: targets met: {s}"),
            Err(e) => anyhow::bail!("bench-check: targets missed: {e}"),
        }
    }
    Ok(())
}
