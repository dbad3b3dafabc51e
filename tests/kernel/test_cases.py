"""Judges of tests/kernel/cases.py on lines captured from real boots."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cases  # noqa: E402


class Report:
    def __init__(self):
        self.oks, self.fails = [], []

    def ok(self, msg):
        self.oks.append(msg)

    def fail(self, msg):
        self.fails.append(msg)


# From boot-pagealloc.log (6.12, 2 GiB, debug_pagealloc=on) and boot-good.log
# (the same boot without it) of make test-kernel, 2026-12-04.
ON = "ZSDIRECTMAP 4k=2097024 2M=0 "
OFF = "ZSDIRECTMAP 4k=18304 2M=2078720 1G=0 "


class DirectMap(unittest.TestCase):
    def test_debug_pagealloc_on_leaves_4k_pages_only(self):
        r = Report()
        self.assertTrue(cases.directmap_4k(r, ["ZSDONE", ON]))
        self.assertEqual(r.fails, [])

    def test_a_kernel_that_ignored_it_fails(self):
        r = Report()
        self.assertFalse(cases.directmap_4k(r, [OFF]))
        self.assertIn("debug_pagealloc=on did not take effect (DirectMap2M=2078720", r.fails[0])

    def test_a_boot_that_never_got_there_adds_nothing(self):
        r = Report()
        self.assertFalse(cases.directmap_4k(r, ["Kernel panic - not syncing: Attempted to kill init!"]))
        self.assertEqual((r.oks, r.fails), ([], []))


if __name__ == "__main__":
    unittest.main()
