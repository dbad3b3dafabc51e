//! The pool alone (`zerostart pool` without the VMM), for tests and hosts
//! that run the daemon separately.

use clap::Parser;

/// zerostart pool: pre-zeroed hugepage memory for VMs.
#[derive(Debug, Parser)]
#[command(name = "zerostart-pool", version, about)]
struct Cli {
    #[command(flatten)]
    pool: pool::cli::PoolArgs,
}

fn main() {
    let cli: Cli = options::parse_command_line("zerostart pool");
    if let Err(e) = pool::cli::run(&cli.pool) {
        eprintln!("zerostart pool: error: {e}");
        std::process::exit(1);
    }
}
