"""make test-libvirt: `zerostart-qemu` (zerostart qemu-dropin) as a real
libvirtd's QEMU, the way Nova and KubeVirt start VMs (docs/fleet.md).

A private libvirtd (Debian's, session mode, as user nobody, every path in
this run's scratch directory: nothing of the machine's libvirt is read or
written) and a private `zerostart pool` (4K shmem pages, so it needs no
hugepages; as root, with `--socket-group nogroup`, so QEMU running as
nobody leases through the socket's group) serve these cases, each a TCG domain
(`<domain type='qemu'>`, no KVM needed) whose `<emulator>` is a two-line
wrapper around `zerostart qemu-dropin`:

  caps     `virsh domcapabilities` through the drop-in equals plain QEMU's
           (libvirt probes QEMU with `-machine none` and QMP: the probe
           must reach QEMU untouched);
  direct   a direct-kernel domain boots the patched guest kernel from a
           pool lease with the hint on its command line and
           prezero.verify=1: the kernel takes the hint, skips clears, 0
           verify failures, the init reads only zeros; the pool shows the
           lease while the domain runs and none after `virsh destroy`;
  dirty    the negative control of `direct`: the drop-in plants a byte
           every 64 MiB of the hint (--test-corrupt-hint dirty-spread); the
           kernel's verify mode or the init's sweep must catch it;
  uefi     a domain with `<loader type='rom'>` zerostart's OVMF.fd and the
           same kernel: the hint goes over fw_cfg, the firmware publishes
           it, the kernel takes it from the EFI table, 0 verify failures;
  numa1    a one-node guest NUMA domain (`-numa node,memdev=`, the shape
           Kata's QEMU driver writes): served like `direct`;
  numa2    a two-node guest NUMA domain (libvirt's `<cell>`s: one
           `-numa node,memdev=` and one backend per node): one lease per
           node, each node's backend on its own region, served like
           `direct` (the pool shows both leases while it runs);
  numa2-bound  numa2 with each cell bound to host node 0 (`<numatune>`:
           host-nodes and policy=bind on each backend): each lease taken
           on that host node;
  numa2-dirty  numa2's negative control: `dirty` on the two-node domain
           (the plants land in both nodes' regions);
  metrics  a Prometheus scrape of the pool after those domains: every
           launch the drop-in served is counted as leased with its
           memory_ready, every lease is back (nothing leased, every
           region clean); the scrape is kept as metrics.txt beside
           virsh-session.log (each virsh command the run gave, with its
           answer: what an operator's session looks like);
  stopped  the pool stopped: the domain still boots, unchanged, with the
           warning (a fleet must not lose a VM to an empty pool).

  python3 tests/libvirt/cases.py [--list] [CASE...]

ZEROSTART_BIN (a release zerostart), ZS_L3_KERNEL-or-the-patched-kernel
(guest-kernel-patches/build.sh) and ZEROSTART_FIRMWARE_DIR (OVMF.fd) come
from make (mk/libvirt.mk). Consoles and domain logs are kept in
target/libvirt/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import tempfile
import time
from pathlib import Path

from zstest import l2image
from zstest.hugepages import HugePages
from zstest.suite import Case, Do, Report, Runner, choose, executable_env, run_suite, stop_process

WHO = "test-libvirt"
ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "target" / "libvirt"
QEMU = "/usr/bin/qemu-system-x86_64"
NOBODY = (65534, 65534)
MEM_MIB = 512
BOOT_TIMEOUT_S = 240
# The guest's own verdict (tests/guest-init/zsinit.c) and the patched
# kernel's word on the hint.
VERDICT_RE = re.compile(r"ZSINIT: (PASS|FAIL) .*nonzero_bytes=(\d+) .*kernel_pages_skipped=(-?\d+) "
                        r".*kernel_verify_failures=(-?\d+)")
KERNEL_BUG_RE = re.compile(r"BUG:|Oops|Bad page state|Kernel panic|WARNING: CPU")
# A guest that will not reach its verdict (panic=-1 ends it anyway); a
# WARNING does not stop it (verify mode's report is one, in the control).
STOP_RE = re.compile(r"BUG:|Oops|Kernel panic")
# zsinit.halt=wait: the guest stays up after its verdict, so `virsh destroy`
# is what ends each domain and returns its lease, as in a fleet.
CMDLINE = "console=ttyS0 panic=-1 oops=panic prezero.verify=1 zsinit.halt=wait zsinit.check_pct=85"


class Bed:
    """The private libvirtd and pool of this run."""

    def __init__(self, work: Path):
        self.dir = work / "lv"
        self.home = self.dir / "home"
        self.run = self.dir / "run"
        self.sock = self.run / "pool.sock"
        self.zs = Path(os.environ["ZEROSTART_BIN"])
        self.pool: subprocess.Popen | None = None
        self.metrics_url = ""
        self.session = True  # virsh commands go to virsh-session.log
        self.libvirtd: subprocess.Popen | None = None
        self.pool_log = OUT / "pool.log"

    def env(self) -> dict[str, str]:
        h = str(self.home)
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": h, "USER": "nobody",
                "LOGNAME": "nobody", "XDG_RUNTIME_DIR": str(self.run), "XDG_CONFIG_HOME": f"{h}/.config",
                "XDG_CACHE_HOME": f"{h}/.cache", "XDG_DATA_HOME": f"{h}/.local/share", "LC_ALL": "C"}

    @staticmethod
    def as_nobody(argv: list[str]) -> list[str]:
        # setpriv execs the command itself: its pid is the daemon's, so a
        # SIGTERM at the end reaches it.
        return ["setpriv", f"--reuid={NOBODY[0]}", f"--regid={NOBODY[1]}", "--clear-groups", "--", *argv]

    def virsh(self, *args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
        p = subprocess.run(self.as_nobody(["virsh", "-c", "qemu:///session", *args]), env=self.env(),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        # The session an operator would see, minus the polling.
        if self.session and args[0] not in ("version", "domstate", "domcapabilities"):
            with open(OUT / "virsh-session.log", "a") as f:
                f.write(f"$ virsh -c qemu:///session {' '.join(args)}\n")
                f.writelines(f"{ln}\n" for ln in (p.stdout + p.stderr).strip().splitlines()[:6])
                if p.returncode:
                    f.write(f"(exit {p.returncode})\n")
        if check and p.returncode != 0:
            raise RuntimeError(f"virsh {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
        return p

    def pool_status(self, *extra: str) -> subprocess.CompletedProcess:
        """`zerostart pool status` as nobody (through the socket's group)."""
        return subprocess.run(self.as_nobody([str(self.zs), "pool", "status", "--socket", str(self.sock), *extra]),
                              capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)

    def leased_bytes(self) -> int | None:
        """The pool's leased bytes now (None: no answer)."""
        p = self.pool_status("--json")
        try:
            return int(json.loads(p.stdout)["leased_bytes"])
        except (ValueError, KeyError):
            return None

    def wait_clean(self) -> str | None:
        """None once every region is clean, else why not within 60 s."""
        p = self.pool_status("--wait-clean", "--timeout", "60")
        return None if p.returncode == 0 else (p.stderr.strip() or f"pool status exited {p.returncode}")

    def start_pool(self) -> None:
        log = open(self.pool_log, "a")
        # The pool runs as root, as its systemd unit does; QEMU (nobody)
        # leases through the socket's group.
        # Port 0: the pool picks a free one and names it in its log (in
        # what this start adds to it: the log is appended to).
        start = self.pool_log.stat().st_size if self.pool_log.exists() else 0
        self.pool = subprocess.Popen([str(self.zs), "pool", "serve", "--socket", str(self.sock),
                                      "--socket-group", "nogroup", "--size", f"{2 * MEM_MIB}M",
                                      "--region-size", f"{MEM_MIB}M", "--page", "4K",
                                      "--metrics", "127.0.0.1:0"],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if (why := self.wait_clean()) is not None:
            raise RuntimeError(f"the pool did not come up clean: {why} (log {self.pool_log})")
        with open(self.pool_log) as f:
            f.seek(start)
            said = re.findall(r"zerostart pool: metrics at (http://\S+/metrics)", f.read())
        if not said:
            raise RuntimeError(f"the pool named no metrics address (log {self.pool_log})")
        self.metrics_url = said[-1]

    def stop_pool(self) -> None:
        stop_process(self.pool, timeout=15)
        self.pool = None

    def stop(self) -> None:
        self.session = False  # the clean-up is no part of the session
        for name in ("zs-direct", "zs-dirty", "zs-uefi", "zs-numa1", "zs-numa2", "zs-numa2-bound", "zs-numa2-dirty", "zs-stopped"):
            if self.libvirtd and self.libvirtd.poll() is None:
                self.virsh("destroy", name, check=False, timeout=30)
        stop_process(self.libvirtd, timeout=15)
        self.stop_pool()


BED: Bed | None = None


def wrapper(bed: Bed, name: str, extra: str = "", env: str = "") -> Path:
    """The `<emulator>` of a domain: libvirt runs it with a cleared
    environment, so the drop-in's settings are in the script (as
    docs/fleet.md installs it)."""
    p = bed.dir / name
    p.write_text("#!/bin/sh\n"
                 f"exec {env}{bed.zs} qemu-dropin --qemu {QEMU} --pool {bed.sock} --page 4K {extra}-- \"$@\"\n")
    p.chmod(0o755)
    return p


def setup(r: Report) -> None:
    global BED
    if not shutil.which("libvirtd") or not shutil.which("virsh"):
        r.fail("libvirtd/virsh missing: run ci/install-deps.sh (make deps installs libvirt-daemon, "
               "libvirt-daemon-driver-qemu, libvirt-clients)")
        r.abandon()
    if not Path(QEMU).exists():
        r.fail(f"{QEMU} missing: run ci/install-deps.sh (qemu-system-x86)")
        r.abandon()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "virsh-session.log").unlink(missing_ok=True)
    bed = Bed(r.work)
    BED = bed
    r.at_exit(bed.stop)
    r.work.chmod(0o755)
    for d in (bed.dir, bed.home, bed.run):
        d.mkdir(parents=True, exist_ok=True)
    bed.dir.chmod(0o755)
    for d in (bed.home, bed.run):
        os.chown(d, *NOBODY)
        d.chmod(0o700)
    # What the guest boots, readable by nobody.
    kernels = l2image.default_l3_kernels()
    if "patched" not in kernels:
        r.fail("no patched guest kernel: build it with guest-kernel-patches/build.sh (make test-libvirt does)")
        r.abandon()
    for src, dst in ((kernels["patched"], "bzImage"), (l2image.build_l3_initramfs(), "initrd"),
                     (Path(os.environ["ZEROSTART_FIRMWARE_DIR"]) / "OVMF.fd", "OVMF.fd")):
        shutil.copyfile(src, bed.dir / dst)
        (bed.dir / dst).chmod(0o644)
    zs = bed.dir / "zerostart"
    shutil.copyfile(bed.zs, zs)
    zs.chmod(0o755)
    bed.zs = zs
    bed.start_pool()
    log = open(OUT / "libvirtd.log", "w")
    bed.libvirtd = subprocess.Popen(bed.as_nobody(["libvirtd", "--timeout", "0"]), env=bed.env(),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(100):
        if bed.virsh("version", check=False, timeout=30).returncode == 0:
            break
        time.sleep(0.2)
    else:
        r.fail(f"libvirtd did not answer (log {OUT / 'libvirtd.log'})")
        r.abandon()
    v = bed.virsh("version").stdout
    r.ok(f"private libvirtd as nobody ({' '.join(v.split())[:120]}); pool as root (2 x {MEM_MIB} MiB, 4K), "
         "socket group nogroup")


def domain_xml(bed: Bed, name: str, emulator: Path, uefi: bool = False, numa: int = 0, bound: bool = False) -> str:
    """BOUND: each guest NUMA cell's memory bound to host node 0
    (`<numatune><memnode mode='strict'>`: libvirt puts host-nodes and
    policy=bind on the cell's backend)."""
    loader = f"<loader type='rom'>{bed.dir / 'OVMF.fd'}</loader>" if uefi else ""
    cpu = ""
    tune = ""
    if bound:
        tune = "<numatune>" + "".join(f"<memnode cellid='{i}' mode='strict' nodeset='0'/>"
                                      for i in range(numa)) + "</numatune>"
    vcpus = max(numa, 1)
    if numa:
        each = MEM_MIB // numa
        cells = "".join(f"<cell id='{i}' cpus='{i}' memory='{each}' unit='MiB'/>" for i in range(numa))
        cpu = f"<cpu><numa>{cells}</numa></cpu>"
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{MEM_MIB}</memory>
  <vcpu>{vcpus}</vcpu>
  {cpu}
  {tune}
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    {loader}
    <kernel>{bed.dir / 'bzImage'}</kernel>
    <initrd>{bed.dir / 'initrd'}</initrd>
    <cmdline>{CMDLINE}</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>{emulator}</emulator>
    <serial type='file'><source path='{bed.home / (name + ".console")}'/><target port='0'/></serial>
  </devices>
</domain>
"""


class Boot:
    """One domain from define to destroy; its console and domain log kept
    in target/libvirt/. A guest that crashes is not started again."""

    def __init__(self, bed: Bed, name: str, emulator: Path, **kw):
        self.bed, self.name = bed, name
        xml = bed.home / f"{name}.xml"
        xml.write_text(domain_xml(bed, name, emulator, **kw))
        os.chown(xml, *NOBODY)
        self.console_path = bed.home / f"{name}.console"
        self.during = ""
        # What stood before `virsh destroy`: the domain's state, the pool's
        # leased bytes; and what destroy answered.
        self.state_before, self.leased_before, self.destroyed = "", None, None
        bed.virsh("define", str(xml))
        try:
            bed.virsh("start", name)
            p = bed.pool_status()
            self.during = p.stdout + p.stderr
            self.console = self.wait()
            self.state_before = bed.virsh("domstate", name, check=False).stdout.strip()
            self.leased_before = bed.leased_bytes()
        finally:
            self.destroyed = bed.virsh("destroy", name, check=False, timeout=60).returncode
            bed.virsh("undefine", name, check=False)
            self.log = self.read(bed.home / ".cache" / "libvirt" / "qemu" / "log" / f"{name}.log")
            (OUT / f"{name}.console.log").write_text(self.console if hasattr(self, "console") else
                                                     self.read(self.console_path))
            (OUT / f"{name}.domain.log").write_text(self.log)

    @staticmethod
    def read(p: Path) -> str:
        try:
            return p.read_text(errors="replace")
        except OSError:
            return ""

    def wait(self) -> str:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.read(self.console_path)
            if VERDICT_RE.search(text) or STOP_RE.search(text):
                time.sleep(0.5)
                return self.read(self.console_path)
            st = self.bed.virsh("domstate", self.name, check=False).stdout.strip()
            if st in ("shut off", "crashed"):
                return self.read(self.console_path)
            time.sleep(0.5)
        return self.read(self.console_path) + f"\n(no verdict in {BOOT_TIMEOUT_S} s)"

    def verdict(self):
        m = VERDICT_RE.search(self.console)
        if not m:
            return None
        return {"status": m.group(1), "nonzero": int(m.group(2)), "skipped": int(m.group(3)),
                "failures": int(m.group(4))}

    def bug(self, verify_warn_expected: bool = False) -> str | None:
        """The first kernel bug line; verify mode's own WARNING (one
        backtrace for the first non-zero page) is the dirty control's
        expected finding, not a bug."""
        m = [ln for ln in self.console.splitlines() if KERNEL_BUG_RE.search(ln) and "ZSINIT" not in ln
             and not (verify_warn_expected and "zerostart_verify_pages" in ln)]
        return m[0][:160] if m else None


def kernel_hint(console: str) -> str | None:
    m = re.search(r"zerostart: hint from ([a-zA-Z ]+): (\d+) ranges", console)
    return m.group(1) if m else None


def leased_after_destroy(bed: Bed) -> str | None:
    why = bed.wait_clean()
    return None if why is None else f"the pool is not clean 60 s after virsh destroy: {why}"


def need_bed(r: Report) -> Bed:
    if BED is None or BED.libvirtd is None:
        r.fail("no private libvirtd (the setup case failed or did not run; run the whole suite)")
        r.abandon()
    return BED


def caps(r: Report) -> None:
    bed = need_bed(r)
    em = wrapper(bed, "zerostart-qemu")
    plain = bed.virsh("domcapabilities", "--emulatorbin", QEMU, "--virttype", "qemu", "--machine", "q35").stdout
    drop = bed.virsh("domcapabilities", "--emulatorbin", str(em), "--virttype", "qemu", "--machine", "q35").stdout
    norm = drop.replace(str(em), QEMU)
    (OUT / "domcapabilities.plain.xml").write_text(plain)
    (OUT / "domcapabilities.dropin.xml").write_text(drop)
    if norm != plain or "<machine>pc-q35" not in plain:
        r.fail(f"domcapabilities through the drop-in differ from plain QEMU's (target/libvirt/domcapabilities.*.xml)")
    else:
        r.ok(f"domcapabilities through the drop-in equal plain QEMU's ({len(plain)} bytes, emulator path aside)")


def served(r: Report, name: str, uefi: bool = False, numa: int = 0, bound: bool = False) -> None:
    bed = need_bed(r)
    b = Boot(bed, name, wrapper(bed, "zerostart-qemu"), uefi=uefi, numa=numa, bound=bound)
    if bound and '"host-nodes":[0],"policy":"bind"' not in b.log:
        r.fail(f"libvirt wrote no host-nodes/policy=bind backend: the case did not test placement "
               f"(domain log target/libvirt/{name}.domain.log)")
    v, want = b.verdict(), ("EFI table" if uefi else "command line")
    if (bug := b.bug()):
        r.fail(f"the patched guest kernel reported a bug (not booted again; console target/libvirt/{name}.console.log): {bug}")
        return
    # One region (of MEM_MIB) per guest NUMA node, or one for the guest.
    held = f"leased {max(numa, 1) * MEM_MIB / 1024:.2f} GiB"
    if held not in b.during:
        r.fail(f"not {held} while the domain ran: {b.during.strip().splitlines()[1:2]}")
    if "zerostart-qemu: warning" in b.log:
        r.fail(f"the drop-in passed the domain through: {[l for l in b.log.splitlines() if 'warning' in l][:1]}")
    got = kernel_hint(b.console)
    if got != want:
        r.fail(f"the kernel took the hint from {got!r}, not the {want}")
    if not v:
        r.fail(f"no ZSINIT verdict (console target/libvirt/{name}.console.log)")
    elif v["status"] != "PASS" or v["nonzero"] != 0 or v["failures"] != 0 or v["skipped"] <= 0:
        r.fail(f"guest verdict {v}: want PASS, 0 non-zero bytes, 0 verify failures, skipped clears")
    else:
        r.ok(f"{name}: pool lease ({held}), hint from the {want}, {v['skipped']} clears skipped and verified, "
             f"0 failures, 0 non-zero bytes")
    # The guest waits after its verdict (zsinit.halt=wait): the domain was
    # running and held its lease until `virsh destroy` ended it.
    if b.state_before != "running" or not b.leased_before or b.destroyed != 0:
        r.fail(f"before virsh destroy: domain {b.state_before!r}, {b.leased_before} bytes leased; destroy "
               f"exited {b.destroyed}: destroy was not what ended the domain")
    elif (why := leased_after_destroy(bed)):
        r.fail(why)
    else:
        r.ok(f"{name}: running with {b.leased_before >> 20} MiB leased until virsh destroy, which returned the "
             "lease (pool clean)")


def dirty(r: Report, name: str = "zs-dirty", numa: int = 0) -> None:
    bed = need_bed(r)
    em = wrapper(bed, "zerostart-qemu-dirty", "--test-corrupt-hint dirty-spread ", "env ZEROSTART_TEST_SWITCHES=1 ")
    b = Boot(bed, name, em, numa=numa)
    v = b.verdict()
    if (bug := b.bug(verify_warn_expected=True)):
        r.fail(f"the patched guest kernel reported a bug (console target/libvirt/{name}.console.log): {bug}")
        return
    if kernel_hint(b.console) != "command line":
        r.fail("the kernel took no command-line hint: the control did not run its path")
    elif not v:
        r.fail(f"no ZSINIT verdict (console target/libvirt/{name}.console.log)")
    elif v["failures"] <= 0 and v["nonzero"] <= 0:
        r.fail(f"the planted bytes were not caught ({v}): the served case's check cannot fail")
    else:
        r.ok(f"{name}: negative control: planted bytes caught ({v['failures']} verify failures, "
             f"{v['nonzero']} non-zero bytes)")
    if (why := leased_after_destroy(bed)):
        r.fail(why)


def passed_through(r: Report, name: str, expect: str, **kw) -> None:
    bed = need_bed(r)
    b = Boot(bed, name, wrapper(bed, "zerostart-qemu"), **kw)
    v = b.verdict()
    warn = [ln for ln in b.log.splitlines() if "zerostart-qemu: warning" in ln]
    if (bug := b.bug()):
        r.fail(f"the guest kernel reported a bug (console target/libvirt/{name}.console.log): {bug}")
        return
    if not warn or expect not in warn[0]:
        r.fail(f"no drop-in warning naming {expect!r} in the domain log: {warn[:1]}")
    if kernel_hint(b.console) is not None:
        r.fail("the kernel took a hint on a passed-through domain")
    if not v or v["status"] != "PASS" or v["failures"] != 0:
        r.fail(f"the passed-through domain did not pass its init check: {v}")
    else:
        r.ok(f"{name}: boots unchanged, no hint, warned: {warn[0].split('warning: ', 1)[-1][:110]}")


def stopped(r: Report) -> None:
    bed = need_bed(r)
    bed.stop_pool()
    try:
        passed_through(r, "zs-stopped", "pool")
    finally:
        bed.start_pool()


def sample(text: str, name: str) -> float | None:
    """The value of the one sample NAME (with its labels) in a scrape."""
    for ln in text.splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[1])
    return None


def metrics(r: Report) -> None:
    """The pool's Prometheus endpoint after the domains above, as a fleet
    operator scrapes it: each launch the drop-in served counted as leased
    with its memory_ready, nothing leased now, every region clean."""
    bed = need_bed(r)
    if (why := bed.wait_clean()) is not None:
        r.fail(f"the pool is not clean before the scrape: {why}")
    try:
        with urllib.request.urlopen(bed.metrics_url, timeout=10) as resp:
            text = resp.read().decode()
    except OSError as e:
        r.fail(f"scrape of the pool's metrics failed: {e}")
        return
    (OUT / "metrics.txt").write_text(text)
    leased = sample(text, 'zerostart_pool_launches_total{vmm="qemu",outcome="leased"}')
    ready = sample(text, 'zerostart_pool_memory_ready_seconds_count{vmm="qemu",source="pool"}')
    leases = sample(text, "zerostart_pool_leases_total")
    if leased and leased >= 1 and ready == leased and leases and leases >= leased:
        r.ok(f"{leased:.0f} launches counted leased, {ready:.0f} memory_ready observations, {leases:.0f} leases "
             f"(metrics.txt)")
    else:
        r.fail(f"launches leased={leased} memory_ready count={ready} leases={leases}: the scrape does not show "
               "what the drop-in served")
    held = sample(text, 'zerostart_pool_bytes{state="leased"}')
    clean = sample(text, 'zerostart_pool_regions{state="clean"}')
    if held == 0 and clean == 2:
        r.ok("after virsh destroy: 0 bytes leased, both regions clean")
    else:
        r.fail(f"after virsh destroy the pool says leased bytes={held}, clean regions={clean}")


CASES = [
    Case("setup", Do("libvirtd", setup)),
    Case("caps", Do("domcapabilities", caps)),
    Case("direct", Do("direct", lambda r: served(r, "zs-direct", uefi=False))),
    Case("dirty", Do("dirty", dirty)),
    Case("uefi", Do("uefi", lambda r: served(r, "zs-uefi", uefi=True))),
    Case("numa1", Do("numa1", lambda r: served(r, "zs-numa1", numa=1))),
    Case("numa2", Do("numa2", lambda r: served(r, "zs-numa2", numa=2))),
    # Each cell bound to host node 0 (<numatune>): each lease on that node.
    Case("numa2-bound", Do("numa2-bound", lambda r: served(r, "zs-numa2-bound", numa=2, bound=True))),
    # numa2's control: the plants go through both nodes' regions.
    Case("numa2-dirty", Do("numa2-dirty", lambda r: dirty(r, "zs-numa2-dirty", numa=2))),
    Case("metrics", Do("metrics", metrics)),
    Case("stopped", Do("stopped", stopped)),
]


def main(argv: list[str]) -> int:
    chosen = choose(WHO, CASES, argv, "zerostart-qemu as a real libvirtd's QEMU")
    if isinstance(chosen, int):
        return chosen
    if executable_env(WHO, "ZEROSTART_BIN", "a release zerostart (make test-libvirt builds it)") is None:
        return 2
    if not os.environ.get("ZEROSTART_FIRMWARE_DIR"):
        print(f"{WHO}: ZEROSTART_FIRMWARE_DIR is not set; make test-libvirt passes the firmware's", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(f"{WHO}: run as root (it drops to nobody for libvirtd, the pool and the guests)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix=f"zerostart-{WHO}."))
    return run_suite(Runner(WHO, work, boot=None, pools=HugePages(WHO)), chosen)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
