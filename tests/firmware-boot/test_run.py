#!/usr/bin/env python3
"""Unit tests of tests/firmware-boot/run.py's judge (no QEMU): the dirty-hint
control must fail when the planted byte goes unseen, and a guest kernel bug
line fails a run whose verdict passed. Run: python3 tests/firmware-boot/test_run.py
"""

import unittest

import run
from zstest.test_vmmargv import SH, ZS, busybox_argv

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
        self.assertTrue(any("no planted byte was found" in f for f in fails), fails)
        fails = run.judge(name, FW, [verdict("FAIL", 1, 0)], [], 0)
        self.assertTrue(any("did not take the EFI-table hint" in f for f in fails), fails)

    def test_kernel_bug_line_fails_a_passing_run(self):
        good = run.judge("fw-zero-1g", FW, [verdict("PASS", 0, -1)], [], 0)
        self.assertEqual(good, [])
        bad = run.judge("fw-zero-1g", FW, ["BUG: Bad page state in process init", verdict("PASS", 0, -1)], [], 0)
        self.assertTrue(any("bug" in f for f in bad), bad)


@unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
class Lines(unittest.TestCase):
    """l2-fwboot.sh runs the command the host built: every run's line
    splits back (busybox's read + eval) into that argv, which is
    `zerostart run --firmware` with the run's hint mode, kernel, consoles
    and extras, and the patched kernel's verify mode."""

    def test_every_run_builds_and_l2_runs_that_argv(self):
        for r in run.RUNS:
            name, kernel, mode, mem, tmo, extra = r
            argv = run.vmmargv.build(run.spec(r), ZS).argv
            self.assertEqual(argv[:2], ["/zs/zerostart", "run"])
            for pair in (["--firmware", "/zs/fw/CLOUDHV.fd"], ["--kernel", f"/zs/kernels/{kernel}"],
                         ["--firmware-hint", mode], ["--debugcon", f"/tmp/{name}.fw"],
                         ["--serial", f"file=/tmp/{name}.serial"], ["--memory", f"size={mem}M,hugepages=on"]):
                i = argv.index(pair[0])
                self.assertEqual(argv[i:i + 2], pair, name)
            line = argv[argv.index("--cmdline") + 1]
            self.assertEqual("prezero.verify=1" in line, kernel == "patched", name)
            for x in extra.split():
                self.assertIn(x, argv)
            ln = run.list_line(r, ZS)
            self.assertTrue(ln.startswith(f"{name}|{kernel}|{mode}|{mem}|{tmo}|"), ln)
            if SH:
                self.assertEqual(busybox_argv(ln, 6), argv, ln)


if __name__ == "__main__":
    unittest.main(verbosity=1)
