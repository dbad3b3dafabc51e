"""Unit tests of zstest.timeline (the timeline schema), zstest.sizes,
zstest.probe's judging, the suite runner (zstest.suite), its hugepage
pools (zstest.hugepages) and the hint encoder (zstest.hint).

Why: the schema is what makes a renamed or missing timeline key fail by
name in every harness; a checker that accepted anything would make those
checks ones that cannot fail, so each rule has a document that breaks it.
Run: python3 -m unittest zstest.test_zstest (PYTHONPATH=tests; make does)
"""

import contextlib
import copy
import io
import json
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock
from pathlib import Path

from lib import make_test  # tests/lib/make_test.py: what `make test` counts
from zstest import guestkernel, hint, hugepages, probe, qemu, sizes, suite, timeline
from zstest.suite import Boot, Case, Check, Group, Reserve, Setup, SkipUnless

# The shape `zerostart run --timeline` writes (vmm/zerostart/src/main.rs).
RUN = {
    "phases": [{"name": "process_start", "t_ms": 0.0}, {"name": "memory_ready", "t_ms": 12.5},
               {"name": "first_kvm_run", "t_ms": 13.0}, {"name": "exit", "t_ms": 900.25}],
    "guest_phases": [{"name": "userspace_started", "host_ms": 410.5, "guest_uptime_ms": 380},
                     {"name": "app_ready", "host_ms": 850.0, "guest_uptime_ms": 820}],
    "memory_bytes": 1 << 30, "vcpus": 2,
    "prezero": {"mode": "auto", "backend": "avx2-nt", "method": "engine", "backing": "memfd-hugetlb-2M",
                "bytes": 1 << 30, "ms": 11.0, "gib_per_s": 90.9, "threads": 2, "hint_ranges": 2,
                "hint_bytes": (1 << 30) - (1 << 20), "verified_bytes": 0},
    "exit": {"reason": "i8042 reset", "kind": "reset", "code": 0},
}
# `zerostart launch --timeline` (vmm/zerostart/src/launch/mod.rs).
LAUNCH = {
    "phases": [{"name": n, "t_ms": float(i)} for i, n in enumerate(timeline.LAUNCH_PHASES)],
    "guest_phases": [],
    "vmm": "qemu", "boot": "uefi", "hint_transport": "fw_cfg", "argv": ["qemu-system-x86_64", "-m", "1G"], "memory_bytes": 1 << 30, "memory_source": "pool",
    "memory_source_asked": "pool", "lease": 3, "lease_held_bytes": 1 << 30, "hint": None, "exit": {"code": 0, "signal": None},
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
            (RUN, "run", ("phases", 1, "t_ms"), -1, "phases[1].t_ms is -1"),
            (RUN, "run", ("phases", 1, "extra"), 1, "phases[1] has unknown key(s) ['extra']"),
            (RUN, "run", ("phases",), [], "phases is empty"),
            (RUN, "run", ("guest_phases",), KeyError, "guest_phases missing"),
            (RUN, "run", ("guest_phases", 0, "name"), "root_shell", "is not one of"),
            (RUN, "run", ("guest_phases", 0, "host_ms"), -2, "guest_phases[0].host_ms is -2"),
            (RUN, "run", ("guest_phases", 0, "guest_uptime_ms"), 1.5, "guest_phases[0].guest_uptime_ms is float"),
            (RUN, "run", ("guest_phases", 0, "host_ms"), 900.0, "not in arrival order"),
            (RUN, "run", ("guest_phases", 1, "extra"), 1, "guest_phases[1] has unknown key(s) ['extra']"),
            (LAUNCH, "launch", ("guest_phases",), None, "guest_phases is NoneType"),
            (LAUNCH, "launch", ("memory_source",), KeyError, "memory_source missing"),
            (LAUNCH, "launch", ("argv",), ["q", 1], "argv[1] is int"),
            (LAUNCH, "launch", ("exit", "signal"), "KILL", "exit.signal is str"),
            (LAUNCH, "launch", ("lease",), KeyError, "lease missing"),
            (LAUNCH, "launch", ("hint",), {"ranges": [[0, 4096]], "bytes": 4096}, "hint.corrupt missing"),
            (LAUNCH, "launch", ("hint",), {"ranges": [[0]], "bytes": 4096, "corrupt": None}, "hint.ranges[0]"),
            (LAUNCH, "launch", ("phases",), [{"name": "process_start", "t_ms": 0.0}], "missing"),
        ]
        for doc, kind, path, value, want in cases:
            with self.subTest(path=path, value=value):
                got = timeline.check(broken(doc, path, value), kind)
                self.assertTrue(any(want in p for p in got), got)
        self.assertIn("phases ['test_done'] missing", timeline.check(RUN, "run", ["test_done"])[0])
        # A schema problem elsewhere does not hide the phase checks.
        self.assertEqual(timeline.check(broken(broken(RUN, ("vcpus",)), ("phases", 2, "t_ms"), 1.0), "run")[1:],
                         [f"phase times are not in order: {[('process_start', 0.0), ('memory_ready', 12.5), ('first_kvm_run', 1.0), ('exit', 900.25)]}"])
        self.assertEqual(timeline.check([], "run"), ["the timeline is list, not an object"])

    def test_a_renamed_key_fails_by_name(self):
        """The writers' types are the schema: a key renamed on either side
        is the old name missing, not a number read as absent."""
        doc = copy.deepcopy(RUN)
        doc["cpus"] = doc.pop("vcpus")
        doc["prezero"]["hint_byte"] = doc["prezero"].pop("hint_bytes")
        self.assertCountEqual(timeline.check(doc, "run"), ["vcpus missing", "prezero.hint_bytes missing"])
        doc = copy.deepcopy(LAUNCH)
        doc["hint"] = {"ranges": [[0, 4096]], "bytes": 4096, "corrupt": "dirty"}
        self.assertEqual(timeline.check(doc, "launch"), [])
        doc["hint"]["byte"] = doc["hint"].pop("bytes")
        self.assertEqual(timeline.check(doc, "launch"), ["hint.bytes missing"])

    def test_the_schema_is_the_generated_one(self):
        """check() reads docs/schema/, which vmm/timeline's test keeps equal
        to what the Rust types generate."""
        for kind, title in (("run", "RunTimeline"), ("launch", "LaunchTimeline")):
            with self.subTest(kind=kind):
                schema = timeline.validator(kind).schema
                self.assertEqual(schema["title"], title)
                self.assertIn("phases", schema["required"])

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


class FakePools:
    """HugePages stand-in: grants reservations of the sizes in `have`."""

    def __init__(self, have=(2048,)):
        self.have, self.reserved, self.restored = set(have), [], 0

    def reserve(self, kb, pages):
        self.reserved.append((kb, pages))
        return kb in self.have

    def restore(self):
        self.restored += 1


class Suite(unittest.TestCase):
    """zstest.suite: selection, step semantics, the summary make counts."""

    TABLE = [
        Case("a", Boot("a", 0, "^ok", ("--memory", "size=512M"))),
        Case("b", Reserve(2048, 8), Boot("b", 1, "refused", ("--memory", "file={work}/f"))),
        Case("loop", *(Group(Setup(f"fill-{i}", ("fill", str(i))), Boot(f"loop[{i}]", 0, "^ok", ())) for i in (1, 2))),
        Case("big", SkipUnless("/nonexistent-1g", "no 1G hugepage support"), Boot("big-1", 0, "^ok", ())),
        Case("frag", Reserve(1048576, 1, skip="fragmented host"), Boot("frag-1", 0, "^ok", ())),
        Case("strict", Reserve(1048576, 1), Boot("strict-1", 0, "^ok", ())),
        Case("chk", Check("size-zero", lambda w: (True, "file truncated to 0")),
             Check("size-left", lambda w: (False, "4096 bytes left in the file"))),
    ]

    def run_cases(self, names=(), bad_boots=(), bad_setups=()):
        boots, cmds = [], []

        def boot(name, rc, verdict, args, check, phases):
            boots.append((name, rc, verdict, args))
            print(f"ok   {name}: fake" if name not in bad_boots else f"FAIL {name}: fake")
            return name not in bad_boots

        def run(argv, **kw):
            cmds.append(argv)
            return subprocess.CompletedProcess(argv, 1 if argv[0] in bad_setups or argv[-1] in bad_setups else 0,
                                               "setup output\n")

        with tempfile.TemporaryDirectory() as d:
            work = Path(d) / "work"
            work.mkdir()
            pools = FakePools()
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = suite.run_suite(suite.Runner("test-x", work, boot, pools, run), suite.select(self.TABLE, names))
            self.assertFalse(work.exists(), "the scratch directory outlives the run")
            self.assertEqual(pools.restored, 1)
        return rc, out.getvalue(), err.getvalue(), boots, cmds, pools

    def test_select(self):
        self.assertEqual([c.name for c in suite.select(self.TABLE, [])], [c.name for c in self.TABLE])
        self.assertEqual([c.name for c in suite.select(self.TABLE, ["loop", "a"])], ["loop", "a"])
        with self.assertRaisesRegex(ValueError, "unknown case nope; cases: a b loop big"):
            suite.select(self.TABLE, ["a", "nope"])

    def test_table_problems(self):
        self.assertEqual(suite.table_problems(self.TABLE), [])
        dup = self.TABLE + [Case("a", Boot("a2", 0, "x", ())), Case("c", Group(Boot("loop[1]", 0, "x", ()))),
                            Case("empty")]
        got = suite.table_problems(dup)
        self.assertEqual(len(got), 3, got)
        self.assertIn("case a is in the table twice", got)
        self.assertIn("Boot loop[1] (case c): the name is used twice", got)
        self.assertIn("case empty has no steps", got)

    def test_the_real_tables_are_well_formed(self):
        # The suites' own tables (python3 tests/<area>/cases.py --list).
        for area, script in (("vmm", "cases.py"), ("redteam", "cases.py"), ("pool", "cases.py"),
                             ("kernel", "run.py")):
            p = subprocess.run([sys.executable, f"tests/{area}/{script}", "--list"], capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parents[2])
            with self.subTest(area=area):
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertGreater(len(p.stdout.split()), 1)

    def test_every_step_and_the_counts_make_sees(self):
        rc, out, err, boots, cmds, pools = self.run_cases(bad_setups=("1",))
        self.assertEqual(rc, 1)
        lines = out.splitlines()
        # {work} is the scratch directory.
        self.assertTrue(boots[1][3][1].startswith("file=/") and boots[1][3][1].endswith("/work/f"), boots[1])
        # A failed setup abandons its Group only: loop[1] never booted, loop[2] did.
        self.assertIn("FAIL fill-1: setup step failed: fill 1", lines)
        self.assertEqual([b[0] for b in boots], ["a", "b", "loop[2]"])
        self.assertIn("SKIP big: no 1G hugepage support", lines)
        self.assertIn("SKIP frag: fragmented host", lines)
        self.assertIn("FAIL strict: could not reserve 1 free 1048576kB hugepages (the line above says why)", lines)
        self.assertIn("ok   size-zero: file truncated to 0", lines)
        self.assertIn("FAIL size-left: 4096 bytes left in the file", lines)
        self.assertEqual(pools.reserved, [(2048, 8), (1048576, 1), (1048576, 1)])
        self.assertEqual(lines[-1], "test-x: 4 passed, 3 failed, 2 skipped")
        self.assertEqual(err.strip(), "test-x: failed cases: fill-1 strict size-left")
        # tests/lib/make_test.py counts the same from these lines.
        c, _ = make_test.count(out.splitlines(keepends=True), [], rc)
        self.assertEqual((c.passed, c.failed, c.skipped), (4, 3, 2))

    def test_all_passing_selection(self):
        rc, out, err, boots, _, _ = self.run_cases(names=["a", "loop"])
        self.assertEqual(rc, 0)
        self.assertEqual([b[0] for b in boots], ["a", "loop[1]", "loop[2]"])
        self.assertEqual(out.splitlines()[-1], "test-x: 3 passed, 0 failed, 0 skipped")
        self.assertEqual(err, "")

    def test_a_failed_boot_fails_the_run(self):
        rc, out, err, _, _, _ = self.run_cases(names=["a"], bad_boots=("a",))
        self.assertEqual((rc, out.splitlines()[-1]), (1, "test-x: 0 passed, 1 failed, 0 skipped"))
        c, _ = make_test.count(out.splitlines(keepends=True), [], rc)
        self.assertEqual((c.passed, c.failed), (0, 1))

    def test_do_steps_report_many_results_and_keep_work(self):
        # The kernel suite's step: a function judging its own boot, any
        # number of results under its name; notes are not results.
        def judge(r):
            r.note("negative control: 16 of 16 found")
            r.ok("first check")
            r.fail("second check")
            r.under("other").ok("a step another case needed first")

        stopped = []

        def start(r):
            r.at_exit(lambda: stopped.append("daemon"))
            r.fail("it never became ready")
            r.abandon()

        table = [Case("k", suite.Do("k", judge)), Case("s", suite.Do("s", lambda r: r.skip("no such thing"))),
                 Case("e", suite.Do("e", lambda r: open(r.work / "missing" / "log"))),
                 Case("x", suite.Do("x", lambda r: (_ for _ in ()).throw(suite.StepError("no mkhint; fix it")))),
                 Case("d", suite.Do("d", start), suite.Do("never", lambda r: r.ok("ran after abandon")))]
        self.assertEqual(suite.table_problems(table), [])
        with tempfile.TemporaryDirectory() as d:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = suite.run_suite(suite.Runner("test-k", Path(d), None, FakePools(), keep_work=True), table)
            self.assertTrue(Path(d).exists(), "keep_work: the logs stay")
        lines = out.getvalue().splitlines()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[:5], ["     k: negative control: 16 of 16 found", "ok   k: first check",
                                     "FAIL k: second check", "ok   other: a step another case needed first",
                                     "SKIP s: no such thing"])
        self.assertTrue(lines[5].startswith("FAIL e: FileNotFoundError: "), lines[5])
        self.assertEqual(lines[6], "FAIL x: StepError: no mkhint; fix it")
        self.assertEqual(lines[-2], "FAIL d: it never became ready")
        self.assertEqual(stopped, ["daemon"], "at_exit runs when the run ends")
        self.assertEqual(lines[-1], "test-k: 2 passed, 4 failed, 1 skipped")
        self.assertEqual(err.getvalue().strip(), "test-k: failed cases: k e x d")
        c, _ = make_test.count(out.getvalue().splitlines(keepends=True), [], rc)
        self.assertEqual((c.passed, c.failed, c.skipped), (2, 4, 1))

    def test_main_refuses_unknown_cases_before_running_any(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(suite.main("test-x", self.TABLE, ["a", "nope"]), 2)
        self.assertIn("test-x: unknown case nope; cases: a b loop", err.getvalue())

    def test_signal_restores_pools_and_removes_work(self):
        # A real SIGTERM in the middle of a setup step: the child exits 143
        # (as bash did) after giving the pages back and removing its work dir.
        with tempfile.TemporaryDirectory() as d:
            sysfs = Path(d) / "sysfs"
            pool = sysfs / "hugepages-2048kB"
            pool.mkdir(parents=True)
            for f, v in (("nr_hugepages", 8), ("free_hugepages", 0), ("resv_hugepages", 0)):
                (pool / f).write_text(f"{v}\n")
            work = Path(d) / "work"
            work.mkdir()
            child = f"""
from pathlib import Path
from zstest import hugepages, suite
pools = hugepages.HugePages("t", Path({str(sysfs)!r}))
pools.added[2048] = 5  # as if reserve() had grown the pool 3 -> 8
table = [suite.Case("slow", suite.Setup("slow", ("sh", "-c", "touch {{work}}/started; exec sleep 60")))]
suite.run_suite(suite.Runner("t", Path({str(work)!r}), None, pools), table)
"""
            p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            deadline = time.monotonic() + 20
            while not (work / "started").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=20)
            self.assertEqual(p.returncode, 143, err)
            self.assertEqual((pool / "nr_hugepages").read_text().strip(), "3")
            self.assertIn("t: 2048kB hugepage pool restored to 3", err)
            self.assertFalse(work.exists())


    def test_a_daemon_served_for_the_cases_ends_with_the_suite(self):
        with tempfile.TemporaryDirectory() as d:
            work = Path(d) / "work"
            work.mkdir()
            procs = []

            def start(r):
                procs.append(suite.serve(r, ["sleep", "60"], work / "daemon.log"))
            table = [Case("d", suite.Do("start", start))]
            with contextlib.redirect_stdout(io.StringIO()):
                rc = suite.run_suite(suite.Runner("test-x", work, None, FakePools()), table)
            self.assertEqual(rc, 0)
            self.assertEqual(len(procs), 1)
            self.assertIsNotNone(procs[0].poll(), "the daemon outlived the suite")

    def test_choose_lists_selects_and_refuses_unknown_cases(self):
        table = [Case("a", Check("x", lambda w: (True, ""))), Case("b", Check("y", lambda w: (True, "")))]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            self.assertEqual(suite.choose("t", table, ["--list"], "x"), 0)
            self.assertEqual([c.name for c in suite.choose("t", table, ["b"], "x")], ["b"])
            self.assertEqual(suite.choose("t", table, ["nosuch"], "x"), 2)
        self.assertEqual(out.getvalue(), "a\nb\n")
        self.assertIn("unknown case nosuch", err.getvalue())


class QemuBoot(unittest.TestCase):
    """zstest.qemu.boot, the one-shot driver of the kernel and firmware
    tests, on real processes standing in for QEMU's exit paths."""

    def test_exit_status_timeout_and_missing_binary(self):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "sub" / "boot.log"
            b = qemu.boot(["sh", "-c", "echo 'line 1\r'; echo 'qemu: fatal: x'; exit 3"], log=log, timeout=30)
            self.assertEqual((b.rc, b.lines), (3, ["line 1", "qemu: fatal: x"]))
            self.assertEqual(b.problem(), f"QEMU exited with status 3: qemu: fatal: x ({log})")
            self.assertEqual(log.read_text(), "line 1\nqemu: fatal: x\n")
            ok = qemu.boot(["sh", "-c", "echo ZSDONE"], log=log, timeout=30)
            self.assertEqual((ok.rc, ok.problem(), ok.lines), (0, None, ["ZSDONE"]))
            t0 = time.monotonic()
            # The child's child holds the pipe open: the process group goes.
            slow = qemu.boot(["sh", "-c", "echo booting; sleep 60 & wait"], log=log, timeout=1)
            self.assertLess(time.monotonic() - t0, 15)
            self.assertTrue(slow.timed_out)
            self.assertEqual(slow.problem(), f"QEMU timed out after 1s: {log}")
            gone = qemu.boot(["/nonexistent/qemu-system-x86_64"], log=log, timeout=5)
            self.assertEqual(gone.rc, 127)
            self.assertIn("No such file", gone.problem())

    def test_only_announced_reboots_boot_again(self):
        # A guest that reboots once, announced, then powers off: all of it read.
        two = "echo 'Linux version 6.12'; echo ZSREBOOT; echo '[    0.000000] Linux version 6.12'; echo ZSDONE"
        # A kernel that crashed and reset (no announcement): QEMU is stopped at
        # the second banner, and the third boot is never read.
        crash = ("echo 'Linux version 6.12'; echo 'Kernel panic - not syncing: x'; echo 'Linux version 6.12'; "
                 "echo 'ZSINIT again'; sleep 60 & wait")
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "boot.log"
            b = qemu.boot(["sh", "-c", two], log=log, timeout=30, reboots=1)
            self.assertEqual((b.rc, b.problem(), b.lines[-1]), (0, None, "ZSDONE"))
            t0 = time.monotonic()
            c = qemu.boot(["sh", "-c", crash], log=log, timeout=30, reboots=1)
            self.assertLess(time.monotonic() - t0, 15)
            self.assertIn("the guest reset without announcing it (boot 2, 0 reboot(s) announced)", c.problem())
            self.assertNotIn("ZSINIT again", c.lines)
            self.assertIn("Kernel panic - not syncing: x", log.read_text())
            # The negative control: the same announced reboot is a crash
            # where none is allowed.
            n = qemu.boot(["sh", "-c", two], log=log, timeout=30)
            self.assertIn("the guest reset without announcing it (boot 2, 0 reboot(s) announced)", n.problem())

    def test_how_a_zero_exit_ended(self):
        # boot() reads end_log_path(log), where the command's spec has QEMU
        # log (qemu.end_log); here the stand-in's $1.
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "boot.log"
            end = str(qemu.end_log_path(log))
            self.assertEqual(end, str(Path(d) / "boot.log.qemu.log"))
            for written, ended in (("CPU Reset (CPU 0)\\nqemu_system_shutdown_request reason=6", "power-off"),
                                   ("CPU Reset (CPU 0)\\nCPU Reset (CPU 1)", "reset"),
                                   ("CPU Reset (CPU 0)\\nTriple fault", "triple fault")):
                b = qemu.boot(["sh", "-c", f'printf "{written}\\n" > "$1"', "sh", end], log=log, timeout=30)
                self.assertEqual((b.rc, b.ended), (0, ended), written)
            # An announced reboot may triple-fault on its way; only a
            # power-off ends such a run.
            t = qemu.boot(["sh", "-c", 'echo ZSREBOOT; printf "Triple fault\\nCPU Reset (CPU 0)\\n'
                           'qemu_system_shutdown_request reason=6\\n" > "$1"', "sh", end], log=log, timeout=30,
                          reboots=1)
            self.assertEqual((t.problem(), t.ended), (None, "power-off"))
            self.assertEqual(qemu.how_it_ended(log.with_name("boot.log.qemu.log"), rebooted=True), "power-off")
            r = Path(d) / "reset.log"
            r.write_text("Triple fault\nCPU Reset (CPU 0)\n")
            self.assertEqual(qemu.how_it_ended(r), "triple fault")
            self.assertEqual(qemu.how_it_ended(r, rebooted=True), "unknown (no power-off)")
            silent = qemu.boot(["sh", "-c", "true"], log=log, timeout=30)
            self.assertTrue(silent.ended.startswith("unknown (no QEMU log"), silent.ended)
            empty = Path(d) / "empty.log"
            empty.write_text("")
            self.assertTrue(qemu.how_it_ended(empty).startswith("unknown (QEMU log empty"))

    def test_triple_fault_detail(self):
        # What bed-qemu/patches/0002 writes (taken from a real run: a boot
        # sector that loads an empty IDT and executes int3).
        with tempfile.TemporaryDirectory() as d:
            log = Path(d) / "q.log"
            log.write_text("CPU Reset (CPU 0)\nEAX=00000000\nTriple fault\n"
                           "Triple fault: exception 0xd (error code 0x42) while delivering a double fault\n"
                           "EAX=0000aa55 EBX=00000000 ECX=00000000 EDX=00000080\n"
                           "EIP=00007c06 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n"
                           "CR0=00000010 CR2=00000000 CR3=00000000 CR4=00000000\n")
            self.assertEqual(qemu.how_it_ended(log), "triple fault")
            self.assertEqual(qemu.triple_fault_detail(log),
                             "exception 0xd (error code 0x42) at EIP=00007c06 CR2=00000000 CR3=00000000")
            log.write_text("CPU Reset (CPU 0)\nTriple fault\n")  # an unpatched QEMU: the class, no detail
            self.assertEqual(qemu.triple_fault_detail(log), "")

    def test_an_l2_soft_lockup_ends_the_wait_at_once(self):
        # The line L2's kernel printed when the emulator lost an IPI (a real
        # run's console): next() raises L2Stuck on it, long before the
        # deadline; the same text from a guest (an "L3| " line) does not.
        lockup = "[   73.413470] watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [khugepaged:35]"
        text = f"L3| 1000 {lockup}\nL2 up\n{lockup}\nafter\n"
        with tempfile.TemporaryDirectory() as d:
            proc = subprocess.Popen(["printf", "%s", text], stdout=subprocess.PIPE)
            con = qemu.Console(proc, Path(d) / "c.log", echo=False)
            far = time.monotonic() + 600
            self.assertEqual(con.next(far), f"L3| 1000 {lockup}")
            self.assertEqual(con.next(far), "L2 up")
            t0 = time.monotonic()
            with self.assertRaises(TimeoutError) as cm:
                con.next(far)
            self.assertIsInstance(cm.exception, qemu.L2Stuck)
            self.assertLess(time.monotonic() - t0, 5)
            self.assertEqual(con.stuck, lockup)
            proc.wait()
            time.sleep(0.1)  # the pump thread reads to EOF
            proc.stdout.close()
            con.log.close()

    def test_an_l2_int3_on_code_no_longer_there_is_a_stale_int3(self):
        # Stop 26's real report (Debian's kernel under multi-threaded TCG):
        # the CPU trapped after the byte 66, which memory holds again, so
        # the int3 it took was stale. next() stops at the Code: line.
        # An int3 still in memory (cc) is not proof, nor is a guest's report.
        oops = "[    2.301234] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI"
        code = "[    2.301301] Code: 48 89 e5 66 <90> e8 3a 00 00 00"
        self.assertEqual(qemu.stale_int3_byte("48 89 e5 66 <90> e8"), "66")
        self.assertIsNone(qemu.stale_int3_byte("48 89 e5 cc <90> e8"))
        self.assertIsNone(qemu.stale_int3_byte("Unable to access opcode bytes at 0xffffffff81000000."))
        self.assertTrue(qemu.L2_INT3_OOPS_RE.match("[   19.1] int3: 0000 [#1] SMP NOPTI"))  # 6.1's form
        text = (f"L3| 10 {oops}\nL3| 11 {code}\n{oops}\n[    2.301290] RIP: 0010:sched_clock_cpu+0x9/0x1d0\n"
                f"{code}\nafter\n")
        with tempfile.TemporaryDirectory() as d:
            proc = subprocess.Popen(["printf", "%s", text], stdout=subprocess.PIPE)
            con = qemu.Console(proc, Path(d) / "c.log", echo=False)
            far = time.monotonic() + 600
            for _ in range(4):
                con.next(far)
            self.assertIsNone(con.stale_int3)
            with self.assertRaises(qemu.L2Stuck):
                con.next(far)
            self.assertIn("the byte before RIP is 66, not cc", con.stale_int3)
            self.assertEqual(qemu.bed_fault(None, None, None, con.stale_int3), con.stale_int3)
            proc.wait()
            time.sleep(0.1)
            proc.stdout.close()
            con.log.close()
            proc = subprocess.Popen(["printf", "%s", f"{oops}\n{code.replace('66 <90>', 'cc <90>')}\n"],
                                    stdout=subprocess.PIPE)
            con = qemu.Console(proc, Path(d) / "c2.log", echo=False)
            self.assertTrue(con.next(far).endswith("NOPTI"))
            self.assertIn("cc <90>", con.next(far))
            self.assertIsNone(con.stale_int3)
            proc.wait()
            time.sleep(0.1)
            proc.stdout.close()
            con.log.close()

    def test_snapshot_names_functions(self):
        # L2's layout line (l2-init.sh) and a symbol table as l2_kallsyms
        # writes it: RIPs and stack words become function+offset.
        text, mods = qemu.parse_l2_layout(
            "ZSE2E-L2 text=ffffffffb7600000 modules=kvm_amd@0xffffffffc0a2b000:155648,kvm@0xffffffffc0800000:1200000")
        self.assertEqual(text, 0xffffffffb7600000)
        self.assertEqual(mods[0], ("kvm_amd", 0xffffffffc0a2b000, 155648))
        with tempfile.TemporaryDirectory() as d:
            ks = Path(d) / "k.txt"
            ks.write_text("0 T _text\na04ff0 T exc_int3\na186e0 T native_queued_spin_lock_slowpath\n"
                          "a18800 T after\n")
            sym = lambda a: qemu.symbolize(a, text, mods, str(ks))  # noqa: E731
            self.assertEqual(sym(0xffffffffb8004ffe), "exc_int3+0xe")
            self.assertEqual(sym(0xffffffffc0a2b010), "[kvm_amd]+0x10")
            self.assertIsNone(sym(0xffff8b6598831980))
            regs = ("(qemu) info registers -a\nCPU#0\nRIP=ffffffffb8004ffe RFL=00000002 [-------] CPL=0 HLT=0\n"
                    "CPU#1\nRIP=ffffffffb8018710 RFL=00000002 [-------] CPL=0 HLT=0\n")
            snap = ("(qemu) info status\nVM status: running\n" + regs +
                    "(qemu) cpu 1\n\n(qemu) x /128xg $esp\n"
                    "ffffccd1000d0d90: 0xffff8b6598831980 0xffffffffb80186f5\n"
                    "ffffccd1000d0da0: 0xffffffffb8004ffa 0x0000000000000002\n" +
                    regs.replace("RIP=ffffffffb8018710", "RIP=ffffffffb80186f5"))
            self.assertEqual(qemu.snapshot_summary(snap, sym),
                             "VM status: running; cpu0 RIP=ffffffffb8004ffe (exc_int3+0xe) HLT=0 IF=0 same RIP 2 s "
                             "later; cpu1 RIP=ffffffffb8018710 (native_queued_spin_lock_slowpath+0x30) HLT=0 IF=0 "
                             "RIP=ffffffffb80186f5 2 s later stack: native_queued_spin_lock_slowpath+0x15 < "
                             "exc_int3+0xa")

    def test_a_cpu_stuck_on_one_int3_is_found_in_both_dumps(self):
        # Stop 28's cpu0, as the snapshot now shows it: in exc_int3 both
        # times, its stack holding the trap frame (RIP, CS 0x10, RFLAGS,
        # RSP, SS 0x18) of an int3 at sched_clock_cpu+0x9. A frame in one
        # pass only, or a CPU outside the int3 handler, is no candidate.
        text = 0xffffffffb7600000
        with tempfile.TemporaryDirectory() as d:
            ks = Path(d) / "k.txt"
            ks.write_text("0 T _text\n1000 T sched_clock_cpu\na04ff0 T exc_int3\n"
                          "a186e0 T native_queued_spin_lock_slowpath\na18800 T after\n")
            sym = lambda a: qemu.symbolize(a, text, [], str(ks))  # noqa: E731
            trap = text + 0x100a  # after the int3 at sched_clock_cpu+0x9
            frame = f"0x{trap:016x} 0x0000000000000010\nffffccd1000d0db0: 0x0000000000000046 0xffffccd1000d0e00\n" \
                    "ffffccd1000d0dc0: 0x0000000000000018 0x0000000000000000\n"
            stack0 = "ffffccd1000d0d90: 0xffff8b6598831980 0xffffffffb8004ffa\nffffccd1000d0da0: " + frame
            stack1 = "ffffccd1000d0d90: 0xffff8b6598831980 0xffffffffb80186f5\n"
            regs = ("(qemu) info registers -a\nCPU#0\nRIP=ffffffffb8004ffe RFL=00000002 [-------] CPL=0 HLT=0\n"
                    "CPU#1\nRIP=ffffffffb8018710 RFL=00000002 [-------] CPL=0 HLT=0\n")
            stacks = f"(qemu) cpu 0\n(qemu) x /128xg $esp\n{stack0}(qemu) cpu 1\n(qemu) x /128xg $esp\n{stack1}"
            snap = "(qemu) info status\nVM status: running\n" + regs + stacks + regs + stacks
            self.assertEqual(qemu.kernel_trap_frames(
                [0xffff8b6598831980, trap, 0x10, 0x46, 0xffffccd1000d0e00, 0x18]), [(1, trap)])
            # RIP outside the int3 functions, but exc_int3's return address
            # above the frame: still handling that int3.
            elsewhere = snap.replace("ffffffffb8004ffe", "ffffffffb8018710")
            self.assertEqual(qemu.int3_loop_candidates(elsewhere, sym), [(0, trap)])
            self.assertEqual(qemu.int3_loop_candidates(snap, sym), [(0, trap)])
            self.assertEqual(qemu.int3_loop_candidates(regs + stacks + regs + stacks.replace(frame, "0x0\n"), sym),
                             [])
            # Neither RIP nor stack in an int3 function: an interrupt's frame, say.
            self.assertEqual(qemu.int3_loop_candidates(
                elsewhere.replace("0xffffffffb8004ffa", "0xffffffffb80186f5"), sym), [])
            self.assertEqual(qemu.int3_loop_candidates(regs + stacks, sym), [])  # one pass proves nothing
            # Caught at the int3 itself (sched_clock_cpu+0x9) in the first
            # dump with no frame, in exc_int3 on its trap frame in the second:
            # the same loop (make demo, 2026-12-03).
            at_int3 = regs.replace("ffffffffb8004ffe", f"{trap - 1:016x}")
            caught = at_int3 + stacks.replace(frame, "0x0\n") + regs + stacks
            self.assertEqual(qemu.int3_loop_candidates(caught, sym), [(0, trap)])
            # Controls: at some other address in the first dump, or at the
            # int3's address in both dumps with no handler anywhere.
            other = regs.replace("ffffffffb8004ffe", f"{trap + 7:016x}")
            self.assertEqual(qemu.int3_loop_candidates(other + stacks.replace(frame, "0x0\n") + regs + stacks, sym),
                             [])
            bare = stacks.replace(frame, "0x0\n").replace("0xffffffffb8004ffa", "0xffffffffb80186f5")
            self.assertEqual(qemu.int3_loop_candidates(at_int3 + bare + at_int3 + bare, sym), [])


class GuestKernelKit(unittest.TestCase):
    """zstest.guestkernel's pure parts: the values lib.sh computed in bash."""

    def test_honest_hint_ranges_match_the_bash_helper(self):
        # tests/kernel/lib.sh's honest_hint_ranges 2048 and 4096 printed these.
        self.assertEqual(guestkernel.honest_hint_ranges(2048), "16777216:117440512,134221824:1946152960")
        self.assertEqual(guestkernel.honest_hint_ranges(4096),
                         "16777216:117440512,134221824:3019894784,4294967296:1073741824")

    def test_kv_reads_the_last_line_with_the_prefix(self):
        lines = ["ZSDEBUGFS pages_skipped=1", "[ 1.0] ZSDEBUGFS pages_skipped=9", "ZSPROBE a=1 b=2",
                 "ZSDEBUGFS pages_skipped=3 x=y", "ZSPROBEX a=7"]
        self.assertEqual(guestkernel.kv(lines, "ZSDEBUGFS", "pages_skipped"), "3")
        self.assertEqual(guestkernel.kv(lines, "ZSPROBE", "a"), "1")
        self.assertIsNone(guestkernel.kv(lines, "ZSPROBE", "c"))
        self.assertEqual((guestkernel.int_or("12", 0), guestkernel.int_or(None, 7), guestkernel.int_or("x", 9)),
                         (12, 7, 9))


    def test_a_kernel_message_inside_a_probe_line_is_taken_out(self):
        # test-kernel's hugedirty case in CI18 read found=16[ from this log
        # and failed its negative control although 16 of 16 were found.
        log = ["ZSBOOT pages_skipped=60095",
               "ZSPROBE hugetlb_planted=16 hugetlb_planted_found=16[    4.667137] zsprobe (55) used greatest "
               "stack depth: 13576 bytes left",
               "",
               "[    5.000001] zerostart: x",
               "ZSPROBE a=1[    6.100000] split",
               " b=2"]
        self.assertEqual(guestkernel.kv(log, "ZSPROBE", "hugetlb_planted_found"), "16[")  # the failure, raw
        lines = guestkernel.untangle(log)
        self.assertEqual(guestkernel.kv(lines, "ZSPROBE", "hugetlb_planted_found"), "16")
        self.assertEqual(lines, ["ZSBOOT pages_skipped=60095",
                                 "[    4.667137] zsprobe (55) used greatest stack depth: 13576 bytes left",
                                 "ZSPROBE hugetlb_planted=16 hugetlb_planted_found=16",
                                 "[    5.000001] zerostart: x",
                                 "[    6.100000] split",
                                 "ZSPROBE a=1 b=2"])
        # Nothing else moves: a line that begins with a message, has none, or
        # is not one of the test programs' (the firmware's text before Linux).
        plain = ["[    1.000000] a [    2.000000] b", "ZSINIT uptime_s=3.13", "x [1.0] y",
                 "Booting from ROM..\x1bc[    0.000000] Linux version 6.12", "[    0.000000] Command line: x"]
        self.assertEqual(guestkernel.untangle(plain), plain)

    def test_the_console_untangles_a_kernel_message_inside_a_harness_line(self):
        # CI on 7c9f985: L2's printk landed inside the launcher timeline's
        # JSON ("...\"name\": \"mult[  162.529693] hrtimer: interrupt took
        # 12243080 ns" then "i_user_reached\" ...") and launch.py failed the
        # scenario with "launcher timeline unparsable". The Console hands
        # the parser the line as printed, and the message on its own line.
        tl = '{"phases": [{"name": "multi_user_reached"}]}'
        raw = [b"ZSL-BEGIN name=x t0_ms=1\n",
               b'ZSL-TIMELINE name=x {"phases": [{"name": "mult[  162.529693] hrtimer: interrupt took 12243080 ns\r\n',
               b'i_user_reached"}]}\n',
               b"L3| 285140 [    0.269186] Code: 89 ff\n",
               b"VMM| zerostart: exit=0[    9.000001] x\n", b" y\n",
               b"ZSL-END name=x rc=0 wall_ms=9[    9.500000] tail\n"]
        proc = type("P", (), {"stdout": io.BytesIO(b"".join(raw))})()
        with tempfile.TemporaryDirectory() as d:
            con = qemu.Console(proc, Path(d) / "console.log", echo=False)
            got = []
            while (line := con.next(time.monotonic() + 5)) is not None:
                got.append(line)
        self.assertEqual(got, ["ZSL-BEGIN name=x t0_ms=1",
                               "[  162.529693] hrtimer: interrupt took 12243080 ns",
                               f"ZSL-TIMELINE name=x {tl}",
                               "L3| 285140 [    0.269186] Code: 89 ff",
                               "[    9.000001] x",
                               "VMM| zerostart: exit=0 y",
                               "[    9.500000] tail",
                               "ZSL-END name=x rc=0 wall_ms=9"])
        self.assertEqual(json.loads(got[2].split(" ", 2)[2]), json.loads(tl))

    def test_a_bed_fault_retry_prints_the_one_retry_line(self):
        # make test counts retries from these lines (tests/lib/make_test.py).
        sc = lambda n: type("Sc", (), {"name": n})()  # noqa: E731
        res = lambda s, rc: type("R", (), {"sc": s, "rc": rc})()  # noqa: E731
        a, b = sc("a"), sc("b")
        runs = iter([([res(a, 0), res(b, None)], "L2 exited during b", "qemu: fatal: boom\n  at x"),
                      ([res(b, 0)], None, None)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            got, fatal = qemu.rerun_after_bed_faults([a, b], lambda todo: next(runs), [], 1, lambda r: False, "e2e")
        self.assertIsNone(fatal)
        self.assertEqual(len(got), 2)
        self.assertIn("RETRY e2e/b: qemu: fatal: boom at x\n", out.getvalue())
        # A crashed guest: no retry, no line.
        runs = iter([([res(a, 0), res(b, None)], "L2 exited during b", "qemu: fatal: boom")])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            qemu.rerun_after_bed_faults([a, b], lambda todo: next(runs), [], 1, lambda r: True, "e2e")
        self.assertNotIn("RETRY", out.getvalue())

    def test_a_verify_catch_inside_a_kernel_fault_is_no_crash(self):
        # Captured from CI (2026-12-02, microvm-zerostart-dirty, the
        # patched 6.12 guest that went on to pass and power off): verify
        # caught a planted byte in a page allocated by a page fault that
        # copy_to_user took (read() of a block device), so its WARN report
        # also printed the interrupted frame, `RIP: 0010:rep_movs_alternative`.
        cap = (Path(__file__).parent / "captured" / "verify-warn-in-kernel-fault.log").read_text().splitlines()
        self.assertTrue(any("RIP: 0010:rep_movs_alternative" in ln for ln in cap))
        self.assertTrue(any(qemu.L3_KERNEL_BUG_RE.search(ln) for ln in cap), "the line-by-line judge flags it")
        self.assertEqual(qemu.kernel_bug_lines(cap), [])
        # Negative controls on the same capture. The same report under a
        # WARNING that is not verify's: every line of it counts.
        other = [ln.replace("zerostart_verify_pages+", "free_pages_prepare+") for ln in cap]
        bugs = qemu.kernel_bug_lines(other)
        self.assertTrue(any("WARNING: CPU: 0 PID: 124" in ln for ln in bugs), bugs)
        self.assertTrue(any("RIP: 0010:rep_movs_alternative" in ln for ln in bugs), bugs)
        # The kernel frame's RIP after verify's report ended: a crash line.
        end = next(i for i, ln in enumerate(cap) if qemu.END_TRACE_RE.search(ln))
        rip = next(ln for ln in cap if "RIP: 0010:rep_movs_alternative" in ln)
        self.assertEqual(qemu.kernel_bug_lines(cap[:end + 1] + [rip]), [rip])
        # Any other report inside verify's still counts.
        oops = "[   14.6] Oops: general protection fault, probably for non-canonical address"
        self.assertEqual(qemu.kernel_bug_lines(cap[:end] + [oops] + cap[end:]), [oops])

    def test_the_bug_line_judge_sees_every_kind_and_no_program_line(self):
        # Each kind of kernel report the harnesses fail a guest for.
        for bad in ("BUG: Bad page state in process zsinit  pfn:12345", "Oops: int3: 0000 [#1] SMP NOPTI",
                    "WARNING: CPU: 0 PID: 1 at mm/page_alloc.c:1203 free_pages_prepare+0x1f0/0x6c0",
                    "RIP: 0010:clear_page_erms+0x7/0x10", "Kernel panic - not syncing: Fatal exception",
                    "watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [zsinit:1]",
                    "NMI watchdog: Watchdog detected hard LOCKUP on cpu 1",
                    "BUG: KFENCE: out-of-bounds read in x", "BUG: KASAN: use-after-free in y",
                    "general protection fault, probably for non-canonical address", "double fault: 0000 [#1]"):
            self.assertTrue(qemu.L3_KERNEL_BUG_RE.search(f"[    2.100000] {bad}"), bad)
        # Any other WARN in zerostart's code is a bug line.
        self.assertTrue(qemu.L3_KERNEL_BUG_RE.search(
            "WARNING: CPU: 0 PID: 1 at mm/zerostart_pristine.c:419 zerostart_pristine_init+0x9d/0x110"))
        self.assertTrue(qemu.L3_KERNEL_BUG_RE.search("RIP: 0010:zerostart_pristine_init+0x9d/0x110"))
        # 7.3's form of the WARNING line (file first), as make test-kernel's consoles show it.
        self.assertTrue(qemu.L3_KERNEL_BUG_RE.search(
            "[    0.07] WARNING: ../src/linux-7.3.4-1~bpo13+1/mm/page_alloc.c:1203 at free_pages_prepare+0x1f0/0x6c0, "
            "CPU#0: swapper/0"))
        self.assertIsNone(qemu.L3_KERNEL_BUG_RE.search(
            "[    0.076592] WARNING: ../src/linux-7.3.4-1~bpo13+1/mm/zerostart_pristine.c:239 at "
            "zerostart_verify_pages+0x33/0x140, CPU#0: swapper/0"))
        # lockdep's and RCU's reports, which have no WARN line of the form above.
        for report in ("WARNING: possible circular locking dependency detected",
                       "WARNING: suspicious RCU usage", "WARNING: inconsistent lock state",
                       "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected"):
            self.assertTrue(qemu.L3_KERNEL_BUG_RE.search(f"[   12.345678] {report}"), report)
            self.assertTrue(qemu.L3_KERNEL_BUG_RE.search(f"L3| 259500 [   26.015218] {report}"), report)
            self.assertIsNone(qemu.L3_KERNEL_BUG_RE.search(report), f"a program's line: {report}")
        # Not a report: the SRSO mitigation line every nested L3 boot prints here (CI on 7c9f985).
        self.assertIsNone(qemu.L3_KERNEL_BUG_RE.search(
            "L3| 17150 [    0.592059] Speculative Return Stack Overflow: WARNING: See "
            "https://kernel.org/doc/html/latest/admin-guide/hw-vuln/srso.html for mitigation options."))
        for ok in ("ZSINIT: PASS hint=valid nonzero_bytes=0", "WARNING: no 1G page here, skipping",
                   # verify catching a page: its count judges it, not this line
                   "[    3.1] WARNING: CPU: 1 PID: 77 at mm/zerostart_pristine.c:188 zerostart_verify_pages+0x9d/0x110",
                   "[    3.1] RIP: 0010:zerostart_verify_pages+0x9d/0x110",
                   # the user task under verify's WARN (fw-dirty-patched-1g's console)
                   "[    8.540680] RIP: 0033:0x445943",
                   "WARNING: CPU: 0 PID: 0 at mm/zerostart_memmap.c:160 zerostart_memmap_take_range+0x5e/0x90",
                   "RIP=ffffffffb8018710 RFL=00000246", "[    0.000000] Linux version 6.12.0"):
            self.assertIsNone(qemu.L3_KERNEL_BUG_RE.search(ok), ok)

    def test_last_words_name_the_crash_and_nothing_of_a_clean_boot(self):
        # Stop 29's CI printed "init did not finish" for a 7.3 boot that
        # reset, and nothing of why: the failure line now carries this.
        log = ["[    5.584658] Run /init as init process",
               "[    6.000001] BUG: unable to handle page fault for address: ffff888000000000",
               "[    6.000002] #PF: supervisor read access in kernel mode",
               "[    6.000010] RIP: 0010:zerostart_pristine_scan+0x40/0x120",
               "[    6.000020] Kernel panic - not syncing: Fatal exception",
               "[    6.000030] Kernel Offset: 0x1000000 from 0xffffffff81000000"]
        self.assertEqual(guestkernel.last_words(log),
                         "BUG: unable to handle page fault for address: ffff888000000000 | "
                         "RIP: 0010:zerostart_pristine_scan+0x40/0x120 | Kernel panic - not syncing: Fatal exception")
        self.assertEqual(guestkernel.last_words(["[    5.584658] Run /init as init process", "ZSDONE"]), "")


class HugePagesPort(unittest.TestCase):
    """zstest.hugepages on a fake sysfs: the bash helper's rules."""

    def pool(self, d, nr, free, resv=0):
        p = Path(d) / "hugepages-2048kB"
        p.mkdir(parents=True, exist_ok=True)
        for f, v in (("nr_hugepages", nr), ("free_hugepages", free), ("resv_hugepages", resv)):
            (p / f).write_text(f"{v}\n")
        return p

    def test_missing_size_enough_free_and_restore(self):
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            hp = hugepages.HugePages("t", Path(d), log)
            self.assertFalse(hp.reserve(1048576, 1))
            self.assertIn("t: this kernel has no 1048576kB hugepages", log.getvalue())
            p = self.pool(d, 16, 16, resv=4)
            self.assertEqual(hp.free(2048), 12)
            self.assertTrue(hp.reserve(2048, 12))  # already free: the pool is not touched
            self.assertEqual((p / "nr_hugepages").read_text(), "16\n")
            hp.restore()
            self.assertEqual((p / "nr_hugepages").read_text(), "16\n")

    def test_a_kernel_that_finds_too_few_pages(self):
        # free_hugepages does not follow the write: the kernel found no
        # memory. What was written is recorded and given back all the same.
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            p = self.pool(d, 4, 1)
            hp = hugepages.HugePages("t", Path(d), log)
            self.assertFalse(hp.reserve(2048, 10))
            self.assertEqual((p / "nr_hugepages").read_text(), "13\n")
            self.assertIn("could only get 1 of 10 free 2048kB hugepages (pool 4 -> 13)", log.getvalue())
            (p / "nr_hugepages").write_text("14\n")  # another process added one meanwhile: kept
            hp.restore()
            hp.restore()  # idempotent
            self.assertEqual((p / "nr_hugepages").read_text(), "5\n")
            self.assertEqual(log.getvalue().count("restored to 5"), 1)

    def test_a_kernel_that_grants_the_pages(self):
        class Kernel(hugepages.HugePages):
            def free(self, kb):  # every page above the 4 in use is free
                return self._read(kb, "nr_hugepages") - 4

        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            p = self.pool(d, 6, 2)
            hp = Kernel("t", Path(d), log)
            self.assertTrue(hp.reserve(2048, 10))
            self.assertTrue(hp.reserve(2048, 12))  # repeated reserves add up
            self.assertEqual(hp.added, {2048: 10})
            self.assertIn("t: 2048kB hugepage pool 6 -> 14 for 10 free pages", log.getvalue())
            hp.restore()
            self.assertEqual((p / "nr_hugepages").read_text(), "6\n")

    def test_not_writable_says_the_fix(self):
        with tempfile.TemporaryDirectory() as d:
            log = io.StringIO()
            p = self.pool(d, 0, 0)
            # Root may write a 0444 file, so the permission check is what is faked.
            with unittest.mock.patch.object(hugepages.os, "access", return_value=False):
                self.assertFalse(hugepages.HugePages("t", Path(d), log).reserve(2048, 3))
            self.assertEqual((p / "nr_hugepages").read_text(), "0\n")
            self.assertIn("is not writable (run as root, or: echo 3 | sudo tee", log.getvalue())


class HugePagesCli(unittest.TestCase):
    """python3 -m zstest.hugepages: the scripts' way to hold pages around a command."""

    def test_status_env_and_bad_usage(self):
        if not (hugepages.SYSFS / "hugepages-2048kB").exists():
            self.skipTest("no 2M hugepages on this kernel")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            # 0 pages are always free: nothing is written, the command runs.
            self.assertEqual(hugepages.main(["2048:0", "--", "sh", "-c", 'test "$ZS_HUGEPAGES" = ok && exit 5']), 5)
            self.assertEqual(hugepages.main(["2048", "--", "true"]), 2)
            self.assertEqual(hugepages.main(["2048:1"]), 2)
        self.assertIn("'2048' is not KB:PAGES; write e.g. 2048:192", err.getvalue())


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


class HintReference(unittest.TestCase):
    """zstest.hint, the one Python reference, against the golden vectors
    (tests/vectors, generated by the Rust zerohint crate): the firmware and
    kernel tests hand QEMU what its encoder writes, so it must be
    byte-identical to the contract, and its validator must agree with every
    verdict."""

    VECTORS = Path(__file__).resolve().parent.parent / "vectors"

    def test_every_ok_vector_is_encoded_byte_for_byte(self):
        vectors = json.loads((self.VECTORS / "vectors.json").read_text())
        ok = [v for v in vectors if v["expect"] == "ok"]
        self.assertGreaterEqual(len(ok), 10, "tests/vectors lost its ok vectors")
        for v in ok:
            with self.subTest(vector=v["name"]):
                scrub = bool(v["flags"] & hint.FLAG_SCRUB_REQUEST)
                self.assertEqual(v["flags"] & ~hint.FLAG_SCRUB_REQUEST, 0)
                want_eflags = 0 if scrub else hint.ENTRY_ZEROED
                self.assertEqual([e[2] for e in v["entries"]], [want_eflags] * len(v["entries"]))
                got = hint.encode([(s, n, shift) for s, n, _, shift in v["entries"]], scrub)
                data = (self.VECTORS / v["file"]).read_bytes()
                if v["exact"]:
                    self.assertEqual(got, data)
                else:  # a hint followed by bytes that are not part of it
                    self.assertGreater(len(data), len(got))
                    self.assertEqual(got, data[:len(got)])

    def test_setup_data_node_carries_the_exact_length(self):
        one = (self.VECTORS / "ok_one.bin").read_bytes()
        node = hint.setup_data(one, next_addr=0x9000)
        self.assertEqual(node[:16], struct.pack("<QII", 0x9000, 0x5A480001, len(one)))
        self.assertEqual(node[16:], one)

    def test_natural_shift_is_2m_only_when_aligned(self):
        self.assertEqual(hint.natural_shift(2 << 20, 4 << 20), 21)
        self.assertEqual(hint.natural_shift(1 << 20, 2 << 20), 12)
        self.assertEqual(hint.natural_shift(2 << 20, (2 << 20) + 4096), 12)

    def test_every_vector_is_judged_as_vectors_json_says(self):
        # The reference validator is the one check_vectors.py runs; here it
        # is also held to each vector's verdict directly, and a vector whose
        # verdict is changed must be caught (the check can fail).
        vectors = json.loads((self.VECTORS / "vectors.json").read_text())
        for v in vectors:
            with self.subTest(vector=v["name"]):
                got = hint.validate((self.VECTORS / v["file"]).read_bytes(), v["exact"], v.get("ram"))
                self.assertEqual(got[:2], (v["expect"], v.get("index")))
        ok = next(v for v in vectors if v["expect"] == "ok" and v["entries"])
        data = bytearray((self.VECTORS / ok["file"]).read_bytes())
        data[hint.HEADER.size] ^= 1  # one bit of the first entry's start
        self.assertEqual(hint.validate(bytes(data), ok["exact"], None)[0], "BadChecksum")

    def test_encode_ranges_round_trips_and_its_corrupt_form_is_refused(self):
        ranges = [(16 << 20, 112 << 20), (128 << 20, (1 << 30) - (128 << 20))]
        got = hint.validate(hint.encode_ranges(ranges), True, None)
        self.assertEqual(got[0], "ok")
        self.assertEqual([(s, n, f, sh) for s, n, f, sh in got[3]],
                         [(16 << 20, 112 << 20, hint.ENTRY_ZEROED, 21),
                          (128 << 20, (1 << 30) - (128 << 20), hint.ENTRY_ZEROED, 21)])
        self.assertEqual(hint.validate(hint.encode_ranges(ranges, corrupt=True), True, None)[0], "BadChecksum")
        self.assertEqual(hint.validate(hint.encode_ranges(ranges, scrub=True), True, None)[0], "ok")

    def test_c_header_check_catches_a_wrong_verdict_or_byte(self):
        # check_vectors.py --c-text holds zshint_text_vectors.h (as
        # check_c_header writes it) to the reference: a dump made from the
        # reference passes, one wrong byte or index fails.
        sys.path.insert(0, str(self.VECTORS))
        try:
            import check_vectors
        finally:
            sys.path.remove(str(self.VECTORS))
        dump = []
        for v in json.loads((self.VECTORS / "text.json").read_text()):
            te, ti, data, ex, ei = check_vectors.text_verdict(v["transport"], v["input"])
            inputs = [v["input"]] if v["transport"] == "cmdline" else v["input"]
            dump.append({"name": v["name"], "transport": v["transport"],
                         "input": [x.encode().hex() for x in inputs], "text_expect": te,
                         "text_index": ti, "data": data.hex(), "expect": "Ok" if ex == "ok" else ex,
                         "index": ei})
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "dump.json"
            f.write_text(json.dumps(dump))
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(check_vectors.check_c_text(str(self.VECTORS), str(f)), 0)
            with_data = next(x for x in dump if x["data"])
            with_data["data"] = with_data["data"][:-2] + ("01" if with_data["data"][-2:] == "00" else "00")
            bad_char = next(x for x in dump if x["text_expect"] == "TextBadChar")
            bad_char["text_index"] += 1
            f.write_text(json.dumps(dump))
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(check_vectors.check_c_text(str(self.VECTORS), str(f)), 2)
            self.assertIn("decoded bytes differ", err.getvalue())

    def test_text_form_decodes_back_to_the_hint(self):
        blob = hint.encode_ranges([(1 << 30, 1 << 30)])
        found, text = hint.find_text("cmdline", f"console=ttyS0 {hint.TEXT_PARAM}={hint.text(blob)} quiet")
        self.assertEqual(found, "ok")
        self.assertEqual(hint.decode_text(text), ("ok", None, blob))
        self.assertEqual(hint.find_text("smbios", ["vendor=x"]), ("Absent", None))


if __name__ == "__main__":
    unittest.main()
