"""VMM command lines from the one builder: `zerostart vmm-argv` (options::vmm_cmd).

Why: the nested host's harnesses (run.py, launch.py, demo.py, microvm.py)
used to hand their L2 scripts pieces of QEMU, cloud-hypervisor, Firecracker
and zerostart command lines that the scripts completed with flags of their
own. Now a harness describes each start as a spec (a dict, the JSON of
options::vmm_cmd::Spec), asks a host-runnable zerostart for the command,
and writes it, shell-quoted, into L2's list file; the L2 scripts run it
with `eval "set -- $cmd"` and spell no VMM flag. A flag changes in
vmm/options/src/vmm_cmd.rs only.

The harness's own QEMU boots come from here too (zstest.qemu's l2_command
and kernel_command, the firmware tests, the L2 image's kallsyms boot), so
no QEMU flag is spelled in Python.

The binary asked is the static zerostart the harness ships into L2 (it
runs on the host too), else ZEROSTART_BIN (make names it: `make vmm-argv`
for the kernel, firmware and rootfs tests) or a cargo build under target/:
nothing here runs inside L2.

The L2 paths every spec names are here once (the L2 image puts them there:
zstest.l2image, the harnesses' extra cpio).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from zstest.l2image import BuildError

REPO = Path(__file__).resolve().parents[2]

def cargo_target() -> Path:
    """Where cargo builds: $CARGO_TARGET_DIR as cargo reads it (relative to
    the workspace, where make runs it), else the work tree's target/.
    .ci/run keeps it in $ZEROSTART_CACHE so a fresh clone finds its
    dependencies built."""
    return REPO / os.environ.get("CARGO_TARGET_DIR", "target")


def static_zerostart() -> Path:
    """The static zerostart (make vmm-static), which L2 runs."""
    return cargo_target() / "x86_64-unknown-linux-gnu" / "static" / "zerostart"

# Where L2 has them.
L2_ZEROSTART = "/zs/zerostart"
L2_QEMU = "/qemu/bin/qemu-system-x86_64"
L2_QEMU_DATA = "/qemu/share"
L2_INITRAMFS = "/zs/l3-initramfs.cpio.gz"
L2_OVMF = "/zs/fw/OVMF.fd"
L2_CLOUDHV = "/zs/fw/CLOUDHV.fd"
L2_CLOUD_HYPERVISOR = "/zs/cloud-hypervisor"
L2_FIRECRACKER = "/zs/firecracker"
# l2-pool.sh's `sock`: the pool the L2 scripts start.
L2_POOL_SOCKET = "/tmp/pool.sock"


class VmmArgvError(BuildError):
    """No command: no zerostart to ask, or it refused the spec (its one
    line). A BuildError: the harnesses report it as they report a missing
    input."""


@dataclass
class Built:
    """A built command: argv (program first) and the files it reads (path -> text)."""
    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """One POSIX shell line; the same quoting as `zerostart vmm-argv --shell`."""
        return shell_line(self.argv)


_PLAIN = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def shell_quote(word: str) -> str:
    """WORD as one POSIX shell word, as options::vmm_cmd::shell_quote
    writes it: bare when every character is plain, else single-quoted
    with each ' as '\\''."""
    return word if _PLAIN.fullmatch(word) else "'" + word.replace("'", "'\\''") + "'"


def shell_line(argv: list[str]) -> str:
    return " ".join(shell_quote(a) for a in argv)


def zerostart_binary(given: Path | str | None = None) -> Path:
    """The zerostart to ask: GIVEN, else $ZEROSTART_BIN, else the static,
    release or debug build under target/."""
    cands = [given, os.environ.get("ZEROSTART_BIN"), static_zerostart(),
             cargo_target() / "release" / "zerostart", cargo_target() / "debug" / "zerostart"]
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    raise VmmArgvError("no zerostart binary to build the VMM command lines with; build one "
                       "(make e2e-zerostart, or cargo build -p zerostart) or set ZEROSTART_BIN")


def build(spec: dict, zerostart: Path | str | None = None) -> Built:
    """The command of SPEC, from `zerostart vmm-argv -`."""
    zs = zerostart_binary(zerostart)
    r = subprocess.run([str(zs), "vmm-argv", "-"], input=json.dumps(spec), capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        why = r.stderr.strip() or f"exit {r.returncode}"
        if "unknown field" in why or "unknown variant" in why:
            # The harness is newer than the binary it found (a static
            # build from an earlier tree is asked first).
            why += ("; this zerostart is older than the harness: rebuild it (make vmm-argv for the debug "
                    "build, make e2e-zerostart for the static one) or set ZEROSTART_BIN to a current build")
        raise VmmArgvError(f"{zs} vmm-argv: {why} (spec {json.dumps(spec)})")
    doc = json.loads(r.stdout)
    return Built(list(doc["argv"]), dict(doc.get("files", {})))


# ---------------------------------------------------------------------------
# Spec pieces the harnesses share.


def l2_qemu(cpus: int | None = 1, **qemu) -> dict:
    """The pinned QEMU in L2 on kvm-amd: -L its data, -cpu host, -no-reboot
    (QEMU options in QEMU)."""
    opts = {"data_dirs": [L2_QEMU_DATA], "cpu": "host", "no_reboot": True, **qemu}
    spec = {"vmm": "qemu", "binary": L2_QEMU, "qemu": opts}
    if cpus is not None:
        spec["cpus"] = cpus
    return spec


def l2_microvm(cpus: int | None = 1, **qemu) -> dict:
    """l2_qemu on `-machine microvm` booting through qboot, as fast-boot
    setups run it (qboot.rom is in L2's QEMU data dir; microvm's default
    firmware with ACPI on, SeaBIOS's bios-microvm.bin, is not). The kernel
    is the caller's: microvm boots only a direct kernel."""
    return {**l2_qemu(cpus, machine="microvm", **qemu), "firmware": "qboot.rom"}


def l2_microvm_seabios(cpus: int | None = 1, **qemu) -> dict:
    """l2_microvm on QEMU's default microvm firmware, SeaBIOS's
    bios-microvm.bin (the harness copies it into L2's QEMU data dir), with
    the option ROMs on: SeaBIOS starts the kernel through linuxboot_dma."""
    return {**l2_qemu(cpus, machine="microvm-seabios", **qemu), "firmware": "bios-microvm.bin"}


def accel_options(accel: str) -> dict:
    """The QEMU options (accel, tcg_thread) of an -accel value as the
    harness's knobs spell it (ZSE2E_L2_ACCEL, ZSFW_L2_ACCEL, ZS_TCG_THREAD's
    modes): kvm, tcg, tcg,thread=multi or tcg,thread=single."""
    m = re.fullmatch(r"(kvm|tcg)(?:,thread=(single|multi))?", accel)
    if not m or (m.group(1) == "kvm" and m.group(2)):
        raise VmmArgvError(f"-accel {accel!r}: the builder takes kvm, tcg, tcg,thread=multi or tcg,thread=single")
    opts = {"accel": m.group(1)}
    if m.group(2):
        opts["tcg_thread"] = m.group(2)
    return opts


def stock_memory(mem_mib: int) -> dict:
    """QEMU's RAM as operators run a hugepage VM: a shared file on
    /dev/hugepages, preallocated by two threads before the guest starts."""
    return {"backing": "hugetlbfs", "size_mib": mem_mib, "path": "/dev/hugepages", "prealloc": True,
            "prealloc_threads": 2}


def memory_ready_probe(mem_mib: int) -> dict:
    """l2-pool.sh's stock_memory_ready: the same QEMU and memory with no
    guest, stopped (-S) with its monitor on stdio (told `quit` once up)."""
    return {"vmm": "qemu", "binary": L2_QEMU, "qemu": {"data_dirs": [L2_QEMU_DATA], "monitor": "stdio"},
            "memory": stock_memory(mem_mib), "extra_args": ["-S"]}


def zerostart_memory(value: str) -> dict:
    """zerostart run's or launch's own --memory value."""
    return {"backing": "zerostart", "value": value}


def launch(inner: dict, memory: str, timeline: str, firmware: str | None = None, extra: list[str] | None = None,
           **devices) -> dict:
    """`zerostart launch` (L2's) starting INNER on MEMORY (the launcher's
    --memory), writing TIMELINE; DEVICES: disks, nets, vsock for the
    launcher to map."""
    spec = {"vmm": "zerostart-launch", "binary": L2_ZEROSTART, "memory": zerostart_memory(memory),
            "timeline": timeline, "launch": inner, **devices}
    if firmware:
        spec["firmware"] = firmware
    if extra:
        spec["extra_args"] = extra
    return spec


def zerostart_run(kernel: str, cmdline: str, memory: str, serial, timeline: str, cpus: int = 1,
                  initrd: str | None = None, extra: list[str] | None = None, **devices) -> dict:
    """`zerostart run` (L2's)."""
    spec = {"vmm": "zerostart-run", "binary": L2_ZEROSTART, "kernel": kernel, "cmdline": cmdline, "cpus": cpus,
            "memory": zerostart_memory(memory), "serial": serial, "timeline": timeline, **devices}
    if initrd:
        spec["initrd"] = initrd
    if extra:
        spec["extra_args"] = extra
    return spec


def list_field(text: str) -> str:
    """TEXT as a field of an L2 list line that is not the last: the scripts
    split lines at '|' (`read`), so a field holding one would shift the rest."""
    if "|" in text or "\n" in text:
        raise VmmArgvError(f"{text!r} holds '|' or a newline; an L2 list field cannot")
    return text
