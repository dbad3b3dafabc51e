"""ci/progress.sh: a long build says what it builds and how long it takes;
a quick one (a cache hit) says nothing; output and status pass through."""
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "progress.sh"


def run(cmd: str, cache: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, ZEROSTART_CACHE=cache, PROGRESS_FIRST_S="1", PROGRESS_EVERY_S="1",
             PROGRESS_RECORD_S="2", **env)
    return subprocess.run(["bash", str(SCRIPT), "thing x", "120", "sh", "-c", cmd],
                          capture_output=True, text=True, env=e, timeout=30)


class Progress(unittest.TestCase):
    def test_quick_build_prints_nothing_and_passes_status(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("echo /out/path; exit 3", d)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (3, "/out/path\n", ""))

    def test_long_build_says_what_and_how_long_then_records_it(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("sleep 3.5; echo done", d)
            self.assertEqual((r.returncode, r.stdout), (0, "done\n"))
            self.assertIn("progress: thing x is building (expected ~2m00s: a cold build on a 2-core machine", r.stderr)
            self.assertIn("progress: thing x still building, 0m02s so far", r.stderr)
            # bash's SECONDS counts whole seconds from a start mid-second.
            self.assertRegex(r.stderr, r"progress: thing x built in 0m0[345]s")
            took = (Path(d) / "durations" / "thing_x").read_text().strip()
            self.assertIn(took, ("3", "4", "5"))
            # The next estimate is this machine's own.
            r = run("sleep 1.5", d)
            self.assertIn(f"expected ~0m0{took}s: its last build here, cold or partial", r.stderr)

    def test_side_by_side_builds_say_the_estimate_is_for_one_alone(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("sleep 1.5", d, PROGRESS_SHARED="7")
            self.assertIn("(expected ~2m00s: a cold build on a 2-core machine, alone; longer now: "
                          "7 builds share the cores; cached afterwards)", r.stderr)
            r = run("sleep 1.5", d, PROGRESS_SHARED="1")
            self.assertNotIn("share the cores", r.stderr)

    def test_failed_build_records_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("sleep 2.5; exit 1", d)
            self.assertEqual(r.returncode, 1)
            self.assertNotIn("built in", r.stderr)
            self.assertFalse((Path(d) / "durations").exists())


if __name__ == "__main__":
    unittest.main()
