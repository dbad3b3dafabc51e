//! Stand-alone `bench host` (the same code `zerostart bench host` mounts):
//! `cargo run --release -p zerobench --example bench_host -- --out DIR`.

use clap::Parser;

#[derive(Parser)]
#[command(about = "The zeroing engine and the pool at this host's core count and memory")]
struct Cli {
    #[command(flatten)]
    args: zerobench::BenchHostArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = zerobench::host::run(&cli.args) {
        eprintln!("bench_host: {e}");
        std::process::exit(1);
    }
}
