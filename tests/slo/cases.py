#!/usr/bin/env python3
"""make test-slo, the runner part: configs through `zerostart slo` (the
release zerostart-slo) and what each run must leave behind. The table
below is the suite; zstest.suite runs it.

  example  tests/slo/example.toml (zerostart + probe on /dev/kvm, 256M THP
           and 1G hugetlb prefaulted; Debian's kernel under QEMU TCG) must
           pass, and its report.json, junit.xml and chart.png agree;
  failing  tests/slo/failing.toml (an SLO that cannot hold) must exit
           non-zero with the failure in both reports;
  pool     with a `zerostart pool` (4 x 256M regions of 2M pages) it
           starts: tests/slo/launch.toml (QEMU TCG + OVMF through
           `zerostart launch` on the pool, every boot through every phase,
           memory_ready before init_started), then tests/slo/pool.toml
           (the probe on pool memory); SKIP when this zerostart has no
           `pool` subcommand.

Each report check prints one `ok   NAME: ...` or `FAIL NAME: ...` line;
the SLO runner prints its own `PASS: N of M SLOs hold` and `zerostart
slo: SKIP` lines (tests/lib/make_test.py counts both).

  python3 tests/slo/cases.py [--list] [CASE...]     (default: every case)

ZEROSTART_BIN (a release zerostart) and SLO_BIN (the release
zerostart-slo) are built by make, with the probe, the Linux guest of
tests/slo/prepare.sh and the firmware (mk/slo.mk). Reports go to
$SLO_OUT (default target/slo), target/slo-failing, -launch and -pool.
The hugetlb scenario and the pool need 2M hugepages: grown as root for
the run and given back at its end, however it ends (zstest.hugepages).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from zstest.hugepages import HugePages
from zstest.suite import (Case, Check, Do, Group, Report, Reserve, Runner, choose, executable_env, run_suite,
                          serve)

WHO = "test-slo"
ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("SLO_OUT") or ROOT / "target" / "slo")
# The chart's text needs a TrueType font (pure-Rust renderer, no fontconfig).
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
POOL_CLEAN_TIMEOUT_S = 120
LAUNCH_SCENARIO = "qemu-tcg-linux-256M-launch-pool"
LAUNCH_PHASES = ("memory_ready", "first_output", "init_started", "test_done", "exit")
# What the pool case adds to the SLO runner's environment: the pool's socket
# (ZEROSTART_POOL_SOCKET) and the firmware (ZEROSTART_FIRMWARE_DIR).
ENV: dict[str, str] = {}


def out(suffix: str = "") -> Path:
    return Path(f"{OUT}{suffix}")


def slo_command(config: str, suffix: str) -> list[str]:
    return [os.environ["SLO_BIN"], "--config", config, "--out", str(out(suffix))]


def run_slo(config: str, suffix: str, log: Path | None = None) -> int:
    """One `zerostart slo` run into a fresh out(SUFFIX) (a report left by an
    earlier run must not pass for this one's), from the repository (the
    configs name their paths from it); its output goes to make's, or to
    LOG. The exit status."""
    shutil.rmtree(out(suffix), ignore_errors=True)
    env = dict(os.environ, **ENV)
    if log is None:
        return subprocess.run(slo_command(config, suffix), cwd=ROOT, env=env, stdin=subprocess.DEVNULL).returncode
    with open(log, "w") as f:
        return subprocess.run(slo_command(config, suffix), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                              stdout=f, stderr=subprocess.STDOUT).returncode


def reports_problem(d: Path, want_pass: bool) -> tuple[str | None, str]:
    """What is wrong with the reports of one run in D (None when nothing),
    and what they hold: report.json's verdict is WANT_PASS, junit.xml has
    one testcase per SLO and as many failures as report.json counts (none
    exactly when it passed), chart.png is a PNG, and at least one scenario
    ran, each that ran with its boots."""
    r = json.loads((d / "report.json").read_text())
    if r["pass"] is not want_pass:
        return f"report.json pass={r['pass']}, want {want_pass}", ""
    cases = ET.parse(d / "junit.xml").getroot().findall(".//testcase")
    slos = [s for sc in r["scenarios"] for s in sc["slos"]]
    if len(cases) != len(slos):
        return f"junit.xml has {len(cases)} testcases for the {len(slos)} SLOs of report.json", ""
    fails = sum(1 for c in cases if c.find("failure") is not None)
    if fails != r["counts"]["failed"]:
        return f"junit.xml has {fails} failures, report.json counts {r['counts']}", ""
    if (fails == 0) != want_pass:
        return f"{fails} failures in a run whose verdict is {'pass' if want_pass else 'fail'}", ""
    with open(d / "chart.png", "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return "chart.png is not a PNG", ""
    ran = [sc for sc in r["scenarios"] if sc["skipped"] is None]
    if not ran:
        return "no scenario ran (every one skipped)", ""
    if empty := [sc["name"] for sc in ran if not sc["reps"]]:
        return f"scenarios ran without a boot: {' '.join(empty)}", ""
    return None, (f"{d}: report.json ({len(ran)} scenarios ran), junit.xml ({len(cases)} testcases, "
                  f"{fails} failures), chart.png ok")


def reports(suffix: str, want_pass: bool):
    """A Check of out(SUFFIX)'s reports (reports_problem); a report that is
    missing or cannot be parsed fails it with the reason."""
    def fn(_work: Path) -> tuple[bool, str]:
        d = out(suffix)
        try:
            problem, text = reports_problem(d, want_pass)
        except (OSError, ValueError, KeyError, TypeError, ET.ParseError) as e:
            return False, f"{d}: {type(e).__name__}: {e}"
        return (False, f"{d}: {problem}") if problem else (True, text)
    return fn


def launch_problem(d: Path) -> tuple[str | None, str]:
    """The launch scenario of D's report.json ran (not skipped) through a pool
    lease, and each of its boots succeeded through every phase, with memory
    ready before init started."""
    r = json.loads((d / "report.json").read_text())
    sc = next((s for s in r["scenarios"] if s["name"] == LAUNCH_SCENARIO), None)
    if sc is None:
        return f"no scenario {LAUNCH_SCENARIO} in report.json", ""
    if sc["skipped"] is not None:
        return f"{LAUNCH_SCENARIO} skipped: {sc['skipped']}", ""
    if not (sc.get("launch") or "").startswith("pool:"):
        return f"{LAUNCH_SCENARIO} launched from {sc['launch']!r}, not a pool", ""
    for rep in sc["reps"]:
        if not rep["ok"]:
            return f"boot {rep['rep']}: {rep['error']}", ""
        if missing := [p for p in LAUNCH_PHASES if p not in rep["phases"]]:
            return f"boot {rep['rep']} has no {' '.join(missing)}: {rep['phases']}", ""
        if not rep["phases"]["memory_ready"] < rep["phases"]["init_started"]:
            return f"boot {rep['rep']}: memory_ready is not before init_started: {rep['phases']}", ""
    return None, (f"{sc['name']}: {len(sc['reps'])} boots through zerostart launch, "
                  f"memory_ready max {max(x['phases']['memory_ready'] for x in sc['reps']):.1f} ms")


def launch_check(_work: Path) -> tuple[bool, str]:
    d = out("-launch")
    try:
        problem, text = launch_problem(d)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return False, f"{d}: {type(e).__name__}: {e}"
    return (False, f"{d}: {problem}") if problem else (True, text)


def passes(config: str, suffix: str):
    """Runs CONFIG into out(SUFFIX); it must exit 0 (its own PASS/FAIL line
    is the SLO verdict; a non-zero exit abandons the case's checks)."""
    def step(r: Report) -> None:
        rc = run_slo(config, suffix)
        if rc != 0:
            r.fail(f"zerostart slo --config {config} exited {rc} (its lines above say why)")
            r.abandon()
    return step


def cannot_hold(r: Report) -> None:
    """failing.toml must make the runner exit non-zero (its output, an SLO
    failure by design, goes to a log next to the reports)."""
    log = out("-failing.log")
    rc = run_slo("tests/slo/failing.toml", "-failing", log)
    if rc == 0:
        r.fail(f"an SLO that cannot hold exited 0 ({log})")
    else:
        r.ok(f"an SLO that cannot hold exits {rc} ({log})")


def serve_pool(r: Report) -> None:
    """Starts the SLO pool (stopped when the run ends) and finds the
    firmware for launch.toml; SKIP for both pool configs without `pool`."""
    zs = os.environ["ZEROSTART_BIN"]
    if subprocess.run([zs, "pool", "--help"], capture_output=True).returncode != 0:
        r.skip("tests/slo/pool.toml, tests/slo/launch.toml: zerostart has no 'pool' subcommand")
        r.abandon()
    # Four regions: the pool never hands a lessee's pages to the next one (a
    # returned region is replaced by fresh memory, docs/pool.md), and with
    # boots back to back the replacement must finish while the next boots
    # lease the others, so memory_ready measures a lease of ready memory.
    # With two, 3-4 of 10 boots waited 18-31 ms for a replacement.
    sock = r.work / "pool.sock"
    log_path = out("-pool-daemon.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    serve(r, [zs, "pool", "serve", "--socket", str(sock), "--size", "1G", "--region-size", "256M"], log_path)
    ENV["ZEROSTART_POOL_SOCKET"] = str(sock)
    # QEMU (TCG) through `zerostart launch` on the same pool boots OVMF;
    # make builds the firmware and passes its directory (the harness builds
    # nothing, nor asks a build script where its output is).
    if not os.environ.get("ZEROSTART_FIRMWARE_DIR"):
        r.fail("ZEROSTART_FIRMWARE_DIR is not set: no firmware for tests/slo/launch.toml "
               "(run `make test-slo`, which builds the firmware and passes its directory)")
        r.abandon()
    ENV["ZEROSTART_FIRMWARE_DIR"] = os.environ["ZEROSTART_FIRMWARE_DIR"]
    r.note(f"pool of 4 x 256M regions on {sock} (log {log_path}); firmware {ENV['ZEROSTART_FIRMWARE_DIR']}")


def pool_clean(before: str):
    """Until every region of the SLO pool is clean, at most
    POOL_CLEAN_TIMEOUT_S; else one line naming why."""
    def step(r: Report) -> None:
        p = subprocess.run([os.environ["ZEROSTART_BIN"], "pool", "status", "--socket", ENV["ZEROSTART_POOL_SOCKET"],
                            "--wait-clean", "--timeout", str(POOL_CLEAN_TIMEOUT_S)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        if p.returncode != 0:
            r.fail(f"the SLO pool was not clean before the {before} run ({out('-pool-daemon.log')})")
            r.abandon()
    return step


# The hugetlb scenario (1G prefaulted) needs 512 free 2M pages, the pool 512
# more while it replaces returned regions: 1024 for each case that needs them.
HUGEPAGES = Reserve(2048, 1024)

CASES = [
    Case("example", HUGEPAGES,
         Do("example-run", passes("tests/slo/example.toml", "")),
         Check("example-reports", reports("", True))),
    Case("failing",
         Do("failing-exit", cannot_hold),
         Check("failing-reports", reports("-failing", False))),
    Case("pool", HUGEPAGES,
         Do("pool-serve", serve_pool),
         Group(Do("launch-clean", pool_clean("launch")),
               Do("launch-run", passes("tests/slo/launch.toml", "-launch")),
               Check("launch-reports", reports("-launch", True)),
               Check("launch-boots", launch_check)),
         Group(Do("pool-clean", pool_clean("pool")),
               Do("pool-run", passes("tests/slo/pool.toml", "-pool")),
               Check("pool-reports", reports("-pool", True)))),
]


def ensure_font() -> str | None:
    """None when the chart has its font (installed from apt when missing),
    else why not."""
    if FONT.is_file():
        return None
    p = subprocess.run(["apt-get", "install", "-y", "-q", "fonts-dejavu-core"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0 or not FONT.is_file():
        last = (p.stderr.strip().splitlines() or [""])[-1]
        return f"chart.png needs {FONT}: apt-get install fonts-dejavu-core failed (exit {p.returncode}): {last}"
    return None


def main(argv: list[str]) -> int:
    chosen = choose(WHO, CASES, argv, "configs through zerostart slo and their reports")
    if isinstance(chosen, int):
        return chosen
    for var, what in (("ZEROSTART_BIN", "a release zerostart"), ("SLO_BIN", "the release zerostart-slo")):
        path = executable_env(WHO, var, f"{what} (make test-slo builds it)")
        if path is None:
            return 2
        # The runs start in the repository (the configs' paths are from it).
        os.environ[var] = path
    if why := ensure_font():
        print(f"{WHO}: {why}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix=f"zerostart-{WHO}."))
    return run_suite(Runner(WHO, work, boot=None, pools=HugePages(WHO)), chosen)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
