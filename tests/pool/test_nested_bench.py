#!/usr/bin/env python3
"""Unit tests of tests/pool/nested_bench.py's judging and console driving (no QEMU).

Why: that harness decides whether the pool handed out only zero memory in
the nested host. A parser that accepted a missing verdict, a non-zero byte,
a non-pool boot counted as a pool one, or a leak check that saw nothing would
make the benchmark's zero claim a check that cannot fail. These feed it
synthetic L2 consoles. Run: python3 tests/pool/test_nested_bench.py
"""

import json
import sys
import time
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import nested_bench as nb  # noqa: E402
nb.print = lambda *a, **k: None  # progress lines are noise here
from zstest.fakes import FakeConsole  # noqa: E402

GIB = 1 << 30
PROBE_PASS = ("ZSPROBE: PASS hint=valid ranges=1 hinted_bytes=1072283648 zero_bytes=1072283648 "
              "nonzero_bytes=0 e820=3")
PROBE_LEAK = ("ZSPROBE: FAIL hint=valid nonzero_bytes=60221512 first_nonzero=0x164000 ranges=1 "
              "hinted_bytes=1072283648 zero_bytes=1012062136")
LINUX_PASS = ("ZSINIT: PASS hint=valid ranges=1 hinted_bytes=998035456 zero_checked_bytes=335544320 "
              "nonzero_bytes=0 hinted_checked_bytes=285212672 populate_ms=105 uptime_ms=2830 "
              "kernel_pages_skipped=82779 kernel_bytes_verified=-1 kernel_verify_failures=-1 kernel=6.12")


def timeline(method: str, linux: bool = False) -> str:
    names = ["process_start", "memory_ready", "first_kvm_run"] + \
        (["init_started", "test_done"] if linux else ["kernel_started", "init_started", "test_done"]) + ["exit"]
    return "ZSPOOL-TIMELINE " + json.dumps({
        "phases": [{"name": n, "t_ms": float(i * 10)} for i, n in enumerate(names)],
        "memory_bytes": 1 << 30, "vcpus": 1,
        "prezero": {"mode": "pool" if method == "pool_lease" else "on", "backend": None, "method": method,
                    "backing": "memfd-hugetlb-2M", "bytes": 1 << 30, "ms": 1.5, "gib_per_s": 9.0, "threads": 1,
                    "hint_ranges": 1, "hint_bytes": 1 << 30, "verified_bytes": 0},
        "exit": {"reason": "i8042 reset", "kind": "reset", "code": 0}, "guest_phases": []})


def sample(method: str, verdict: str, guest: str = "probe", rc: int = 0) -> str:
    return (f"ZSPOOL-SAMPLE size_gib=1 method={method} rep=1 guest={guest} rc={rc} wall_ms=900 "
            f"attempts=1 verdict={verdict}")


def drive(lines, eof=True, patched=False):
    return nb.drive(FakeConsole(lines, eof), time.monotonic() + 5, patched)


class Judge(unittest.TestCase):
    def one(self, lines, patched=False):
        samples, _, fatal = drive(lines + ["ZSPOOL-END boots=1"], patched=patched)
        self.assertIsNone(fatal)
        self.assertEqual(len(samples), 1)
        return samples[0]["failures"]

    def test_clean_pool_boot_passes(self):
        self.assertEqual(self.one([timeline("pool_lease"), sample("pool", PROBE_PASS)]), [])

    def test_nonzero_bytes_fail(self):
        bad = PROBE_PASS.replace("nonzero_bytes=0", "nonzero_bytes=8").replace("PASS", "FAIL")
        f = self.one([timeline("pool_lease"), sample("pool", bad)])
        self.assertTrue(any("non-zero" in x for x in f), f)

    def test_missing_verdict_fails(self):
        self.assertTrue(self.one([timeline("pool_lease"), sample("pool", "")]))

    def test_vmm_exit_code_fails(self):
        self.assertTrue(any("exited 1" in x for x in self.one([timeline("pool_lease"), sample("pool", PROBE_PASS, rc=1)])))

    def test_pool_boot_must_lease(self):
        f = self.one([timeline("populate"), sample("pool", PROBE_PASS)])
        self.assertTrue(any("pool_lease" in x for x in f), f)

    def test_prefault_boot_must_not_lease(self):
        self.assertTrue(self.one([timeline("pool_lease"), sample("populate", PROBE_PASS)]))

    def test_probe_must_scan_most_of_ram(self):
        small = PROBE_PASS.replace("zero_bytes=1072283648", "zero_bytes=4096")
        self.assertTrue(any("checked only" in x for x in self.one([timeline("pool_lease"), sample("pool", small)])))

    def test_missing_timeline_fails(self):
        self.assertTrue(any("timeline" in x for x in self.one([sample("pool", PROBE_PASS)])))

    def test_linux_pass_and_patched_skips(self):
        self.assertEqual(self.one([timeline("pool_lease", True), sample("pool", LINUX_PASS, "linux")], True), [])
        none = LINUX_PASS.replace("kernel_pages_skipped=82779", "kernel_pages_skipped=0")
        f = self.one([timeline("pool_lease", True), sample("pool", none, "linux")], True)
        self.assertTrue(any("skipped no clears" in x for x in f), f)

    def test_linux_nonzero_fails(self):
        bad = LINUX_PASS.replace("nonzero_bytes=0", "nonzero_bytes=1")
        self.assertTrue(self.one([timeline("pool_lease", True), sample("pool", bad, "linux")]))

    def test_leak_check_must_see_the_leak(self):
        self.assertEqual(self.one([timeline("pool_lease"), sample("leak_probe", PROBE_LEAK)]), [])
        f = self.one([timeline("pool_lease"), sample("leak_probe", PROBE_PASS)])
        self.assertTrue(any("not caught" in x for x in f), f)


class Drive(unittest.TestCase):
    def test_boot_count_must_match(self):
        lines = [timeline("pool_lease"), sample("pool", PROBE_PASS), "ZSPOOL-END boots=2"]
        _, _, fatal = drive(lines)
        self.assertIn("1 of 2", fatal)

    def test_no_end_line_fails(self):
        _, _, fatal = drive([timeline("pool_lease"), sample("pool", PROBE_PASS)])
        self.assertIn("before the benchmark ended", fatal)

    def test_fatal_lines_stop_the_run(self):
        for ln in ("ZSPOOL-FATAL pool daemon died", "ZSE2E-FATAL insmod kvm-amd"):
            _, _, fatal = drive([ln, "ZSPOOL-END boots=0"])
            self.assertEqual(fatal, ln)

    def test_hang_times_out(self):
        _, _, fatal = nb.drive(FakeConsole([], eof=False), time.monotonic() + 0.2, False)
        self.assertIn("timeout", fatal)

    def test_pool_status_is_recorded(self):
        st = {"size_bytes": GIB, "clean_bytes": GIB, "scrub_failures": 0, "retired_total": 0}
        _, pools, fatal = drive([f"ZSPOOL-POOL event=started size_gib=1 ms=990 status={json.dumps(st)}",
                                 "ZSPOOL-END boots=0"])
        self.assertIsNone(fatal)
        self.assertEqual(pools[0]["status"]["clean_bytes"], GIB)

    def test_table_has_every_sample_and_the_median(self):
        lines = []
        for i, t in enumerate((30.0, 10.0, 20.0)):
            js = {"phases": [{"name": n, "t_ms": t} for n in nb.PHASES], "prezero": {"method": "pool_lease"}}
            lines += ["ZSPOOL-TIMELINE " + json.dumps(js), sample("pool", PROBE_PASS).replace("rep=1", f"rep={i + 1}")]
        samples, _, fatal = drive(lines + ["ZSPOOL-END boots=3"])
        self.assertIsNone(fatal)
        row = [r for r in nb.table(samples, [1]).splitlines() if r.startswith("| 1 |")][0]
        self.assertIn("30.0 / 10.0 / 20.0 (**20.0**)", row)


if __name__ == "__main__":
    unittest.main()
