#!/usr/bin/env python3
"""Unit tests of tests/pool/nested_bench.py's judging and console driving (no QEMU).

Why: that harness decides whether the pool handed out only zero memory in
the nested host. A parser that accepted a missing verdict, a non-zero byte,
a non-pool boot counted as a pool one, or a leak check that saw nothing would
make the benchmark's zero claim a check that cannot fail. These feed it
synthetic L2 consoles. Run: python3 tests/pool/test_nested_bench.py
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import nested_bench as nb  # noqa: E402
nb.print = lambda *a, **k: None  # progress lines are noise here
from zstest.fakes import FakeConsole  # noqa: E402
from zstest import vmmargv  # noqa: E402
from zstest.test_vmmargv import SH, ZS, busybox_argv  # noqa: E402

GIB = 1 << 30
PROBE_PASS = ("ZSPROBE: PASS hint=valid ranges=1 hinted_bytes=1072283648 zero_bytes=1072283648 "
              "nonzero_bytes=0 e820=3")
PROBE_LEAK = ("ZSPROBE: FAIL hint=valid nonzero_bytes=60221512 first_nonzero=0x164000 ranges=1 "
              "hinted_bytes=1072283648 zero_bytes=1012062136")
LINUX_PASS = ("ZSINIT: PASS hint=valid ranges=1 hinted_bytes=998035456 zero_checked_bytes=335544320 "
              "nonzero_bytes=0 hinted_checked_bytes=285212672 populate_ms=105 uptime_ms=2830 "
              "kernel_pages_skipped=82779 kernel_bytes_verified=-1 kernel_verify_failures=-1 kernel=6.12")

# The console of a patched L3 guest that crashed under oops=panic, in the form
# of stop 26's real report (tests/zstest/test_zstest.py, multi-threaded TCG's
# stale int3 in sched_clock_cpu): no verdict, then the reset of panic=-1.
CRASH_CONSOLE = """\
[    0.000000] Linux version 6.12.0-zerostart (zerostart@build) #1 SMP PREEMPT_DYNAMIC
[    0.000000] Command line: console=ttyS0 reboot=k panic=-1 oops=panic loglevel=5 hugepages=128
[    1.128215] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI
[    1.128220] CPU: 1 UID: 0 PID: 0 Comm: swapper/1 Not tainted 6.12.0-zerostart #1
[    1.128230] RIP: 0010:sched_clock_cpu+0x9/0x1d0
[    1.128301] Code: 48 89 e5 66 <90> e8 3a 00 00 00
[    1.128390] Kernel panic - not syncing: Fatal exception in interrupt
[    1.128402] Kernel Offset: 0x1000000 from 0xffffffff81000000
"""
CLEAN_CONSOLE = """\
[    0.000000] Linux version 6.12.0-zerostart (zerostart@build) #1 SMP PREEMPT_DYNAMIC
[    0.000000] Command line: console=ttyS0 reboot=k panic=-1 oops=panic loglevel=5 hugepages=128
ZSINIT uptime_s=2.83
""" + LINUX_PASS + "\n"


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
            f"verdict={verdict}")


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

    def test_kernel_bug_lines_fail_a_passing_verdict_and_are_named(self):
        # A patched kernel's WARNING, bad page or oops fails its boot even
        # when zsinit still printed PASS, and the failure names the line.
        for bad in ("[    2.1] WARNING: CPU: 0 PID: 1 at mm/page_alloc.c:1203 free_pages_prepare+0x1f0/0x6c0",
                    "[    2.1] BUG: Bad page state in process zsinit  pfn:12345",
                    "[    2.1] BUG: KASAN: use-after-free in clear_page_erms+0x7/0x10",
                    "[    2.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [zsinit:1]",
                    "[    2.1] RIP: 0010:clear_page_erms+0x7/0x10"):
            f = self.one([timeline("pool_lease", True), "L3| " + bad, sample("pool", LINUX_PASS, "linux")], True)
            self.assertIn(f"L3 kernel bug line: {bad}", f)
        # The lines of a clean boot, and a bug line of an earlier boot, fail nothing.
        samples, _, fatal = drive([timeline("pool_lease", True), "L3| [    0.0] BUG: Bad page state",
                                   sample("pool", "", "linux"), "L3| ZSINIT uptime_s=2.83", "L3| " + LINUX_PASS,
                                   timeline("pool_lease", True), sample("pool", LINUX_PASS, "linux"),
                                   "ZSPOOL-END boots=2"], patched=True)
        self.assertIsNone(fatal)
        self.assertTrue(samples[0]["failures"])
        self.assertEqual(samples[1]["failures"], [])
        self.assertEqual(samples[1]["l3"], ["ZSINIT uptime_s=2.83", LINUX_PASS])

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


@unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
class Commands(unittest.TestCase):
    """nested_bench.py's command list: each zerostart run the script boots,
    built by options::vmm_cmd, as the script's `read` and `eval` get it back."""

    def test_every_boot_the_script_may_ask_for_is_listed(self):
        lines = nb.command_lines([1, 4], 4, 2, "patched", ZS)
        keys = {tuple(ln.split("|")[:3]) for ln in lines}
        want = {("probe", str(g), m) for g in (1, 2, 4) for m in nb.MEMORY}
        want |= {("linux", str(g), m) for g in (2, 4) for m in nb.MEMORY}
        self.assertEqual(keys, want)
        self.assertEqual(len(lines), len(keys))
        # The warm-up's 1 GiB is listed even when no size asks for it.
        self.assertIn(("probe", "1", "off"), {tuple(ln.split("|")[:3]) for ln in nb.command_lines([8], 0, 0, "p", ZS)})

    def test_the_commands_are_the_runs_the_script_spelled(self):
        by = {tuple(ln.split("|")[:3]): ln for ln in nb.command_lines([4], 4, 0, "patched", ZS)}
        a = vmmargv.build(nb.boot_spec("probe", 4, "pool", "patched"), ZS).argv
        # Was: $Z run --kernel $K --serial file=$ser --timeline $tl --memory size=${2}G,hugepages=on,prezero=pool:$S
        self.assertEqual(a[:2], ["/zs/zerostart", "run"])
        self.assertEqual(a[a.index("--kernel") + 1], "/zs/probe.bzImage")
        self.assertEqual(a[a.index("--serial") + 1], "file=/tmp/guest.serial")
        self.assertEqual(a[a.index("--timeline") + 1], "/tmp/timeline.json")
        self.assertEqual(a[a.index("--memory") + 1], "size=4G,hugepages=on,prezero=pool:/tmp/pool.sock")
        self.assertEqual(len(a), 10, a)  # nothing else: no --cpus, --cmdline, --initramfs
        a = vmmargv.build(nb.boot_spec("linux", 4, "populate", "patched"), ZS).argv
        self.assertEqual(a[a.index("--kernel") + 1], "/zs/kernels/patched")
        self.assertEqual(a[a.index("--initramfs") + 1], "/zs/l3-initramfs.cpio.gz")
        self.assertEqual(a[a.index("--cmdline") + 1],
                         "console=ttyS0 reboot=k panic=-1 oops=panic loglevel=5 hugepages=128 zsinit.check_mib=64 "
                         "zsinit.populate_mib=256")
        self.assertEqual(a[a.index("--memory") + 1],
                         "size=4G,hugepages=on,hugepage_size=2M,prefault=on,prefault_method=populate")
        for m, v in (("nt", "prefault=on,prefault_method=nt"), ("off", "prefault=off")):
            a = vmmargv.build(nb.boot_spec("probe", 4, m, "patched"), ZS).argv
            self.assertEqual(a[a.index("--memory") + 1], f"size=4G,hugepages=on,hugepage_size=2M,{v}")
        if SH:
            for key, ln in by.items():
                want = vmmargv.build(nb.boot_spec(key[0], int(key[1]), key[2], "patched"), ZS).argv
                self.assertEqual(busybox_argv(ln, 4), want, key)

    def test_the_script_paths_are_the_commands(self):
        script = (HERE / "nested-bench-l2.sh").read_text()
        self.assertIn(f"\nS={vmmargv.L2_POOL_SOCKET}\n", script)
        self.assertIn(f"ser={nb.L2_SERIAL}; out=/tmp/vmm.out; tl={nb.L2_TIMELINE}\n", script)
        self.assertIn(f"\nK={nb.L2_PROBE}\n", script)
        self.assertIn(f"\nCMDS=/{nb.L2_CMDS}\n", script)
        self.assertNotIn('"$Z" run', script)


@unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
class InL2Script(unittest.TestCase):
    """nested-bench-l2.sh itself, run here with a fake zerostart: the boot
    of a patched guest that crashes is not booted again, its whole console
    reaches the host, and the host's judge fails it naming the crash line."""

    def run_script(self, linux_console: str) -> tuple[list[str], list[str]]:
        """(the script's output lines, one line per zerostart run)."""
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "zs" / "kernels").mkdir(parents=True)
            (d / "tmp").mkdir()
            (d / "zs" / "probe.bzImage").write_bytes(b"probe")
            # Every L2 script's VMM timeout, as the L2 image carries it.
            (d / "zs" / "l2-timeout.sh").write_bytes((HERE.parent / "nested-host" / "l2-timeout.sh").read_bytes())
            (d / "zs" / "kernels" / "patched").write_bytes(b"bzImage")
            (d / "cmdline").write_text("zse2e.script=nested-bench-l2.sh zspool.sizes=1 zspool.reps=1 "
                                       "zspool.timeout=30 zspool.linux=1 zspool.linux_reps=1 "
                                       "zspool.kernel=patched zspool.methods=populate zspool.leakcheck=0\n")
            (d / "free").write_text("512\n")  # 1 GiB: one guest, no pool kept (methods=populate)
            (d / "linux.serial").write_text(linux_console)
            (d / "probe.serial").write_text(PROBE_PASS + "\n")
            (d / "linux.tl").write_text(timeline("populate", True).split(" ", 1)[1])
            (d / "probe.tl").write_text(timeline("populate").split(" ", 1)[1])
            fake = d / "zs" / "zerostart"
            # Writes the console and timeline its guest would have, as zerostart does.
            fake.write_text(f"""#!/bin/sh
echo "$*" >>{d}/runs
ser=; tl=; g=probe
while [ $# -gt 0 ]; do
  case "$1" in
    --serial) ser=${{2#file=}}; shift;;
    --timeline) tl=$2; shift;;
    --kernel) case "$2" in */kernels/*) g=linux;; esac; shift;;
  esac
  shift
done
cp {d}/$g.serial "$ser"
cp {d}/$g.tl "$tl"
""")
            fake.chmod(0o755)
            script = (HERE / "nested-bench-l2.sh").read_text()
            cmds = "\n".join(nb.command_lines([1], 1, 0, "patched", ZS)) + "\n"
            # L2's paths moved under d (through a placeholder: d itself may be under /tmp).
            for real, here in (("/proc/cmdline", "@@/cmdline"),
                               ("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "@@/free"),
                               ("/zs/", "@@/zs/"), ("/tmp/", "@@/tmp/")):
                self.assertIn(real, script)
                script = script.replace(real, here)
                cmds = cmds.replace(real, here)
            script = script.replace("@@", str(d))
            (d / nb.L2_CMDS).write_text(cmds.replace("@@", str(d)))
            r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, PATH=os.environ.get("PATH", "/usr/bin:/bin")))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            return r.stdout.splitlines(), (d / "runs").read_text().splitlines()

    def test_a_crashed_patched_guest_fails_once_with_its_console_kept(self):
        out, runs = self.run_script(CRASH_CONSOLE)
        # Warm-up, the probe, the Linux guest: each booted once, the crash too.
        self.assertEqual(len(runs), 3, runs)
        self.assertEqual(sum("/kernels/patched" in r for r in runs), 1, runs)
        self.assertFalse([ln for ln in out if "RETRY" in ln], out)
        # Its whole console reached the host, in order, before its sample.
        l3 = [ln[len("L3| "):] for ln in out if ln.startswith("L3| ")]
        self.assertEqual(l3[-len(CRASH_CONSOLE.splitlines()):], CRASH_CONSOLE.splitlines())
        samples, _, fatal = drive(out, patched=True)
        self.assertIsNone(fatal)
        linux = [s for s in samples if s["guest"] == "linux"]
        self.assertEqual(len(linux), 1)
        f = linux[0]["failures"]
        self.assertIn("L3 kernel bug line: [    1.128215] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI", f)
        self.assertIn("L3 kernel bug line: [    1.128390] Kernel panic - not syncing: Fatal exception in interrupt", f)
        self.assertIn("guest verdict: none", f)
        self.assertEqual([s["failures"] for s in samples if s["guest"] != "linux"], [[], []])

    def test_a_clean_patched_guest_passes(self):
        out, runs = self.run_script(CLEAN_CONSOLE)
        self.assertEqual(len(runs), 3, runs)
        samples, _, fatal = drive(out, patched=True)
        self.assertIsNone(fatal)
        self.assertEqual([s["failures"] for s in samples], [[], [], []])
        self.assertEqual(samples[-1]["guest"], "linux")
        self.assertIn(LINUX_PASS, samples[-1]["l3"])


if __name__ == "__main__":
    unittest.main()
