"""Unit tests of zstest.timeline (the timeline schema) and zstest.sizes.

Why: the schema is what makes a renamed or missing timeline key fail by
name in every harness; a checker that accepted anything would make those
checks ones that cannot fail, so each rule has a document that breaks it.
Run: python3 -m unittest zstest.test_zstest (PYTHONPATH=tests; make does)
"""

import copy
import json
import subprocess
import sys
import tempfile
import unittest

from zstest import probe, sizes, timeline

# The shape `zerostart run --timeline` writes (vmm/zerostart/src/main.rs).
RUN = {
    "phases": [{"name": "process_start", "t_ms": 0.0}, {"name": "memory_ready", "t_ms": 12.5},
               {"name": "first_kvm_run", "t_ms": 13.0}, {"name": "exit", "t_ms": 900.25}],
    "memory_bytes": 1 << 30, "vcpus": 2,
    "prezero": {"mode": "auto", "backend": "avx2-nt", "method": "engine", "backing": "memfd-hugetlb-2M",
                "bytes": 1 << 30, "ms": 11.0, "gib_per_s": 90.9, "threads": 2, "hint_ranges": 2,
                "hint_bytes": (1 << 30) - (1 << 20), "verified_bytes": 0},
    "exit": {"reason": "i8042 reset", "kind": "reset", "code": 0},
}
# `zerostart launch --timeline` (vmm/zerostart/src/launch/mod.rs).
LAUNCH = {
    "phases": [{"name": n, "t_ms": float(i)} for i, n in enumerate(timeline.LAUNCH_PHASES)],
    "vmm": "qemu", "argv": ["qemu-system-x86_64", "-m", "1G"], "memory_bytes": 1 << 30, "memory_source": "pool",
    "lease": 3, "hint": None, "exit": {"code": 0, "signal": None},
}


def broken(doc, path, value=KeyError):
    root = d = copy.deepcopy(doc)
    *head, last = path
    for k in head:
        d = d[k]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value
    return root


class Timeline(unittest.TestCase):
    def test_good_documents_pass(self):
        self.assertEqual(timeline.check(RUN, "run", ["memory_ready", "exit"]), [])
        self.assertEqual(timeline.check(LAUNCH, "launch"), [])

    def test_each_rule_can_fail(self):
        cases = [
            (RUN, "run", ("vcpus",), KeyError, "vcpus missing"),
            (RUN, "run", ("vcpus",), True, "vcpus is bool"),
            (RUN, "run", ("vcpus",), 0, "vcpus is 0"),
            (RUN, "run", ("memory_bytes",), "1G", "memory_bytes is str"),
            (RUN, "run", ("prezero", "hint_bytes"), KeyError, "prezero.hint_bytes missing"),
            (RUN, "run", ("exit", "code"), None, "exit.code is NoneType"),
            (RUN, "run", ("phases", 0, "t_ms"), 1.0, "not process_start at 0"),
            (RUN, "run", ("phases", 2, "t_ms"), 1.0, "not in order"),
            (RUN, "run", ("phases", 1, "t_ms"), -1, "not a time"),
            (RUN, "run", ("phases", 1, "extra"), 1, "is not {name, t_ms}"),
            (RUN, "run", ("phases",), [], "phases is empty"),
            (LAUNCH, "launch", ("memory_source",), KeyError, "memory_source missing"),
            (LAUNCH, "launch", ("argv",), ["q", 1], "argv holds a non-string"),
            (LAUNCH, "launch", ("exit", "signal"), "KILL", "exit.signal is str"),
            (LAUNCH, "launch", ("phases",), [{"name": "process_start", "t_ms": 0.0}], "missing"),
        ]
        for doc, kind, path, value, want in cases:
            with self.subTest(path=path, value=value):
                got = timeline.check(broken(doc, path, value), kind)
                self.assertTrue(any(want in p for p in got), got)
        self.assertIn("phases ['test_done'] missing", timeline.check(RUN, "run", ["test_done"])[0])
        self.assertEqual(timeline.check([], "run"), ["the timeline is list, not an object"])

    def test_cli_exits_1_with_one_line_per_problem(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(broken(RUN, ("vcpus",)), f)
            f.flush()
            p = subprocess.run([sys.executable, "-m", "zstest.timeline", "run", f.name], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(p.stderr.strip().splitlines(), [f"timeline {f.name}: vcpus missing"])
            with open(f.name, "w") as g:
                json.dump(RUN, g)
            self.assertEqual(subprocess.run([sys.executable, "-m", "zstest.timeline", "run", f.name]).returncode, 0)


class Probe(unittest.TestCase):
    """zstest.probe.judge: every way a probe boot can fail is caught."""

    V = "ZSPROBE: PASS hint=valid ranges=2 hinted_bytes=9 zero_bytes=9 nonzero_bytes=0 e820=3\n"

    def judge(self, rc=0, want_rc=0, want="^ZSPROBE: PASS hint=valid ", serial=V, stderr="", tl=RUN, args=(),
              check=None, phases=()):
        return probe.judge(rc, want_rc, want, serial, stderr, tl, list(args), check, phases)

    def test_clean_boot_passes(self):
        self.assertIsNone(self.judge(check="j['vcpus'] == 2", phases=("memory_ready",)))
        self.assertIsNone(self.judge(rc=1, want_rc=1, want="not zero", serial="", stderr="x: memory is not zero\n"))

    def test_each_failure(self):
        verified = broken(RUN, ("prezero", "verified_bytes"), 5)
        for kw, want in [
            (dict(rc=1), "exit code 1, expected 0"),
            (dict(rc=1, want_rc=1, want="leak"), "stderr does not match"),
            (dict(serial=self.V * 2), "2 verdict lines"),
            (dict(serial=""), "0 verdict lines"),
            (dict(want="^ZSPROBE: FAIL"), "verdict does not match"),
            (dict(tl=None), "no timeline JSON"),
            (dict(tl=broken(RUN, ("exit",))), "exit missing"),
            (dict(phases=("test_done",)), "test_done"),
            (dict(check="j['vcpus'] == 4"), "check failed"),
            (dict(check="j['nope']"), "raised"),
            (dict(tl=verified, args=("--verify-hint",)), "verified 5 of"),
        ]:
            with self.subTest(kw=kw):
                got = self.judge(**kw)
                self.assertIsNotNone(got)
                self.assertIn(want, got)

    def test_log_names_survive_the_serial_option(self):
        # `--serial file=PATH` is a key=value list: no comma may reach it.
        self.assertEqual(probe.log_stem("anon-freed-dirty[thp=on,prefault=on]"), "anon-freed-dirty_thp_on_prefault_on_")
        self.assertEqual(probe.log_stem("size-3145724K"), "size-3145724K")


class Sizes(unittest.TestCase):
    def test_units_and_bases(self):
        for text, want in [("4096", 4096), ("4K", 4096), ("2m", 2 << 20), ("4G", 4 << 30), ("1T", 1 << 40),
                           ("0x1000", 4096), ("512MiB", 512 << 20), (" 1g ", 1 << 30), ("0", 0)]:
            self.assertEqual(sizes.parse_size(text), want, text)

    def test_bad_sizes_say_what_to_write(self):
        for bad in ("", "G", "1.5G", "x", "-1G", "4Q"):
            with self.subTest(bad=bad), self.assertRaisesRegex(ValueError, "size|negative"):
                sizes.parse_size(bad)

    def test_pages_round_up(self):
        self.assertEqual(sizes.pages("2G", 2048), 1024)
        self.assertEqual(sizes.pages("3M", 2048), 2)
        self.assertEqual(sizes.pages("1M", 1048576), 1)


if __name__ == "__main__":
    unittest.main()
