#!/usr/bin/env python3
"""Where a TCG guest kernel's boot spends its time, by function.

TCG has no PMU to sample and the guest cannot profile its own early boot,
so this samples from outside: QEMU's monitor (`info registers -a`) is read
every PERIOD seconds while the guest boots as tests/kernel/measure.sh boots
it (zstest.guestkernel: the honest hint as setup_data, the test initramfs,
nokaslr so that the image's System.map names every RIP), and each vCPU's
RIP is mapped to the function that holds it. A sample is host time, not
guest work: under -icount (--icount, single-threaded TCG) the guest clock
counts instructions, but the sampler still sees where the host spent its
time (e.g. first-touch faults of guest RAM show up in whatever wrote it).
Good for finding the step that scales, not for exact shares.

  PYTHONPATH=tests python3 tests/kernel/tcgprof.py --image BZIMAGE \\
      --system-map System.map --mem-mib 65536 \\
      --append "init_on_alloc=1 hugepages=16384" [--icount] [--smp 2] \\
      [--period 0.002] [--window deferred_init_maxorder] [--work DIR]

Prints the 25 functions with the most samples over the whole boot and, with
--window SYMBOL, over the samples between the first and the last one of
SYMBOL (the step SYMBOL belongs to, and what ran beside it). The System.map
must be the image's own: a dev build's (guest-kernel-patches/build.sh
--dev keeps build/System.map), not another build of the same series.
Found this way (2026-12-05): with init_on_alloc=1, check_pages' per-page
checks in free_pages_prepare() (deferred init) and __rmqueue_pcplist()
(the hugetlb pool), see docs/kernel-measurements.md "Scale".
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zstest import guestkernel as gk, qemu  # noqa: E402

RIP_RE = re.compile(r"\bRIP=([0-9a-f]{16})")
KERNEL_TEXT = 0xffffffff80000000


class SymbolMap:
    """Text symbols of a System.map, for RIP -> function."""

    def __init__(self, text: str):
        syms = []
        for ln in text.splitlines():
            parts = ln.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                syms.append((int(parts[0], 16), parts[2]))
        syms.sort()
        self.addrs = [a for a, _ in syms]
        self.names = [n for _, n in syms]

    def name(self, rip: int) -> str:
        """The function holding RIP ("user/other" outside kernel text)."""
        i = bisect.bisect_right(self.addrs, rip) - 1
        if rip < KERNEL_TEXT or i < 0:
            return "user/other"
        return self.names[i]


def top(samples: list[str], n: int = 25) -> list[tuple[str, int, float]]:
    """The N most frequent names: (name, samples, percent)."""
    c = collections.Counter(samples)
    total = sum(c.values()) or 1
    return [(k, v, 100.0 * v / total) for k, v in c.most_common(n)]


def window(samples: list[str], symbol: str) -> list[str]:
    """The samples from the first to the last one of SYMBOL (empty if none)."""
    idx = [i for i, s in enumerate(samples) if s == symbol]
    return samples[idx[0]:idx[-1] + 1] if idx else []


class Monitor:
    """QEMU's human monitor on a unix socket."""

    def __init__(self, path: Path, timeout: float = 60):
        end = time.monotonic() + timeout
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX)
                self.s.connect(str(path))
                break
            except OSError:
                self.s.close()
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        self.s.settimeout(10)
        self.buf = b""
        self.command("")

    def command(self, cmd: str) -> str:
        self.s.sendall(cmd.encode() + b"\n")
        while b"(qemu) " not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise EOFError
            self.buf += d
        out, _, self.buf = self.buf.partition(b"(qemu) ")
        return out.decode(errors="replace")


def sample(args: argparse.Namespace) -> tuple[list[str], Path]:
    """Boot once and sample; returns (per-sample function names, console log)."""
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    initrd = gk.build_initramfs(work)
    img, blob = gk.make_hinted_image(work, "prof", args.image, gk.honest_hint_ranges(args.mem_mib))
    extra = ["-initrd", str(initrd), *gk.loader_args(blob)]
    if args.icount:
        extra += ["-icount", "shift=0,sleep=off"]
    if args.mem_mib >= 16384:  # as measure.sh: overcommit, backed as touched
        extra += ["-object", f"memory-backend-ram,id=zs-ram,size={args.mem_mib}M,reserve=off",
                  "-machine", "memory-backend=zs-ram"]
    mon = work / "monitor.sock"
    mon.unlink(missing_ok=True)
    extra += ["-monitor", f"unix:{mon},server=on,wait=off"]
    cmd = qemu.kernel_command(img, f"{args.append} nokaslr", args.mem_mib, extra,
                              thread="single" if args.icount else None, smp=args.smp)
    log = work / "console.log"
    syms = SymbolMap(Path(args.system_map).read_text())
    names: list[str] = []
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            m = Monitor(mon)
            end = time.monotonic() + args.timeout
            while p.poll() is None and time.monotonic() < end:
                names += [syms.name(int(r, 16)) for r in RIP_RE.findall(m.command("info registers -a"))]
                time.sleep(args.period)
        except (EOFError, OSError):
            pass  # QEMU went away: the boot ended
        finally:
            if p.poll() is None:
                p.kill()
            p.wait()
    return names, log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", required=True)
    ap.add_argument("--system-map", required=True)
    ap.add_argument("--mem-mib", type=int, default=4096)
    ap.add_argument("--append", default="init_on_alloc=1")
    ap.add_argument("--icount", action="store_true")
    ap.add_argument("--smp", type=int, default=2)
    ap.add_argument("--period", type=float, default=0.002)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--window", default=None)
    ap.add_argument("--work", default=str(gk.ROOT / "target" / "tcgprof"))
    args = ap.parse_args()
    for f in (args.image, args.system_map):
        if not Path(f).is_file():
            print(f"tcgprof: {f}: no such file; build the image with guest-kernel-patches/build.sh --dev "
                  "and pass its build/System.map", file=sys.stderr)
            return 2
    names, log = sample(args)
    if not names:
        print(f"tcgprof: no samples (QEMU ended at once? see {log})", file=sys.stderr)
        return 1
    print(f"tcgprof: {len(names)} samples ({args.smp} vCPUs each); console {log}")
    for k, v, pct in top(names):
        print(f"  {v:6d} {pct:5.1f}%  {k}")
    if args.window:
        w = window(names, args.window)
        print(f"tcgprof: window of {args.window}: {len(w)} samples")
        for k, v, pct in top(w):
            print(f"  {v:6d} {pct:5.1f}%  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
