#!/usr/bin/env python3
"""make test-kernel: the guest kernel series, tested in QEMU TCG: the case
tables of cases.py (the main suite, then the memmap suite) on zstest.suite,
every boot through zstest.qemu.

  python3 tests/kernel/run.py [--line 6.12|7.3] [--kernel BZIMAGE] [--kasan-kernel BZIMAGE]
                              [--series-dir DIR] [--firmware OVMF.fd]
                              [--suite kernel|kasan|memmap] [--list] [--repeat N] [CASE...]

The kernel under test is a parameter: --line names a kernel line of
guest-kernel-patches/ (guest-kernel-patches/6.12/, the default, or
guest-kernel-patches/7.3/), and sets the defaults of the rest: --kernel is
the bzImage (default $ZEROSTART_KERNEL_IMAGE, else the line's committed
series built in the cache, `guest-kernel-patches/build.sh --line L
--print`), --kasan-kernel the same series built with generic KASAN for the
kasan suite (default: bzImage-kasan beside the line's cached bzImage,
which `ZEROSTART_KERNEL_VARIANTS=kasan build.sh` builds), --series-dir the
series it was built from (its `series` file
and patches/: the vector-copy check and the KUnit suites to require),
default $ZEROSTART_KERNEL_SERIES_DIR, else the line's directory. Suites of
a line other than 6.12 carry its name (`kernel-7.3: N passed, ...`), so
the two lines' results stay apart in one `make test-kernel`. make builds
the kernels and the firmware (mk/kernel.mk); this script builds nothing
but the initramfs (busybox, /init, zsprobe).

Tables: a run without case names (make test-kernel) runs the main suite,
the memmap suite and the kasan suite; the kasan suite needs the KASAN
image, a second cold kernel build per line (12 to 15 minutes here), which
make test-kernel builds, incrementally, only where this machine keeps its
build directory (make test-kernel-kasan made it once; a fresh machine's
make demo + make test cannot fit two such builds in their 90 minutes);
without the image the suite is one SKIP line saying so. --suite kasan
(make test-kernel-kasan) runs it alone and fails without the image.

Cases: CASE... or ZS_TEST_ONLY="kunit good ..." picks a subset (names of
the main or memmap table, in table order, or of --suite's; qemu-exit,
vectors and checkpatch always run); default every case.
ZEROSTART_KERNEL_TEST_TIMEOUT (s) per boot (default 600, memmap
900). ZS_TEST_WORK=dir: logs and scratch (default
target/kernel-test of this checkout, target/kernel-test-L for line L other
than 6.12, the memmap suite in its memmap/ subdir, --suite kasan in
target/kernel-test-kasan[-L]); kept after the run, for reading a failure.

--repeat N soaks the named cases: N rounds (the always-run cases in the
first only), ending at the first round with a failure, whose logs are the
ones left in the work directory; no round runs after a failed one.

Correctness boots run single-threaded TCG (ZS_TCG_THREAD=single unless
set): with thread=multi about 1 boot in 20 died with "Oops: int3" in
sched_clock_tick while the kernel patched its own text (static keys), with
and without a hint: a multi-threaded TCG cross-modifying-code race, not
ours. Timings (measure.sh) keep multi.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ for cases.py in the work tree
import cases
from zstest import guestkernel as gk
from zstest.hugepages import HugePages
from zstest.suite import Runner, run_suite, table_problems

WHO = "test-kernel"


DEFAULT_LINE = "6.12"


def line_dir(line: str) -> Path:
    """The directory of a kernel line's series (build.sh's HERE)."""
    return gk.ROOT / "guest-kernel-patches" / line


def default_kernel(line: str) -> str | None:
    if os.environ.get("ZEROSTART_KERNEL_IMAGE"):
        return os.environ["ZEROSTART_KERNEL_IMAGE"]
    p = subprocess.run(["bash", str(gk.ROOT / "guest-kernel-patches" / "build.sh"), "--line", line, "--print"],
                       capture_output=True, text=True)
    out = p.stdout.strip().splitlines()
    return f"{out[-1]}/bzImage" if p.returncode == 0 and out else None


def kasan_image(line: str, image: Path, given: str | None, by_hand: bool) -> tuple[Path | None, str | None]:
    """The KASAN image of the kasan suite, or None and why there is none:
    GIVEN (--kasan-kernel), else bzImage-kasan beside the line's cached
    IMAGE (build.sh puts it there); an image given BY_HAND has no such
    sibling. A full run says SKIP with the why, --suite kasan fails."""
    if given:
        kimage = Path(given)
    elif by_hand:
        return None, "the kasan suite of a kernel given by hand needs its KASAN build too: pass --kasan-kernel BZIMAGE"
    else:
        kimage = image.parent / "bzImage-kasan"
    if kimage.is_file():
        return kimage.resolve(), None
    if given:
        return None, f"no KASAN kernel image at {kimage} (--kasan-kernel); pass the path of a KASAN bzImage"
    build = "kernel-kasan" if line == DEFAULT_LINE else f"kernel-{line}-kasan"
    return None, (f"no KASAN kernel image at {kimage}: this machine never built one (a second cold kernel build, "
                  f"12 to 15 min, outside a fresh machine's make test budget); `make {build}` or `make "
                  "test-kernel-kasan` builds it once, then make test-kernel keeps it current and runs this suite")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tests/kernel/run.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--line", default=DEFAULT_LINE,
                    help=f"the kernel line: guest-kernel-patches/LINE (default {DEFAULT_LINE})")
    ap.add_argument("--kernel", help="the bzImage under test")
    ap.add_argument("--kasan-kernel", help="the same series built with KASAN, for the kasan suite (default: "
                                           "bzImage-kasan beside the line's cached bzImage)")
    ap.add_argument("--series-dir", type=Path,
                    help="the series it was built from (series + patches/; default $ZEROSTART_KERNEL_SERIES_DIR, "
                         "else the line's directory)")
    ap.add_argument("--firmware", help="zerostart's OVMF.fd (ZeroStartHandover.efi beside it), for the efi cases "
                                       "(make test-kernel passes it)")
    ap.add_argument("--work", type=Path, help="logs and scratch (kept)")
    ap.add_argument("--suite", choices=("kernel", "kasan", "memmap"), help="run only this table")
    ap.add_argument("--list", action="store_true", help="print the case names of each table and exit")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="a soak: run the named cases N times (the always-run cases once), stopping at the first "
                         "round with a failure, whose logs stay in the work directory (default 1)")
    ap.add_argument("cases", nargs="*", metavar="CASE")
    a = ap.parse_args(argv)
    os.environ.setdefault("ZS_TCG_THREAD", "single")
    if not (line_dir(a.line) / "series").is_file():
        print(f"{WHO}: no kernel line '{a.line}' (no {line_dir(a.line)}/series); lines: "
              + " ".join(d.parent.name for d in sorted((gk.ROOT / "guest-kernel-patches").glob("*/series"))),
              file=sys.stderr)
        return 2
    if a.series_dir is None:
        a.series_dir = Path(os.environ.get("ZEROSTART_KERNEL_SERIES_DIR") or line_dir(a.line))
    # Suite names: 6.12's as they always were, another line's with its name.
    tag = "" if a.line == DEFAULT_LINE else f"-{a.line}"

    # In this checkout's target/, not the shared cache: two checkouts (a CI
    # clone and a developer's tree) testing at once each wiped the other's
    # hinted images in a shared test-run/ (seen: "could not open kernel file
    # .../test-run/good.bzImage" in 9 cases of a fresh-clone run).
    # --suite kasan (make test-kernel-kasan) keeps its own work directory,
    # so it never wipes test-kernel's logs; in a full run the kasan suite
    # works in WORK/kasan beside memmap/.
    kasan = a.suite == "kasan"
    work = a.work or Path(os.environ.get("ZS_TEST_WORK")
                          or gk.ROOT / "target" / f"kernel-test{'-kasan' if kasan else ''}{tag}")
    tmo = os.environ.get("ZEROSTART_KERNEL_TEST_TIMEOUT")
    k = cases.Kernel(image=Path("."), series_dir=a.series_dir, firmware=None, work=work,
                     timeout=float(tmo or 600), memmap_timeout=float(tmo or 900))
    km = cases.Kernel(image=Path("."), series_dir=a.series_dir, firmware=None, work=work / "memmap",
                      timeout=k.timeout, memmap_timeout=k.memmap_timeout)
    kz = cases.Kernel(image=Path("."), series_dir=a.series_dir, firmware=None, work=work / "kasan",
                      timeout=k.timeout, memmap_timeout=k.memmap_timeout, append=cases.KASAN_APPEND)
    names = a.cases or os.environ.get("ZS_TEST_ONLY", "").split()
    tables = [("kernel", k, cases.table(k)), ("memmap", km, cases.memmap_table(km)),
              ("kasan", kz, cases.kasan_table(kz))]
    if a.suite:
        tables = [t for t in tables if t[0] == a.suite]
    elif names:
        # Case names pick from the main and memmap tables (the kasan
        # table's are their namesakes): a full run alone adds it.
        tables = tables[:2]
    with_kasan = any(t[0] == "kasan" for t in tables)
    tables = [(name + tag, kk, t) for name, kk, t in tables]
    for name, _, t in tables:
        for p in table_problems(t):
            print(f"{WHO}: {name} case table: {p}", file=sys.stderr)
            return 2
    if a.list:
        for name, _, t in tables:
            print(f"{name}: {' '.join(c.name for c in t)}")
        return 0

    if a.repeat < 1:
        print(f"{WHO}: --repeat {a.repeat} runs nothing; give a count of at least 1", file=sys.stderr)
        return 2
    if a.repeat > 1 and not names:
        print(f"{WHO}: --repeat {a.repeat} without cases would soak the whole suite; name the cases to soak "
              "(e.g. --repeat 300 memblock)", file=sys.stderr)
        return 2
    known = {c.name for _, _, t in tables for c in t}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"{WHO}: unknown case {' '.join(unknown)}; cases: {' '.join(sorted(known))}", file=sys.stderr)
        return 2

    image = a.kernel or default_kernel(a.line)
    if not image or not Path(image).is_file():
        build = "make kernel" if a.line == DEFAULT_LINE else f"make kernel-{a.line}"
        print(f"{WHO}: no kernel image at {image or f'(the {a.line} series is not built)'}; build it with "
              f"`{build}` or pass --kernel BZIMAGE", file=sys.stderr)
        return 2
    if not a.firmware and any(name == "kernel" + tag and (not names or any(n.startswith("efi") for n in names))
                              for name, _, _ in tables):
        print(f"{WHO}: the efi cases need --firmware OVMF.fd (and ZeroStartHandover.efi beside it); `make "
              "test-kernel` passes the one `make firmware` builds (or pick cases without efi*)", file=sys.stderr)
        return 2
    for kk in (k, km):
        kk.image, kk.firmware = Path(image).resolve(), Path(a.firmware) if a.firmware else None
    if with_kasan:
        by_hand = bool(a.kernel or os.environ.get("ZEROSTART_KERNEL_IMAGE"))
        kimage, why = kasan_image(a.line, Path(image), a.kasan_kernel, by_hand)
        if kimage:
            kz.image = kimage
        if why and kasan:
            print(f"{WHO}: {why}", file=sys.stderr)
            return 2
        if why:
            tables = [(n, kk, [cases.Case("kasan", cases.Do("kasan", lambda r, w=why: r.skip(w)))])
                      if n == "kasan" + tag else (n, kk, t) for n, kk, t in tables]
    if not (a.series_dir / "series").is_file():
        print(f"{WHO}: no series file in {a.series_dir}; pass --series-dir DIR (the series the kernel was built "
              "from)", file=sys.stderr)
        return 2
    gk.log(WHO, f"line {a.line}: kernel {k.image} (series {a.series_dir})")

    try:
        gk.install_test_deps(WHO)
        shutil.rmtree(work, ignore_errors=True)
        km.work.mkdir(parents=True)
        if with_kasan:
            kz.work.mkdir(parents=True)
        k.initrd = gk.build_initramfs(k.work)
        km.initrd = kz.initrd = k.initrd
    except (gk.KitError, OSError) as e:
        print(f"{WHO}: {e}", file=sys.stderr)
        return 1

    rc = 0
    for rnd in range(1, a.repeat + 1):
        # A soak never boots again after a failed round: a patched guest that
        # crashed is a failure to read (its console is in the work directory),
        # not something to retry.
        for name, kk, t in tables:
            chosen = [c for c in t if not names or c.name in names
                      or (rnd == 1 and name == "kernel" + tag and c.name in cases.ALWAYS)]
            if not chosen:
                continue
            runner = Runner(name, kk.work, boot=None, pools=HugePages(WHO), keep_work=True)
            rc = max(rc, run_suite(runner, chosen))
        if a.repeat > 1:
            gk.log(WHO, f"line {a.line}: soak round {rnd} of {a.repeat}: {'passed' if rc == 0 else 'FAILED'}")
        if rc:
            break
    gk.log(WHO, f"line {a.line}: {'all kernel tests passed' if rc == 0 else 'a check failed'} (logs in {work})")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
