"""Hugepage pools for the test harness: grow a pool for a run and give the
pages back however the run ends. The one copy of these rules (there was a
bash twin, tests/lib/hugepages.sh): the suites (zstest.suite) reserve per
case in-process, as their table says (the red team dirties *every* free
page right after reserving); scripts run their command under the CLI:

  python3 -m zstest.hugepages [--who NAME] [--may-fail] KB:PAGES [KB:PAGES...] -- COMMAND [ARG...]

reserves PAGES free KB-sized pages of each size, runs COMMAND with
ZS_HUGEPAGES=ok (or =short: --may-fail, some pool could not be grown; the
reason is on stderr), and gives back what it added when COMMAND ends,
however it ends (SIGINT, SIGTERM and SIGHUP are passed on to it first, so
its own cleanup, e.g. unmounting a hugetlbfs, runs before the pages go).
Exit status: COMMAND's (128+N for a signal N); 1 when a pool could not be
grown without --may-fail (COMMAND does not run).

The rules:

  - "free" is free_hugepages - resv_hugepages (pages another process has
    reserved with mmap are not ours to count); sizes are in kB as in
    /sys/kernel/mm/hugepages/hugepages-<kB>kB;
  - reserve(kb, n) grows the pool until n pages are free, or returns False
    with one line on stderr saying why and what to do;
  - restore() takes away exactly the pages this process added (idempotent),
    which puts the pool back unless another process changed it meanwhile
    (then that change is kept). zstest.suite calls it in a `finally` that
    also runs on SIGINT/SIGTERM/SIGHUP, after the suite's mounts are gone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SYSFS = Path("/sys/kernel/mm/hugepages")


class HugePages:
    def __init__(self, who: str, sysfs: Path = SYSFS, log=None):
        self.who = who
        self.sysfs = Path(sysfs)
        self.log = log
        self.added: dict[int, int] = {}

    def _say(self, msg: str) -> None:
        print(f"{self.who}: {msg}", file=self.log or sys.stderr, flush=True)

    def dir(self, kb: int) -> Path:
        return self.sysfs / f"hugepages-{kb}kB"

    def _read(self, kb: int, name: str) -> int:
        return int((self.dir(kb) / name).read_text())

    def free(self, kb: int) -> int:
        """Free pages of size KB not reserved by anybody."""
        return self._read(kb, "free_hugepages") - self._read(kb, "resv_hugepages")

    def reserve(self, kb: int, need: int) -> bool:
        """Grows the KB pool until NEED pages are free; False (and why, on
        stderr) when the kernel has no such pages or cannot find them."""
        d = self.dir(kb)
        nr = d / "nr_hugepages"
        if not nr.exists():
            self._say(f"this kernel has no {kb}kB hugepages ({d} is missing)")
            return False
        free = self.free(kb)
        if free >= need:
            return True
        total = self._read(kb, "nr_hugepages")
        if not os.access(nr, os.W_OK):
            self._say(f"need {need} free {kb}kB hugepages but only {free} are free, and {nr} is not writable "
                      f"(run as root, or: echo {total + need - free} | sudo tee {nr})")
            return False
        # The write fails (or gives fewer pages) when the kernel cannot find
        # the memory; what it did give is recorded and given back all the same.
        try:
            nr.write_text(f"{total + need - free}\n")
        except OSError:
            pass
        now = self._read(kb, "nr_hugepages")
        self.added[kb] = self.added.get(kb, 0) + now - total
        free = self.free(kb)
        if free < need:
            self._say(f"could only get {free} of {need} free {kb}kB hugepages (pool {total} -> {now}): the kernel "
                      "cannot find that much contiguous memory; free some memory or reserve hugepages at boot "
                      "(hugepages=N on the kernel command line)")
            return False
        self._say(f"{kb}kB hugepage pool {total} -> {now} for {need} free pages")
        return True

    def restore(self) -> None:
        """Gives back every page this process added (idempotent)."""
        for kb, n in self.added.items():
            if n <= 0:
                continue
            nr = self.dir(kb) / "nr_hugepages"
            target = max(self._read(kb, "nr_hugepages") - n, 0)
            try:
                nr.write_text(f"{target}\n")
            except OSError:
                self._say(f"could not restore {nr} to {target}")
                continue
            self.added[kb] = 0
            self._say(f"{kb}kB hugepage pool restored to {self._read(kb, 'nr_hugepages')}")


def main(argv: list[str]) -> int:
    import argparse
    import signal
    import subprocess

    if "--" not in argv:
        print("zstest.hugepages: usage: python3 -m zstest.hugepages [--who NAME] [--may-fail] KB:PAGES... -- "
              "COMMAND [ARG...]", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="python3 -m zstest.hugepages")
    ap.add_argument("--who", default="hugepages", help="prefix of the messages")
    ap.add_argument("--may-fail", action="store_true", help="run COMMAND (ZS_HUGEPAGES=short) if a pool is short")
    ap.add_argument("sizes", nargs="+", metavar="KB:PAGES")
    a = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    if not cmd:
        print("zstest.hugepages: no COMMAND after --", file=sys.stderr)
        return 2
    want = []
    for spec in a.sizes:
        kb, _, n = spec.partition(":")
        if not (kb.isdigit() and n.isdigit()):
            print(f"zstest.hugepages: {spec!r} is not KB:PAGES; write e.g. 2048:192", file=sys.stderr)
            return 2
        want.append((int(kb), int(n)))
    pools = HugePages(a.who)
    child = None

    def forward(signum, _frame):
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        got = all([pools.reserve(kb, n) for kb, n in want])
        if not got and not a.may_fail:
            return 1
        if not got:
            print(f"{a.who}: running the command anyway (ZS_HUGEPAGES=short)", file=sys.stderr, flush=True)
        child = subprocess.Popen(cmd, env=dict(os.environ, ZS_HUGEPAGES="ok" if got else "short"))
        while True:
            try:
                rc = child.wait()
                break
            except InterruptedError:
                continue
        return 128 - rc if rc < 0 else rc
    finally:
        pools.restore()
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
