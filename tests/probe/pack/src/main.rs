//! `probe-pack`: writes the probe bzImage from its linked ELF (only when the
//! bytes changed, so `make probe` stays a no-op when nothing did).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// Pack the probe's ELF into a bzImage.
#[derive(Parser)]
struct Args {
    /// The linked probe ELF (target/probe-cargo/x86_64-unknown-linux-gnu/release/probe).
    #[arg(long)]
    elf: PathBuf,
    /// Output bzImage path.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let elf =
        std::fs::read(&args.elf).with_context(|| format!("reading {}", args.elf.display()))?;
    let packed =
        probe_pack::pack(&elf).with_context(|| format!("packing {}", args.elf.display()))?;
    if std::fs::read(&args.out).ok().as_deref() != Some(&packed.image[..]) {
        if let Some(dir) = args.out.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = args.out.with_extension("tmp");
        std::fs::write(&tmp, &packed.image)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &args.out)
            .with_context(|| format!("renaming to {}", args.out.display()))?;
    }
    println!(
        "probe-pack: {} ({} bytes: payload {} at {:#x}, init_size {:#x})",
        args.out.display(),
        packed.image.len(),
        packed.payload_size,
        probe_pack::LOAD_ADDR,
        packed.init_size
    );
    Ok(())
}
