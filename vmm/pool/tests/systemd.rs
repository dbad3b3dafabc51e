//! `dist/systemd/zerostart-pool.service`: `systemd-analyze verify` must
//! accept it without a single warning (it exits 0 on unknown keys and bad
//! values, so any output fails the test), and the hardening the docs
//! promise must be in it. A negative control shows the check fails on a
//! misspelled key and a bad value.
//!
//! If `systemd-analyze` is missing the test installs Debian's `systemd`
//! package (root, apt-get); if that cannot be done it prints SKIP and why.

use std::path::{Path, PathBuf};
use std::process::Command;

fn unit_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/systemd/zerostart-pool.service")
}

/// `systemd-analyze`, installed if missing; `Err(reason)` to skip.
fn analyze() -> Result<PathBuf, String> {
    let found = |p: &str| Path::new(p).exists().then(|| PathBuf::from(p));
    if let Some(p) = found("/usr/bin/systemd-analyze").or_else(|| found("/bin/systemd-analyze")) {
        return Ok(p);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("systemd-analyze is missing and installing systemd needs root".into());
    }
    let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
    let _ = ok(Command::new("apt-get").args(["update", "-qq"]));
    if !ok(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends", "systemd"])
        .env("DEBIAN_FRONTEND", "noninteractive"))
    {
        return Err("systemd-analyze is missing and `apt-get install systemd` failed".into());
    }
    found("/usr/bin/systemd-analyze")
        .ok_or_else(|| "apt-get installed systemd but no systemd-analyze".into())
}

/// Writes `text` as `zerostart-pool.service` with ExecStart's binary
/// pointed at this build's daemon (verify checks that it is executable)
/// and runs `systemd-analyze verify`; `Err(output)` on any complaint.
fn verify(analyze: &Path, text: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_zerostart-pool");
    let text = text.replace(
        "/usr/local/bin/zerostart pool serve",
        &format!("{bin} serve"),
    );
    assert!(
        text.contains(bin),
        "ExecStart is not /usr/local/bin/zerostart pool serve"
    );
    let unit = dir.path().join("zerostart-pool.service");
    std::fs::write(&unit, text).unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {said}", out.status))
    }
}

#[test]
fn the_unit_file_verifies_clean_and_is_hardened() {
    let text = std::fs::read_to_string(unit_path()).unwrap();
    // What the docs promise (security.md, pool.md).
    for line in [
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=\n",
        "NoNewPrivileges=yes",
        "RuntimeDirectory=zerostart",
        "--socket /run/zerostart/pool.sock",
    ] {
        assert!(text.contains(line), "the unit lacks {line:?}");
    }
    let analyze = match analyze() {
        Ok(a) => a,
        Err(why) => {
            testsupport::skip("SYSTEMD_ANALYZE", format!("systemd-analyze verify: {why}"));
            return;
        }
    };
    verify(&analyze, &text).unwrap_or_else(|e| panic!("systemd-analyze verify: {e}"));
    // Negative control: the check sees a misspelled key and a bad value.
    for (from, to) in [
        ("ProtectSystem=strict", "ProtectSystem=bogus"),
        ("PrivateTmp=yes", "PrivateTemp=yes"),
    ] {
        let bad = text.replace(from, to);
        assert!(
            verify(&analyze, &bad).is_err(),
            "verify did not notice {to}"
        );
    }
}
