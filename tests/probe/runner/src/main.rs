//! `probe-runner`: boots the probe bzImage on /dev/kvm and prints its
//! serial output, its boot-timer markers and how it stopped. Exits 0 only
//! if the probe printed exactly one verdict line, it is a PASS, and the
//! guest ended with the i8042 reset.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use probe_runner::{Boot, Exit, Hint};

#[derive(Clone, Copy, ValueEnum)]
enum HintArg {
    /// The ranges a correct VMM would hint.
    Correct,
    /// No hint node.
    Absent,
    /// A correct hint with a flipped checksum bit.
    Corrupt,
    /// A correct hint, then one non-zero byte planted in its last range.
    Dirty,
}

/// Boot the zerostart probe guest on /dev/kvm.
#[derive(Parser)]
struct Args {
    /// The probe bzImage.
    #[arg(long, default_value = "target/probe/probe.bzImage")]
    kernel: PathBuf,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 512)]
    memory_mib: u64,
    /// What to hand over as a hint.
    #[arg(long, value_enum, default_value = "correct")]
    hint: HintArg,
    /// Kernel command line.
    #[arg(long, default_value = "console=ttyS0")]
    cmdline: String,
    /// Load address for the protected-mode part (default: the image's).
    #[arg(long, value_parser = parse_u64)]
    load_addr: Option<u64>,
    /// Wall-clock limit in seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("`{s}` is not a number: {e}"))
}

fn main() -> ExitCode {
    let a = Args::parse();
    let mut boot = Boot::new(a.memory_mib << 20);
    boot.cmdline = a.cmdline;
    boot.load_addr = a.load_addr;
    boot.timeout = Duration::from_secs(a.timeout);
    match a.hint {
        HintArg::Correct => {}
        HintArg::Absent => boot.hint = Hint::Absent,
        HintArg::Corrupt => boot.corrupt_checksum = true,
        HintArg::Dirty => {
            // The last page of RAM is inside the correct hint's last range.
            boot.pokes.push(((a.memory_mib << 20) - 8, vec![0x5a]));
        }
    }
    let out = match boot.run(&a.kernel) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("probe-runner: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", out.serial);
    for (id, t) in &out.markers {
        let name =
            boottimer::marker::label(*id).map_or_else(|| format!("{id:#x}"), |l| l.to_string());
        println!(
            "probe-runner: marker {name} at {:.3} ms",
            t.as_secs_f64() * 1e3
        );
    }
    println!(
        "probe-runner: exit {:?}, load {:#x}, init_size {:#x}, hint ranges {}",
        out.exit,
        out.load_addr,
        out.init_size,
        out.hint_entries.len()
    );
    let pass = out.exit == Exit::Reset
        && out
            .verdict()
            .is_some_and(|v| v.starts_with("ZSPROBE: PASS"));
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
