"""`zerostart launch` scenarios in the nested test host (`run.py launch`, `make test-launch`).

QEMU (the pinned 10.x in L2) is started by `zerostart launch` on real
kvm-amd in L2, with guest RAM leased from a `zerostart pool` running in L2,
the hint over fw_cfg through OVMF (firmware/build.sh, ZeroStartPkg) and the
patched guest kernel with prezero.verify=1 (every clear it skips is checked).

cloud-hypervisor, when one is on PATH (or ZEROSTART_CLOUD_HYPERVISOR names
it; it is in no package registry, so CI prints SKIP): the same through
CLOUDHV.fd, with the kernel, initramfs and command line in a UKI on an EFI
system partition (tests/lib/mkesp.sh) that the firmware boots from a
virtio disk: cloud-hypervisor cannot give its firmware a kernel over fw_cfg
(docs/launch.md).

Reusable: `run_scenarios(scenarios, ...)` boots one L2, runs the scenarios in
it and returns one report row per scenario (the report contract of issue 13:
name, vmm, memory_bytes, memory_source, kernel, hint_seen,
kernel_pages_skipped, kernel_verify_failures, nonzero_bytes, passed,
phases_ms {memory_ready, init_started, app_ready}), so other harnesses (the
demo) can add their own scenarios.

Phases, ms from the launcher's start: memory_ready from the launcher's own
timeline (memory leased or prefaulted and the hint published);
init_started and app_ready from the guest's serial lines as L2 sees them
(stamped with L2's uptime when they arrive): the zsinit start line and its
verdict line (after its memory checks).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import run as e2e
from zstest import l2image as build
from zstest import timeline as tlschema
from zstest import vmmargv
from zstest.qemu import L3_CONSOLE_ARGS, bed_fault, boot_l2, l2_memory, rerun_after_bed_faults

REPO = build.REPO
OUT = REPO / "target" / "launch"
MIB = 1 << 20
GRACE_S = 60


# The QEMU rows that boot the kernel directly (no OVMF; the hint on -append).
DIRECT_QEMU = ("qemu-direct", "microvm-direct", "microvm-seabios-direct")


@dataclass
class LaunchScenario:
    name: str
    mem_mib: int
    # qemu (through OVMF) | qemu-direct (-kernel, hint on -append) | cloud-hypervisor (CLOUDHV.fd, UKI)
    # | chv-direct (cloud-hypervisor --kernel, hint on --cmdline) | firecracker (hint in boot_args)
    # | microvm-direct (QEMU -machine microvm, qboot, -kernel; hint on -append)
    # | microvm-seabios-direct (the same on SeaBIOS's bios-microvm.bin, microvm's default firmware)
    vmm: str = "qemu"
    source: str = "pool"  # pool | prefault | none
    kernel: str = "patched"  # name under /zs/kernels in L2
    expect: str = "pass"  # pass | dirty (verify must catch it) | corrupt (hint ignored, reason logged)
    launcher_args: str = ""
    guest_args: str = ""
    timeout_s: int = 180
    note: str = ""
    # The firmware's debug log (port 0x402). Every byte of it is an I/O exit
    # of the nested L3 guest, which costs seconds of boot under TCG, so only
    # scenarios that judge firmware lines turn it on.
    debugcon: bool = False
    # cloud-hypervisor memory zones the launcher must have given the VMM
    # (a guest larger than the pool's regions: one lease of several
    # regions); 0: not judged.
    zones: int = 0
    # MiB of pool memory the lease must hold (the timeline's
    # lease_held_bytes): on a pool of several region sizes, the smallest
    # region that holds the guest; 0: not judged.
    held_mib: int = 0

    def spec(self) -> dict:
        """This row's start in L2 (zstest.vmmargv): `zerostart launch` on
        the pool l2-pool.sh starts (or prefault / none), writing its
        timeline where the L2 script reads it (/tmp/NAME.tl.json), QEMU's
        debug console and log to /tmp/NAME.fw and /tmp/NAME.qlog."""
        name, kernel = self.name, f"/zs/kernels/{self.kernel}"
        # pool, optionally with more --memory keys (pool,hint=off: the same
        # memory without the hint, the demo's baseline).
        src = f"pool:{vmmargv.L2_POOL_SOCKET}{self.source[4:]}" if self.source.startswith("pool") else self.source
        memory, tl = f"size={self.mem_mib}M,source={src}", f"/tmp/{name}.tl.json"
        extra = shlex.split(self.launcher_args)
        direct = {"kernel": kernel, "initrd": vmmargv.L2_INITRAMFS, "cmdline": self.cmdline()}
        if self.vmm == "cloud-hypervisor":
            # No debug console: CLOUDHV.fd logs to the serial port (its
            # ZeroStart lines arrive as L3 lines), and cloud-hypervisor's
            # --debug-console at 0x402 overlaps a device of its own. The
            # kernel, initramfs and command line are in the UKI on the disk.
            inner = {"vmm": "cloud-hypervisor", "binary": vmmargv.L2_CLOUD_HYPERVISOR, "cpus": 1,
                     "disks": [{"path": f"/zs/esp/{name}.img", "readonly": True}], "serial": "tty"}
            return vmmargv.launch(inner, memory, tl, firmware=vmmargv.L2_CLOUDHV, extra=extra)
        if self.vmm == "chv-direct":
            inner = {"vmm": "cloud-hypervisor", "binary": vmmargv.L2_CLOUD_HYPERVISOR, "cpus": 1, **direct,
                     "serial": "tty"}
            return vmmargv.launch(inner, memory, tl, extra=extra)
        if self.vmm == "firecracker":
            # Firecracker reads everything from its config file (delivered
            # into L2 beside the list); the launcher adds the hint to
            # boot_args and hands it a sealed copy.
            inner = {"vmm": "firecracker", "binary": vmmargv.L2_FIRECRACKER, "cpus": 1,
                     "memory": {"backing": "anonymous", "size_mib": self.mem_mib},
                     **direct, "kernel": f"{kernel}.vmlinux", "firecracker": {"config_path": f"/zs/fc/{name}.json"}}
            return vmmargv.launch(inner, memory, tl, extra=extra)
        # qemu (OVMF), qemu-direct (q35: SeaBIOS and its linuxboot option
        # ROM) or microvm-direct (qboot): no OVMF, the hint rides on -append.
        q = {"log": f"/tmp/{name}.qlog"}
        if self.debugcon:
            q["debugcon"] = f"/tmp/{name}.fw"
        base = {"microvm-direct": vmmargv.l2_microvm, "microvm-seabios-direct": vmmargv.l2_microvm_seabios}.get(
            self.vmm, vmmargv.l2_qemu)(1, **q)
        inner = {**base, **direct, "serial": "stdio"}
        return vmmargv.launch(inner, memory, tl, firmware=None if self.vmm in DIRECT_QEMU else vmmargv.L2_OVMF,
                              extra=extra)

    def ready_spec(self) -> dict | None:
        """The command measuring memory_ready before the row, for a VMM
        without a timeline (the demo's stock QEMU); None: the launcher's."""
        return None

    def line(self, cmd: str, ready: str = "") -> str:
        """l2-launch.sh's list line: name|timeout_s|command (CMD: the
        shell-quoted command, last: the only field that may hold a '|')."""
        return "|".join([vmmargv.list_field(self.name), str(self.timeout_s), cmd])

    def cmdline(self) -> str:
        """The L3 kernel's whole command line: l2-launch.sh passes it to
        QEMU's -append, and a cloud-hypervisor scenario has it in its UKI.
        Firecracker has no ACPI power-off: its guest ends by a reset
        through the keyboard controller (reboot=k), which ends Firecracker."""
        halt = "reboot=k" if self.vmm == "firecracker" else "zsinit.halt=poweroff"
        return f"{L3_CONSOLE_ARGS} {halt} {self.guest_args}".strip()


def guest_args(mem_mib: int, extra: str = "") -> str:
    """The L3 kernel's arguments of a launch row (after L3_CONSOLE_ARGS,
    whose loglevel=5 lets the kernel's warnings, a WARNING or a refused
    hint's reason, reach the console, where judge() reads them)."""
    huge = 64
    return (f"prezero.verify=1 hugepages={huge} zsinit.check_mib=64 zsinit.populate_mib={huge * 2} "
            f"{extra} {os.environ.get('ZSE2E_GUEST_APPEND', '')}").strip()


# x86 exceptions by vector, for shutdown_event.
EXCEPTIONS = {0: "#DE", 6: "#UD", 8: "#DF", 11: "#NP", 12: "#SS", 13: "#GP", 14: "#PF"}


def shutdown_event(kvm_exit: str) -> str | None:
    """What the guest was delivering when it shut down, from L2 KVM's
    kvm_exit record of the shutdown (SVM's EXITINTINFO: bit 31 valid, bits
    8-10 the type, 3 an exception, bit 11 an error code, bits 0-7 the
    vector): 'delivering #PF, error 0x10: instruction fetch, page not
    present'. None when it delivered nothing."""
    m = re.search(r"intr_info 0x([0-9a-f]+) error_code 0x([0-9a-f]+)", kvm_exit)
    if not m:
        return None
    info, err = int(m.group(1), 16), int(m.group(2), 16)
    if not info >> 31:
        return None
    vec = info & 0xff
    kind = (info >> 8) & 7
    what = EXCEPTIONS.get(vec, f"vector {vec}") if kind == 3 else f"event type {kind} vector {vec}"
    if not (info >> 11) & 1:
        return f"delivering {what}"
    out = f"delivering {what}, error 0x{err:x}"
    if vec == 14:
        bits = ["instruction fetch" if err & 0x10 else "write" if err & 2 else "read",
                "user" if err & 4 else "kernel", "protection" if err & 1 else "page not present"]
        out += ": " + ", ".join(bits)
    return out


def elf_interpreter(p: Path) -> str | None:
    """The program interpreter (PT_INTERP) a 64-bit ELF executable names:
    a dynamically linked one; None for a static one or a non-ELF file."""
    import struct
    try:
        with open(p, "rb") as f:
            h = f.read(64)
            if len(h) < 64 or h[:4] != b"\x7fELF" or h[4] != 2 or h[5] != 1:
                return None
            phoff, = struct.unpack_from("<Q", h, 32)
            phentsize, phnum = struct.unpack_from("<HH", h, 54)
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                ph = f.read(56)
                if len(ph) == 56 and struct.unpack_from("<I", ph, 0)[0] == 3:  # PT_INTERP
                    off, = struct.unpack_from("<Q", ph, 8)
                    size, = struct.unpack_from("<Q", ph, 32)
                    f.seek(off)
                    return f.read(size).rstrip(b"\0").decode(errors="replace")
    except OSError:
        return None
    return None


def nested_runnable(p: Path, name: str) -> str | None:
    """Why `p` cannot run in the nested host (None: it can). L2 runs the
    VMM without the host's shared libraries (no libgcc_s), so a dynamically
    linked build exits 127 there; the release binaries are static."""
    interp = elf_interpreter(p)
    if interp:
        return (f"{p} is dynamically linked ({interp}), and the nested host has none of this host's shared "
                f"libraries: give a static {name} (its release binary, or a build with "
                f"RUSTFLAGS='-C target-feature=+crt-static')")
    return None


def cloud_hypervisor() -> tuple[Path | None, str]:
    """The cloud-hypervisor to test, or None and why there is none; with a
    binary, which channel the launcher will hand CLOUDHV.fd the hint on:
    fw_cfg where its --help lists --fw-cfg-config, else (every release
    binary) an SMBIOS OEM string."""
    env = os.environ.get("ZEROSTART_CLOUD_HYPERVISOR")
    found = env or shutil.which("cloud-hypervisor")
    if not found:
        return None, "cloud-hypervisor is not on PATH (it is in no package registry; docs/launch.md)"
    p = Path(found)
    if (why := nested_runnable(p, "cloud-hypervisor")):
        return None, why
    try:
        help_text = subprocess.run([str(p), "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as ex:
        return None, f"{p} --help failed: {ex}"
    if "--fw-cfg-config" not in help_text:
        return p, "smbios"
    return p, "fw_cfg"


def chv_scenarios(kernel: str, channel: str = "fw_cfg") -> list[LaunchScenario]:
    """The cloud-hypervisor rows: pool memory with the hint verified, and the
    negative control (a byte planted every 64 MiB inside the hint must be caught).
    CHANNEL: how the binary hands CLOUDHV.fd the hint (cloud_hypervisor())."""
    via = "fw_cfg" if channel == "fw_cfg" else "an SMBIOS OEM string"
    return [
        LaunchScenario("launch-chv-pool-1g", 1024, vmm="cloud-hypervisor", kernel=kernel, debugcon=True,
                       launcher_args="--test-poison-unhinted", guest_args=guest_args(1024),
                       note=f"cloud-hypervisor on pool memory, hint over {via} via CLOUDHV.fd, kernel from a "
                            "UKI on the boot disk; every byte the hint leaves out is poisoned first"),
        LaunchScenario("launch-chv-dirty-1g", 1024, vmm="cloud-hypervisor", kernel=kernel, expect="dirty",
                       launcher_args="--test-corrupt-hint dirty-spread", guest_args=guest_args(1024, "zsinit.check_pct=85"),
                       note="negative control through cloud-hypervisor: a byte planted every 64 MiB of the hint "
                            "must be caught"),
    ]


def firecracker() -> tuple[Path | None, str]:
    """The Firecracker to test, or None and why there is none."""
    found = os.environ.get("ZEROSTART_FIRECRACKER") or shutil.which("firecracker")
    if not found:
        return None, "firecracker is not on PATH (it is in no package registry; docs/launch.md)"
    if (why := nested_runnable(Path(found), "firecracker")):
        return None, why
    return Path(found), ""


def vmlinux_of(bzimage: Path) -> bytes:
    """The ELF kernel inside a gzip-compressed bzImage (what the kernel's
    scripts/extract-vmlinux does): Firecracker boots only an ELF vmlinux,
    and the kernel cache keeps the bzImage."""
    import zlib
    data = bzimage.read_bytes()
    at = data.find(b"\x1f\x8b\x08\x00")
    while at >= 0:
        try:
            elf = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[at:])
        except zlib.error:
            elf = b""
        if elf[:4] == b"\x7fELF":
            return elf
        at = data.find(b"\x1f\x8b\x08\x00", at + 1)
    raise build.BuildError(f"{bzimage}: no gzip-compressed ELF inside (CONFIG_KERNEL_GZIP)")


def fc_scenarios(kernel: str) -> list[LaunchScenario]:
    """Firecracker through the launcher: it allocates its own guest memory
    (source=none), the hint rides on boot_args. The pass row verifies every
    skipped clear; a hint with a bad checksum must be refused with its
    reason. (A dirty-byte control needs a region the launcher holds, which
    Firecracker has not.)"""
    return [
        LaunchScenario("launch-fc-1g", 1024, vmm="firecracker", source="none", kernel=kernel,
                       guest_args=guest_args(1024),
                       note="Firecracker on its own memory, hint in boot_args, every skipped clear verified"),
        LaunchScenario("launch-fc-corrupt-1g", 1024, vmm="firecracker", source="none", kernel=kernel,
                       expect="corrupt", launcher_args="--test-corrupt-hint checksum",
                       guest_args=guest_args(1024),
                       note="Firecracker: a hint with a bad checksum in boot_args is refused with its reason"),
    ]


def direct_rows(kernel: str, vmm: str, boot: str, carrier: str) -> list[LaunchScenario]:
    """The pool row and its negative control of a direct kernel boot
    (VMM qemu-direct or chv-direct; BOOT and CARRIER name the boot and the
    hint's place in the rows' notes). The pool row is the poisoned-memory
    experiment that checks the VMM's layout facts (vmm::qemu_direct_writes,
    vmm::chv_direct_writes): every byte the hint leaves out is poisoned
    first, and verify checks every clear the kernel skips; the dirty row
    plants a byte inside the hint, which must be caught."""
    tag = vmm.removesuffix("-direct")
    return [
        LaunchScenario(f"launch-{tag}-direct-pool-1g", 1024, vmm=vmm, kernel=kernel,
                       launcher_args="--test-poison-unhinted", guest_args=guest_args(1024),
                       note=f"{boot} on pool memory, hint on {carrier}; every byte the hint leaves out is "
                            "poisoned first, every skipped clear verified"),
        LaunchScenario(f"launch-{tag}-direct-dirty-1g", 1024, vmm=vmm, kernel=kernel, expect="dirty",
                       launcher_args="--test-corrupt-hint dirty-spread",
                       guest_args=guest_args(1024, "zsinit.check_pct=85"),
                       note=f"negative control of the {boot}: a byte planted every 64 MiB inside the hint must be caught"),
    ]


# The fleet rows' pool (issue 29 item 4): regions of several sizes, as a
# fleet of guests of many sizes runs on one pool, in an L2 boot of their
# own (the other rows need one region of their largest guest): one 1280 MiB
# region listed first, then three of 640 MiB, 3200 MiB in all; as `zerostart
# pool serve --regions` takes it.
FLEET_REGIONS_MIB = [1280, 640, 640, 640]
FLEET_POOL_MIB = sum(FLEET_REGIONS_MIB)
FLEET_REGIONS = ",".join(f"{m}M" for m in FLEET_REGIONS_MIB)


def qemu_fleet_scenarios(kernel: str) -> list[LaunchScenario]:
    """QEMU (one memory-backend: one region per guest) on the fleet pool: a
    512 MiB guest must take a 640 MiB region, not the 1280 MiB one listed
    first (the pool's best fit; a first fit would hold 1280), and boot with
    the hint exact: every byte the hint leaves out, the region's tail
    beyond the guest included, is poisoned first and every skipped clear
    verified."""
    return [
        LaunchScenario("launch-qemu-direct-fleet-512m", 512, vmm="qemu-direct", kernel=kernel, held_mib=640,
                       launcher_args="--test-poison-unhinted", guest_args=guest_args(512),
                       note="QEMU direct boot of a 512 MiB guest on a pool of 1280 + 3 x 640 MiB regions: the "
                            "lease holds one 640 MiB region (best fit), hint on -append, unhinted bytes "
                            "poisoned, every skipped clear verified"),
    ]


def chv_zones_scenarios(kernel: str) -> list[LaunchScenario]:
    """cloud-hypervisor on guests larger than every region of the fleet
    pool (issue 29 item 4): one lease of whole regions, one --memory-zone
    each, the hint over the whole guest. 3200 MiB takes all four regions
    (1280 first, the largest; then the 640s), the last zone straddling the
    32-bit hole at 3 GiB: every byte the hint leaves out is poisoned first
    and prezero.verify=1 checks every skipped clear, so a zone laid out
    anywhere but where the launcher's layout says fails the row. The
    control plants a byte every 64 MiB of the hint of a 1920 MiB guest
    (1280 + 640: both zones), which must be caught."""
    big, small = FLEET_POOL_MIB, 1920
    return [
        LaunchScenario(f"launch-chv-zones-{big}m", big, vmm="chv-direct", kernel=kernel,
                       zones=4, held_mib=big, timeout_s=300,
                       launcher_args="--test-poison-unhinted", guest_args=guest_args(big),
                       note="cloud-hypervisor direct boot on the four regions of a pool of 1280 + 3 x 640 MiB "
                            "as memory zones (one across the hole), hint on --cmdline; every byte the hint "
                            "leaves out poisoned first, every skipped clear verified"),
        LaunchScenario(f"launch-chv-zones-dirty-{small}m", small, vmm="chv-direct", kernel=kernel, expect="dirty",
                       zones=2, held_mib=small,
                       launcher_args="--test-corrupt-hint dirty-spread",
                       guest_args=guest_args(small, "zsinit.check_pct=85"),
                       note="negative control over memory zones: a byte planted every 64 MiB of the hint, in "
                            "both zones, must be caught"),
    ]


def chv_direct_scenarios(kernel: str) -> list[LaunchScenario]:
    """cloud-hypervisor booting the kernel itself (--kernel bzImage, no
    firmware), as its release binaries can: the hint rides on --cmdline."""
    return direct_rows(kernel, "chv-direct", "cloud-hypervisor direct boot", "--cmdline")


def direct_scenarios(kernel: str) -> list[LaunchScenario]:
    """QEMU's direct kernel boot through the launcher (no OVMF: SeaBIOS and
    the linuxboot option ROM start the kernel, the hint rides on -append),
    and a hint with a bad checksum, refused. Like every launch row they log
    at loglevel 5 (guest_args), so the kernel's one-line reasons (a refused
    hint) reach the console."""
    return [
        LaunchScenario("launch-qemu-direct-corrupt-1g", 1024, vmm="qemu-direct", kernel=kernel, expect="corrupt",
                       launcher_args="--test-corrupt-hint checksum", guest_args=guest_args(1024),
                       note="direct boot: a hint with a bad checksum on the command line is refused with its "
                            "one-line reason"),
        *direct_rows(kernel, "qemu-direct", "direct boot (SeaBIOS, -kernel)", "the kernel command line"),
        *direct_rows(kernel, "microvm-direct", "microvm direct boot (qboot, -kernel)", "the kernel command line"),
        *direct_rows(kernel, "microvm-seabios-direct", "microvm direct boot (SeaBIOS bios-microvm.bin, -kernel)",
                     "the kernel command line"),
    ]


def test_scenarios(kernel: str, large_mib: int) -> list[LaunchScenario]:
    """`make test-launch`: 1 GiB and a larger size (3 GiB: q35 puts 1 GiB of it above 4 GiB)."""
    # The corrupt case runs first: the first launch of an L2 boot pays
    # one-time process start-up costs, which must not land in the 1 GiB vs
    # larger memory_ready comparison of the two pool scenarios.
    return [
        LaunchScenario("launch-qemu-corrupt-1g", 1024, kernel=kernel, expect="corrupt", debugcon=True,
                       launcher_args="--test-corrupt-hint checksum", guest_args=guest_args(1024),
                       note="a hint with a bad checksum is ignored with its one-line reason"),
        LaunchScenario("launch-qemu-pool-1g", 1024, kernel=kernel, launcher_args="--test-poison-unhinted",
                       guest_args=guest_args(1024),
                       note="pool memory, hint over fw_cfg via OVMF; every byte the hint leaves out is "
                            "poisoned first, the kernel verifies every skipped clear"),
        LaunchScenario(f"launch-qemu-pool-{large_mib // 1024}g", large_mib, kernel=kernel,
                       launcher_args="--test-poison-unhinted", guest_args=guest_args(large_mib),
                       note="as 1g, larger (q35: RAM above 4 GiB too); memory_ready must not grow"),
        LaunchScenario("launch-qemu-dirty-1g", 1024, kernel=kernel, expect="dirty",
                       launcher_args="--test-corrupt-hint dirty-spread", guest_args=guest_args(1024, "zsinit.check_pct=85"),
                       note="negative control of verify mode: a byte planted every 64 MiB inside the hint must be "
                            "caught by prezero.verify=1 (the guest's sweep is reported, not enough alone)"),
    ]


@dataclass
class LaunchResult:
    sc: LaunchScenario
    t0_ms: int | None = None
    rc: int | None = None
    wall_ms: int | None = None
    l3: list[tuple[int, str]] = field(default_factory=list)
    fw: list[str] = field(default_factory=list)
    vmm: list[str] = field(default_factory=list)
    qlog: str | None = None
    # L2 KVM's record of this guest's shutdown exits (triple faults) and the
    # exceptions it injected (l2-pool.sh kvmx_line): where a guest died.
    kvmx: list[str] = field(default_factory=list)
    # The nested host's QEMU's own line at this guest's shutdown (bed-qemu
    # patches/0004, on L2's stderr): the CPU state the emulator held then.
    bed: list[str] = field(default_factory=list)
    timeline: dict | None = None
    failures: list[str] = field(default_factory=list)

    def end_story(self) -> str:
        """How QEMU saw the guest end, and what L2's KVM saw, for a failure line."""
        s = f"QEMU log: {self.qlog or 'none'}"
        dead = [i for i, k in enumerate(self.kvmx) if "kvm_exit" in k]
        if dead:
            # The last shutdown exit and the two records before it (the
            # exceptions injected on the way there, if any).
            last = self.kvmx[max(dead[-1] - 2, 0):dead[-1] + 1]
            s += f"; L2 KVM: {' | '.join(k.split(': ', 1)[-1].strip() for k in last)}"
            event = shutdown_event(self.kvmx[dead[-1]])
            if event:
                s += f" ({event})"
        if self.bed:
            s += f"; nested host's QEMU: {self.bed[-1].split(': ', 1)[-1]}"
        # bed-qemu/patches/0005: the emulator caught itself in a state no
        # correct CPU reaches; its head here, its ring of world switches in
        # the console log.
        for inv in (b for b in self.bed if " invariant: " in b):
            s += f"; nested host's QEMU: {inv.split('; last switches', 1)[0].removeprefix('QEMU-SVM ')}"
        # An exception storm (kvmx_line prints its commonest kinds): a
        # guest that spun re-taking a fault rather than dying.
        storm = [k for k in self.kvmx if k.startswith("shutdown_exits=0 injected_exceptions=")]
        counts = [k.removeprefix("count ").strip() for k in self.kvmx if k.startswith("count ")]
        if storm and counts:
            s += f"; L2 KVM: {storm[-1].split(' ', 1)[1]}, commonest: {counts[0]}"
        return s

    def shut_down(self) -> str | None:
        """The failure line of a guest that shut down (a triple fault: L2's
        KVM recorded a shutdown exit, kvmx_line in l2-pool.sh) even though
        it printed its verdict first: a crash during power-off is a crash,
        and a PASS printed before it does not hide it. None: no shutdown."""
        if any("kvm_exit" in k and "reason shutdown" in k for k in self.kvmx):
            return f"the guest shut down (triple fault) after its verdict ({self.end_story()})"
        return None

    def no_verdict(self) -> str:
        """The failure line of a guest that printed no verdict: where its
        output stopped and how QEMU and L2's KVM saw the end, so that a
        crash can be told from output lost on the way."""
        last = self.l3[-1][1] if self.l3 else "nothing"
        return f"no ZSINIT verdict from the guest (its serial output ended with {last!r}; {self.end_story()})"

    def verdict(self) -> dict:
        for _, ln in self.l3:
            if "ZSINIT: PASS" in ln or "ZSINIT: FAIL" in ln:
                return e2e.parse_verdict(ln)
        return {}

    def line_ms(self, needle: str) -> int | None:
        for t, ln in self.l3:
            if needle in ln and self.t0_ms is not None:
                return t - self.t0_ms
        return None

    def kernel_counter(self, name: str) -> int:
        for _, ln in self.l3:
            if f"kernel-zerostart start {name}=" in ln:
                try:
                    return int(ln.split(f"{name}=", 1)[1].split()[0])
                except ValueError:
                    return -1
        return -1


def row(r: LaunchResult) -> dict:
    v = r.verdict()
    tl = {p["name"]: p["t_ms"] for p in (r.timeline or {}).get("phases", [])}
    pristine = r.kernel_counter("pristine_pages_at_boot")
    skipped = int(v.get("kernel_pages_skipped", -1))
    return {
        "name": r.sc.name,
        "vmm": {"qemu-direct": "qemu", "microvm-direct": "qemu", "microvm-seabios-direct": "qemu",
                "chv-direct": "cloud-hypervisor"}.get(r.sc.vmm,
                                                                                                        r.sc.vmm),
        "boot": (r.timeline or {}).get("boot") or ("direct" if r.sc.vmm.endswith("-direct")
                                                    or r.sc.vmm == "firecracker" else "uefi"),
        "hint_transport": (r.timeline or {}).get("hint_transport"),
        "memory_bytes": r.sc.mem_mib * MIB,
        "memory_source": r.sc.source,
        "kernel": "stock" if r.sc.kernel.startswith("debian") else "patched",
        "hint_seen": pristine > 0 or skipped > 0,
        "kernel_pages_skipped": skipped,
        "kernel_verify_failures": int(v.get("kernel_verify_failures", -1)),
        "nonzero_bytes": int(v.get("nonzero_bytes", -1)),
        "passed": not r.failures,
        "phases_ms": {
            "memory_ready": tl.get("memory_ready"),
            "init_started": r.line_ms("ZSINIT: START"),
            # The workload is write-faulted (zsinit's APP_READY line); the read-back check comes after.
            "app_ready": r.line_ms("ZSINIT: APP_READY") or r.line_ms("ZSINIT: PASS") or r.line_ms("ZSINIT: FAIL"),
        },
        # additions
        "launcher_args": r.sc.launcher_args,
        "guest_args": r.sc.guest_args,
        "kernel_bytes_verified": int(v.get("kernel_bytes_verified", -1)),
        "pristine_pages_at_boot": pristine,
        "firmware": [ln for ln in r.fw + [t for _, t in r.l3] if "ZeroStart:" in ln][:6],
        "launcher_timeline": r.timeline,
        "vmm_rc": r.rc,
        "wall_ms_in_l2": r.wall_ms,
        "failures": r.failures,
        "note": r.sc.note,
    }


def judge(r: LaunchResult) -> None:
    sc, v, f = r.sc, r.verdict(), r.failures
    # OVMF logs to its debug console (FW| lines); CLOUDHV.fd to the serial
    # port, so its ZeroStart lines come among the guest's.
    fw = "\n".join(r.fw + [ln for _, ln in r.l3 if "ZeroStart:" in ln])
    if r.rc is None:
        f.append("no ZSL-END line (scenario did not finish)")
    elif r.rc != 0:
        f.append(f"zerostart launch exited {r.rc}")
    if not v:
        # A crash (a reset: one more CPU reset than a clean run) told
        # from output lost on the way.
        f.append(r.no_verdict())
        return
    skipped = int(v.get("kernel_pages_skipped", -1))
    fails = int(v.get("kernel_verify_failures", -1))
    nonzero = int(v.get("nonzero_bytes", -1))
    # A kernel bug line fails the row whatever the verdict says (a Bad
    # page state with a PASS verdict is no pass); verify mode's own WARN
    # on a caught page is the dirty rows' point and never matches.
    bug = next(iter(e2e.kernel_bug_lines(ln for _, ln in r.l3)), None)
    if bug:
        f.append(f"kernel bug line on the guest console: {bug.strip()[:160]}")
    if r.shut_down():
        f.append(r.shut_down())
    if r.timeline is None:
        f.append("no launcher timeline")
    else:
        f += [f"launcher timeline JSON: {p}" for p in tlschema.check(r.timeline, "launch")]
        if sc.zones:
            got = r.timeline.get("argv", []).count("--memory-zone")
            if got != sc.zones:
                f.append(f"the launcher gave cloud-hypervisor {got} memory zones, not {sc.zones} "
                         f"(one per pool region of the lease)")
        held = (r.timeline.get("lease_held_bytes") or 0) >> 20
        if sc.held_mib and held != sc.held_mib:
            f.append(f"the lease held {held} MiB of pool memory, not {sc.held_mib} "
                     f"(the smallest region that holds {sc.mem_mib} MiB)")
    if sc.expect == "pass":
        if v["status"] != "PASS":
            f.append(f"guest verdict FAIL: {v.get('reason', '?')}")
        if nonzero != 0:
            f.append(f"guest saw {nonzero} non-zero bytes")
        if fails != 0:
            f.append(f"prezero.verify found {fails} skipped clears non-zero: the hint is wrong")
        if not sc.kernel.startswith("debian"):
            if skipped <= 0:
                f.append("the patched kernel skipped no clears (hint not used)")
            if int(v.get("kernel_bytes_verified", "0")) <= 0:
                f.append("prezero.verify=1 but the kernel verified no bytes")
        if sc.debugcon and "ZeroStart: published" not in fw:
            f.append("the firmware published no EFI table")
    elif sc.expect == "dirty":
        # The control of verify mode itself (issue 32): prezero.verify=1
        # must catch the planted byte on its own. The guest's sweep is the
        # second net, reported, never enough alone.
        if fails <= 0:
            f.append(f"prezero.verify=1 did not catch the byte planted inside the hint (verify_failures 0; "
                     f"the guest's sweep saw {nonzero} non-zero bytes)")
    elif sc.expect == "corrupt" and sc.vmm in (*DIRECT_QEMU, "chv-direct", "firecracker"):
        why = "zerostart: ignoring pre-zeroed hint from command line: BadChecksum"
        if not any(why in ln for _, ln in r.l3):
            f.append(f"the kernel did not log '{why}'")
        if skipped > 0:
            f.append(f"the kernel skipped {skipped} clears without a valid hint")
        if v["status"] != "PASS" or nonzero != 0:
            f.append(f"guest verdict {v['status']} nonzero={nonzero}")
    elif sc.expect == "corrupt":
        if "hint rejected: BadChecksum" not in fw:
            f.append("the firmware did not log 'hint rejected: BadChecksum'")
        if "ZeroStart: published" in fw:
            f.append("the firmware published a table for a corrupt hint")
        if skipped > 0:
            f.append(f"the kernel skipped {skipped} clears without a valid hint")
        if v["status"] != "PASS" or nonzero != 0:
            f.append(f"guest verdict {v['status']} nonzero={nonzero}")


# How many times run_scenarios boots L2 again after a test-bed fault
# (zstest.qemu.bed_fault: the L2 QEMU's own abort, or an interrupt its TCG
# never delivered). Each is printed, reported and counted; a guest is never
# retried.
L2_RETRIES = int(os.environ.get("ZSE2E_L2_RETRIES", "1"))


def run_scenarios(scenarios: list[LaunchScenario], zerostart: Path, ovmf: Path, pool_mib: int, region_mib: int,
                  regions: str = "", echo: bool = False, smp: int = 2, console_log: Path = OUT / "console.log",
                  extra_files: dict[str, tuple[bytes, int]] | None = None,
                  script: Path = Path(__file__).parent / "l2-launch.sh",
                  judge_fn=None, l2_disks: list[dict] | None = None,
                  l2_extra_mib: int = 0,
                  l2_retries: list[str] | None = None) -> tuple[list[LaunchResult], str | None]:
    """Boots L2 with a pool of `pool_mib` in regions of `region_mib` (or of
    the sizes `regions` lists, `zerostart pool serve --regions`, adding up
    to `pool_mib`), runs `scenarios`, returns results.

    `script` is the L2 script (l2-launch.sh; the demo's l2-demo.sh speaks the
    same protocol), `judge_fn` judges each result (default: `judge`),
    `l2_disks` adds virtio disks to L2's QEMU (spec dicts, options::vmm_cmd::Disk: the real-VM disks) and
    `l2_extra_mib` memory to L2 beyond the guests' (their page cache).

    One L2 boot runs them all. When that boot fails by a fault of the test
    bed itself (zstest.qemu.bed_fault), L2 boots again, at most L2_RETRIES
    times, for the scenarios it had not finished; the scenario it was in is
    run again from its start, unless its guest printed a kernel bug line
    (then it fails, as any guest crash does). Each retry's reason is
    appended to `l2_retries` and printed; its console goes to
    `<console_log>.l2-retryN.log`."""
    retries = l2_retries if l2_retries is not None else []
    kernels = build.default_l3_kernels()
    manifest = build.build_l2(kernels, None, with_qemu=True)

    def boot(todo: list[LaunchScenario]):
        log = console_log if not retries else console_log.with_name(
            f"{console_log.stem}.l2-retry{len(retries)}{console_log.suffix}")
        return _boot_once(todo, manifest, kernels, zerostart, ovmf, pool_mib, region_mib, regions, echo, smp,
                          log, extra_files, script, judge_fn or judge, l2_disks, l2_extra_mib)

    return rerun_after_bed_faults(list(scenarios), boot, retries, L2_RETRIES,
                                  lambda r: bool(e2e.kernel_bug_lines(ln for _, ln in r.l3)), "launch")


def _boot_once(scenarios: list[LaunchScenario], manifest: dict, kernels: dict, zerostart: Path, ovmf: Path,
               pool_mib: int, region_mib: int, regions: str, echo: bool, smp: int, console_log: Path,
               extra_files: dict[str, tuple[bytes, int]] | None, script: Path, judge_fn,
               l2_disks: list[dict] | None, l2_extra_mib: int) -> tuple[list[LaunchResult], str | None, str | None]:
    """One L2 boot for `scenarios`: results, the fatal error and, when the
    boot failed by a fault of the test bed (zstest.qemu.bed_fault), why."""
    extra = build.Cpio()
    extra.file("zs/zerostart", zerostart.read_bytes(), 0o755)
    extra.file("zs/fw/OVMF.fd", ovmf.read_bytes())
    chv = [s for s in scenarios if s.vmm == "cloud-hypervisor"]
    if chv or any(s.vmm == "chv-direct" for s in scenarios):
        binary, why = cloud_hypervisor()
        if binary is None:
            raise build.BuildError(f"cloud-hypervisor scenarios without cloud-hypervisor: {why}")
        extra.file("zs/cloud-hypervisor", binary.read_bytes(), 0o755)
    fcs = [s for s in scenarios if s.vmm == "firecracker"]
    if fcs:
        binary, why = firecracker()
        if binary is None:
            raise build.BuildError(f"Firecracker scenarios without firecracker: {why}")
        extra.file("zs/firecracker", binary.read_bytes(), 0o755)
        for k in {s.kernel for s in fcs}:
            extra.file(f"zs/kernels/{k}.vmlinux", vmlinux_of(kernels[k]), 0o644)
    if chv:
        # CLOUDHV.fd is built beside OVMF.fd (make firmware).
        extra.file("zs/fw/CLOUDHV.fd", (ovmf.parent / "CLOUDHV.fd").read_bytes())
        l3i = build.build_l3_initramfs()
        for s in chv:
            img = OUT / f"esp-{s.name}.img"
            img.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["bash", str(REPO / "tests" / "lib" / "mkesp.sh"), str(kernels[s.kernel]), str(l3i),
                            s.cmdline(), str(img)], check=True)
            extra.file(f"zs/esp/{s.name}.img", img.read_bytes())
    extra.file("zs/launch.sh", script.read_bytes(), 0o755)
    extra.file("zs/l2-pool.sh", (Path(__file__).parent / "l2-pool.sh").read_bytes(), 0o644)
    _, (data, seabios) = build.pinned_qemu()
    for rom in ("kvmvapic.bin", "linuxboot_dma.bin"):
        if (data / rom).exists():
            extra.file(f"qemu/share/{rom}", (data / rom).read_bytes())
    # q35's default BIOS, which runs a direct kernel boot (qemu-direct).
    if any(s.vmm == "qemu-direct" for s in scenarios):
        bios = seabios / "bios-256k.bin"
        if not bios.is_file():
            raise build.BuildError(f"no {bios} for the direct-boot scenarios: run `make deps` (seabios)")
        extra.file("qemu/share/bios-256k.bin", bios.read_bytes())
    # microvm's default BIOS (Debian ships it in seabios, not in QEMU's data).
    if any(s.vmm == "microvm-seabios-direct" for s in scenarios):
        bios = seabios / "bios-microvm.bin"
        if not bios.is_file():
            raise build.BuildError(f"no {bios} for the microvm SeaBIOS scenarios: run `make deps` (seabios)")
        extra.file("qemu/share/bios-microvm.bin", bios.read_bytes())
    for path, (blob, mode) in (extra_files or {}).items():
        extra.file(path, blob, mode)
    extra.file("zs/launch.txt", ("\n".join([f"pool|{pool_mib}|{region_mib}|{regions}"] + list_lines(scenarios, zerostart, extra))
                                 + "\n").encode())
    l2_mem, hugepages = l2_memory(manifest, pool_mib)
    l2_mem += l2_extra_mib
    print(f"launch: booting L2 ({l2_mem} MiB, pool {pool_mib} MiB in "
          f"{f'regions of {regions}' if regions else f'{region_mib} MiB regions'}) "
          f"for {len(scenarios)} scenario(s)", flush=True)
    with boot_l2(manifest, extra, l2_mem, hugepages, log=console_log, smp=smp, echo=echo,
                 append="zse2e.script=launch.sh", disks=l2_disks, zerostart=zerostart) as con:
        results, fatal = _drive(con, scenarios, judge_fn)
        abort = silent = triple = None
        if fatal and fatal.startswith("L2 exited"):
            # The nested host's QEMU ended: say how (its status, and the
            # line by which it reported an abort of its own, if any), as
            # run.py does for its scenarios.
            abort = con.abort_line(con.exit_code())
            fatal += f" ({con.exit_story()})"
            triple = con.l2_triple_fault()
        elif fatal and fatal.startswith("timeout"):
            # The nested host went silent: where L2's CPUs are and what their
            # APICs hold go into the console log and the failure line.
            silent = con.silent_host()
            if silent:
                fatal += f" ({silent})"
        # _drive adds a scenario it was in to `results` with no rc.
        return results, fatal, bed_fault(silent, abort, triple, con.stale_int3,
                                         guest_in_flight=any(r.rc is None for r in results))


# What the test bed's QEMU prints (stderr, so on L2's console stream) when a
# nested guest shuts down: bed-qemu/patches/0004.
BED_SHUTDOWN_LINE = "QEMU-SVM cpu"


def list_lines(scenarios: list[LaunchScenario], zerostart: Path, extra: build.Cpio) -> list[str]:
    """The L2 script's scenario lines, each with its command built by
    ZEROSTART's `vmm-argv` (on this host); the files a command reads (a
    Firecracker config) go into EXTRA, at their L2 paths."""
    out = []
    for s in scenarios:
        b = vmmargv.build(s.spec(), zerostart)
        for path, text in b.files.items():
            extra.file(path, text.encode())
        rs = s.ready_spec()
        out.append(s.line(b.shell(), vmmargv.build(rs, zerostart).shell() if rs else ""))
    return out


def _drive(con, scenarios: list[LaunchScenario], judge_fn=judge) -> tuple[list[LaunchResult], str | None]:
    by = {s.name: s for s in scenarios}
    results: list[LaunchResult] = []
    t_start = time.monotonic()
    overall = t_start + e2e.L2_BOOT_TIMEOUT_S + 300 + sum(s.timeout_s + GRACE_S for s in scenarios)
    deadline = t_start + e2e.L2_BOOT_TIMEOUT_S + 300  # L2 boot + the pool's first fill
    cur: LaunchResult | None = None
    try:
        while True:
            line = con.next(min(deadline, overall))
            if line is None:
                return results, (f"L2 exited during {cur.sc.name}" if cur else
                                 None if len(results) == len(scenarios) else "L2 exited early")
            if line.startswith("ZSE2E-FATAL"):
                return results, line
            if line.startswith("ZSL-POOL"):
                print(f"launch: pool in L2 {line.split(' ', 2)[2]}", flush=True)
            elif line.startswith("ZSL-BEGIN"):
                d = e2e.kv(line)
                cur = LaunchResult(by[d["name"]], t0_ms=int(d["t0_ms"]))
                deadline = time.monotonic() + cur.sc.timeout_s + GRACE_S
                print(f"launch: [{cur.sc.name}] running ({cur.sc.vmm}, {cur.sc.mem_mib} MiB, "
                      f"source={cur.sc.source}, kernel {cur.sc.kernel})", flush=True)
            elif cur and line.startswith("L3| "):
                rest = line[4:]
                t, _, text = rest.partition(" ")
                try:
                    cur.l3.append((int(t), text))
                except ValueError:
                    cur.l3.append((0, rest))
            elif cur and line.startswith("FW| "):
                cur.fw.append(line[4:])
            elif cur and line.startswith("VMM| "):
                cur.vmm.append(line[5:])
            elif cur and line.startswith("QLOG| "):
                cur.qlog = line[6:].strip()
            elif cur and line.startswith("KVMX| "):
                cur.kvmx.append(line[6:].strip())
            elif cur and line.startswith(BED_SHUTDOWN_LINE):
                cur.bed.append(line.strip())
            elif cur and line.startswith("ZSL-TIMELINE"):
                try:
                    cur.timeline = json.loads(line.split(" ", 2)[2])
                except (IndexError, json.JSONDecodeError) as ex:
                    cur.failures.append(f"launcher timeline unparsable: {ex}")
            elif cur and line.startswith("ZSL-END"):
                d = e2e.kv(line)
                cur.rc, cur.wall_ms = int(d.get("rc", "-1")), int(d.get("wall_ms", "0"))
                judge_fn(cur)
                results.append(cur)
                rr = row(cur)
                # Only the phases this guest printed: a real-VM row (microvm)
                # has no probe lines, and its phases come in its own table.
                seen = ", ".join(f"{k} {v} ms" for k, v in rr["phases_ms"].items() if v is not None)
                print(f"launch: [{cur.sc.name}] {'PASS' if not cur.failures else 'FAIL: ' + '; '.join(cur.failures)} "
                      f"({seen or 'no phase lines'})", flush=True)
                cur = None
                deadline = overall
            elif line.startswith("ZSE2E-DONE"):
                deadline = min(overall, time.monotonic() + 30)
    except TimeoutError:
        if cur:
            cur.failures.append("harness timeout")
            results.append(cur)
        return results, f"timeout after {time.monotonic() - t_start:.0f} s"


def retries_line(who: str, retries: list[str]) -> str:
    """The count of L2 boots run_scenarios repeated after a test-bed fault,
    with each reason: printed by every harness on it, 0 included."""
    return "\n".join([f"{who}: {len(retries)} L2 retries after a test-bed fault outside every guest"] +
                     [f"{who}:   retry {i}: {r[:400]}" for i, r in enumerate(retries, 1)])


def summary(rows: list[dict]) -> str:
    head = ("scenario", "ok", "mem", "source", "kernel", "hint", "skipped", "verify_fail", "nonzero",
            "memory_ready", "init_started", "app_ready")
    out = [head]
    for s in rows:
        p = s["phases_ms"]
        out.append((s["name"], "PASS" if s["passed"] else "FAIL", f"{s['memory_bytes'] // MIB}M", s["memory_source"],
                    s["kernel"], "seen" if s["hint_seen"] else "-", str(s["kernel_pages_skipped"]),
                    str(s["kernel_verify_failures"]), str(s["nonzero_bytes"]),
                    *(e2e.fmt_ms(p[k]) for k in ("memory_ready", "init_started", "app_ready"))))
    lines = e2e.text_table(out)
    for s in rows:
        for fl in s["failures"]:
            lines.append(f"  {s['name']}: {fl}")
    return "\n".join(lines)


def inputs(a, who: str, need_patched: bool) -> tuple[Path, Path, dict]:
    """What `run.py launch` and `run.py demo` both start from: the static
    zerostart, OVMF.fd and the L3 kernels; raises BuildError naming what is
    missing and the make target that makes it."""
    zs = e2e.zerostart_path(a.zerostart)
    if zs is None:
        raise build.BuildError(f"no static zerostart binary; run `make {who}` (it builds one with e2e-zerostart)")
    if not getattr(a, "firmware", None):
        raise build.BuildError(f"no --firmware OVMF.fd given; run `make {who}`, which passes the one "
                               "`make firmware` builds")
    ovmf = Path(a.firmware)
    if not ovmf.exists():
        raise build.BuildError(f"{ovmf} missing; run `make firmware`")
    kernels = build.default_l3_kernels()
    if need_patched and "patched" not in kernels:
        raise build.BuildError(f"no patched guest kernel; build it with guest-kernel-patches/build.sh "
                               f"(make {who} does)")
    return zs, ovmf, kernels


def cmd_launch(a) -> int:
    t0 = time.monotonic()
    zs, ovmf, kernels = inputs(a, "test-launch", need_patched=False)
    kernel = "patched" if "patched" in kernels else "debian-6.12"
    if kernel != "patched":
        print("launch: WARNING: no patched guest kernel (guest-kernel-patches/build.sh); the verify checks need it",
              flush=True)
    large = int(os.environ.get("ZSLAUNCH_LARGE_MIB", "3072"))
    scs = test_scenarios(kernel, large)
    chv, why = cloud_hypervisor()
    skipped: list[str] = []

    def runnable(rows: list[LaunchScenario], why_not: str | None) -> list[LaunchScenario]:
        """ROWS, or none when WHY_NOT names what they lack (each listed as skipped with it)."""
        if why_not is None:
            return rows
        skipped.extend(f"SKIP launch: {s.name}: {why_not}" for s in rows)
        return []

    # Only the patched kernel reads a hint on its command line.
    no_cmdline = None if kernel == "patched" else "no patched guest kernel reads the command-line hint"
    scs += runnable(direct_scenarios(kernel), no_cmdline)
    no_chv = why if chv is None else None if kernel == "patched" else "no patched guest kernel to put in the UKI"
    if no_chv is None:
        print(f"launch: cloud-hypervisor {chv} (hint to the firmware over {why})", flush=True)
    scs += runnable(chv_scenarios(kernel, why if no_chv is None else "fw_cfg") + chv_direct_scenarios(kernel),
                    no_chv)
    fc, fc_why = firecracker()
    no_fc = (fc_why if fc is None else None if kernel == "patched"
             else "no patched guest kernel reads the hint in boot_args")
    if no_fc is None:
        print(f"launch: firecracker {fc}", flush=True)
    scs += runnable(fc_scenarios(kernel), no_fc)
    fleet = runnable(qemu_fleet_scenarios(kernel), no_cmdline) + runnable(chv_zones_scenarios(kernel), no_chv)
    if a.only:
        want = set(a.only.split(","))
        scs = [s for s in scs if s.name in want]
        fleet = [s for s in fleet if s.name in want]
        skipped = [k for k in skipped if k.split(": ")[1] in want]
    # One region of the largest size: each lease takes it, the pool re-scrubs it between scenarios.
    retries: list[str] = []
    results, fatal = ([], None) if not scs else run_scenarios(
        scs, zs, ovmf, pool_mib=large, region_mib=large, echo=a.verbose, smp=a.smp, l2_retries=retries)
    if fleet and fatal is None:
        # The fleet rows: a pool of several region sizes, in an L2 boot of its own.
        more, fatal = run_scenarios(fleet, zs, ovmf, pool_mib=FLEET_POOL_MIB, region_mib=max(FLEET_REGIONS_MIB),
                                    regions=FLEET_REGIONS, echo=a.verbose, smp=a.smp,
                                    console_log=OUT / "console-fleet.log", l2_retries=retries)
        results += more
    scs += fleet
    rows = [row(r) for r in results]
    OUT.mkdir(parents=True, exist_ok=True)
    rep = {"scenarios": rows, "fatal": fatal, "firmware": str(ovmf), "kernel": kernel, "l2_retries": retries}
    # run.py's --report default is the e2e report; anything else was asked for.
    given = a.report and Path(a.report).resolve() != (e2e.OUT / "report.json").resolve()
    path = Path(a.report) if given else OUT / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep, indent=2) + "\n")
    print("\n" + summary(rows))
    for k in skipped:
        print(k)
    # One check line per scenario, as make_test.py counts them.
    for r in rows:
        print(f"ok: launch: {r['name']}" if r["passed"] else
              f"FAIL: launch: {r['name']}: {'; '.join(r['failures']) or 'failed'}")
    ran = {r["name"] for r in rows}
    for s in scs:
        if s.name not in ran:
            print(f"FAIL: launch: {s.name}: did not run ({fatal or 'L2 ended early'})")
    mr = {s["memory_bytes"] // MIB: s["phases_ms"]["memory_ready"] for s in rows
          if s["passed"] and s["name"].startswith("launch-qemu-pool-")}
    if 1024 in mr and large in mr and mr[1024]:
        print(f"\nlaunch: memory_ready through the launcher (pool): 1 GiB {mr[1024]} ms, "
              f"{large // 1024} GiB {mr[large]} ms, {mr[large] / mr[1024]:.2f}x (same L2 boot)")
    print(retries_line("launch", retries))
    print(f"launch: report {path}; console log {OUT / 'console.log'}; {time.monotonic() - t0:.0f} s total")
    ok = fatal is None and len(results) == len(scs) and all(s["passed"] for s in rows)
    if not ok:
        e2e.CONSOLE_LOG = OUT / "console.log"
        e2e.fail_loudly(fatal, [f"{r['name']}: {fl}" for r in rows for fl in r["failures"]])
        return 1
    print("launch: all scenarios passed")
    return 0
