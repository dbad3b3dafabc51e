//! The one way a zerostart test that cannot run its check here skips.
//!
//! Why: cargo counts a test that printed "SKIP" and returned as a pass, so
//! about twenty tests (the pool's holder attacks and their negative
//! controls, the zero check of the virtio devices, the 1 GiB lease scan,
//! the `--hugetlbfs` tests) could pass `make test` without checking
//! anything, each printing its own kind of line. Every such test calls
//! [`skip`]: under `ZEROSTART_REQUIRE_<WHAT>=1` the missing requirement is a
//! failure (`make test` sets `ZEROSTART_REQUIRE_KVM=1` and
//! `ZEROSTART_REQUIRE_HUGEPAGES=1`); otherwise the test says
//! `SKIP <test>: <why>` on stderr and appends that line to
//! `$ZEROSTART_SKIP_LOG`, which `make test` (tests/lib/make_test.py) reads to
//! count it as skipped, not passed. The caller returns (or leaves out the
//! part it could not check) after the call.
#![deny(missing_docs)]

use std::fmt::Display;
use std::io::Write as _;

/// True when `ZEROSTART_REQUIRE_<what>` is `1`: what a test needs must then
/// be there, and its absence fails the test.
pub fn required(what: &str) -> bool {
    std::env::var(format!("ZEROSTART_REQUIRE_{what}")).is_ok_and(|v| v == "1")
}

/// The calling test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// The one-line skip record: `SKIP <test>: <why>`, newlines folded.
fn line(test: &str, why: &str) -> String {
    format!(
        "SKIP {test}: {}",
        why.split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

/// Skips the calling test's check because `what` (KVM, HUGEPAGES, ROOT,
/// TAP, ...) is missing here, `why` saying what and, where known, how to
/// get it. Panics (the test fails) when `ZEROSTART_REQUIRE_<what>=1`;
/// otherwise prints `SKIP <test>: <why>` on stderr and appends it to
/// `$ZEROSTART_SKIP_LOG` when set. The caller then returns.
pub fn skip(what: &str, why: impl Display) {
    let test = test_name();
    let why = why.to_string();
    if required(what) {
        panic!(
            "{test}: {why}; ZEROSTART_REQUIRE_{what}=1 makes that a failure: provide it, or set ZEROSTART_REQUIRE_{what}=0 to let the test skip"
        );
    }
    let line = line(&test, &why);
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("ZEROSTART_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
        {
            // One write of the whole line: tests of one binary skip from
            // parallel threads, and `writeln!` may write the line and its
            // newline separately, so two records could run together (seen:
            // "SKIP a: ...SKIP b: ...", counted as one skip). A single
            // O_APPEND write of a short line is not interleaved.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both env variables are process-wide: one test touches them.
    #[test]
    fn skips_logs_one_line_or_fails_when_required() {
        let dir = std::env::temp_dir().join(format!("testsupport-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        let _ = std::fs::remove_file(&log);
        std::env::set_var("ZEROSTART_SKIP_LOG", &log);
        std::env::set_var("ZEROSTART_REQUIRE_TESTSUPPORT_X", "0");
        skip("TESTSUPPORT_X", "no x here\n(install x)");
        let got = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            got,
            "SKIP tests::skips_logs_one_line_or_fails_when_required: no x here (install x)\n"
        );
        std::env::set_var("ZEROSTART_REQUIRE_TESTSUPPORT_X", "1");
        assert!(required("TESTSUPPORT_X"));
        let e = std::panic::catch_unwind(|| skip("TESTSUPPORT_X", "no x here"))
            .expect_err("a required skip must fail");
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("no x here; ZEROSTART_REQUIRE_TESTSUPPORT_X=1")
                && msg.contains("set ZEROSTART_REQUIRE_TESTSUPPORT_X=0")
                && !msg.contains('\n'),
            "{msg}"
        );
        // A failure is not a skip: nothing more in the log.
        assert_eq!(std::fs::read_to_string(&log).unwrap(), got);
        std::env::remove_var("ZEROSTART_SKIP_LOG");
        std::env::remove_var("ZEROSTART_REQUIRE_TESTSUPPORT_X");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
