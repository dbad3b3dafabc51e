"""Hugepage pools for the Python suites: grow a pool for a run and give the
pages back however the run ends.

Why a port of tests/lib/hugepages.sh and not a call to it: that helper
records what it added in the shell that sourced it and gives it back when
that shell exits; the suite runner (zstest.suite) is one Python process
that reserves per case, as its table says (the red team dirties *every*
free page right after reserving), so the record has to live in this
process. The rules and messages are the bash helper's, kept in step:

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
