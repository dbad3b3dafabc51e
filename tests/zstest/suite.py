"""The one suite runner: runs the selected cases of a case table (the probe
suites tests/vmm/cases.py and tests/redteam/cases.py) and counts them.

Why: each suite was a bash `case` block around its own counters, setup
steps, hugepage reservation and `python3 -m zstest.probe` per boot. A suite
is now data: a list of Case rows, each a name (what `make test-vmm
VMM_CASES=...` selects) and the steps it runs, in order:

  Boot(name, rc, verdict, args, check, phases)
      one probe boot through `zerostart run ARGS`, judged by zstest.probe
  Setup(name, argv, show=False)
      a command that must succeed for the case to mean anything (e.g.
      dirty.py filling host memory with a secret); on failure: FAIL NAME
      with its output, and the rest of the case (or Group) is abandoned
  Reserve(kb, pages, skip=None)
      at least PAGES free KB-sized hugepages (zstest.hugepages), given back
      when the run ends however it ends; on failure FAIL, or with `skip`
      SKIP and that reason (a host that cannot assemble a 1G page)
  SkipUnless(path, reason)
      SKIP the case with REASON unless PATH exists
  Mount(path, fstype, options) / Unmount(path)
      a mount for the case; any still mounted at the end is unmounted
      before the hugepages are given back (its pages are free by then)
  Check(name, fn)
      fn(work) -> (ok, text): a check in Python, e.g. a file's size
  Group(*steps)
      steps whose Setup failing abandons only them (one of a loop's rounds)
  Do(name, fn)
      fn(report): Python steps that judge a boot of their own (the guest
      kernel suite, tests/kernel/cases.py) and report any number of results
      under NAME: report.ok(text), report.fail(text), report.skip(reason),
      report.note(text) (a line that is not a result), report.abandon()
      (the rest of the case cannot mean anything), report.at_exit(fn) (fn()
      when the run ends however it ends, before the mounts go: e.g. stop a
      daemon the step started)

`{work}` in args and argv is the run's scratch directory (removed at the
end). Lines printed are the ones tests/lib/make_test.py counts: `ok   NAME:`
per passed boot or check, `FAIL NAME: why`, `SKIP CASE: reason`, then
`SUITE: N passed, N failed, N skipped` and, on failure, the failed names on
stderr; exit 0, 1 (a failure) or 2 (bad usage: unknown case, missing binary).

  python3 tests/vmm/cases.py [--list] [CASE...]     (default: every case)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zstest import probe
from zstest.hugepages import HugePages


@dataclass(frozen=True)
class Boot:
    name: str
    rc: int
    verdict: str
    args: tuple[str, ...]
    check: str | None = None
    phases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Setup:
    name: str
    argv: tuple[str, ...]
    show: bool = False


@dataclass(frozen=True)
class Reserve:
    kb: int
    pages: int
    skip: str | None = None


@dataclass(frozen=True)
class SkipUnless:
    path: str
    reason: str


@dataclass(frozen=True)
class Mount:
    path: str
    fstype: str
    options: str


@dataclass(frozen=True)
class Unmount:
    path: str


@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[[Path], tuple[bool, str]]


@dataclass(frozen=True)
class Do:
    name: str
    fn: Callable[["Report"], None]


class StepError(Exception):
    """A Do step cannot go on; the message says what to do (e.g.
    zstest.guestkernel.KitError). Its FAIL line is the message."""


class Report:
    """What a Do step's function reports through: each ok/fail/skip is one
    result line of the suite (counted by the runner and by make_test.py)."""

    def __init__(self, runner: "Runner", case: "Case", name: str):
        self.runner, self.case, self.name, self.work = runner, case, name, runner.work

    def ok(self, text: str) -> None:
        self.runner._ok(self.name, text)

    def fail(self, text: str) -> None:
        self.runner._fail(self.name, text)

    def skip(self, reason: str) -> None:
        self.runner.skipped += 1
        print(f"SKIP {self.name}: {reason}", flush=True)

    def note(self, text: str) -> None:
        print(f"     {self.name}: {text}", flush=True)

    def abandon(self) -> None:
        """Ends the case (or its Group) here; say why first (fail or skip)."""
        raise _Abandon

    def at_exit(self, fn: Callable[[], None]) -> None:
        self.runner.exit_fns.append(fn)

    def under(self, name: str) -> "Report":
        """Results of a step another case needs first (the kernel suite's
        "planted" boots "honest" for its memmap range) under that step's name."""
        return Report(self.runner, self.case, name)


@dataclass(frozen=True, init=False)
class Group:
    steps: tuple

    def __init__(self, *steps):
        object.__setattr__(self, "steps", steps)


@dataclass(frozen=True, init=False)
class Case:
    name: str
    steps: tuple

    def __init__(self, name: str, *steps):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "steps", steps)


def _leaves(steps):
    for s in steps:
        if isinstance(s, Group):
            yield from _leaves(s.steps)
        else:
            yield s


def table_problems(cases: Sequence[Case]) -> list[str]:
    """What is wrong with a case table: a name twice (cases are selected by
    name; boots, setups and checks name their logs and result lines)."""
    bad, seen, results = [], set(), set()
    for c in cases:
        if c.name in seen:
            bad.append(f"case {c.name} is in the table twice")
        seen.add(c.name)
        if not c.steps:
            bad.append(f"case {c.name} has no steps")
        for s in _leaves(c.steps):
            if isinstance(s, (Boot, Setup, Check, Do)):
                if s.name in results:
                    bad.append(f"{type(s).__name__} {s.name} (case {c.name}): the name is used twice")
                results.add(s.name)
    return bad


def select(cases: Sequence[Case], names: Sequence[str]) -> list[Case]:
    """The cases NAMES picks, in the order given; every case when empty."""
    if not names:
        return list(cases)
    by = {c.name: c for c in cases}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise ValueError(f"unknown case {' '.join(unknown)}; cases: {' '.join(by)}")
    return [by[n] for n in names]


class _Abandon(Exception):
    """The rest of the case (or Group) cannot mean anything."""


class Runner:
    """Runs cases and counts results. BOOT is zstest.probe.boot with the
    binaries bound (a fake in unit tests), RUN subprocess.run."""

    def __init__(self, suite: str, work: Path, boot: Callable[..., bool], pools: HugePages,
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run, keep_work: bool = False):
        self.suite, self.work, self.boot, self.pools, self.run = suite, Path(work), boot, pools, run
        # keep_work: the work directory holds logs a failure is read from
        # (the kernel suite's, under $ZEROSTART_CACHE): cleanup leaves it.
        self.keep_work = keep_work
        self.passed = self.failed = self.skipped = 0
        self.failures: list[str] = []
        self.mounts: list[str] = []
        self.exit_fns: list[Callable[[], None]] = []

    def sub(self, s: str) -> str:
        return s.replace("{work}", str(self.work))

    def _ok(self, name: str, text: str) -> None:
        self.passed += 1
        print(f"ok   {name}: {text}", flush=True)

    def _fail(self, name: str, text: str) -> None:
        self.failed += 1
        if name not in self.failures:
            self.failures.append(name)
        print(f"FAIL {name}: {text}", flush=True)

    def run_case(self, case: Case) -> None:
        try:
            self._steps(case, case.steps)
        except _Abandon:
            pass

    def _steps(self, case: Case, steps) -> None:
        for s in steps:
            if isinstance(s, Group):
                try:
                    self._steps(case, s.steps)
                except _Abandon:
                    pass
            else:
                self._step(case, s)

    def _cmd(self, argv: Sequence[str]) -> subprocess.CompletedProcess:
        return self.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, errors="replace")

    def _step(self, case: Case, s) -> None:
        if isinstance(s, Boot):
            if self.boot(s.name, s.rc, s.verdict, [self.sub(a) for a in s.args], s.check, s.phases):
                self.passed += 1
            else:
                self.failed += 1
                self.failures.append(s.name)
        elif isinstance(s, Setup):
            argv = [self.sub(a) for a in s.argv]
            p = self._cmd(argv)
            if p.returncode != 0:
                self._fail(s.name, f"setup step failed: {' '.join(argv)}")
                print(p.stdout, end="", flush=True)
                raise _Abandon
            if s.show:
                print(p.stdout, end="", flush=True)
        elif isinstance(s, Reserve):
            if self.pools.reserve(s.kb, s.pages):
                return
            if s.skip:
                self.skipped += 1
                print(f"SKIP {case.name}: {s.skip}", flush=True)
            else:
                self._fail(case.name, f"could not reserve {s.pages} free {s.kb}kB hugepages (the line above says why)")
            raise _Abandon
        elif isinstance(s, SkipUnless):
            if not Path(self.sub(s.path)).exists():
                self.skipped += 1
                print(f"SKIP {case.name}: {s.reason}", flush=True)
                raise _Abandon
        elif isinstance(s, Mount):
            path = self.sub(s.path)
            os.makedirs(path, exist_ok=True)
            p = self._cmd(["mount", "-t", s.fstype, "-o", s.options, "none", path])
            if p.returncode != 0:
                self._fail(case.name, f"mount -t {s.fstype} -o {s.options} none {path}: {p.stdout.strip()}")
                raise _Abandon
            self.mounts.append(path)
        elif isinstance(s, Unmount):
            path = self.sub(s.path)
            p = self._cmd(["umount", path])
            if p.returncode != 0:
                self._fail(case.name, f"umount {path}: {p.stdout.strip()}")
                raise _Abandon
            self.mounts.remove(path)
        elif isinstance(s, Check):
            try:
                ok, text = s.fn(self.work)
            except OSError as e:
                ok, text = False, str(e)
            (self._ok if ok else self._fail)(s.name, text)
        elif isinstance(s, Do):
            try:
                s.fn(Report(self, case, s.name))
            except _Abandon:
                raise
            except Exception as e:  # noqa: BLE001 - one step's error is its FAIL, the other cases still run
                # (an OSError or StepError says what went wrong; anything
                # else is a bug of the step: its traceback goes to stderr)
                if not isinstance(e, (OSError, StepError)):
                    traceback.print_exc()
                self._fail(s.name, f"{type(e).__name__}: {e}")
        else:
            raise TypeError(f"case {case.name}: {s!r} is not a suite step")

    def cleanup(self) -> None:
        """What Do steps registered (report.at_exit), then mounts (their
        hugetlbfs pages become free), then the scratch directory, then the
        hugepages this run added."""
        while self.exit_fns:
            try:
                self.exit_fns.pop()()
            except Exception as e:  # noqa: BLE001 - the rest of the cleanup must run
                print(f"{self.suite}: cleanup: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        for m in reversed(self.mounts):
            if self._cmd(["umount", m]).returncode != 0:
                self._cmd(["umount", "-l", m])
        self.mounts.clear()
        if not self.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)
        self.pools.restore()

    def summary(self) -> int:
        print(f"{self.suite}: {self.passed} passed, {self.failed} failed, {self.skipped} skipped", flush=True)
        if self.failed:
            print(f"{self.suite}: failed cases: {' '.join(self.failures)}", file=sys.stderr, flush=True)
            return 1
        return 0


def _exit_on_signal(signum, _frame):
    # SystemExit unwinds through the runner's `finally` (and subprocess.run
    # kills the boot or setup it was waiting for), with the shell's status.
    raise SystemExit(128 + signum)


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_suite(runner: Runner, cases: Sequence[Case]) -> int:
    """Runs CASES; whatever ends the run (a failure, an exception, SIGINT,
    SIGTERM, SIGHUP) runs runner.cleanup() before the process exits."""
    old = {s: signal.signal(s, _exit_on_signal) for s in SIGNALS}
    try:
        for c in cases:
            runner.run_case(c)
        return runner.summary()
    finally:
        for s in SIGNALS:  # a second ^C must not cut the restore short
            signal.signal(s, signal.SIG_IGN)
        try:
            runner.cleanup()
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def choose(suite: str, cases: Sequence[Case], argv: Sequence[str], what: str) -> list[Case] | int:
    """The command line every suite module takes, `[--list] [CASE...]`:
    the cases to run, in order, or the exit status to end with (0 after
    --list, 2 for a broken table or an unknown case, with one line why)."""
    ap = argparse.ArgumentParser(prog=suite, description=f"{suite}: {what}")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument("cases", nargs="*", metavar="CASE", help="cases to run, in this order (default: all)")
    a = ap.parse_args(argv)
    problems = table_problems(cases)
    if problems:
        for p in problems:
            print(f"{suite}: case table: {p}", file=sys.stderr)
        return 2
    if a.list:
        print("\n".join(c.name for c in cases))
        return 0
    try:
        return select(cases, a.cases)
    except ValueError as e:
        print(f"{suite}: {e}", file=sys.stderr)
        return 2


def stop_process(proc: subprocess.Popen | None, timeout: float = 10) -> None:
    """Ends a daemon a suite started: SIGTERM, then SIGKILL after TIMEOUT
    seconds; reaped either way. Nothing for one already gone (or None)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def executable_env(suite: str, var: str, what: str) -> str | None:
    """The absolute path in environment variable VAR if it names an
    executable (make sets it), else None after one line naming VAR and
    WHAT it must be."""
    path = os.environ.get(var, "")
    if not (path and os.access(path, os.X_OK)):
        print(f"{suite}: {var}={path!r} is not an executable; set {var} to {what}", file=sys.stderr)
        return None
    return os.path.abspath(path)


def serve(r: Report, cmd: Sequence[str], log_path: Path) -> subprocess.Popen:
    """Starts a daemon the cases need (e.g. `zerostart pool serve`) with its
    output in LOG_PATH, and stops it when the suite ends (SIGTERM, then
    SIGKILL after 10 s), so no daemon outlives the run."""
    log = open(log_path, "w")
    proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def stop() -> None:
        stop_process(proc)
        log.close()
    r.at_exit(stop)
    return proc


def main(suite: str, cases: Sequence[Case], argv: Sequence[str], env: dict[str, str] | None = None) -> int:
    """The entry point of a suite module: `python3 tests/<area>/cases.py [--list] [CASE...]`."""
    chosen = choose(suite, cases, argv, "the probe boots of its case table")
    if isinstance(chosen, int):
        return chosen
    try:
        kvm = stat.S_ISCHR(os.stat("/dev/kvm").st_mode)
    except OSError:
        kvm = False
    if not kvm:
        print(f"{suite}: /dev/kvm is missing; these tests boot the probe guest on KVM (load kvm_intel or kvm_amd)",
              file=sys.stderr)
        return 1
    zs, kernel = os.environ.get("ZEROSTART_BIN", ""), os.environ.get("PROBE_BZIMAGE", "")
    if not (zs and os.access(zs, os.X_OK) and os.path.isfile(kernel)):
        print(f"{suite}: ZEROSTART_BIN={zs!r} (a release zerostart) or PROBE_BZIMAGE={kernel!r} (the probe guest) "
              f"is missing; run make {suite}, which builds both", file=sys.stderr)
        return 2
    os.environ.update(env or {})
    work = Path(tempfile.mkdtemp(prefix=f"zerostart-{suite}."))

    def boot(name, rc, verdict, args, check, phases):
        return probe.boot(name, rc, verdict, args, check, phases, zerostart=zs, kernel=kernel, work=work)

    return run_suite(Runner(suite, work, boot, HugePages(suite)), chosen)
