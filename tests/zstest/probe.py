"""The one probe-boot-and-judge helper: boots the probe guest (tests/probe)
through `zerostart run` on this host's /dev/kvm and judges the run.

Why one: the vmm and red-team suites each had their own boot loop with the
same judging (exit code, exactly one ZSPROBE verdict line, its text, the
timeline), which had drifted (one checked the timeline, the other only
--verify-hint). Both suites are case tables (tests/vmm/cases.py,
tests/redteam/cases.py) whose Boot rows zstest.suite runs through boot().
One boot by hand:

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


def log_stem(name: str) -> str:
    """A file name for NAME's logs: only letters, digits, `.`, `_`, `+`, `-`.

    Why: the log paths go into `--serial file=PATH`, a key=value list split
    at commas, so a case named `anon-freed-dirty[thp=on,prefault=on]` used as
    the file name made zerostart refuse the run ("unknown key 'prefault'").
    """
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def boot(name: str, want_rc: int, verdict: str, args: list[str], check: str | None = None, phases: tuple = (),
         timeout: int = 300, *, zerostart: str, kernel: str, work: Path) -> bool:
    """Boots the probe through `zerostart run ARGS`, judges it, prints
    `ok   NAME: <verdict>` or `FAIL NAME: <why>` with stderr and serial log."""
    log, tl_path, err = (work / f"{log_stem(name)}.{x}" for x in ("serial", "json", "stderr"))
    for p in (log, tl_path):
        p.unlink(missing_ok=True)
    cmd = [zerostart, "run", "--kernel", kernel, "--serial", f"file={log}", "--timeline", str(tl_path), *args]
    with open(err, "w") as ef:
        try:
            rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=ef, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    serial = log.read_text(errors="replace") if log.exists() else ""
    stderr = err.read_text(errors="replace")
    try:
        tl = json.loads(tl_path.read_text()) if tl_path.exists() else None
    except json.JSONDecodeError as e:
        tl = {"unparsable": str(e)}
    why = judge(rc, want_rc, verdict, serial, stderr, tl, list(args), check, tuple(phases))
    if why is None:
        line = next((ln for ln in serial.splitlines() if VERDICT_RE.match(ln)), None)
        print(f"ok   {name}: {line or (stderr.strip().splitlines() or [''])[-1]}")
        exits = [ln for ln in stderr.splitlines() if ln.startswith("zerostart: exit")]
        if exits:
            print(f"     {exits[-1]}")
        sys.stdout.flush()
        return True
    print(f"FAIL {name}: {why}")
    print(f"---- zerostart {' '.join(args)} (stderr)\n{stderr}---- serial log\n{serial}----", flush=True)
    return False


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
    try:
        zs, kernel, work = os.environ["ZEROSTART_BIN"], os.environ["PROBE_BZIMAGE"], Path(os.environ["WORK"])
    except KeyError as e:
        print(f"zstest.probe: set {e.args[0]} (make passes ZEROSTART_BIN and PROBE_BZIMAGE; WORK is the log dir)",
              file=sys.stderr)
        return 2
    phases = tuple(x for x in a.phases.split(",") if x)
    ok = boot(a.name, a.rc, a.verdict, argv[i + 1:], a.check, phases, a.timeout, zerostart=zs, kernel=kernel,
              work=work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
