#!/usr/bin/env python3
"""QEMU TCG tests of zerostart's OVMF build (firmware/).

Each case boots OVMF.fd with a hint in fw_cfg (opt/org.zerostart/prezeroed)
or, in text form, in an SMBIOS OEM string (-smbios type=11,value=prezero.hint=...,
which QEMU serves in fw_cfg etc/smbios/smbios-tables), and ZeroStartDump.efi
as the default boot loader (\\EFI\\BOOT\\BOOTX64.EFI on a
virtual FAT disk). The application prints the published EFI table, checks it
from inside the guest (validates, every range still claimed, table and its
own image outside the ranges, every byte zero) and powers off. This script
then checks from outside: ranges inside the hint, inside RAM, above the
firmware floor, off the non-RAM hint entries; the firmware's debug log
(debugcon 0x402) for the claim/scrub/total lines; and, for a corrupted hint,
no table and exactly one warning naming the error.

  run_tests.py --fw-dir DIR            correctness cases (make test-firmware): the
                                       CASES table on zstest.suite, one ok/FAIL
                                       line each; QEMU runs through zstest.qemu
  run_tests.py --fw-dir DIR --timing   firmware time, 1/4 GiB x 1/2 vCPUs x
                                       with/without scrub (make firmware-timing)
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from zstest import guestkernel as gk
from zstest import hint as zshint
from zstest import qemu, vmmargv
from zstest.hugepages import HugePages
from zstest.suite import Case, Do, Runner, run_suite

MiB = zshint.MiB
GiB = zshint.GiB
FLOOR = 32 * MiB  # ZeroStartPei's ZEROSTART_FLOOR
PATTERN = 0x5A53464C4C504154  # FILL_PATTERN of firmware/ZeroStartPkg/Include/Internal/ZeroStartTestPattern.h
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def q35_ram(mem):
    """Guest RAM ranges of QEMU's q35 machine for -m mem (bytes): below 4 GiB
    up to 2 GiB when RAM does not fit under 2.75 GiB (0xb0000000), else all
    of it; the rest from 4 GiB."""
    low = mem if mem < 0xB0000000 else 0x80000000
    ram = [(0, low)]
    if mem > low:
        ram.append((4 * GiB, mem - low))
    return ram


def adversarial_hint(mem, scrub=False):
    """A hint over all of the guest's RAM - including the first MiB, which
    the firmware must never publish - plus ranges that are not RAM at all
    (the PCI hole after low RAM, the flash below 4 GiB), which it must clip.
    Returns (blob, ram_entries, not_ram_entries)."""
    ram = q35_ram(mem)
    low_end = ram[0][1]
    entries = [(0, 0xA0000, 12), (MiB, low_end - MiB, 12)]
    not_ram = [(low_end, 64 * MiB, 12), (4 * GiB - 16 * MiB, 16 * MiB, 12)]
    entries.append(not_ram[0])
    entries.append(not_ram[1])
    if len(ram) > 1:
        entries.append((ram[1][0], ram[1][1], 21))
    entries.sort()
    return (zshint.encode(entries, scrub), [(s, n) for s, n, e in entries if (s, n, e) not in not_ram],
            [(s, n) for s, n, _ in not_ram])


class Boot:
    """One QEMU boot: its serial console and firmware debug log."""

    def __init__(self, name, serial, debug, seconds, rc):
        self.name = name
        self.serial = serial
        self.debug = debug
        self.seconds = seconds
        self.rc = rc

    def dump(self):
        return [l[len("ZSDUMP: "):] for l in self.serial.splitlines() if l.startswith("ZSDUMP: ")]

    def ranges(self):
        out = []
        for l in self.dump():
            m = re.match(r"range \d+ 0x([0-9a-fA-F]+) \+0x([0-9a-fA-F]+) shift (\d+)", l)
            if m:
                out.append((int(m.group(1), 16), int(m.group(2), 16)))
        return out

    def result(self):
        for l in self.dump():
            if l.startswith("RESULT "):
                return l.split()[1]
        return None

    def zs_log(self):
        return [l for l in self.debug.splitlines() if l.startswith("ZeroStart:")]


def oem(text):
    """The SMBIOS OEM strings that carry a hint's text form (transport (e))."""
    return [f"{zshint.TEXT_PARAM}={text}"]


def run_qemu(args, work, name, mem, smp, hint=None, pattern=False, timeout=900, reboot_test=False, prealloc=False,
             linux=None, smbios=None):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "esp", "EFI", "BOOT"))
    shutil.copy(os.path.join(args.fw_dir, "ZeroStartDump.efi"), os.path.join(d, "esp", "EFI", "BOOT", "BOOTX64.EFI"))
    serial = os.path.join(d, "serial.log")
    debug = os.path.join(d, "debug.log")
    # The command from the one builder (options::vmm_cmd through zstest.vmmargv).
    opts = {"machine": "q35", "accel": "tcg", "tcg_thread": "multi", "cpu": "max", "debugcon": debug,
            "fw_cfg": []}
    spec = {"vmm": "qemu", "binary": args.qemu or qemu.KERNEL_QEMU, "cpus": smp,
            # prealloc: host memory faulted in before the guest starts, as a VMM
            # with pre-faulted hugepages would: the scrub then measures the
            # guest's stores, not the host's page faults.
            "memory": {"backing": "anonymous", "size_mib": mem // MiB, "prealloc": prealloc},
            "firmware": os.path.join(args.fw_dir, "OVMF.fd"), "serial": {"file": serial}, "qemu": opts}
    if linux:
        # OVMF loads a fw_cfg kernel through its EFI stub before any boot option.
        kernel, initrd, append = linux
        spec.update(kernel=kernel, initrd=initrd, cmdline=append)
    else:
        # ZeroStartDump.efi on a FAT disk made of the directory (QEMU's vvfat).
        spec["disks"] = [gk.fat_dir_disk(os.path.join(d, "esp"))]
    if reboot_test:
        # ZeroStartDump dirties the published pages and warm-resets once.
        flag = os.path.join(d, "reboot.flag")
        with open(flag, "w") as f:
            f.write("1")
        opts["fw_cfg"].append({"name": "opt/org.zerostart/test/reboot", "file": flag})
    else:
        opts["no_reboot"] = True
    if hint is not None:
        path = os.path.join(d, "hint.bin")
        with open(path, "wb") as f:
            f.write(hint)
        opts["fw_cfg"].append({"name": "opt/org.zerostart/prezeroed", "file": path})
    # One SMBIOS type 11 entry per OEM string.
    opts["oem_strings"] = list(smbios or [])
    if pattern:
        # Guest RAM starts as a private copy of a file full of the pattern:
        # the scrub must turn what it publishes into zeros.
        ramfile = os.path.join(d, "ram.img")
        chunk = PATTERN.to_bytes(8, "little") * (8 * MiB // 8)
        with open(ramfile, "wb") as f:
            for _ in range(mem // len(chunk)):
                f.write(chunk)
        spec["memory"] = {"backing": "file", "size_mib": mem // MiB, "path": ramfile, "prealloc": prealloc}
    log = Path(d) / "qemu.log"
    opts["end_log"] = str(qemu.end_log_path(log))
    cmd = vmmargv.build(spec).argv
    # zstest.qemu: the harness's one QEMU driver (deadline, process-group kill);
    # the serial console and debugcon go to files, QEMU's own output to qemu.log.
    b = qemu.boot(cmd, log=log, timeout=timeout)
    rc = "timeout" if b.timed_out else b.rc
    if b.timed_out:
        print(f"  qemu timed out after {timeout} s")
    elif rc != 0:
        print(f"  qemu exited {rc}: {chr(10).join(b.lines)[-2000:]}")
    seconds = b.seconds
    if pattern:
        os.unlink(os.path.join(d, "ram.img"))

    def read(p):
        try:
            with open(p, "rb") as f:
                return ANSI.sub("", f.read().decode(errors="replace")).replace("\r", "")
        except FileNotFoundError:
            return ""

    return Boot(name, read(serial), read(debug), seconds, rc)


def inside(r, ranges):
    s, n = r
    return any(a <= s and s + n <= a + m for a, m in ranges)


def overlaps(r, ranges):
    s, n = r
    return any(s < a + m and a < s + n for a, m in ranges)


def check_published(boot, hint_ram, not_ram, mem, min_fraction):
    errs = []
    if boot.result() != "PASS":
        errs.append(f"guest check result {boot.result()!r}, want PASS")
    ranges = boot.ranges()
    ram = q35_ram(mem)
    for r in ranges:
        if not inside(r, hint_ram):
            errs.append(f"range {r[0]:#x}+{r[1]:#x} not inside the hint's RAM entries")
        if not inside(r, ram):
            errs.append(f"range {r[0]:#x}+{r[1]:#x} not inside guest RAM")
        if overlaps(r, not_ram):
            errs.append(f"range {r[0]:#x}+{r[1]:#x} overlaps a non-RAM hint entry")
        if r[0] < FLOOR:
            errs.append(f"range {r[0]:#x}+{r[1]:#x} below the {FLOOR:#x} floor")
    # PEI's permanent memory (the PHIT range) held PEI's allocations and HOBs.
    pei = re.search(r"PeiInstallPeiMemory MemoryBegin 0x([0-9A-Fa-f]+), MemoryLength 0x([0-9A-Fa-f]+)", boot.debug)
    if not pei:
        errs.append("no PeiInstallPeiMemory line in the debug log")
    else:
        phit = (int(pei.group(1), 16), int(pei.group(2), 16))
        for r in ranges:
            if overlaps(r, [phit]):
                errs.append(f"range {r[0]:#x}+{r[1]:#x} overlaps PEI memory {phit[0]:#x}+{phit[1]:#x}")
    total = sum(n for _, n in ranges)
    if total < min_fraction * mem:
        errs.append(f"only {total} bytes published of {mem}, want >= {min_fraction:.0%}")
    log = boot.zs_log()
    if not any(l.startswith("ZeroStart: PEI:") for l in log):
        errs.append("no 'ZeroStart: PEI:' claim line in the debug log")
    if not any(l.startswith("ZeroStart: total") for l in log):
        errs.append("no 'ZeroStart: total' line in the debug log")
    m = [l for l in log if l.startswith("ZeroStart: published")]
    if not m or f"published {total} bytes" not in m[0]:
        errs.append(f"debug log published line {m} disagrees with the table ({total} bytes)")
    return errs


def case_zero(args, work):
    mem = 1 * GiB
    blob, hint_ram, not_ram = adversarial_hint(mem)
    b = run_qemu(args, work, "zero-1g-2cpu", mem, 2, blob)
    return b, check_published(b, hint_ram, not_ram, mem, 0.4)


def case_zero_4g(args, work):
    mem = 4 * GiB
    blob, hint_ram, not_ram = adversarial_hint(mem)
    b = run_qemu(args, work, "zero-4g-1cpu", mem, 1, blob)
    errs = check_published(b, hint_ram, not_ram, mem, 0.6)
    if not any(s >= 4 * GiB for s, _ in b.ranges()):
        errs.append("nothing published above 4 GiB")
    return b, errs


def corrupt_case(name, mutate, error, smbios=None, scrub=False):
    """A hint the firmware must refuse: MUTATE turns the adversarial hint's
    bytes into the bad ones; with SMBIOS (bytes -> OEM strings) they go in
    an SMBIOS OEM string instead of fw_cfg. ERROR is what the one warning
    names after 'hint rejected: '."""
    def case(args, work):
        mem = 1 * GiB
        blob, _, _ = adversarial_hint(mem, scrub)
        blob = mutate(bytearray(blob))
        if smbios:
            b = run_qemu(args, work, name, mem, 1, smbios=smbios(blob))
        else:
            b = run_qemu(args, work, name, mem, 1, blob)
        errs = []
        if b.result() != "ABSENT":
            errs.append(f"guest saw {b.result()!r}, want ABSENT (no table for a bad hint)")
        warn = [l for l in b.zs_log() if "hint rejected" in l]
        if len(warn) != 1 or f"rejected: {error} " not in warn[0]:
            errs.append(f"want exactly one 'hint rejected: {error}' line, got {warn}")
        if any(l.startswith("ZeroStart: PEI:") for l in b.zs_log()):
            errs.append("a rejected hint was still claimed")
        return b, errs

    return case


def flip_crc(blob):
    blob[0x18] ^= 1
    return bytes(blob)


def flip_entry(blob):
    blob[32 + 8] ^= 0x10  # first entry's length, after the CRC was computed
    return bytes(blob)


def bad_char(index, char="+"):
    """OEM strings with the hint's text, character INDEX replaced."""
    def strings(blob):
        t = zshint.text(blob)
        return oem(t[:index] + char + t[index + 1:])

    return strings


def case_smbios(args, work):
    """The hint's text form in an SMBIOS OEM string and no fw_cfg file: the
    firmware must take it down the fw_cfg hint's path (claim, table, every
    published byte zero) and say where it came from."""
    mem = 1 * GiB
    blob, hint_ram, not_ram = adversarial_hint(mem)
    b = run_qemu(args, work, "smbios-1g-2cpu", mem, 2, smbios=oem(zshint.text(blob)))
    errs = check_published(b, hint_ram, not_ram, mem, 0.4)
    pei = [l for l in b.zs_log() if l.startswith("ZeroStart: PEI:")]
    if len(pei) != 1 or not pei[0].endswith("from SMBIOS OEM string, fw_cfg etc/smbios/smbios-tables"):
        errs.append(f"want one claim line from the SMBIOS OEM string, got {pei}")
    return b, errs


def case_fw_cfg_over_smbios(args, work):
    """fw_cfg comes first: with the fw_cfg file present, a different valid
    hint in SMBIOS (64 MiB, far below what the fw_cfg hint publishes) is not
    consulted, and the firmware says so."""
    mem = 1 * GiB
    blob, hint_ram, not_ram = adversarial_hint(mem)
    other = zshint.encode([(64 * MiB, 64 * MiB, 12)])
    b = run_qemu(args, work, "fw-cfg-over-smbios", mem, 2, blob, smbios=oem(zshint.text(other)))
    errs = check_published(b, hint_ram, not_ram, mem, 0.4)
    log = b.zs_log()
    pei = [l for l in log if l.startswith("ZeroStart: PEI:")]
    if len(pei) != 1 or not pei[0].endswith("from fw_cfg opt/org.zerostart/prezeroed"):
        errs.append(f"want one claim line from fw_cfg, got {pei}")
    if not any(l.startswith("ZeroStart: SMBIOS OEM string prezero.hint= ignored: fw_cfg") for l in log):
        errs.append("no line saying the SMBIOS hint was ignored")
    return b, errs


def no_hint_case(args, work):
    b = run_qemu(args, work, "no-hint", 1 * GiB, 1, None)
    errs = []
    if b.result() != "ABSENT":
        errs.append(f"guest saw {b.result()!r}, want ABSENT")
    if any("rejected" in l or l.startswith("ZeroStart: PEI:") for l in b.zs_log()):
        errs.append(f"unexpected log without a hint: {b.zs_log()}")
    return b, errs


def case_scrub(args, work, mem=1 * GiB):
    blob, hint_ram, not_ram = adversarial_hint(mem, scrub=True)
    b = run_qemu(args, work, f"scrub-{mem // GiB}g-2cpu-pattern", mem, 2, blob, pattern=True)
    errs = check_published(b, hint_ram, not_ram, mem, 0.4)
    if mem > 2 * GiB and not any(s >= 4 * GiB for s, _ in b.ranges()):
        errs.append("nothing scrubbed and published above 4 GiB")
    log = b.zs_log()
    cpus = [l for l in log if l.startswith("ZeroStart: scrub cpu")]
    busy = [l for l in cpus if not l.endswith(": 0 bytes")]
    if len(cpus) != 2 or len(busy) != 2:
        errs.append(f"want both vCPUs scrubbing, got {cpus}")
    if not any("on 2 of 2 processors (parallel)" in l for l in log):
        errs.append("no 'scrubbed ... on 2 of 2 processors (parallel)' line")
    m = re.search(r"free pages (\d+) with fill pattern (\d+)", "\n".join(b.dump()))
    if not m or int(m.group(2)) == 0:
        errs.append("no free page outside the table still holds the fill pattern: the fill did not reach RAM")
    return b, errs


def case_warm_reset(args, work):
    """A warm reset keeps guest RAM while fw_cfg keeps offering the same hint:
    the guest dirties every published page and resets; the second boot must
    reject the hint as Stale and publish nothing."""
    mem = 1 * GiB
    blob, _, _ = adversarial_hint(mem)
    b = run_qemu(args, work, "warm-reset", mem, 2, blob, reboot_test=True)
    errs = []
    results = [l for l in b.dump() if l.startswith("RESULT")]
    if len(results) != 2 or not results[0].startswith("RESULT PASS") or results[1] != "RESULT ABSENT":
        errs.append(f"want RESULT PASS, reset, RESULT ABSENT; got {results}")
    if not any(l.startswith("dirtied every published page") for l in b.dump()):
        errs.append("the guest did not dirty the published pages before resetting")
    stale = [l for l in b.zs_log() if "hint rejected: Stale" in l]
    claims = [l for l in b.zs_log() if l.startswith("ZeroStart: PEI:")]
    if len(stale) != 1 or len(claims) != 1:
        errs.append(f"want one claim (first boot) and one Stale rejection (second), got {claims} / {stale}")
    return b, errs


def case_linux(args, work):
    """A stock Linux kernel (Debian cloud, via OVMF's EFI stub path) boots with
    the hint claimed: the reserve is enough for the OS loader, the claimed
    memory reaches the OS as EfiLoaderData and becomes ordinary RAM."""
    if not args.linux_dir:
        return None, ["no --linux-dir (tests/firmware/qemu/prepare_linux.sh)"]
    mem = 1 * GiB
    blob, _, _ = adversarial_hint(mem)
    linux = (os.path.join(args.linux_dir, "vmlinuz"), os.path.join(args.linux_dir, "initrd.cpio.gz"),
             "console=ttyS0 panic=-1 oops=panic efi=debug")
    b = run_qemu(args, work, "linux-1g", mem, 2, blob, linux=linux)
    errs = []
    if "ZSLINUX: done" not in b.serial:
        errs.append("Linux did not reach its init (see serial.log)")
    m = re.search(r"ZSLINUX: MemTotal:\s+(\d+) kB", b.serial)
    if not m or int(m.group(1)) * 1024 < 0.85 * mem:
        errs.append(f"MemTotal {m and m.group(1)} kB: the claimed memory did not become RAM for the OS")
    pub = re.search(r"ZeroStart: published (\d+) bytes", b.debug)
    table = re.search(r"table at 0x([0-9A-Fa-f]+)", b.debug)
    if not pub or int(pub.group(1)) < 0.4 * mem:
        errs.append(f"firmware published {pub and pub.group(1)} bytes")
    # efi=debug: the OS's memory map must show the claim as Loader Data.
    loader = [(int(a, 16), int(z, 16) + 1) for a, z in
              re.findall(r"efi: mem\d+: \[Loader Data\s*\|[^\]]*\] range=\[0x([0-9a-f]+)-0x([0-9a-f]+)\]", b.serial)]
    if not any(z - a >= 0.4 * mem for a, z in loader):
        errs.append(f"no large Loader Data region in the kernel's EFI memory map: {loader[:8]}")
    b.summary = [l for l in b.serial.splitlines() if l.startswith("ZSLINUX")]
    if table:
        b.summary.append(f"table at 0x{table.group(1)}")
    return b, errs


def case_verify_detects(args, work):
    """Negative control: a VMM that lies (RAM full of the pattern, zero hint)
    must make the guest-side verify mode fail. Shows the zero check in the
    other cases can fail at all."""
    mem = 1 * GiB
    blob, _, _ = adversarial_hint(mem)
    b = run_qemu(args, work, "verify-detects-lie", mem, 1, blob, pattern=True)
    errs = []
    m = re.search(r"non-zero pages in ranges (\d+)", "\n".join(b.dump()))
    if b.result() != "FAIL" or not m or int(m.group(1)) == 0:
        errs.append(f"the guest check did not catch non-zero published memory: result {b.result()!r}, {m and m.group(0)}")
    return b, errs


CASES = {
    "zero": case_zero,
    "zero-4g": case_zero_4g,
    "bad-checksum": corrupt_case("bad-checksum", flip_crc, "BadChecksum"),
    "bad-data": corrupt_case("bad-data", flip_entry, "BadChecksum"),
    "bad-length": corrupt_case("bad-length", lambda b: bytes(b) + b"\0", "BadLength"),
    "no-hint": no_hint_case,
    "smbios": case_smbios,
    "smbios-bad-checksum": corrupt_case("smbios-bad-checksum", flip_crc, "BadChecksum",
                                        smbios=lambda blob: oem(zshint.text(blob))),
    "smbios-bad-char": corrupt_case("smbios-bad-char", bytes, "TextBadChar (index 10,", smbios=bad_char(10)),
    "smbios-duplicate": corrupt_case("smbios-duplicate", bytes, "Duplicate",
                                     smbios=lambda blob: oem(zshint.text(blob)) * 2),
    "smbios-scrub": corrupt_case("smbios-scrub", bytes, "ScrubRequest", smbios=lambda blob: oem(zshint.text(blob)),
                                 scrub=True),
    "fw-cfg-over-smbios": case_fw_cfg_over_smbios,
    "scrub": case_scrub,
    "scrub-4g": lambda args, work: case_scrub(args, work, 4 * GiB),
    "verify-detects": case_verify_detects,
    "warm-reset": case_warm_reset,
    "linux": case_linux,
}


def timing(args, work):
    """Same-run comparison per guest size and vCPU count: no hint (baseline:
    stock firmware path), zero hint, scrub request. Median of --repeat runs."""
    rows = []
    ok = True
    for mem in (1 * GiB, 4 * GiB):
        for smp in (1, 2):
            for kind in ("none", "zero", "scrub"):
                runs = []
                for rep in range(args.repeat):
                    blob = None if kind == "none" else adversarial_hint(mem, kind == "scrub")[0]
                    name = f"time-{mem // GiB}g-{smp}cpu-{kind}-{rep}"
                    b = run_qemu(args, work, name, mem, smp, blob, prealloc=args.prealloc)
                    log = "\n".join(b.zs_log())
                    tot = re.search(r"total (\d+) us \(PEI (\d+) us, DXE (\d+) us\).*scrubbed (\d+), published (\d+)", log)
                    sc = re.search(r"on (\d+) of (\d+) processors \((\w+)\) in (\d+) us, (\d+) MiB/s", log)
                    want = "ABSENT" if kind == "none" else "PASS"
                    if b.result() != want or (kind != "none" and not tot):
                        ok = False
                        print(f"  {name}: FAIL result {b.result()!r} (want {want})")
                    runs.append((b.seconds, tot, sc))
                    print(f"  {name}: {b.result()} {b.seconds:.1f} s wall; " + (tot.group(0) if tot else "no total line") +
                          ("; " + sc.group(0) if sc else ""), flush=True)
                runs.sort(key=lambda r: int(r[1].group(1)) if r[1] else r[0])
                rows.append((mem // GiB, smp, kind, runs[len(runs) // 2], sorted(r[0] for r in runs)[len(runs) // 2]))
    print(f"\nmedian of {args.repeat} runs each, host memory {'pre-faulted (-mem-prealloc)' if args.prealloc else 'cold'} "
          "(firmware times from the debug log; wall = whole QEMU run incl. the guest check)\n")
    print("| guest | vCPUs | hint | ZeroStart total | PEI | DXE | scrubbed | scrub | published | QEMU wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mem, smp, kind, (_, tot, sc), wall in rows:
        if not tot:
            print(f"| {mem} GiB | {smp} | {kind} | - | - | - | - | - | - | {wall:.1f} s |")
            continue
        us, pei, dxe, scrubbed, pub = (int(tot.group(i)) for i in range(1, 6))
        rate = f"{sc.group(5)} MiB/s, {sc.group(1)} CPU{'s' if sc.group(1) != '1' else ''}" if sc else "-"
        print(f"| {mem} GiB | {smp} | {kind} | {us / 1000:.1f} ms | {pei / 1000:.1f} ms | {dxe / 1000:.1f} ms | "
              f"{scrubbed / MiB:.0f} MiB | {rate} | {pub / MiB:.0f} MiB | {wall:.1f} s |")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fw-dir", required=True, help="firmware/build.sh output directory")
    ap.add_argument("--qemu", help="QEMU binary (default: zstest.qemu.KERNEL_QEMU, qemu-system-x86_64)")
    ap.add_argument("--only", action="append", choices=sorted(CASES), help="run only these cases")
    ap.add_argument("--timing", action="store_true", help="run the timing matrix instead of the cases")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--linux-dir", help="vmlinuz + initrd.cpio.gz for the linux case (prepare_linux.sh)")
    ap.add_argument("--prealloc", action="store_true", help="timing: pre-fault guest RAM on the host (-mem-prealloc)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing configuration (median reported)")
    args = ap.parse_args()
    for f in ("OVMF.fd", "ZeroStartDump.efi"):
        if not os.path.exists(os.path.join(args.fw_dir, f)):
            sys.exit(f"run_tests.py: {f} missing in {args.fw_dir}; run `make firmware` first")
    work = tempfile.mkdtemp(prefix="zs-fw-qemu-")
    if args.timing:
        try:
            ok = timing(args, work)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        if not ok:
            sys.exit("firmware qemu tests failed: timing")
        return
    # The correctness cases: a case table on zstest.suite (one ok/FAIL line
    # per case, the summary make_test.py does not double-count, the work
    # directory kept when a case failed).
    runner = Runner("test-firmware-qemu", Path(work), boot=None, pools=HugePages("test-firmware-qemu"),
                    keep_work=args.keep)
    rc = run_suite(runner, [Case(name, Do(name, judged(args, name))) for name in args.only or list(CASES)])
    if runner.keep_work:
        print(f"test-firmware-qemu: logs in {work}")
    sys.exit(rc)


def judged(args, name):
    """The suite step of case NAME: boot, print what the guest and the
    firmware said, one result line."""
    def step(r):
        print(f"firmware qemu test {name} ...", flush=True)
        boot, errs = CASES[name](args, str(r.work))
        if boot is None:
            r.fail(errs[0])
            return
        summary = getattr(boot, "summary", None) or \
            [l for l in boot.dump() if l.startswith(("ranges", "RESULT", "free pages", "non-zero"))]
        print(f"  {boot.seconds:.1f} s wall; guest: {'; '.join(summary)}")
        for l in boot.zs_log():
            if not l.startswith("ZeroStart: scrub cpu") or name.startswith("scrub"):
                print("  " + l)
        for e in errs:
            r.fail(e)
        if errs:
            print(f"  (logs kept in {os.path.join(r.work, name)})")
            r.runner.keep_work = True
        else:
            r.ok(f"{boot.seconds:.1f} s")
    return step


if __name__ == "__main__":
    main()
