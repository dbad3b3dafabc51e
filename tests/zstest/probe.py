"""The one probe-boot-and-judge helper: boots the probe guest (tests/probe)
through `zerostart run` on this host's /dev/kvm and judges the run.

Why one: tests/vmm/run.sh and tests/redteam/run.sh each had their own boot
loop with the same judging (exit code, exactly one ZSPROBE verdict line,
its text, the timeline), which had drifted (one checked the timeline, the
other only --verify-hint). Both suites are case tables that call this.

  python3 -m zstest.probe NAME RC VERDICT [--check EXPR] [--phases P,...] -- zerostart-run-args...

ZEROSTART_BIN and PROBE_BZIMAGE name the binaries (make builds them), WORK a
directory for the logs. A run passes when zerostart exits RC and:
  RC != 0: its stderr matches VERDICT (a refused configuration);
  RC == 0: the serial log holds exactly one `ZSPROBE: PASS|FAIL` line and it
           matches VERDICT, the timeline conforms to zstest.timeline (with
           --phases present), EXPR (Python over `j`, the timeline) holds,
           and with --verify-hint every hinted byte was verified.
Prints `ok   NAME: <verdict>` or `FAIL NAME: <why>` with stderr and serial
log; exits 0 or 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from zstest import timeline

VERDICT_RE = re.compile(r"^ZSPROBE: (PASS|FAIL)", re.M)


def judge(rc: int, want_rc: int, want: str, serial: str, stderr: str, tl: dict | None, args: list[str],
          check: str | None = None, phases: tuple = ()) -> str | None:
    """Why the run failed, or None."""
    if rc != want_rc:
        return f"exit code {rc}, expected {want_rc}"
    if want_rc != 0:
        return None if re.search(want, stderr, re.M) else f"stderr does not match /{want}/"
    n = len(VERDICT_RE.findall(serial))
    if n != 1:
        return f"{n} verdict lines, expected exactly 1"
    if not re.search(want, serial, re.M):
        return f"verdict does not match /{want}/"
    if tl is None:
        return "no timeline JSON"
    bad = timeline.check(tl, "run", phases)
    if bad:
        return "timeline JSON: " + "; ".join(bad)
    if check:
        try:
            ok = eval(check, {}, {"j": tl})  # noqa: S307 (the suite's own case table)
        except Exception as e:  # noqa: BLE001 (a check that cannot be evaluated fails the case)
            return f"timeline JSON: check {check} raised {e!r}"
        if not ok:
            return f"timeline JSON: check failed: {check} on {json.dumps(tl)}"
    if "--verify-hint" in args:
        p = tl["prezero"]
        if not (p["hint_bytes"] > 0 and p["verified_bytes"] == p["hint_bytes"]):
            return f"timeline: --verify-hint verified {p['verified_bytes']} of {p['hint_bytes']} hinted bytes"
    return None


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: python3 -m zstest.probe NAME RC VERDICT [--check EXPR] [--phases P,...] -- args...",
              file=sys.stderr)
        return 2
    i = argv.index("--")
    ap = argparse.ArgumentParser(prog="zstest.probe")
    ap.add_argument("name")
    ap.add_argument("rc", type=int)
    ap.add_argument("verdict")
    ap.add_argument("--check")
    ap.add_argument("--phases", default="")
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args(argv[:i])
    args = argv[i + 1:]
    try:
        zs, kernel, work = os.environ["ZEROSTART_BIN"], os.environ["PROBE_BZIMAGE"], Path(os.environ["WORK"])
    except KeyError as e:
        print(f"zstest.probe: set {e.args[0]} (make passes ZEROSTART_BIN and PROBE_BZIMAGE; WORK is the log dir)",
              file=sys.stderr)
        return 2
    log, tl_path, err = (work / f"{a.name}.{x}" for x in ("serial", "json", "stderr"))
    for p in (log, tl_path):
        p.unlink(missing_ok=True)
    cmd = [zs, "run", "--kernel", kernel, "--serial", f"file={log}", "--timeline", str(tl_path), *args]
    with open(err, "w") as ef:
        try:
            rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=ef, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    serial = log.read_text(errors="replace") if log.exists() else ""
    stderr = err.read_text(errors="replace")
    try:
        tl = json.loads(tl_path.read_text()) if tl_path.exists() else None
    except json.JSONDecodeError as e:
        tl = {"unparsable": str(e)}
    phases = tuple(x for x in a.phases.split(",") if x)
    why = judge(rc, a.rc, a.verdict, serial, stderr, tl, args, a.check, phases)
    if why is None:
        verdict = next((ln for ln in serial.splitlines() if VERDICT_RE.match(ln)), None)
        print(f"ok   {a.name}: {verdict or (stderr.strip().splitlines() or [''])[-1]}")
        exits = [ln for ln in stderr.splitlines() if ln.startswith("zerostart: exit")]
        if exits:
            print(f"     {exits[-1]}")
        return 0
    print(f"FAIL {a.name}: {why}")
    print(f"---- zerostart {' '.join(args)} (stderr)\n{stderr}---- serial log\n{serial}----")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
