//! Where a config is read from: its directory and workspace root for
//! `${ROOT}` paths, and the file name every error starts with.

use std::path::{Path, PathBuf};

use super::ConfigError;

pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) dir: &'a Path,
    pub(super) root: &'a Path,
}

impl Ctx<'_> {
    pub(super) fn err(
        &self,
        place: &str,
        key: &str,
        problem: String,
        fix: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            place: if place.is_empty() {
                String::new()
            } else {
                format!("scenario '{place}' ")
            },
            key: key.to_string(),
            problem,
            fix: fix.into(),
        }
    }

    /// Expands `${VAR}` and resolves relative to the config directory.
    pub(super) fn path(
        &self,
        place: &str,
        key: &str,
        v: &str,
        must_exist: bool,
    ) -> Result<PathBuf, ConfigError> {
        let mut out = String::new();
        let mut rest = v;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let Some(j) = rest[i..].find('}') else {
                return Err(self.err(
                    place,
                    key,
                    format!("'{v}' has an unclosed ${{"),
                    "write ${NAME}",
                ));
            };
            let name = &rest[i + 2..i + j];
            let val = match name {
                "ROOT" => self.root.display().to_string(),
                "CONFIG_DIR" => self.dir.display().to_string(),
                "ZEROSTART_CACHE" => std::env::var(name).unwrap_or_else(|_| {
                    format!(
                        "{}/.cache/zerostart",
                        std::env::var("HOME").unwrap_or_default()
                    )
                }),
                _ => std::env::var(name).map_err(|_| {
                    self.err(
                        place,
                        key,
                        format!("'{v}' uses ${{{name}}}, which is not set"),
                        format!("export {name} or write the path out"),
                    )
                })?,
            };
            out.push_str(&val);
            rest = &rest[i + j + 1..];
        }
        out.push_str(rest);
        let p = self.dir.join(out);
        if must_exist && !p.exists() {
            return Err(self.err(
                place,
                key,
                format!("{} does not exist", p.display()),
                "build it first (make probe; tests/slo/prepare.sh for the Linux guest) or fix the path",
            ));
        }
        Ok(p)
    }
}

pub(super) fn workspace_root(dir: &Path) -> PathBuf {
    let mut d = Some(dir);
    while let Some(x) = d {
        if let Ok(t) = std::fs::read_to_string(x.join("Cargo.toml")) {
            if t.contains("[workspace]") {
                return x.to_path_buf();
            }
        }
        d = x.parent();
    }
    dir.to_path_buf()
}
