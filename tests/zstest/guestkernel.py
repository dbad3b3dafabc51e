"""The guest kernel tests' boot kit: the initramfs with /init and zsprobe,
the pre-zeroed hint as real setup_data, and one QEMU TCG boot through
zstest.qemu, for the kernel suite (tests/kernel/run.py) and the kernel
measurements (tests/kernel/measure.sh, memmap-measure.sh, through the CLI
below). Boots happen in QEMU TCG: this machine's /dev/kvm cannot run Linux.

Why here and not in tests/kernel/lib.sh: the suite is a case table in
Python (zstest.suite), and the measurements must boot exactly as the suite
does; one copy of each helper, callable from both.

  python3 -m zstest.guestkernel initramfs DIR            -> DIR/initrd.cpio.gz
  python3 -m zstest.guestkernel hinted DIR NAME BZIMAGE RANGES [mkhint flags]
                                                         -> DIR/NAME.bzImage, DIR/NAME.blob
  python3 -m zstest.guestkernel honest-ranges MEM_MIB    (prints START:LEN,...)
  python3 -m zstest.guestkernel loader-args BLOB         (prints the -device loader args)
  python3 -m zstest.guestkernel boot LOG TIMEOUT MEM_MIB IMAGE APPEND [QEMU ARG...]
      exit 0 when QEMU ran to its end with status 0, else 1 and one line why
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from zstest import qemu
from zstest.suite import StepError

ROOT = Path(__file__).resolve().parents[2]
KTEST = ROOT / "tests" / "kernel"
CACHE = Path(os.environ.get("ZEROSTART_CACHE", Path.home() / ".cache" / "zerostart"))
MIB = 1 << 20
# Where the hint's setup_data entry is placed in guest RAM (128 MiB): above
# everything QEMU and SeaBIOS put in low memory, below the initrd at the top.
HINT_ADDR = 128 * MIB
DEPS = ("qemu-system-x86", "busybox-static", "cpio", "gcc", "libc6-dev", "python3")


class KitError(StepError):
    """A step of the kit that cannot go on; the message says what to do."""


def log(who: str, msg: str) -> None:
    print(f"{who}: {msg}", file=sys.stderr, flush=True)


def install_test_deps(who: str = "test-kernel") -> None:
    """apt-get installs what the boots need and is missing (as before, in lib.sh)."""
    need = []
    for p in DEPS:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            need.append(p)
    if not need:
        return
    log(who, f"installing {' '.join(need)}")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    r = subprocess.run([*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
                        "--no-install-recommends", *need], stdout=subprocess.DEVNULL)
    if r.returncode != 0:
        raise KitError(f"could not install {' '.join(need)}; install them with apt-get and re-run")


def build_initramfs(work: Path) -> Path:
    """busybox + tests/kernel/init.sh as /init + zsprobe -> WORK/initrd.cpio.gz
    (WORK/initramfs is left for callers that change /init, e.g. memmap-measure.sh)."""
    root = Path(work) / "initramfs"
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "proc", "sys", "dev"):
        (root / d).mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    r = subprocess.run(["gcc", "-O2", "-static", "-Wall", "-Werror", "-o", str(root / "zsprobe"),
                        str(KTEST / "zsprobe.c")])
    if r.returncode != 0:
        raise KitError("cannot build zsprobe (gcc, libc6-dev)")
    shutil.copy(KTEST / "init.sh", root / "init")
    os.chmod(root / "init", 0o755)
    return pack_initramfs(work)


def pack_initramfs(work: Path) -> Path:
    out = Path(work) / "initrd.cpio.gz"
    r = subprocess.run("find . | cpio -o -H newc --quiet | gzip -1", shell=True, cwd=Path(work) / "initramfs",
                       stdout=open(out, "wb"))
    if r.returncode != 0:
        raise KitError(f"cannot pack {out} (cpio, gzip)")
    return out


def make_hinted_image(work: Path, name: str, image: Path | str, ranges: str, *flags: str) -> tuple[Path, Path]:
    """A copy of IMAGE whose boot header points at a setup_data entry at
    HINT_ADDR carrying a hint of RANGES (mkhint.py): WORK/NAME.bzImage and
    the entry, WORK/NAME.blob, to load there with loader_args()."""
    img, blob = Path(work) / f"{name}.bzImage", Path(work) / f"{name}.blob"
    r = subprocess.run([sys.executable, str(KTEST / "mkhint.py"), "--ranges", ranges, "--addr", str(HINT_ADDR),
                        "--bzimage", str(image), "--out-image", str(img), "--out-blob", str(blob), *flags],
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           [str(ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])])))
    if r.returncode != 0:
        raise KitError(f"mkhint.py could not build the {name} hint ({ranges}) for {image}")
    return img, blob


def test_disk(path: Path | str) -> dict:
    """A scratch image as a virtio disk (a spec's disk, options::vmm_cmd),
    through the host's page cache: QEMU's default, which the tests' `-drive
    if=virtio` had, not the launcher's O_DIRECT (cache=none), which tmpfs
    would refuse."""
    return {"path": str(path), "cache": "writeback"}


def fat_dir_disk(path: Path | str) -> dict:
    """A host directory as a read-only FAT disk (QEMU's vvfat; a spec's
    disk), for firmware to boot an EFI application from; vvfat has no
    O_DIRECT, so through the host's page cache."""
    return {"path": str(path), "readonly": True, "fat_dir": True, "cache": "writeback"}


def loader(file: Path | str, addr: int) -> dict:
    """FILE planted in guest RAM at ADDR by QEMU (a spec's qemu.loaders
    entry, options::vmm_cmd::Loader)."""
    return {"file": str(file), "addr": addr}


def hint_spec(blob: Path | str, *more: dict) -> dict:
    """The spec part that plants the hint BLOB at HINT_ADDR (and the MORE
    loaders after it), for kernel_command."""
    return {"qemu": {"loaders": [loader(blob, HINT_ADDR), *more]}}


def loader_args(blob: Path | str) -> list[str]:
    """hint_spec's plant as QEMU arguments, for the shell measurement
    scripts (tests/kernel/lib.sh's hint_loader_args), which spell their own
    QEMU command lines."""
    return ["-device", f"loader,file={blob},addr={HINT_ADDR},force-raw=on"]


def honest_hint_ranges(mem_mib: int) -> str:
    """The hint a VMM would send for a QEMU pc guest of MEM_MIB: all RAM from
    16 MiB up, minus the setup_data page, the top 64 MiB below the low RAM
    end (initrd, ACPI, SeaBIOS write there before the kernel runs) and the
    PCI hole; all RAM above 4 GiB."""
    mem = mem_mib * MIB
    high = 0
    if mem >= 0xE0000000:
        low = 0xC0000000
        high = mem - low
    else:
        low = mem
    r = f"{16 * MIB}:{HINT_ADDR - 16 * MIB},{HINT_ADDR + 4096}:{low - 64 * MIB - HINT_ADDR - 4096}"
    if high > 0:
        r += f",{1 << 32}:{high}"
    return r


def kv(lines: list[str], prefix: str, key: str) -> str | None:
    """Value of KEY=... on the last line starting with PREFIX + ' ' (None if absent)."""
    val = None
    for ln in lines:
        if ln.startswith(prefix + " "):
            for w in ln.split():
                if w.startswith(key + "="):
                    val = w[len(key) + 1:]
    return val


def untangle(lines: list[str]) -> list[str]:
    """LINES with each kernel message that cut into a line of the test
    programs (they all begin with "ZS") taken out: the message on a line of
    its own, and the cut line joined to its rest (the next line). Any other
    line stays as it is (e.g. the firmware's "Booting from ROM.." before the
    kernel's first message). The streaming form is zstest.qemu.Untangler,
    which every Console applies as it reads."""
    u = qemu.Untangler(("ZS",))
    return [out for ln in lines for out in u.feed(ln)] + u.flush()


def grep(lines: list[str], pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [ln for ln in lines if rx.search(ln)]


# A kernel's own account of why it stopped: the first of these lines in a
# log that did not end in a power-off names the fault (and RIP: where).
LAST_WORDS_RE = re.compile(r"Kernel panic|BUG:|Oops|general protection fault|double fault|WARNING:|RIP: |"
                           r"Kernel Offset|reboot: ")


def last_words(lines: list[str], most: int = 3) -> str:
    """The first MOST lines of LINES that say why a kernel stopped (a panic,
    an oops and its RIP, a warning, a reboot request), joined by " | " and
    without printk times: put into a failure line, a CI summary that shows
    only failure lines still names the crash. Empty when the log has none
    (a triple fault or a reset says nothing)."""
    hits = [qemu.PRINTK_AT.sub("", ln).strip() for ln in lines if LAST_WORDS_RE.search(ln)]
    return " | ".join(hits[:most])


def boot(logf: Path, timeout: float, mem_mib: int, image: Path | str, append: str, extra: list[str] = (),
         who: str = "test-kernel", reboots: int = 0, spec: dict | None = None) -> qemu.Boot:
    """One TCG boot of IMAGE (zstest.qemu.kernel_command, with SPEC and EXTRA;
    ZS_TCG_THREAD picks the thread mode); a QEMU that timed out or failed is
    named on stderr. REBOOTS: resets in place the guest may announce
    (zstest.qemu.boot)."""
    cmd = qemu.kernel_command(image, append, mem_mib, list(extra), reboot=reboots > 0,
                              end_log=qemu.end_log_path(Path(logf)), spec=spec)
    b = qemu.boot(cmd, log=Path(logf), timeout=timeout, reboots=reboots)
    if b.problem():
        log(who, b.problem())
    elif b.ended != "power-off":  # a panic (panic=-1), reset or triple fault: said, judged by the caller
        log(who, f"the guest ended by {b.ended}, not a power-off ({logf})")
    return b


def int_or(v: str | None, default: int) -> int:
    """bash's ${v:-default} as a number; a value that is no number counts as DEFAULT."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def main(argv: list[str]) -> int:
    usage = __doc__.split("\n\n")[-1]
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "initramfs" and len(args) == 1:
            build_initramfs(Path(args[0]))
        elif cmd == "hinted" and len(args) >= 4:
            make_hinted_image(Path(args[0]), args[1], args[2], args[3], *args[4:])
        elif cmd == "honest-ranges" and len(args) == 1:
            print(honest_hint_ranges(int(args[0])))
        elif cmd == "loader-args" and len(args) == 1:
            print(" ".join(loader_args(args[0])))
        elif cmd == "boot" and len(args) >= 5:
            b = boot(Path(args[0]), float(args[1]), int(args[2]), args[3], args[4], args[5:],
                     who=os.environ.get("ZS_KIT_WHO", "kernel-boot"))
            return 0 if b.problem() is None else 1
        else:
            print(f"zstest.guestkernel: bad arguments: {' '.join(argv)}; usage:\n{usage}", file=sys.stderr)
            return 2
    except KitError as e:
        print(f"zstest.guestkernel: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
