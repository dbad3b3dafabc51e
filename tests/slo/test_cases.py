#!/usr/bin/env python3
"""Unit tests of tests/slo/cases.py's report checks (no VM, no runner).

Why: make test-slo judges each `zerostart slo` run by its report.json,
junit.xml and chart.png. A check that accepted reports that disagree, a
run where nothing ran, or a launch boot that missed a phase would pass a
broken runner. These feed it synthetic reports of the runner's schema
(vmm/slo/src/report.rs, runner.rs). Run: python3 tests/slo/test_cases.py
"""

import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402
from zstest.suite import table_problems  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
PHASES = {"memory_ready": 1.5, "first_output": 900.0, "init_started": 3100.0, "test_done": 3200.0, "exit": 3300.0}


def rep(i: int, ok: bool = True, phases: dict | None = None) -> dict:
    return {"rep": i, "ok": ok, "error": None if ok else "timed out", "phases": dict(PHASES if phases is None else phases),
            "serial_phases": {}, "exit_code": 0, "serial_log": f"/tmp/{i}.log"}


def scenario(name: str, slos_pass: list[bool], reps: list[dict] | None = None, skipped: str | None = None,
             launch: str | None = None) -> dict:
    return {"name": name, "vmm": "zerostart", "binary": None, "memory": "256M", "launch": launch, "vcpus": 1,
            "skipped": skipped, "reps": [rep(0), rep(1)] if reps is None else reps, "phases": {},
            "serial_phases": {}, "slos": [{"label": f"{name} slo{i}", "pass": p, "skipped": skipped is not None}
                                          for i, p in enumerate(slos_pass)]}


def write(d: Path, scenarios: list[dict], *, verdict: bool | None = None, junit_failures: int | None = None,
          junit_cases: int | None = None, png: bytes = PNG) -> None:
    """A run's three outputs in D; by default consistent with SCENARIOS."""
    slos = [s for sc in scenarios for s in sc["slos"]]
    failed = sum(1 for s in slos if not s["pass"] and not s["skipped"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.json").write_text(json.dumps({
        "config": "tests/slo/x.toml", "started_unix": 0, "host": {},
        "pass": failed == 0 if verdict is None else verdict,
        "counts": {"evaluated": len(slos), "failed": failed, "skipped": 0}, "scenarios": scenarios}))
    n = len(slos) if junit_cases is None else junit_cases
    f = failed if junit_failures is None else junit_failures
    tcs = "".join(f'<testcase name="c{i}">' + ("<failure message='x'/>" if i < f else "") + "</testcase>"
                  for i in range(n))
    (d / "junit.xml").write_text(f'<?xml version="1.0"?><testsuites><testsuite name="s">{tcs}</testsuite>'
                                 "</testsuites>")
    (d / "chart.png").write_bytes(png)


class ReportsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = Path(self.tmp.name) / "slo"

    def tearDown(self):
        self.tmp.cleanup()

    def problem(self, want_pass: bool):
        return cases.reports_problem(self.d, want_pass)[0]

    def test_consistent_passing_run(self):
        write(self.d, [scenario("a", [True, True]), scenario("ch", [True], reps=[], skipped="not installed")])
        problem, text = cases.reports_problem(self.d, True)
        self.assertIsNone(problem)
        self.assertIn("report.json (1 scenarios ran), junit.xml (3 testcases, 0 failures), chart.png ok", text)
        self.assertIsNotNone(self.problem(False), "a passing run must fail the want-fail check")

    def test_consistent_failing_run(self):
        write(self.d, [scenario("impossible", [False])])
        self.assertIsNone(self.problem(False))
        self.assertIn("pass=False", self.problem(True))

    def test_reports_that_disagree(self):
        write(self.d, [scenario("a", [True, True])], junit_cases=1)
        self.assertIn("1 testcases for the 2 SLOs", self.problem(True))
        write(self.d, [scenario("a", [True, False])], junit_failures=0)
        self.assertIn("0 failures, report.json counts", self.problem(False))
        # report.json says pass but both say one SLO failed.
        write(self.d, [scenario("a", [True, False])], verdict=True)
        self.assertIn("1 failures in a run whose verdict is pass", self.problem(True))

    def test_chart_and_runs(self):
        write(self.d, [scenario("a", [True])], png=b"GIF89a..")
        self.assertEqual(self.problem(True), "chart.png is not a PNG")
        write(self.d, [scenario("a", [True], reps=[], skipped="not installed")])
        self.assertIn("no scenario ran", self.problem(True))
        write(self.d, [scenario("a", [True], reps=[])])
        self.assertIn("scenarios ran without a boot: a", self.problem(True))

    def test_missing_or_broken_report_fails_the_check(self):
        check = cases.reports("", True)
        self.addCleanup(setattr, cases, "OUT", cases.OUT)
        cases.OUT = self.d
        ok, text = check(Path(self.tmp.name))
        self.assertFalse(ok)
        self.assertIn("FileNotFoundError", text)
        write(self.d, [scenario("a", [True])])
        (self.d / "junit.xml").write_text("<testsuites>")
        ok, text = check(Path(self.tmp.name))
        self.assertFalse(ok)
        self.assertIn("ParseError", text)
        write(self.d, [scenario("a", [True])])
        self.assertEqual(check(Path(self.tmp.name))[0], True)


class LaunchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = Path(self.tmp.name) / "slo-launch"

    def tearDown(self):
        self.tmp.cleanup()

    def problem(self, sc):
        write(self.d, [sc])
        return cases.launch_problem(self.d)[0]

    def launch(self, **kw):
        kw.setdefault("launch", "pool:/tmp/pool.sock")
        return scenario(cases.LAUNCH_SCENARIO, [True], **kw)

    def test_boots_through_every_phase(self):
        write(self.d, [self.launch()])
        problem, text = cases.launch_problem(self.d)
        self.assertIsNone(problem)
        self.assertEqual(text, f"{cases.LAUNCH_SCENARIO}: 2 boots through zerostart launch, memory_ready max 1.5 ms")

    def test_what_fails_it(self):
        self.assertIn("no scenario", self.problem(scenario("other", [True])))
        self.assertIn("skipped: no pool", self.problem(self.launch(reps=[], skipped="no pool")))
        self.assertIn("not a pool", self.problem(self.launch(launch=None)))
        self.assertIn("not a pool", self.problem(self.launch(launch="fresh")))
        self.assertIn("boot 1: timed out", self.problem(self.launch(reps=[rep(0), rep(1, ok=False)])))
        self.assertIn("has no test_done", self.problem(self.launch(reps=[rep(0, phases={
            k: v for k, v in PHASES.items() if k != "test_done"})])))
        self.assertIn("not before init_started", self.problem(self.launch(reps=[rep(0, phases=dict(
            PHASES, memory_ready=4000.0))])))


class TableTest(unittest.TestCase):
    def test_table_is_well_formed(self):
        self.assertEqual(table_problems(cases.CASES), [])
        self.assertEqual([c.name for c in cases.CASES], ["example", "failing", "pool"])


if __name__ == "__main__":
    unittest.main()
