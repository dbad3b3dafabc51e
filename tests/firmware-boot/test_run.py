#!/usr/bin/env python3
"""Unit tests of tests/firmware-boot/run.py's judge (no QEMU): the dirty-hint
control must fail when the planted byte goes unseen, and a guest kernel bug
line fails a run whose verdict passed. Run: python3 tests/firmware-boot/test_run.py
"""

import contextlib
import io
import tempfile
import unittest
from pathlib import Path

import run
from zstest.fakes import FakeConsole

FW = ["QemuFwCfgProbe: Supported 1, DMA 1",
      "ZeroStart: PEI: zero hint, 1 entries, 1000 bytes, claimed 1000 bytes",
      "ZeroStart: published 1000 bytes"]
EFI = "zerostart: hint from EFI table: 1 ranges, 900 MiB; 900 MiB in RAM"


def verdict(status, nonzero, vf):
    return (f"ZSINIT: {status} hint=absent ranges=0 hinted_bytes=0 zero_checked_bytes=1 nonzero_bytes={nonzero} "
            f"hinted_checked_bytes=0 populate_ms=1 uptime_ms=1 kernel_pages_skipped=5 kernel_bytes_verified=1 "
            f"kernel_verify_failures={vf} kernel=6.12")


class Judge(unittest.TestCase):
    def test_dirty_control_must_see_the_byte(self):
        name = "fw-dirty-patched-1g"
        self.assertEqual(run.judge(name, FW, [EFI, verdict("FAIL", 1, 0)], [], 0), [])
        self.assertEqual(run.judge(name, FW, [EFI, verdict("FAIL", 0, 1)], [], 0), [])
        fails = run.judge(name, FW, [EFI, verdict("PASS", 0, 0)], [], 0)
        self.assertTrue(any("planted byte was not found" in f for f in fails), fails)
        fails = run.judge(name, FW, [verdict("FAIL", 1, 0)], [], 0)
        self.assertTrue(any("did not take the EFI-table hint" in f for f in fails), fails)

    def test_kernel_bug_line_fails_a_passing_run(self):
        good = run.judge("fw-zero-1g", FW, [verdict("PASS", 0, -1)], [], 0)
        self.assertEqual(good, [])
        bad = run.judge("fw-zero-1g", FW, ["BUG: Bad page state in process init", verdict("PASS", 0, -1)], [], 0)
        self.assertTrue(any("bug" in f for f in bad), bad)


class OneBoot(unittest.TestCase):
    """Every run in one L2 boot; a test-bed fault boots L2 again for what did not end."""

    LOST = "nested host silent, its QEMU running; cpu0 HLT=1 IF=1 IRR=236; UNDELIVERED INTERRUPT cpu0"

    def boot(self, lines, runs, eof=True):
        class Con(FakeConsole):
            def silent_host(con):
                return self.LOST

            def exit_code(con, *_):
                return 0

        @contextlib.contextmanager
        def fake_start(*a, **k):
            yield Con(lines, eof=eof)
        saved = (run.start_l2, run.l2_memory)
        run.start_l2, run.l2_memory = fake_start, lambda man, mem: (mem, 0)
        try:
            with tempfile.TemporaryDirectory() as d:
                zs = Path(d) / "zs"
                zs.write_bytes(b"x")
                return run.boot_l2({}, zs, zs, runs, False, io.StringIO())
        finally:
            run.start_l2, run.l2_memory = saved

    def test_every_run_in_one_boot(self):
        runs = [("a", "k", "zero", 1024, 1, ""), ("b", "k", "zero", 1024, 1, "")]
        lines = ["ZSFW-BEGIN name=a kernel=k", "FW| x", "L3| y", "ZSFW-END name=a rc=0 wall_ms=5",
                 "ZSFW-BEGIN name=b kernel=k", "VMM| z", "ZSFW-END name=b rc=3 wall_ms=6"]
        with contextlib.redirect_stdout(io.StringIO()):
            res, ended = self.boot(lines, runs)
        self.assertEqual(ended, "finished")
        self.assertEqual({n: (r["rc"], r["fw"], r["l3"], r["vmm"]) for n, r in res.items()},
                         {"a": (0, ["x"], ["y"], []), "b": (3, [], [], ["z"])})

    def test_a_silent_host_ends_the_boot_with_its_snapshot(self):
        runs = [("a", "k", "zero", 1024, 0, ""), ("b", "k", "zero", 1024, 0, "")]
        lines = ["ZSFW-BEGIN name=a kernel=k", "ZSFW-END name=a rc=0 wall_ms=5", "ZSFW-BEGIN name=b kernel=k"]
        with contextlib.redirect_stdout(io.StringIO()):
            res, ended = self.boot(lines, runs, eof=False)
        self.assertEqual((res["a"]["rc"], res["b"]["rc"]), (0, None))
        self.assertEqual(ended, f"timeout ({self.LOST})")
        self.assertEqual(run.bed_fault(ended, None), ended)


if __name__ == "__main__":
    unittest.main(verbosity=1)
