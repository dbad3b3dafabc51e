#!/usr/bin/env python3
"""Unit tests of tests/lib/make_test.py, the counter behind `make test`'s
closing line, with real make on a scratch Makefile.

Why: that line is what CI reads; a counter that calls a skipped check a pass,
or a failed target a success, hides exactly what the summary is for.
Run: python3 tests/lib/test_make_test.py
"""

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
import make_test  # noqa: E402  (this file's directory: python3 puts it on the path)


class Count(unittest.TestCase):
    def c(self, text, skips=(), rc=0):
        return make_test.count(text.splitlines(True), list(skips), rc)[0]

    def test_cargo_lines_and_runtime_skips(self):
        c = self.c("test a::slow ... ignored\n"
                   "test result: ok. 10 passed; 0 failed; 1 ignored; 0 measured\n"
                   "test result: ok. 5 passed; 0 failed; 0 ignored\n",
                   skips=["SKIP a::kvm: cannot open /dev/kvm", "SKIP b::tap: not root"])
        self.assertEqual((c.passed, c.failed, c.skipped), (13, 0, 3))
        self.assertEqual(c.skips, ["a::slow: #[ignore]", "SKIP a::kvm: cannot open /dev/kvm",
                                   "SKIP b::tap: not root"])

    def test_a_logged_skip_printed_too_counts_once(self):
        # make test-pool runs its crate tests with --nocapture: the helper's
        # stderr line and its skip-log line are the same skip.
        c = self.c("SKIP holders::io_uring: io_uring is disabled here\n"
                   "test result: ok. 4 passed; 0 failed; 0 ignored\n",
                   skips=["SKIP holders::io_uring: io_uring is disabled here"])
        self.assertEqual((c.passed, c.failed, c.skipped), (3, 0, 1))
        self.assertEqual(c.skips, ["SKIP holders::io_uring: io_uring is disabled here"])

    def test_retries_are_counted_and_named_not_checks(self):
        c = self.c("RETRY e2e/zs-prezero-1g: qemu: fatal: boom (L2 exited during zs-prezero-1g)\n"
                   "e2e: 8 passed, 0 failed, 0 skipped; 1 L2 retries after a test-bed fault outside every guest\n"
                   "RETRY fwboot/ovmf: L2 QEMU aborted\n")
        self.assertEqual((c.passed, c.failed, c.skipped, c.retried), (8, 0, 0, 2))
        self.assertEqual(c.retries, ["RETRY e2e/zs-prezero-1g: qemu: fatal: boom (L2 exited during zs-prezero-1g)",
                                     "RETRY fwboot/ovmf: L2 QEMU aborted"])
        # Not the retry line's form: no count.
        self.assertEqual(self.c("RETRY without a name\nok: a\n").retried, 0)

    def test_skips_a_summary_counts_without_names_are_said(self):
        c = self.c("Ran 3 tests in 0.1s\n\nOK (skipped=2)\n")
        self.assertEqual(c.skipped, 2)
        self.assertEqual(len(c.skips), 1)
        self.assertTrue(c.skips[0].startswith("2 more, counted by a summary line"), c.skips)

    def test_unittest_and_script_lines(self):
        c = self.c("Ran 7 tests in 0.1s\n\nFAILED (failures=1, errors=1, skipped=1)\n"
                   "ok: a\nPASS: b\nFAIL: c\nSKIP d: no kvm\n", rc=1)
        self.assertEqual((c.passed, c.failed, c.skipped), (6, 3, 2))

    def test_slo_skipped_scenarios(self):
        c = self.c("zerostart slo: SKIP ch-256M: cloud-hypervisor is not on PATH\n"
                   "  SKIPPED: cloud-hypervisor is not on PATH\nok: x\n")
        self.assertEqual((c.passed, c.failed, c.skipped), (1, 0, 1))

    def test_e2e_line(self):
        c = self.c("e2e: 8 passed, 1 failed, 2 skipped; 0 L2 retries\n", rc=1)
        self.assertEqual((c.passed, c.failed, c.skipped), (8, 1, 2))
        c = self.c("fwboot: 5 passed, 0 failed, 0 skipped; 0 L2 retries\n")
        self.assertEqual((c.passed, c.failed, c.skipped), (5, 0, 0))

    def test_failed_exit_without_fail_line_is_a_failure(self):
        c = self.c("ok: a\n", rc=2)
        self.assertEqual((c.passed, c.failed), (1, 1))

    def test_all_skipped_fails(self):
        c = self.c("SKIP a: x\nSKIP b: y\n")
        self.assertEqual((c.passed, c.failed, c.skipped), (0, 1, 2))

    def test_no_check_lines_is_one_check(self):
        self.assertEqual(self.c("building\n").passed, 1)
        self.assertEqual(self.c("building\n", rc=1).failed, 1)


class WithMake(unittest.TestCase):
    def test_runs_every_target_and_prints_the_closing_line(self):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "Makefile").write_text(
                "good:\n\t@echo 'test x::slow ... ignored'\n"
                "\t@echo 'test result: ok. 3 passed; 0 failed; 1 ignored'\n"
                "\t@echo 'SKIP x: no 1G page' >>$$ZEROSTART_SKIP_LOG\n"
                "bad:\n\t@echo 'FAIL: planted byte not found'; exit 1\n"
                "empty:\n\t@echo 'SKIP y: nothing here'\n"
                "again:\n\t@echo 'RETRY e2e/s1: qemu: fatal: boom'; echo 'e2e: 1 passed, 0 failed, 0 skipped'\n")
            r = subprocess.run([sys.executable, str(HERE / "make_test.py"), "good", "bad", "empty", "again"],
                               cwd=d, env=dict(os.environ, MAKE="make"), capture_output=True, text=True)
        lines = r.stdout.splitlines()
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertEqual(lines[-1], "make-test: 3 passed, 2 failed, 3 skipped, 1 retried")
        # CI's parser: 'N passed, N failed' with ', N skipped' after it, on the last line.
        self.assertRegex(lines[-1], r"^make-test: \d+ passed, \d+ failed, \d+ skipped(, |$)")
        # Above it, every skip and every retry by name.
        self.assertEqual(lines[-7:-1], [
            "make-test: skipped: 3:",
            "make-test:   good: x::slow: #[ignore]",
            "make-test:   good: SKIP x: no 1G page",
            "make-test:   empty: SKIP y: nothing here",
            "make-test: retried: 1:",
            "make-test:   again: RETRY e2e/s1: qemu: fatal: boom"])
        self.assertIn("make-test: empty: every one of its 1 checks skipped: the target fails", lines)
        self.assertIn("make test: FAILED: bad empty", lines)
        self.assertTrue(any(ln.startswith("make-test: good: 2 passed, 0 failed, 2 skipped, 0 retried (exit 0, ")
                            and ln.endswith(" s)") for ln in lines), lines)
        self.assertTrue(any(ln.startswith("make-test: wall time ") and "bad " in ln for ln in lines), lines)
        # The closing block repeats what failed, after the long output.
        tail = lines[lines.index("make-test: what failed (each line as its check printed it):"):]
        self.assertIn("make-test: bad: FAIL: planted byte not found", tail)
        self.assertIn("make-test: empty: every one of its 1 checks skipped: the target fails", tail)


class FailedLines(unittest.TestCase):
    def test_cargo_failure_carries_its_panic_message(self):
        out = ("test a::ok ... ok\ntest net::arp ... FAILED\n\nfailures:\n\n"
               "---- net::arp stdout ----\n\n"
               "thread 'net::arp' (22124) panicked at src/net.rs:536:9:\n"
               "no ARP reply within 5 s\nfailures:\n    net::arp\n")
        self.assertEqual(make_test.failed_lines(out.splitlines(True)), [
            "test net::arp ... FAILED",
            "thread 'net::arp' (22124) panicked at src/net.rs:536:9: no ARP reply within 5 s"])

    def test_passing_output_names_nothing(self):
        out = "ok: microvm: a\nPASS: 15 of 15 SLOs hold\ntest x ... ok\n"
        self.assertEqual(make_test.failed_lines(out.splitlines(True)), [])


if __name__ == "__main__":
    unittest.main(verbosity=1)
