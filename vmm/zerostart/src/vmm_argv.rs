//! `zerostart vmm-argv SPEC|-`: the command line of a VMM start, built by
//! `options::vmm_cmd` from a JSON spec, for the scripts that start VMMs
//! themselves (the nested host's harness writes L2's command lines with
//! it), so that none of them spells a VMM flag.
//!
//! Visible in `--help` rather than hidden: any script that starts QEMU,
//! cloud-hypervisor, Firecracker or zerostart on this project's terms can
//! use it, and its output is stable JSON.

use std::io::Read;
use std::path::PathBuf;

use options::vmm_cmd;

/// `zerostart vmm-argv` options.
#[derive(Debug, clap::Args)]
pub struct VmmArgvArgs {
    /// The spec: a JSON file (`options::vmm_cmd::Spec`), or `-` for stdin.
    pub spec: PathBuf,
    /// Print one POSIX shell line (each word quoted as needed) instead of
    /// `{"argv": [...], "files": {...}}`; refused when the command needs a
    /// file written first (Firecracker's config), which only the JSON
    /// carries.
    #[arg(long)]
    pub shell: bool,
}

/// Why no command line was printed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec file cannot be read.
    #[error("cannot read {path}: {err}; give a readable JSON file or - for stdin")]
    Read {
        /// The file.
        path: String,
        /// Why.
        err: std::io::Error,
    },
    /// The spec is not one the builder takes.
    #[error(transparent)]
    Spec(#[from] vmm_cmd::SpecError),
    /// `--shell` for a command that needs files.
    #[error("the command reads {0}, which a shell line cannot carry; drop --shell and write the JSON's files first")]
    ShellWithFiles(String),
}

/// What `zerostart vmm-argv` prints for `a` (without the final newline).
pub fn run(a: &VmmArgvArgs) -> Result<String, Error> {
    let read_err = |err| Error::Read {
        path: a.spec.display().to_string(),
        err,
    };
    let text = if a.spec.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(read_err)?;
        s
    } else {
        std::fs::read_to_string(&a.spec).map_err(read_err)?
    };
    let built = vmm_cmd::build(&vmm_cmd::parse(&text)?)?;
    if a.shell {
        if !built.files.is_empty() {
            let names: Vec<&str> = built.files.keys().map(String::as_str).collect();
            return Err(Error::ShellWithFiles(names.join(", ")));
        }
        return Ok(built.shell_line());
    }
    Ok(serde_json::to_string(&built).expect("strings and maps serialize"))
}
