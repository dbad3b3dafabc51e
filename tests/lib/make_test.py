#!/usr/bin/env python3
"""`make test`: runs every area's test target and counts the checks inside.

Why: a summary that counts targets says "14 passed" when a target skipped
every check it has, or when half its checks were skipped for want of
hugepages. This runs each target (all of them, also after a failure, so one
run shows every failure), reads what its checks printed, and ends with the
one line CI parses:

    make-test: N passed, N failed, N skipped, N retried

(the plain "N passed, N failed, N skipped" first, as CI reads it), after a
list of every skipped and every retried check by name: a retry that ends in
a pass, or a skip, is what a green summary would otherwise hide.

What counts as a check, from a target's output:
  - cargo's `test result: ok. N passed; M failed; K ignored` (ignored = skipped);
  - Rust tests that skip at run time append `SKIP <test>: <reason>` to
    $ZEROSTART_SKIP_LOG (set here); each moves one of cargo's passes to skipped;
  - Python unittest's `Ran N tests` with `OK` / `FAILED (failures=F, errors=E)`
    (and `skipped=S`);
  - the harness scripts' own lines: `PASS ...` / `ok: ...`, `FAIL...`, `SKIP ...`;
  - the e2e harness's `e2e: N passed, N failed, N skipped; ...`;
  - `RETRY <name>: <why>`, one line per run a harness repeated (the one
    format of every retry point: zstest.qemu.rerun_after_bed_faults and
    firmware-boot), counted as retried, not as a check.
A `SKIP` line that is also in $ZEROSTART_SKIP_LOG (a Rust test run with
--nocapture) is that one skip, counted once.
A target that exits non-zero with no failed check counts one failure; one
that prints no check at all counts as one check (passed or failed by its exit
status); one whose every check skipped fails (a test bed that can run nothing
proves nothing).

At the end, before the counts, every failed check's own line is printed
again (at most a few per target), so the tail of a long CI log, which is
often all a reader gets, names what failed and not only where.

  make_test.py TARGET...   (MAKE from the environment; default `make`)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

CARGO = re.compile(r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored")
UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ")
UNITTEST_END = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$")
E2E = re.compile(r"^(?:e2e|fwboot): (\d+) passed, (\d+) failed, (\d+) skipped")
PASS = re.compile(r"^(PASS|ok)\b[: ]")
FAIL = re.compile(r"^FAIL\b")
# `zerostart slo` prints its skipped scenarios as "zerostart slo: SKIP ...".
SKIP = re.compile(r"^(zerostart slo: )?SKIP\b")
# A cargo test marked #[ignore], by name.
CARGO_IGNORED = re.compile(r"^test (\S+) \.\.\. ignored")
# A harness that ran something again: `RETRY <name>: <why>`.
RETRY = re.compile(r"^RETRY \S+: ")
# The panic message is on the line after "panicked at".
PANIC = re.compile(r"^thread '.*' .*panicked at ")
# A failed check's own line, repeated in the closing summary: the harness
# FAIL lines (FAIL above), a failed cargo test and its panic message,
# unittest's header, a harness's FAILED line.
FAILED_LINE = re.compile("|".join([FAIL.pattern, r"^test \S+ \.\.\. FAILED$", PANIC.pattern, "^ERROR: ", "^FAILED: "]))
SHOWN_PER_TARGET = 8


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    retried: int = 0
    # The skip and retry lines that name them (prefixed by their target once added up).
    skips: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)

    def add(self, o: "Counts", target: str) -> None:
        self.passed += o.passed
        self.failed += o.failed
        self.skipped += o.skipped
        self.retried += o.retried
        self.skips += [f"{target}: {s}" for s in o.skips]
        self.retries += [f"{target}: {r}" for r in o.retries]


def failed_lines(lines: list[str]) -> list[str]:
    """The lines that say which checks failed and why, in order, deduplicated."""
    out: list[str] = []
    for i, ln in enumerate(lines):
        ln = ln.rstrip("\r\n")
        if not FAILED_LINE.match(ln):
            continue
        if PANIC.match(ln) and i + 1 < len(lines):
            ln = f"{ln} {lines[i + 1].strip()}"
        if ln not in out:
            out.append(ln)
    return out


def count(lines: list[str], runtime_skips: list[str], rc: int) -> tuple[Counts, list[str]]:
    """Counts of one target from its output and the lines its Rust tests
    appended to $ZEROSTART_SKIP_LOG; notes say why a target failed."""
    c, notes, ran = Counts(), [], None
    logged = set(runtime_skips)
    for ln in lines:
        ln = ln.rstrip("\r\n")
        if RETRY.match(ln):
            c.retried += 1
            c.retries.append(ln)
        elif m := CARGO_IGNORED.match(ln):
            c.skips.append(f"{m[1]}: #[ignore]")
        elif m := CARGO.match(ln):
            c.passed += int(m[1])
            c.failed += int(m[2])
            c.skipped += int(m[3])
        elif m := UNITTEST_RAN.match(ln):
            ran = int(m[1])
        elif ran is not None and (m := UNITTEST_END.match(ln)):
            d = dict(kv.split("=") for kv in (m[2] or "").split(", ") if "=" in kv)
            bad = int(d.get("failures", 0)) + int(d.get("errors", 0))
            sk = int(d.get("skipped", 0))
            c.failed += bad
            c.skipped += sk
            c.passed += max(ran - bad - sk, 0)
            ran = None
        elif m := E2E.match(ln):
            c.passed += int(m[1])
            c.failed += int(m[2])
            c.skipped += int(m[3])
        elif PASS.match(ln):
            c.passed += 1
        elif FAIL.match(ln):
            c.failed += 1
        elif SKIP.match(ln) and ln not in logged:
            c.skipped += 1
            c.skips.append(ln)
    # A Rust test that skipped at run time was counted passed by cargo.
    moved = min(len(runtime_skips), c.passed)
    c.passed -= moved
    c.skipped += moved
    c.skips += runtime_skips
    # unittest's skipped=N and the e2e line count skips without naming them here.
    if c.skipped > len(c.skips):
        c.skips.append(f"{c.skipped - len(c.skips)} more, counted by a summary line that names none "
                       "(unittest's skipped=N, e2e's N skipped): see the target's output")
    if c.passed + c.failed + c.skipped == 0:
        c.passed, c.failed = (1, 0) if rc == 0 else (0, 1)
        notes.append("no check lines: counted as one check")
    elif rc != 0 and c.failed == 0:
        c.failed = 1
        notes.append(f"exited with status {rc} without a failed check line: counted as one failure")
    if c.passed == 0 and c.failed == 0 and c.skipped > 0:
        c.failed = 1
        notes.append(f"every one of its {c.skipped} checks skipped: the target fails")
    return c, notes


def run_target(make: list[str], target: str) -> tuple[Counts, list[str], int, list[str]]:
    with tempfile.NamedTemporaryFile("w+", prefix=f"zerostart-skips-{target}-", delete=False) as f:
        skip_log = f.name
    env = dict(os.environ, ZEROSTART_SKIP_LOG=skip_log)
    lines = []
    proc = subprocess.Popen([*make, "--no-print-directory", target], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, text=True, errors="replace")
    for ln in proc.stdout:
        sys.stdout.write(ln)
        sys.stdout.flush()
        lines.append(ln)
    rc = proc.wait()
    try:
        with open(skip_log) as f:
            skips = [s.rstrip("\n") for s in f if s.strip()]
    finally:
        os.unlink(skip_log)
    for s in skips:
        print(f"make-test: {target}: {s}")
    c, notes = count(lines, skips, rc)
    return c, notes, rc, failed_lines(lines) if c.failed else []


def main(argv: list[str]) -> int:
    make = shlex.split(os.environ.get("MAKE", "make"))
    total, bad, took, why = Counts(), [], [], []
    start = time.monotonic()
    for t in argv:
        print(f"make-test: === {t}", flush=True)
        t0 = time.monotonic()
        c, notes, rc, fl = run_target(make, t)
        secs = round(time.monotonic() - t0)
        took.append(f"{t} {secs} s")
        total.add(c, t)
        for n in notes:
            print(f"make-test: {t}: {n}")
        print(f"make-test: {t}: {c.passed} passed, {c.failed} failed, {c.skipped} skipped, {c.retried} retried "
              f"(exit {rc}, {secs} s)", flush=True)
        if c.failed:
            bad.append(t)
            shown = fl[:SHOWN_PER_TARGET] or notes or [f"exit status {rc}"]
            why += [f"make-test: {t}: {x}" for x in shown]
            if len(fl) > SHOWN_PER_TARGET:
                why.append(f"make-test: {t}: ... and {len(fl) - SHOWN_PER_TARGET} more failure lines above")
    # Where the time went, in one line: CI's whole run must fit its limit
    # (README: make test under 45 min from scratch), and the slow area is
    # the one to cache or trim.
    print(f"make-test: wall time {round(time.monotonic() - start)} s: {', '.join(took)}")
    if bad:
        print("make-test: what failed (each line as its check printed it):")
        for x in why:
            print(x)
        print(f"make test: FAILED: {' '.join(bad)}")
    else:
        print(f"make test: every area passed: {' '.join(argv)}")
    # Every skip and retry by name, right above the counts: what CI's log
    # tail shows.
    print(f"make-test: skipped: {total.skipped}" + (":" if total.skips else ""))
    for s in total.skips:
        print(f"make-test:   {s}")
    print(f"make-test: retried: {total.retried}" + (":" if total.retries else ""))
    for r in total.retries:
        print(f"make-test:   {r}")
    print(f"make-test: {total.passed} passed, {total.failed} failed, {total.skipped} skipped, "
          f"{total.retried} retried")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
