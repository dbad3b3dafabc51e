//! Writes the golden vectors (`*.bin`, `vectors.json`, C headers, README)
//! into the directory given as the only argument, normally `tests/vectors`.

#[path = "../tests/vectorgen/mod.rs"]
mod vectorgen;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: gen_vectors <output dir>  (normally tests/vectors)");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("gen_vectors: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let files = vectorgen::files();
    for (name, bytes) in &files {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("gen_vectors: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    println!(
        "gen_vectors: wrote {} files to {}",
        files.len(),
        dir.display()
    );
    ExitCode::SUCCESS
}
