#!/usr/bin/env python3
"""Unit tests of the e2e harness's judging and console driving (no QEMU).

Why: the harness decides pass/fail for every end-to-end claim; a parser
that silently accepts a missing verdict or a non-zero byte would turn the
whole suite into a test that cannot fail. These feed it synthetic L2
consoles. Run: python3 tests/nested-host/test_run.py
"""

import contextlib
import dataclasses
import io
import subprocess
import tempfile
import time
import types
import unittest
from unittest import mock
from pathlib import Path

import run
from zstest import qemu
from zstest import vmmargv
from zstest.test_vmmargv import SH, ZS, busybox_argv
from zstest.fakes import FakeConsole

run.print = lambda *a, **k: None  # the harness's progress lines are noise here

PASS_LINE = ("ZSINIT: PASS hint=valid ranges=3 hinted_bytes=4234989568 zero_checked_bytes=335544320 "
             "nonzero_bytes=0 hinted_checked_bytes=335544320 populate_ms=401 uptime_ms=9000 "
             "kernel_pages_skipped=-1 kernel_bytes_verified=-1 kernel_verify_failures=-1 kernel=6.12")
TIMELINE = ('{"phases":[{"name":"process_start","t_ms":0.0},{"name":"memory_ready","t_ms":3400.0},'
            '{"name":"first_kvm_run","t_ms":3600.0},{"name":"init_started","t_ms":8800.0},'
            '{"name":"test_done","t_ms":9400.0},{"name":"exit","t_ms":9500.0}],"memory_bytes":4294967296,'
            '"vcpus":1,"prezero":{"mode":"auto","backend":"avx2-nt","method":"engine","backing":"memfd-hugetlb-2M",'
            '"bytes":4294967296,"ms":1200.5,"gib_per_s":3.3,"threads":2,"hint_ranges":3,"hint_bytes":4234989568,'
            '"verified_bytes":0},"exit":{"reason":"i8042 reset","kind":"reset","code":0},"guest_phases":[]}')


def sc(name="s", **kw):
    base = dict(vmm="zerostart", kernel="debian-6.12", mem_mib=4096, prezero="auto", expect_hint="valid")
    base.update(kw)
    return run.Scenario(name, **base)


def console_for(name, verdict=PASS_LINE, timeline=TIMELINE, rc=0, extra=()):
    lines = ["ZSE2E-L2 kvm ready nested=1", f"ZSE2E-BEGIN name={name} vmm=zerostart"]
    lines += list(extra)
    if verdict:
        lines.append("L3| " + verdict)
    if timeline:
        lines.append(f"ZSE2E-TIMELINE name={name} {timeline}")
    lines += [f"ZSE2E-END name={name} rc={rc} wall_ms=9600", "ZSE2E-DONE rc=0"]
    return lines


class Judge(unittest.TestCase):
    def drive(self, scenario, lines, eof=True):
        return run._drive(FakeConsole(lines, eof), [scenario])

    def test_clean_run_passes_and_reports_schema(self):
        res, fatal = self.drive(sc(), console_for("s"))
        self.assertIsNone(fatal)
        self.assertEqual(res[0].failures, [])
        e = run.report_entry(res[0])
        for k in ("name", "passed", "guest_mem_bytes", "hint_seen", "zero_checked_bytes", "nonzero_bytes", "timeline"):
            self.assertIn(k, e)
        self.assertTrue(e["passed"] and e["hint_seen"])
        self.assertEqual(e["guest_mem_bytes"], 4 << 30)
        self.assertEqual(e["timeline"][-1], {"name": "exit", "t_ms": 9500.0})

    def test_check_pct_share_of_memavailable_is_asserted(self):
        # The README's "85 % of each guest's free memory": zsinit reports
        # MemAvailable, the judge requires check_pct of it read back (320 MiB
        # checked in PASS_LINE).
        args = "hugepages=528 zsinit.check_pct=85 zsinit.populate_mib=1056"
        enough = PASS_LINE.replace("kernel=6.12", "mem_available_kib=385024 kernel=6.12")  # wants 319 MiB
        res, _ = self.drive(sc(guest_args=args), console_for("s", verdict=enough))
        self.assertEqual(res[0].failures, [])
        short = PASS_LINE.replace("kernel=6.12", "mem_available_kib=393216 kernel=6.12")  # wants 326 MiB
        res, _ = self.drive(sc(guest_args=args), console_for("s", verdict=short))
        self.assertIn("less than zsinit.check_pct=85 % of its MemAvailable (326 of 384 MiB)", " ".join(res[0].failures))
        # A guest that does not say how much was available cannot pass a check_pct row ...
        res, _ = self.drive(sc(guest_args=args), console_for("s"))
        self.assertTrue(any("mem_available_kib" in f for f in res[0].failures), res[0].failures)
        # ... and a fixed-size row (zsinit.check_mib) is not held to it.
        res, _ = self.drive(sc(guest_args="zsinit.check_mib=64"), console_for("s", verdict=short))
        self.assertEqual(res[0].failures, [])

    def test_nonzero_bytes_fail(self):
        bad = PASS_LINE.replace("PASS", "FAIL").replace("nonzero_bytes=0", "nonzero_bytes=1")
        res, _ = self.drive(sc(), console_for("s", verdict=bad))
        self.assertTrue(any("non-zero" in f for f in res[0].failures))

    def test_missing_verdict_fails(self):
        res, _ = self.drive(sc(), console_for("s", verdict=None))
        self.assertIn("no ZSINIT verdict line from the L3 guest", res[0].failures)

    def test_missing_phase_fails(self):
        tl = TIMELINE.replace('{"name":"test_done","t_ms":9400.0},', "")
        res, _ = self.drive(sc(), console_for("s", timeline=tl))
        self.assertTrue(any("test_done" in f for f in res[0].failures))

    def test_timeline_schema_is_checked(self):
        # Negative control of the schema: a renamed key and phases out of order fail by name.
        res, _ = self.drive(sc(), console_for("s", timeline=TIMELINE.replace('"vcpus"', '"cpus"')))
        self.assertTrue(any("timeline JSON: vcpus missing" in f for f in res[0].failures), res[0].failures)
        res, _ = self.drive(sc(), console_for("s", timeline=TIMELINE.replace('"t_ms":3600.0', '"t_ms":3000.0')))
        self.assertTrue(any("not in order" in f for f in res[0].failures), res[0].failures)

    def test_hint_expectations(self):
        res, _ = self.drive(sc(expect_hint="absent"), console_for("s"))
        self.assertTrue(any("expected no hint" in f for f in res[0].failures))
        absent = PASS_LINE.replace("hint=valid ranges=3", "hint=absent ranges=0")
        res, _ = self.drive(sc(), console_for("s", verdict=absent))
        self.assertTrue(any("expected a valid" in f for f in res[0].failures))

    def test_corrupt_hint_must_be_rejected_for_that_reason_only(self):
        want = "invalid(BadChecksum)"
        rej = PASS_LINE.replace("PASS hint=valid", f"FAIL hint={want}") + " reason=hint rejected: BadChecksum (entry 0)"
        res, _ = self.drive(sc(expect_hint=want), console_for("s", verdict=rej))
        self.assertEqual(res[0].failures, [])
        res, _ = self.drive(sc(expect_hint=want), console_for("s"))
        self.assertTrue(any("expected hint=invalid" in f for f in res[0].failures))

    def test_planted_byte_must_be_found(self):
        res, _ = self.drive(sc(expect_nonzero=True), console_for("s"))
        self.assertTrue(any("leak went unnoticed" in f for f in res[0].failures))
        found = PASS_LINE.replace("PASS", "FAIL").replace("nonzero_bytes=0", "nonzero_bytes=1")
        res, _ = self.drive(sc(expect_nonzero=True), console_for("s", verdict=found))
        self.assertEqual(res[0].failures, [])

    def test_patched_kernel_must_skip(self):
        line = PASS_LINE.replace("kernel_pages_skipped=-1", "kernel_pages_skipped=0")
        res, _ = self.drive(sc(kernel="patched"), console_for("s", verdict=line))
        self.assertTrue(any("skipped no clears" in f for f in res[0].failures))

    def test_skips_without_hint_fail(self):
        line = PASS_LINE.replace("hint=valid ranges=3", "hint=absent ranges=0").replace(
            "kernel_pages_skipped=-1", "kernel_pages_skipped=7")
        res, _ = self.drive(sc(kernel="patched", expect_hint="absent"), console_for("s", verdict=line))
        self.assertTrue(any("without a valid hint" in f for f in res[0].failures))

    def test_rebooting_guest_fails(self):
        res, _ = self.drive(sc(), console_for("s", extra=["L3| ZSINIT: START kernel=x", "L3| ZSINIT: START kernel=x"]))
        self.assertTrue(any("booted 2 times" in f for f in res[0].failures))

    def test_guest_kernel_bug_lines_fail_a_passing_verdict(self):
        # A crash or a bad page inside the guest is the kernel under test failing: never retried.
        for bad in ("BUG: Bad page state in process zsinit  pfn:12345", "BUG: unable to handle page fault",
                    "Oops: general protection fault, probably for non-canonical address",
                    "Kernel panic - not syncing: Fatal exception"):
            res, _ = self.drive(sc(), console_for("s", extra=["L3| [    1.2] " + bad]))
            self.assertTrue(any("bug line" in f for f in res[0].failures), (bad, res[0].failures))

    def test_valid_hint_needs_hinted_memory_checked(self):
        line = PASS_LINE.replace("hinted_checked_bytes=335544320", "hinted_checked_bytes=0")
        res, _ = self.drive(sc(), console_for("s", verdict=line))
        self.assertTrue(any("hinted_checked_bytes=0" in f for f in res[0].failures), res[0].failures)
        res, _ = self.drive(sc(expect_hint="absent"), console_for("s", verdict=line.replace("hint=valid ranges=3",
                                                                                             "hint=absent ranges=0")))
        self.assertEqual(res[0].failures, [])

    def test_l2_abort_is_recognised_only_with_qemu_s_own_line_and_status(self):
        lines = ["L3| ok", "qemu: fatal: Trying to execute code outside RAM or ROM at 0x0000000000000000"]
        self.assertEqual(qemu.l2_abort(lines, -6), lines[1])
        self.assertIsNone(qemu.l2_abort(lines, 0))
        self.assertIsNone(qemu.l2_abort(["L3| Kernel panic - not syncing"], 1))
        self.assertTrue(qemu.l2_abort(["qemu-system-x86_64: ../accel/tcg/cpu-exec.c:1000: cpu_exec: "
                                      "Assertion `x' failed."], -6))

    def test_l2_abort_retries_the_unfinished_scenarios_and_records_it(self):
        calls = []

        def fake_run_l2(scs, manifest, echo, smp, attempt=0):
            calls.append([s.name for s in scs])
            if attempt == 0:
                r = run.Result(scs[0])
                r.rc = 0
                return [r], "L2 exited during scenario b", "qemu: fatal: boom"
            return [run.Result(s) for s in scs], None, None
        old = run._run_l2
        run._run_l2 = fake_run_l2
        try:
            retries = []
            with contextlib.redirect_stdout(io.StringIO()):
                res, fatal = run.run_nested([sc("a"), sc("b")], {}, False, 2, retries)
        finally:
            run._run_l2 = old
        self.assertIsNone(fatal)
        self.assertEqual(calls, [["a", "b"], ["b"]])
        self.assertEqual([r.sc.name for r in res], ["a", "b"])
        self.assertEqual(len(retries), 1)
        self.assertIn("qemu: fatal: boom", retries[0])
        self.assertIn("1 L2 retries", run.counts_line(res, [sc("a"), sc("b")], [], retries))

    def test_bed_fault_is_only_the_test_beds_own_failure(self):
        self.assertEqual(qemu.bed_fault(None, "qemu: fatal: boom"), "qemu: fatal: boom")
        lost = "nested host silent, its QEMU running; cpu0 HLT=1 IF=1 IRR=236; UNDELIVERED INTERRUPT cpu0"
        self.assertEqual(qemu.bed_fault(lost, None), lost)
        # Silent with every CPU able to take what it holds: maybe the guest; not retried.
        self.assertIsNone(qemu.bed_fault("nested host silent, its QEMU running; cpu0 HLT=0 IF=0 IRR=-", None))
        self.assertIsNone(qemu.bed_fault(None, None))
        # L2's own CPU shut down (a guest's triple fault is KVM's #VMEXIT).
        t = "L2 triple fault: exception 0xe (error code 0x8) at RIP=ffffffffc05f1dcc"
        self.assertEqual(qemu.bed_fault(None, None, t), t)

    def test_a_nested_host_stuck_between_guests_is_the_beds_fault(self):
        # The real line of `make demo` on 2026-12-03: L2 stuck after
        # scenario stock-1g ended and before the next began (CPU 1 in its
        # int3 handler with IPIs pending, CPU 0 waiting for it).
        cap = (Path(__file__).parent.parent / "zstest" / "captured" / "l2-stuck-between-guests.txt")
        silent = cap.read_text().strip()
        idle = qemu.stuck_between_guests(silent, guest_in_flight=False)
        self.assertIsNotNone(idle)
        self.assertEqual(qemu.bed_fault(silent, None, guest_in_flight=False), idle)
        # The same state with a guest in flight: it may be the guest's; not retried.
        self.assertIsNone(qemu.stuck_between_guests(silent, guest_in_flight=True))
        self.assertIsNone(qemu.bed_fault(silent, None, guest_in_flight=True))
        self.assertIsNone(qemu.bed_fault(silent, None))  # a harness that cannot tell: in flight
        # A CPU sampled once, or without its APIC dump, is no proof.
        once = silent.replace("RIP=ffffffffafe04ffe 2 s later ", "")
        self.assertIsNone(qemu.stuck_between_guests(once, guest_in_flight=False))
        no_apic = silent.replace("IRR=236,251 ", "")
        self.assertIsNone(qemu.stuck_between_guests(no_apic, guest_in_flight=False))
        self.assertIsNone(qemu.stuck_between_guests(None, guest_in_flight=False))
        self.assertIsNone(qemu.stuck_between_guests("nested host silent, its QEMU running; empty snapshot",
                                                    guest_in_flight=False))

    def test_a_stuck_host_between_guests_reruns_only_what_had_not_begun(self):
        # launch._boot_once's reading of _drive's results: a scenario it was
        # in has no rc. Ended ones keep their results; the rest boot again.
        cap = (Path(__file__).parent.parent / "zstest" / "captured" / "l2-stuck-between-guests.txt")
        silent = cap.read_text().strip()

        @dataclasses.dataclass
        class R:
            sc: object
            rc: int | None

        a, b, c = (types.SimpleNamespace(name=n) for n in "abc")
        calls = []

        def boot(todo):
            calls.append([s.name for s in todo])
            if len(calls) == 1:
                res = [R(a, 0)]  # a ended; L2 stuck before b began
                return res, "timeout", qemu.bed_fault(silent, None, guest_in_flight=any(r.rc is None for r in res))
            return [R(s, 0) for s in todo], None, None

        retries: list[str] = []
        # The real print, whatever another test module silenced it with.
        with contextlib.redirect_stdout(io.StringIO()) as out, \
                mock.patch.object(qemu, "print", print, create=True):
            res, fatal = qemu.rerun_after_bed_faults([a, b, c], boot, retries, 1, lambda r: False, "launch")
        self.assertIsNone(fatal)
        self.assertEqual(calls, [["a", "b", "c"], ["b", "c"]])
        self.assertEqual([r.sc.name for r in res], ["a", "b", "c"])
        self.assertEqual(len(retries), 1)
        self.assertIn("RETRY launch/b: nested host stuck between guests", out.getvalue())

        # The control: stuck with b in flight (no rc) is not retried.
        calls.clear()

        def boot_in_flight(todo):
            calls.append([s.name for s in todo])
            res = [R(a, 0), R(b, None)]
            return res, "timeout", qemu.bed_fault(silent, None, guest_in_flight=any(r.rc is None for r in res))

        retries = []
        with contextlib.redirect_stdout(io.StringIO()):
            res, fatal = qemu.rerun_after_bed_faults([a, b, c], boot_in_flight, retries, 1, lambda r: False,
                                                     "launch")
        self.assertEqual(fatal, "timeout")
        self.assertEqual(calls, [["a", "b", "c"]])
        self.assertEqual(retries, [])

    def test_l2_triple_fault_only_for_a_zero_exit_that_logged_one(self):
        # The log bed-qemu/patches/0002 wrote in the real run (2026-11-27).
        dump = ("CPU Reset (CPU 0)\nTriple fault\n"
                "Triple fault: exception 0xe (error code 0x8) while delivering a double fault\n"
                "RIP=ffffffffc05f1dcc RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=0\n"
                "CR0=80050033 CR2=fffffe0000000080 CR3=0000000001142000 CR4=003506b0\n")
        with tempfile.TemporaryDirectory() as d:
            for text, code, want in ((dump, 0, "L2 triple fault: exception 0xe (error code 0x8) at "
                                                "RIP=ffffffffc05f1dcc CR2=fffffe0000000080 CR3=0000000001142000"),
                                     ("CPU Reset (CPU 0)\nqemu_system_shutdown_request\n", 0, None),
                                     (dump, 1, None)):
                end = Path(d) / "end.log"
                end.write_text(text)
                proc = subprocess.Popen(["sh", "-c", f"exit {code}"], stdout=subprocess.PIPE)
                con = qemu.Console(proc, Path(d) / "c.log", False, end_log=end)
                proc.wait()
                self.assertEqual(con.l2_triple_fault(), want, text)
                time.sleep(0.1)
                proc.stdout.close()
                con.log.close()

    def test_an_undelivered_interrupt_reruns_the_scenario_it_stopped(self):
        calls = []
        lost = "nested host silent, its QEMU running; cpu0 HLT=1 IF=1 IRR=236; UNDELIVERED INTERRUPT cpu0"

        def fake_run_l2(scs, manifest, echo, smp, attempt=0):
            calls.append([s.name for s in scs])
            if attempt == 0:
                a, b = run.Result(scs[0]), run.Result(scs[1])
                a.rc = 0
                b.failures.append("harness timeout")  # in progress: rc stays None
                return [a, b], f"timeout waiting for scenario b ({lost})", lost
            rs = [run.Result(s) for s in scs]
            for r in rs:
                r.rc = 0
            return rs, None, None
        retries = []
        with mock.patch.object(run, "_run_l2", fake_run_l2):
            with contextlib.redirect_stdout(io.StringIO()):
                res, fatal = run.run_nested([sc("a"), sc("b"), sc("c")], {}, False, 2, retries)
        self.assertIsNone(fatal)
        self.assertEqual(calls, [["a", "b", "c"], ["b", "c"]])
        self.assertEqual([(r.sc.name, r.failures) for r in res], [("a", []), ("b", []), ("c", [])])
        self.assertIn("UNDELIVERED INTERRUPT", retries[0])

    def test_a_bed_fault_after_a_guest_kernel_bug_is_not_retried(self):
        # Negative control for the test above: the same fault, but the
        # guest it stopped in had printed a kernel bug line: that is the
        # scenario failing, never something to boot again.
        lost = "nested host silent, its QEMU running; cpu0 HLT=1 IF=1 IRR=236; UNDELIVERED INTERRUPT cpu0"
        calls = []

        def fake_run_l2(scs, manifest, echo, smp, attempt=0):
            calls.append(attempt)
            b = run.Result(scs[0])
            b.l3_lines.append("[    9.1] BUG: Bad page state in process zsinit  pfn:1234")
            b.failures.append("harness timeout")
            return [b], "timeout waiting for scenario b", lost
        retries = []
        with mock.patch.object(run, "_run_l2", fake_run_l2):
            with contextlib.redirect_stdout(io.StringIO()):
                res, fatal = run.run_nested([sc("b")], {}, False, 2, retries)
        self.assertEqual((calls, retries), ([0], []))
        self.assertIn("timeout", fatal)
        self.assertEqual(res[0].failures, ["harness timeout"])

    def test_a_guest_crash_is_not_retried(self):
        calls = []

        def fake_run_l2(scs, manifest, echo, smp, attempt=0):
            calls.append(attempt)
            return [], "L2 exited during scenario a", None  # no QEMU abort line: not outside the guest
        old = run._run_l2
        run._run_l2 = fake_run_l2
        try:
            retries = []
            with contextlib.redirect_stdout(io.StringIO()):
                _, fatal = run.run_nested([sc("a")], {}, False, 2, retries)
        finally:
            run._run_l2 = old
        self.assertEqual(calls, [0])
        self.assertEqual(retries, [])
        self.assertIn("L2 exited", fatal)

    def test_patched_kernel_asked_for_but_missing_fails(self):
        old = run.os.environ.get("E2E_KERNEL")
        run.os.environ["E2E_KERNEL"] = "patched"
        try:
            with self.assertRaises(run.build.BuildError):
                run.l3_kernel_name({})
        finally:
            if old is None:
                run.os.environ.pop("E2E_KERNEL")
            else:
                run.os.environ["E2E_KERNEL"] = old
        self.assertEqual(run.l3_kernel_name({"patched": Path("/k")}), "patched")

    def test_counts_line(self):
        a, b = run.Result(sc("a")), run.Result(sc("b"))
        b.failures.append("x")
        line = run.counts_line([a, b], [sc("a"), sc("b"), sc("c")], ["d: needs the patched kernel"], [])
        self.assertEqual(line, "e2e: 1 passed, 2 failed, 1 skipped; 0 L2 retries after a test-bed fault outside every guest")

    def test_expected_exit_reason(self):
        want = "exit=halted: every vCPU stopped with interrupts off"
        res, _ = self.drive(sc(expect_exit=want), console_for("s", extra=["VMM| zerostart: exit=i8042 reset code=0"]))
        self.assertTrue(any("expected zerostart to end with" in f and "i8042 reset" in f for f in res[0].failures))
        res, _ = self.drive(sc(expect_exit=want), console_for("s", extra=[f"VMM| zerostart: {want} code=0"]))
        self.assertEqual(res[0].failures, [])

    def test_vmm_exit_code_fails(self):
        res, _ = self.drive(sc(), console_for("s", rc=1))
        self.assertIn("VMM exited 1", res[0].failures)

    def test_l2_fatal_and_eof(self):
        _, fatal = self.drive(sc(), ["ZSE2E-FATAL no /dev/kvm"])
        self.assertIn("no /dev/kvm", fatal)
        _, fatal = self.drive(sc(), ["ZSE2E-BEGIN name=s"])
        self.assertIn("L2 exited during scenario s", fatal)

    def test_hang_times_out(self):
        s = sc(timeout_s=0)
        old = (run.GRACE_S, run.L2_BOOT_TIMEOUT_S)
        run.GRACE_S, run.L2_BOOT_TIMEOUT_S = 0.3, 0.3
        try:
            res, fatal = self.drive(s, ["ZSE2E-BEGIN name=s"], eof=False)
        finally:
            run.GRACE_S, run.L2_BOOT_TIMEOUT_S = old
        self.assertIn("timeout waiting for scenario s", fatal)
        self.assertIn("harness timeout", res[0].failures)


class ScenarioLines(unittest.TestCase):
    """scenario.sh's list lines: the fields its ZSE2E-BEGIN/INFO lines print,
    then the VMM command built by `zerostart vmm-argv`."""

    def test_fields_before_the_command(self):
        s = run.e2e_scenarios("patched")[0]
        f = s.line("CMD").split("|")
        self.assertEqual(f[:7], [s.name, "zerostart", "patched", "4096", s.memory_opts(), "1", str(s.timeout_s)])
        self.assertEqual(f[7], f"console=ttyS0 panic=-1 oops=panic quiet loglevel=5 reboot=k {s.guest_args}")
        self.assertEqual(f[8], "CMD")
        self.assertIsNone(sc("x", vmm="bochs").spec())

    @unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
    def test_every_scenario_builds_and_l2_runs_that_argv(self):
        scs = run.e2e_scenarios("patched")
        cmds = run.commands(scs, ZS)
        for s in scs:
            argv = vmmargv.build(s.spec(), ZS).argv
            ser = f"/tmp/{s.name}.serial"
            if s.vmm == "zerostart":
                self.assertEqual(argv[:2], ["/zs/zerostart", "run"])
                self.assertEqual(argv[argv.index("--serial") + 1], f"file={ser}")
                self.assertEqual(argv[argv.index("--timeline") + 1], f"/tmp/{s.name}.timeline.json")
                self.assertEqual(argv[argv.index("--cmdline") + 1], s.cmdline())
                if s.vmm_args:
                    self.assertEqual(argv[-len(s.vmm_args.split()):], s.vmm_args.split())
            else:
                self.assertEqual(argv[0], "/qemu/bin/qemu-system-x86_64")
                self.assertIn("microvm,x-option-roms=off,rtc=on,memory-backend=ram", argv)
                self.assertEqual(argv[argv.index("-serial") + 1], f"file:{ser}")
                self.assertEqual(argv[-1], f"{s.cmdline()} zsinit.halt=poweroff")
            if SH:
                self.assertEqual(busybox_argv(s.line(cmds[s.name]), 9), argv)


class L2Command(unittest.TestCase):
    """zstest.qemu.l2_command: the L2 command line of every harness."""

    def cmd(self, append=""):
        old = dict(run.os.environ)
        run.os.environ.update(ZSE2E_L2_QEMU="/x/qemu", ZSE2E_L2_QEMU_DATA="/d1:/d2")
        run.os.environ.pop("ZSE2E_L2_APPEND", None)
        try:
            return qemu.l2_command({"vmlinuz": "/v"}, Path("/i"), 2048, 528, 2, append)
        finally:
            run.os.environ.clear()
            run.os.environ.update(old)

    def test_e2e_command_line(self):
        c = self.cmd()
        self.assertEqual(c[:5], ["/x/qemu", "-L", "/d1", "-L", "/d2"])
        self.assertEqual(c[c.index("-m") + 1], "2048M")
        self.assertEqual(c[c.index("-smp") + 1], "2")
        app = c[c.index("-append") + 1]
        self.assertTrue(app.startswith("console=ttyS0 panic=-1 quiet loglevel=5 init_on_alloc=0 hugepages=528 "))
        self.assertNotIn("zse2e.attempts", app)
        self.assertNotIn("zse2e.script", app)

    def test_extra_append_goes_on_the_l2_command_line(self):
        app = self.cmd("zse2e.script=x.sh zspool.reps=3")
        app = app[app.index("-append") + 1]
        self.assertIn(" zse2e.script=x.sh zspool.reps=3 ", app)


class L2Timeout(unittest.TestCase):
    """tests/nested-host/l2-timeout.sh, every L2 harness's VMM timeout:
    `timeout -s KILL` semantics, plus a sample of a guest still running
    near the limit (HANG| lines), which a command that ends in time never
    prints (the negative control)."""

    SCRIPT = str(Path(__file__).resolve().parent / "l2-timeout.sh")
    # L2's shell is busybox's; the host's sh when it has no busybox.
    SHELL = [SH, "sh"] if SH else ["sh"]

    def run_sh(self, *argv: str) -> tuple[int, str, float]:
        t0 = time.monotonic()
        p = subprocess.run([*self.SHELL, self.SCRIPT, *argv], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stderr, time.monotonic() - t0

    def test_a_command_in_time_keeps_its_status_and_is_not_sampled(self):
        rc, err, took = self.run_sh("30", "sh", "-c", "exit 3")
        self.assertEqual(rc, 3)
        self.assertNotIn("HANG|", err)
        self.assertLess(took, 5)

    def test_a_command_at_the_limit_is_sampled_then_killed(self):
        rc, err, took = self.run_sh("4", "sleep", "60")
        self.assertEqual(rc, 137)
        self.assertIn("HANG| still running after 1 s of 4 s", err)
        self.assertGreaterEqual(took, 4)
        self.assertLess(took, 15)

    def test_a_reader_of_its_output_is_not_held_open(self):
        # l2-pool.sh pipes the VMM's stdout into a reader: the watchdog's
        # sleep must not keep that pipe open after the VMM ended.
        t0 = time.monotonic()
        p = subprocess.run(["sh", "-c", f"{' '.join(self.SHELL)} {self.SCRIPT} 30 echo hi | cat"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.stdout, "hi\n")
        self.assertLess(time.monotonic() - t0, 5)


if __name__ == "__main__":
    unittest.main(verbosity=1)
