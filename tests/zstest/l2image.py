"""Builds the nested KVM test host (the "L2" image) from Debian packages.

Why this exists: the machines zerostart is developed on expose a software KVM
that cannot boot Linux. QEMU in TCG mode with an emulated AMD CPU
(`-cpu EPYC,+svm`) running Debian's cloud kernel can load kvm-amd and run
real KVM guests, so every claim about booting Linux is checked there. This
script produces, cached by a hash of every input under
$ZEROSTART_CACHE/nested/:

  l2-<hash>/vmlinuz            Debian bookworm cloud kernel (L2)
  l2-<hash>/initramfs.cpio     busybox, kvm modules, zerostart, QEMU bundle,
                               L3 kernels, L3 initramfs, scenario script
  l2-<hash>/manifest.json      what went in (paths, hashes, package versions)

The scenario list is not part of the image: the harness appends it as a
second cpio archive at boot (the kernel unpacks concatenated archives, see
zstest.qemu.boot_l2), so changing scenarios never rebuilds the image.
Python 3 standard library only.

  python3 -m zstest.l2image [--zerostart PATH] [--no-qemu] [--fetch-only]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
# The files L2 runs (l2-*.sh, scenario.sh) and the pinned versions.
HERE = REPO / "tests" / "nested-host"
GUEST_INIT = REPO / "tests" / "guest-init"
LOCK = HERE / "versions.lock"

# Files of ours that go into the image; their bytes are part of the hash.
L2_INIT = HERE / "l2-init.sh"
SCENARIO_SH = HERE / "scenario.sh"
# Every L2 harness's VMM timeout (scenario.sh, l2-pool.sh).
L2_TIMEOUT_SH = HERE / "l2-timeout.sh"

SUITE_SOURCES = """Types: deb
URIs: http://deb.debian.org/debian
Suites: SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


class BuildError(Exception):
    """A build step failed; the message names the problem and the fix."""


def log(msg: str) -> None:
    print(f"nested-host: {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    root = Path(os.environ.get("ZEROSTART_CACHE", Path.home() / ".cache" / "zerostart"))
    return root / "nested"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(cmd: list[str], timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    """Runs a tool; bounded, so a stuck mirror or compiler cannot hang CI."""
    try:
        return subprocess.run(cmd, check=False, text=True, capture_output=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise BuildError(f"`{' '.join(cmd[:3])} ...` did not finish within {timeout} s") from None


# --------------------------------------------------------------------------
# Debian packages


class LockEntry:
    def __init__(self, line: str):
        fields = line.split()
        pkg, _, ver = fields[0].partition("=")
        attrs = dict(f.split("=", 1) for f in fields[1:])
        if not pkg or not ver or "sha256" not in attrs or "suite" not in attrs:
            raise BuildError(f"{LOCK}: bad line {line!r}; expected 'pkg=ver sha256=.. suite=..'")
        self.package, self.version = pkg, ver
        self.sha256 = attrs["sha256"]
        self.suite = attrs["suite"]
        self.meta = attrs.get("meta")
        self.role = attrs.get("role", pkg)


def read_lock() -> list[LockEntry]:
    out = []
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(LockEntry(line))
    return out


class Apt:
    """apt-get for one suite; any suite but bookworm (trixie, bookworm-backports)
    goes through a private lists dir so the machine's own sources and package
    state are never touched."""

    def __init__(self, suite: str):
        self.suite = suite
        self.opts: list[str] = []
        if suite != "bookworm":
            base = cache_root() / f"apt-{suite}"
            (base / "lists" / "partial").mkdir(parents=True, exist_ok=True)
            (base / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
            (base / "parts").mkdir(parents=True, exist_ok=True)
            src = base / "parts" / f"{suite}.sources"
            src.write_text(SUITE_SOURCES.replace("SUITE", suite))
            self.opts = [
                "-o", f"Dir::State::Lists={base / 'lists'}",
                "-o", "Dir::Etc::SourceList=/dev/null",
                "-o", f"Dir::Etc::SourceParts={base / 'parts'}",
                "-o", f"Dir::Cache={base / 'cache'}",
            ]
        self.updated = False

    def update(self) -> None:
        if self.updated:
            return
        log(f"apt-get update ({self.suite})")
        r = run(["apt-get", *self.opts, "-qq", "update"])
        if r.returncode != 0:
            raise BuildError(f"apt-get update for {self.suite} failed: {r.stderr.strip()[-400:]}")
        self.updated = True

    def download(self, spec: str, dest: Path) -> Path | None:
        """Downloads `spec` (pkg or pkg=ver) into dest; returns the .deb or None."""
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            r = run(["apt-get", *self.opts, "-qq", "download", spec], cwd=tmp)
            debs = list(Path(tmp).glob("*.deb"))
            if r.returncode != 0 or len(debs) != 1:
                return None
            final = dest / debs[0].name
            os.replace(debs[0], final)
            return final

    def depends(self, meta: str) -> str | None:
        r = run(["apt-cache", *self.opts, "depends", meta])
        m = re.search(r"Depends: (\S+)", r.stdout)
        return m.group(1) if m else None

    def candidate(self, pkg: str) -> str | None:
        r = run(["apt-cache", *self.opts, "policy", pkg])
        m = re.search(r"Candidate: (\S+)", r.stdout)
        return m.group(1) if m and m.group(1) != "(none)" else None


def fetch_packages() -> dict[str, Path]:
    """Returns role -> verified .deb path, downloading what is missing."""
    debs_dir = cache_root() / "debs"
    debs_dir.mkdir(parents=True, exist_ok=True)
    apts: dict[str, Apt] = {}
    out: dict[str, Path] = {}
    for e in read_lock():
        # A cached file of the right hash is the pinned package, whatever its name.
        hit = next((p for p in debs_dir.glob("*.deb") if e.sha256 in _known_hashes(p)), None)
        if hit:
            out[e.role] = hit
            continue
        apt = apts.setdefault(e.suite, Apt(e.suite))
        spec = f"{e.package}={e.version}"
        deb = apt.download(spec, debs_dir)
        if deb is None:
            apt.update()
            deb = apt.download(spec, debs_dir)
        if deb is not None:
            got = sha256_file(deb)
            if got != e.sha256:
                deb.unlink()
                raise BuildError(
                    f"{spec}: sha256 {got} does not match versions.lock ({e.sha256}); "
                    "the mirror served different bytes for a pinned version: investigate before updating the lock")
        else:
            pkg = e.package
            if e.meta:
                apt.update()
                pkg = apt.depends(e.meta) or pkg
            ver = apt.candidate(pkg)
            deb = apt.download(pkg, debs_dir) if ver else None
            if deb is None:
                raise BuildError(f"cannot download {spec} nor a current {pkg} from Debian {e.suite}; "
                                 "check network access to deb.debian.org")
            got = sha256_file(deb)
            log(f"WARNING: {spec} is gone from the mirror; using {pkg}={ver}. Update versions.lock with:\n"
                f"  {pkg}={ver} sha256={got} suite={e.suite}"
                + (f" meta={e.meta}" if e.meta else "") + f" role={e.role}")
        _remember_hash(deb)
        out[e.role] = deb
    return out


def _known_hashes(deb: Path) -> set[str]:
    side = deb.with_suffix(".sha256")
    if side.exists() and side.stat().st_mtime >= deb.stat().st_mtime:
        return {side.read_text().strip()}
    return set()


def _remember_hash(deb: Path) -> None:
    deb.with_suffix(".sha256").write_text(sha256_file(deb) + "\n")


def unpack(deb: Path) -> Path:
    """dpkg-deb -x into the cache (never into the machine's /)."""
    digest = _known_hashes(deb).pop() if _known_hashes(deb) else sha256_file(deb)
    dest = cache_root() / "unpack" / digest[:20]
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent))
    r = run(["dpkg-deb", "-x", str(deb), str(tmp)])
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"dpkg-deb -x {deb} failed: {r.stderr.strip()}")
    os.replace(tmp, dest)
    return dest


def kernel_of(tree: Path) -> tuple[Path, str]:
    vms = sorted(tree.glob("boot/vmlinuz-*"))
    if len(vms) != 1:
        raise BuildError(f"{tree}: expected one boot/vmlinuz-*, found {len(vms)}")
    return vms[0], vms[0].name[len("vmlinuz-"):]


def module(tree: Path, release: str, rel: str) -> bytes:
    """A kernel module's bytes, decompressed if the package ships .ko.xz/.zst."""
    for base in (tree / "lib" / "modules" / release, tree / "usr" / "lib" / "modules" / release):
        p = base / "kernel" / rel
        if p.exists():
            return p.read_bytes()
        if p.with_name(p.name + ".xz").exists():
            import lzma
            return lzma.decompress(p.with_name(p.name + ".xz").read_bytes())
        if p.with_name(p.name + ".zst").exists():
            r = subprocess.run(["zstd", "-dc", str(p.with_name(p.name + ".zst"))], capture_output=True, check=True)
            return r.stdout
    raise BuildError(f"module {rel} not found in {tree} for {release}")


# --------------------------------------------------------------------------
# cpio (newc), written here so device nodes need no mknod and output is
# byte-for-byte reproducible (mtime 0, fixed inode numbers).


class Cpio:
    def __init__(self) -> None:
        self.entries: dict[str, tuple[int, bytes, int, int]] = {}  # path -> (mode, data, rmajor, rminor)

    def dir(self, path: str, perm: int = 0o755) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            self.entries.setdefault(p, (stat.S_IFDIR | perm, b"", 0, 0))

    def _parent(self, path: str) -> str:
        path = path.strip("/")
        if "/" in path:
            self.dir(path.rsplit("/", 1)[0])
        return path

    def file(self, path: str, data: bytes, perm: int = 0o644) -> None:
        self.entries[self._parent(path)] = (stat.S_IFREG | perm, data, 0, 0)

    def symlink(self, path: str, target: str) -> None:
        self.entries[self._parent(path)] = (stat.S_IFLNK | 0o777, target.encode(), 0, 0)

    def chardev(self, path: str, major: int, minor: int, perm: int = 0o600) -> None:
        self.entries[self._parent(path)] = (stat.S_IFCHR | perm, b"", major, minor)

    def digest(self) -> str:
        h = hashlib.sha256()
        for p in sorted(self.entries):
            mode, data, ma, mi = self.entries[p]
            h.update(f"{p}\0{mode:o}\0{ma}:{mi}\0{len(data)}\0".encode())
            h.update(hashlib.sha256(data).digest())
        return h.hexdigest()

    def write(self, out: io.BufferedIOBase) -> None:
        def pad(n: int) -> bytes:
            return b"\0" * ((4 - n % 4) % 4)

        def rec(ino: int, name: str, mode: int, data: bytes, ma: int, mi: int) -> None:
            nb = name.encode() + b"\0"
            nlink = 2 if stat.S_ISDIR(mode) else 1
            hdr = "070701" + "".join(f"{v:08x}" for v in (
                ino, mode, 0, 0, nlink, 0, len(data), 0, 0, ma, mi, len(nb), 0))
            out.write(hdr.encode() + nb + pad(110 + len(nb)))
            out.write(data + pad(len(data)))

        for i, p in enumerate(sorted(self.entries), start=1):
            mode, data, ma, mi = self.entries[p]
            rec(i, p, mode, data, ma, mi)
        rec(0, "TRAILER!!!", 0, b"", 0, 0)


def write_cpio(c: Cpio, path: Path, compress: bool) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as raw:
        if compress:
            # filename="" and mtime=0: no name or time in the header, so equal inputs give equal bytes.
            with gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
                c.write(gz)
        else:
            c.write(raw)
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# Pieces


def build_guest_init() -> Path:
    """gcc -static the L3 /init; cached by its sources' hash."""
    srcs = sorted(GUEST_INIT.glob("*.[ch]"))
    srcs = [s for s in srcs if not s.name.startswith("test_")]
    srcs.append(REPO / "tests" / "vectors" / "zshint_errors.h")
    h = hashlib.sha256()
    for s in srcs:
        h.update(s.name.encode() + b"\0" + s.read_bytes())
    out = cache_root() / "guest-init" / h.hexdigest()[:20] / "zsinit"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["gcc", "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(REPO / "tests" / "vectors"),
           "-o", str(out) + ".tmp",
           *[str(s) for s in srcs if s.suffix == ".c"]]
    r = run(cmd)
    if r.returncode != 0:
        raise BuildError(f"building the L3 init failed ({' '.join(cmd)}):\n{r.stderr}")
    os.replace(str(out) + ".tmp", out)
    return out


def build_l3_initramfs() -> Path:
    init = build_guest_init()
    c = Cpio()
    for d in ("dev", "proc", "sys", "tmp"):
        c.dir(d)
    # The kernel opens /dev/console before devtmpfs is mounted: it must exist in the archive.
    c.chardev("dev/console", 5, 1)
    c.chardev("dev/null", 1, 3, 0o666)
    c.file("init", init.read_bytes(), 0o755)
    out = cache_root() / "l3" / f"initramfs-{c.digest()[:20]}.cpio.gz"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        write_cpio(c, out, compress=True)
    return out


def pinned_qemu() -> tuple[Path, list[Path]]:
    """The pinned QEMU (versions.lock roles qemu, qemu-data), unpacked: its
    binary and the firmware dirs for -L (its own data, then the host's seabios
    for the pc machine's bios-256k.bin)."""
    debs = fetch_packages()
    q = unpack(debs["qemu"]) / "usr" / "bin" / "qemu-system-x86_64"
    data = unpack(debs["qemu-data"]) / "usr" / "share" / "qemu"
    r = run(["ldd", str(q)])
    if r.returncode != 0 or "not found" in r.stdout:
        missing = [ln.split()[0] for ln in r.stdout.splitlines() if "not found" in ln]
        raise BuildError(f"the pinned QEMU needs libraries this machine lacks ({' '.join(missing)}); "
                         "run `make deps` (it installs qemu-system-x86, which pulls them in)")
    return q, [data, Path("/usr/share/seabios")]


def qemu_bundle(c: Cpio) -> None:
    """The pinned QEMU + every library ldd lists + qboot, as the L3 baseline VMM."""
    q, (data, _) = pinned_qemu()
    qpath = str(q)
    c.file("qemu/bin/qemu-system-x86_64", q.read_bytes(), 0o755)
    r = run(["ldd", qpath])
    for line in r.stdout.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if not m:
            continue
        lib = Path(m.group(1))
        real = lib.resolve()
        c.file(str(lib).lstrip("/"), real.read_bytes(), 0o755)
        # ld.so is looked up by its PT_INTERP path; /lib64 in Debian.
    for rom in ("qboot.rom", "linuxboot_dma.bin"):
        p = data / rom
        if p.exists():
            c.file(f"qemu/share/{rom}", p.read_bytes())


# What L2 needs to host the real cloud VM (issue 15, tests/nested-host/
# l2-microvm.sh loads them in this order, dependencies first): virtio-blk
# for the root-filesystem disks the harness attaches to L2, tun/tap +
# vhost-net and vhost-vsock (the kernel backends of zerostart's and QEMU's
# NICs and vsock), a bridge for the VMs' taps. Debian's cloud kernel has
# them all as modules; the other L2 boots never load them.
REAL_VM_MODULES = (
    "drivers/virtio/virtio_ring.ko", "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_pci_modern_dev.ko", "drivers/virtio/virtio_pci_legacy_dev.ko",
    "drivers/virtio/virtio_pci.ko", "drivers/block/virtio_blk.ko",
    "drivers/net/tun.ko", "drivers/net/tap.ko", "drivers/vhost/vhost_iotlb.ko", "drivers/vhost/vhost.ko",
    "drivers/vhost/vhost_net.ko", "net/vmw_vsock/vsock.ko", "net/vmw_vsock/vmw_vsock_virtio_transport_common.ko",
    "drivers/vhost/vhost_vsock.ko", "net/llc/llc.ko", "net/802/stp.ko", "net/bridge/bridge.ko",
)


def zerostart_binary(path: Path | None) -> Path | None:
    if path is None:
        return None
    if not path.exists():
        raise BuildError(f"zerostart binary {path} does not exist; build it with `make e2e-zerostart`")
    r = run(["ldd", str(path)])
    if "not a dynamic executable" not in (r.stdout + r.stderr) and "statically linked" not in (r.stdout + r.stderr):
        raise BuildError(f"{path} is dynamically linked; L2 has no libc. Build with "
                         "RUSTFLAGS='-C target-feature=+crt-static' --target x86_64-unknown-linux-gnu")
    return path


# The script of l2_kallsyms' one boot: L2's kernel lists its own text symbols.
KALLSYMS_INIT = b"""#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo ZSKSYM-BEGIN
/bin/busybox grep -E ' [tT] ' /proc/kallsyms
echo ZSKSYM-END
/bin/busybox poweroff -f
"""


def l2_kallsyms(vmlinuz: Path, vm_hash: str, busybox: Path, zerostart: Path | None = None) -> Path | None:
    """The text symbols of L2's kernel as 'offset-from-_text type name'
    lines, so a snapshot of a stuck nested host names the function each CPU
    is in (zstest.qemu.symbolize) instead of a bare RIP. Debian ships the
    real System.map only in the -dbg package (its System.map says so), and
    the bzImage has no symbol table, so L2's kernel is booted once under
    TCG with a busybox init that prints /proc/kallsyms (12-25 s), cached
    by the kernel's hash (`vm_hash`, the one build_l2 computed). Diagnostics
    only: None, with the reason logged, when that boot fails; nothing waits
    on it otherwise. ZEROSTART builds the QEMU command (zstest.vmmargv)."""
    out = cache_root() / f"kallsyms-{vm_hash[:20]}.txt"
    if out.exists():
        return out
    qemu = os.environ.get("ZS_KERNEL_QEMU", "qemu-system-x86_64")
    if not shutil.which(qemu):
        log(f"no {qemu} on PATH: snapshots of a stuck L2 will show bare addresses")
        return None
    c = Cpio()
    for d in ("bin", "proc", "dev"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.file("bin/busybox", busybox.read_bytes(), 0o755)
    c.file("init", KALLSYMS_INIT, 0o755)
    with tempfile.TemporaryDirectory(dir=cache_root()) as td:
        initrd, serial = Path(td) / "init.cpio", Path(td) / "serial.txt"
        write_cpio(c, initrd, compress=False)
        # From the one builder (options::vmm_cmd); imported here, as vmmargv
        # imports this module. Before it: no -machine or -accel (QEMU's
        # defaults, pc and TCG; one vCPU either way), -m in MiB.
        from zstest import vmmargv
        try:
            cmd = vmmargv.build({"vmm": "qemu", "binary": qemu,
                                 "memory": {"backing": "anonymous", "size_mib": 512},
                                 "kernel": str(vmlinuz), "initrd": str(initrd),
                                 "cmdline": "console=ttyS0 quiet panic=-1", "serial": {"file": str(serial)},
                                 "qemu": {"machine": "pc", "accel": "tcg", "no_reboot": True}}, zerostart).argv
        except vmmargv.VmmArgvError as e:
            log(f"no QEMU command for the kallsyms boot ({e}): snapshots will show bare addresses")
            return None
        try:
            subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
        except subprocess.TimeoutExpired:
            log("the kallsyms boot of L2's kernel took over 300 s: snapshots will show bare addresses")
            return None
        text = serial.read_text(errors="replace").replace("\r", "") if serial.exists() else ""
        if "ZSKSYM-END" not in text:
            log("the kallsyms boot of L2's kernel printed no symbol list: snapshots will show bare addresses")
            return None
        body = text.split("ZSKSYM-BEGIN", 1)[1].split("ZSKSYM-END", 1)[0]
        syms = [ln.split() for ln in body.splitlines() if len(ln.split()) >= 3]
        base = next((int(a, 16) for a, _, n, *_ in syms if n == "_text"), None)
        if base is None:
            log("L2's kernel listed no _text: snapshots will show bare addresses")
            return None
        lines = sorted((int(a, 16) - base, t, n) for a, t, n, *_ in syms if int(a, 16) >= base)
        tmp = Path(td) / "kallsyms.txt"
        tmp.write_text("".join(f"{o:x} {t} {n}\n" for o, t, n in lines))
        os.replace(tmp, out)
    return out


def build_l2(l3_kernels: dict[str, Path], zerostart: Path | None, with_qemu: bool = True) -> dict:
    """Returns the manifest of the cached L2 image, building it if needed."""
    debs = fetch_packages()
    l2tree = unpack(debs["l2-kernel"])
    vmlinuz, release = kernel_of(l2tree)
    bb = unpack(debs["busybox"]) / "bin" / "busybox"

    kernels: dict[str, Path] = {}
    for role, deb in debs.items():
        if role.startswith("l3-kernel-"):
            kernels[role[len("l3-kernel-"):]] = kernel_of(unpack(deb))[0]
    kernels.update(l3_kernels)

    c = Cpio()
    for d in ("dev", "proc", "sys", "tmp", "run", "bin", "sbin", "usr/bin", "usr/sbin", "zs"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.chardev("dev/null", 1, 3, 0o666)
    c.file("bin/busybox", bb.read_bytes(), 0o755)
    c.symlink("bin/sh", "busybox")
    c.file("init", L2_INIT.read_bytes(), 0o755)
    c.file("zs/scenario.sh", SCENARIO_SH.read_bytes(), 0o755)
    c.file("zs/l2-timeout.sh", L2_TIMEOUT_SH.read_bytes(), 0o755)
    for m in ("virt/lib/irqbypass.ko", "arch/x86/kvm/kvm.ko", "arch/x86/kvm/kvm-amd.ko", *REAL_VM_MODULES):
        c.file(f"lib/modules/{Path(m).name}", module(l2tree, release, m))
    for name, k in sorted(kernels.items()):
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise BuildError(f"L3 kernel name {name!r} must match [A-Za-z0-9._-]+")
        c.file(f"zs/kernels/{name}", k.read_bytes())
    l3i = build_l3_initramfs()
    c.file("zs/l3-initramfs.cpio.gz", l3i.read_bytes())
    zs = zerostart_binary(zerostart)
    if zs:
        c.file("zs/zerostart", zs.read_bytes(), 0o755)
    if with_qemu:
        qemu_bundle(c)

    vm_hash = sha256_file(vmlinuz)
    digest = hashlib.sha256((c.digest() + vm_hash).encode()).hexdigest()[:20]
    outdir = cache_root() / f"l2-{digest}"
    manifest = {
        "dir": str(outdir),
        "vmlinuz": str(outdir / "vmlinuz"),
        "initramfs": str(outdir / "initramfs.cpio"),
        "l2_kernel_release": release,
        "l3_kernels": {n: str(p) for n, p in sorted(kernels.items())},
        "zerostart": str(zs) if zs else None,
        "zerostart_sha256": sha256_file(zs) if zs else None,
        "qemu": with_qemu,
        "packages": {e.role: f"{e.package}={e.version}" for e in read_lock()},
        "hash": digest,
    }
    ksyms = l2_kallsyms(vmlinuz, vm_hash, bb, zerostart)
    if ksyms:
        manifest["l2_kallsyms"] = str(ksyms)
    if (outdir / "manifest.json").exists():
        log(f"L2 image cached: {outdir}")
        os.utime(outdir)  # recently used: pruned last
        return manifest
    log(f"building L2 image {outdir}")
    tmp = Path(tempfile.mkdtemp(dir=cache_root()))
    shutil.copyfile(vmlinuz, tmp / "vmlinuz")
    # Uncompressed on purpose: L2 runs under TCG, where gunzip of ~150 MB costs seconds.
    write_cpio(c, tmp / "initramfs.cpio", compress=False)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if outdir.exists():
        shutil.rmtree(outdir)
    os.replace(tmp, outdir)
    prune_images(keep=outdir)
    return manifest


def prune_images(keep: Path, count: int = 4) -> None:
    """Every zerostart rebuild makes a new ~80 MB image: keep the newest few."""
    imgs = sorted((p for p in cache_root().glob("l2-*") if p.is_dir() and p != keep),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in imgs[count - 1:]:
        shutil.rmtree(old, ignore_errors=True)


def default_l3_kernels() -> dict[str, Path]:
    """The patched guest kernel, when it has been built.

    ZS_L3_KERNEL=/path/bzImage wins; otherwise guest-kernel-patches/build.sh
    --print names the image built from the current patch series (nothing if
    it is not built: this harness never starts a 7-minute kernel build on its
    own; `make` the kernel area first). Without either, run.py falls back to
    stock Debian 6.12 for the "kernel under test" and says so.
    """
    if os.environ.get("E2E_KERNEL") == "stock":  # `make test-nested-host E2E_KERNEL=stock`
        return {}
    env = os.environ.get("ZS_L3_KERNEL")
    if env:
        p = Path(env)
        if not p.exists():
            raise BuildError(f"ZS_L3_KERNEL={env} does not exist")
        return {"patched": p}
    script = REPO / "guest-kernel-patches" / "build.sh"
    if not script.exists():
        return {}
    r = run(["bash", str(script), "--print"])
    if r.returncode != 0 or not r.stdout.strip():
        return {}
    out = Path(r.stdout.strip().splitlines()[-1])
    kernels = {}
    if (out / "bzImage").exists():
        kernels["patched"] = out / "bzImage"
    if (out / "bzImage-noprezero").exists():
        kernels["patched-noprezero"] = out / "bzImage-noprezero"
    return kernels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zerostart", type=Path, help="static zerostart binary to put in L2")
    ap.add_argument("--no-qemu", action="store_true", help="leave the QEMU baseline VMM out of L2")
    ap.add_argument("--fetch-only", action="store_true", help="only download and verify the packages")
    a = ap.parse_args()
    try:
        if a.fetch_only:
            for role, deb in fetch_packages().items():
                print(f"{role}: {deb}")
            return 0
        m = build_l2(default_l3_kernels(), a.zerostart, with_qemu=not a.no_qemu)
        print(json.dumps(m, indent=2))
        return 0
    except BuildError as e:
        print(f"nested-host: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
