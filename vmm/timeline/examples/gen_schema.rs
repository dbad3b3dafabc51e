//! Writes the timeline documents' JSON Schemas into a directory:
//! `cargo run -p timeline --example gen_schema -- docs/schema`.
//! `tests/schema.rs` fails while the committed files differ.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("gen_schema: no output directory; run `cargo run -p timeline --example gen_schema -- docs/schema`");
        return ExitCode::from(2);
    };
    for (name, text) in timeline::schemas() {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!(
                "gen_schema: writing {}: {e}; check that the directory exists",
                path.display()
            );
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
