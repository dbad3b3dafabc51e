//! `zerostart slo` as its own binary (finds `zerostart` next to itself,
//! through `$ZEROSTART_BIN`, or on PATH).

use clap::Parser;

/// zerostart slo: boot-time SLO runner.
#[derive(Debug, Parser)]
#[command(name = "zerostart-slo", version, about)]
struct Cli {
    #[command(flatten)]
    slo: slo::cli::SloArgs,
}

fn main() {
    let cli: Cli = options::parse_command_line("zerostart slo");
    if let Err(e) = slo::cli::run(&cli.slo) {
        eprintln!("zerostart slo: {e}");
        std::process::exit(1);
    }
}
