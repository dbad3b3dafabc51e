#!/usr/bin/env python3
"""Firmware boot in the nested test host: zerostart run --firmware CLOUDHV.fd.

Boots the nested host (L2, tests/nested-host) with the static zerostart, the
CloudHv firmware and tests/firmware-boot/l2-fwboot.sh appended as a second
cpio archive to the cached L2 image (so nothing of the e2e image is rebuilt
or pruned), runs `zerostart run --firmware` on L2's real KVM with a Linux
kernel handed over fw_cfg, and requires (judge()):

* the firmware finds fw_cfg with DMA, the ZeroStart PEIM reads the hint,
  accepts it (`ZeroStart: PEI: zero hint` / `scrub-request hint`), claims a
  non-zero amount, ZeroStartDxe scrubs on every CPU (scrub run) and
  publishes the EFI table at ReadyToBoot;
* a checksum-corrupted hint is rejected (`hint rejected: BadChecksum`) and
  nothing is published;
* every run boots Linux through the firmware (QemuKernelLoaderFsDxe, which
  firmware/patches/0002 gives the real fw_cfg library) to the test init,
  whose zero check passes (`ZSINIT: PASS`), and zerostart exits 0;
* the patched guest kernel finds and validates the EFI-table hint;
* negative control (fw-dirty-patched-1g): zerostart plants a byte every
  64 MiB of every hinted range after the firmware's hint is fixed
  (--test-corrupt-hint dirty-spread: a single byte is found only if the
  guest happens to allocate that one page); the firmware publishes the
  ranges, the patched kernel skips its
  clear, and the guest's check (85 % of its free memory, zsinit.check_pct)
  or the kernel's verify mode must report it: the zero check of the other
  runs can fail;
* no run's guest prints a kernel bug line (BUG:, Bad page state, Oops).

Each run boots its own L2 (QEMU_CR8_BUG used to kill it at random).

Writes target/fwboot/console.log and target/fwboot/report.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

from zstest import l2image as build  # the nested host's image: Cpio, cache
from zstest import vmmargv
from zstest.qemu import L2_ABORT_RE as L2_ABORT
from zstest.qemu import L2_ACCEL, kernel_bug_lines
from zstest.qemu import STALE_INT3, bed_fault
from zstest.qemu import boot_l2 as start_l2
from zstest.qemu import l2_memory

HERE = Path(__file__).resolve().parent
REPO = build.REPO

OUT = REPO / "target" / "fwboot"
MIB = 1 << 20
STATIC = vmmargv.static_zerostart()

# (name, L3 kernel (/zs/kernels), hint mode, mem_mib, timeout_s, zerostart extras)
RUNS = [
    ("fw-zero-1g", "debian-6.12", "zero", 1024, 120, ""),
    ("fw-scrub-1g", "debian-6.12", "scrub", 1024, 120, ""),
    ("fw-corrupt-1g", "debian-6.12", "zero", 1024, 120, "--test-corrupt-hint checksum"),
    # The guest kernel patches read the EFI table the firmware publishes.
    ("fw-zero-patched-1g", "patched", "zero", 1024, 120, ""),
    ("fw-dirty-patched-1g", "patched", "zero", 1024, 120, "--test-corrupt-hint dirty-spread"),
]


def cached_l2() -> dict:
    """The L2 image for the current inputs (the patched kernel of the current
    series, as the e2e harness finds it): cached by input hash, built only
    when those inputs changed. Taking merely the newest cached image ran an
    older kernel than the series under test."""
    return build.build_l2(build.default_l3_kernels(), None, with_qemu=True)


# QEMU's TCG (7.2 and 10.0 alike) aborts L2 when L3 writes CR8 while KVM has
# a virtual interrupt pending (target/i386 helper_write_crN calls
# cpu_interrupt without the BQL). EDK2's interrupt handlers used to write CR8
# back on every interrupt; firmware/patches/0003 writes it only when it
# changed, which removes the trigger. Seen again, it fails the run by name.
QEMU_CR8_BUG = "tcg_handle_interrupt: assertion failed"

# Boots per run at most (see main()): only a fault of the test bed itself,
# outside every guest, is retried.
ATTEMPTS = 3


def judge(name: str, fw: list[str], l3: list[str], vmm: list[str], rc: int | None) -> list[str]:
    """Failures of one run: the firmware's log (hint read over fw_cfg DMA,
    validated, claimed, published as the EFI table at ReadyToBoot) and
    Linux's (booted through the firmware, its init verdict)."""
    text = "\n".join(fw)
    serial = "\n".join(l3)
    fails = []
    if not fw:
        return ["empty firmware debug log (did the firmware start?)"]
    if "QemuFwCfgProbe: Supported 1, DMA 1" not in text:
        fails.append("the firmware did not find fw_cfg with DMA")
    bugs = [x for x in kernel_bug_lines(l3) if not x.startswith("ZSINIT:")]
    if bugs:
        fails.append(f"the guest kernel reported a bug: {bugs[0][:160]}")
    if name == "fw-dirty-patched-1g":
        # The planted bytes must be caught: by the guest's sweep (nonzero_bytes)
        # or by the kernel verifying the clear it skipped (verify_failures).
        v = re.search(r"ZSINIT: (PASS|FAIL) .*nonzero_bytes=(\d+) .*kernel_verify_failures=(-?\d+)", serial)
        if not v:
            fails.append("no ZSINIT verdict from the guest")
        elif int(v.group(2)) == 0 and int(v.group(3)) <= 0:
            fails.append("no planted byte was found (nonzero_bytes=0, kernel_verify_failures="
                         f"{v.group(3)}): the firmware-boot zero check cannot fail")
        if rc != 0:
            fails.append(f"zerostart exited {rc} (the guest's reboot is exit 0)")
        if not re.search(r"zerostart: hint from EFI table: \d+ ranges", serial):
            fails.append("the patched kernel did not take the EFI-table hint: the control did not run its path")
        return fails
    # Every run, a rejected hint included, must boot Linux to its init, and
    # the init's zero check must pass (ZSINIT: PASS; FAIL names nonzero bytes).
    if "ZSINIT: PASS" not in serial:
        verdict = [x for x in l3 if x.startswith("ZSINIT: FAIL")]
        fails.append(f"Linux did not pass its init check ({verdict[0] if verdict else 'no ZSINIT verdict'})")
    if rc != 0:
        fails.append(f"zerostart exited {rc} (the guest's reboot is exit 0)")
    if name == "fw-corrupt-1g":
        if "hint rejected: BadChecksum" not in text:
            fails.append("the corrupted hint was not rejected with BadChecksum")
        if re.search(r"ZeroStart: PEI: (zero|scrub-request) hint", text):
            fails.append("the firmware accepted a corrupted hint")
        if "ZeroStart: published" in text:
            fails.append("the firmware published a table for a corrupted hint")
        return fails
    # ZeroStartPei logs "zero hint" or "scrub-request hint".
    kind = "scrub-request hint" if name == "fw-scrub-1g" else "zero hint"
    m = re.search(r"ZeroStart: PEI: " + kind + r", (\d+) entries, (\d+) bytes.*claimed (\d+) bytes", text)
    claimed = int(m.group(3)) if m else 0
    if not m:
        fails.append(f"no 'ZeroStart: PEI: {kind}' line with a claim")
    elif claimed == 0:
        fails.append("the firmware claimed nothing")
    if "hint rejected" in text or "nothing published" in text:
        fails.append("the firmware rejected the hint or published nothing")
    pub = re.search(r"ZeroStart: published (\d+) bytes", text)
    if not pub:
        fails.append("no 'ZeroStart: published' line (no EFI table at ReadyToBoot)")
    elif claimed and int(pub.group(1)) > claimed:
        fails.append(f"published {pub.group(1)} bytes, more than the {claimed} claimed")
    if name == "fw-scrub-1g":
        cpus = re.findall(r"ZeroStart: scrub cpu \d+: (\d+) bytes", text)
        if not cpus or 0 in map(int, cpus):
            fails.append(f"the scrub did not run on every CPU ({cpus})")
    if name == "fw-zero-patched-1g":
        # The patched kernel reads and validates the EFI table (patch 1).
        if not re.search(r"zerostart: hint from EFI table: \d+ ranges", serial):
            fails.append("the patched kernel did not report the EFI-table hint")
        if "ignoring pre-zeroed hint" in serial:
            fails.append("the patched kernel rejected the EFI-table hint")
        # It must also keep what the firmware published (the ranges lie in
        # claimed EfiLoaderData, hint-abi.md (c)), skip clears of it, and
        # find every skipped page zero (prezero.verify=1).
        kept = re.search(r"zerostart: hint from EFI table: \d+ ranges, \d+ MiB; (\d+) MiB in RAM", serial)
        if kept and int(kept.group(1)) == 0:
            fails.append("the patched kernel kept 0 MiB of the EFI-table hint")
        v = re.search(r"ZSINIT: \S+ .*kernel_pages_skipped=(-?\d+) .*kernel_verify_failures=(-?\d+)", serial)
        if not v or int(v.group(1)) <= 0:
            fails.append(f"the patched kernel skipped no clears ({v.group(1) if v else 'no verdict'})")
        elif int(v.group(2)) != 0:
            fails.append(f"prezero.verify found {v.group(2)} skipped pages non-zero")
    return fails


def spec(run: tuple) -> dict:
    """RUN's `zerostart run --firmware` in L2 (zstest.vmmargv): CloudHv
    firmware, the hint mode, the firmware's debug console and the serial
    console where l2-fwboot.sh reads them (/tmp/NAME.fw, /tmp/NAME.serial).
    The stock kernel boots `quiet loglevel=5` (its warnings still reach
    the bug-line judge); the patched one logs its hint at loglevel 7 and
    verifies every clear it skips."""
    name, kernel, mode, mem, _tmo, extra = run
    log = "quiet loglevel=5" if kernel == "debian-6.12" else "loglevel=7 prezero.verify=1"
    s = vmmargv.zerostart_run(f"/zs/kernels/{kernel}",
                              f"console=ttyS0 reboot=k panic=-1 oops=panic {log} zsinit.check_pct=85",
                              f"size={mem}M,hugepages=on", {"file": f"/tmp/{name}.serial"}, f"/tmp/{name}.tl.json",
                              initrd=vmmargv.L2_INITRAMFS,
                              extra=["--firmware-hint", mode, "--debugcon", f"/tmp/{name}.fw", *shlex.split(extra)])
    s["firmware"] = "/zs/fw/CLOUDHV.fd"
    return s


def list_line(run: tuple, zs: Path) -> str:
    """l2-fwboot.sh's line for RUN: name|kernel|mode|mem_mib|timeout_s|command
    (the command shell-quoted, built here by ZS's `vmm-argv`: the script
    spells no zerostart flag)."""
    name, kernel, mode, mem, tmo, _extra = run
    return "|".join([vmmargv.list_field(str(x)) for x in (name, kernel, mode, mem, tmo)]
                    + [vmmargv.build(spec(run), zs).shell()])


def boot_l2(man: dict, zs: Path, fw: Path, run: tuple, verbose: bool, log) -> tuple[dict | None, str]:
    """Boots L2 for one run; returns its result (None if it never started)
    and how L2 ended."""
    name, _kernel, _mode, mem, tmo, _extra = run
    extra = build.Cpio()
    extra.file("zs/zerostart", zs.read_bytes(), 0o755)
    extra.dir("zs/fw")
    extra.file("zs/fw/CLOUDHV.fd", fw.read_bytes())
    extra.file("zs/scenario.sh", (HERE / "l2-fwboot.sh").read_bytes(), 0o755)
    extra.file("zs/fwboot.txt", (list_line(run, zs) + "\n").encode())
    l2_mem, hugepages = l2_memory(man, mem)
    cur = None
    ended = "timeout"
    with start_l2(man, extra, l2_mem, hugepages, log=log, smp=1, echo=verbose,
                  accel=os.environ.get("ZSFW_L2_ACCEL", L2_ACCEL), prealloc=True, zerostart=zs) as con:
        # From L2's start: whatever start_l2 did first (finding or building
        # the nested host's QEMU) is not the run's time.
        deadline = time.monotonic() + 120 + tmo + 60
        try:
            while True:
                line = con.next(deadline)
                if line is None:
                    if ended == "timeout":  # keep "finished" or the abort line
                        ended = f"L2 QEMU exited: {con.exit_story()}"
                    break
                if line.startswith("ZSFW-BEGIN"):
                    cur = {"name": name, "fw": [], "l3": [], "vmm": [], "rc": None, "wall_ms": None}
                elif cur and line.startswith("FW| "):
                    cur["fw"].append(line[4:])
                elif cur and line.startswith("L3| "):
                    cur["l3"].append(line[4:])
                elif cur and line.startswith("VMM| "):
                    cur["vmm"].append(line[5:])
                elif cur and line.startswith("ZSFW-END"):
                    kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
                    cur["rc"], cur["wall_ms"] = int(kv["rc"]), int(kv["wall_ms"])
                    ended = "finished"
                elif QEMU_CR8_BUG in line or L2_ABORT.match(line):
                    ended = "L2 QEMU aborted: " + line.strip()
                elif line.startswith("ZSE2E-FATAL"):
                    ended = line
        except TimeoutError:
            # L2 went silent: where its CPUs are and what their APICs hold.
            silent = con.silent_host()
            if silent:
                ended = f"timeout ({silent})"
        if con.stale_int3 and con.stale_int3 not in ended:
            ended += f" ({con.stale_int3})"
    return cur, ended


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--firmware", help="CLOUDHV.fd (make test-firmware-boot passes the one `make firmware` builds)")
    ap.add_argument("--zerostart", default=str(STATIC), help="static zerostart (make vmm-static)")
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo the whole L2 console")
    a = ap.parse_args()
    try:
        if not a.firmware:
            raise build.BuildError("no --firmware CLOUDHV.fd given; run `make test-firmware-boot`, which passes "
                                   "the one `make firmware` builds")
        fw = Path(a.firmware)
        if not fw.exists():
            raise build.BuildError(f"{fw} does not exist; run `make firmware` first")
        zs = build.zerostart_binary(Path(a.zerostart))
        man = cached_l2()
    except build.BuildError as e:
        print(f"fwboot: error: {e}", file=sys.stderr)
        return 1
    runs = [r for r in RUNS if not a.only or r[0] in a.only.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    print(f"fwboot: L2 {man['dir']}, firmware {fw}, {len(runs)} run(s), one L2 boot each", flush=True)
    results, endings, retries = {}, {}, {}
    with open(OUT / "console.log", "w") as log:
        for run in runs:
            # A run normally takes ~13 s (one L3 boot of ~12 s). As in the
            # e2e harness, only a run whose L2 failed by a fault of the test
            # bed itself (zstest.qemu.bed_fault: the L2 QEMU's own abort line,
            # not the CR8 bug, which fails by name; or an interrupt its TCG
            # never delivered) is booted again, at most ATTEMPTS times in
            # all, and every retry is in the report and counted. A guest that
            # crashed or hung is the run failing.
            for attempt in range(1, ATTEMPTS + 1):
                print(f"fwboot: {run[0]} ..." + (f" (attempt {attempt})" if attempt > 1 else ""),
                      flush=True)
                r, ended = boot_l2(man, zs, fw, run, a.verbose, log)
                if r:
                    results[run[0]] = r
                endings[run[0]] = ended
                fails = judge(run[0], *(r[k] for k in ("fw", "l3", "vmm", "rc"))) if r else ["no run"]
                aborted = ended.startswith("L2 QEMU aborted") and QEMU_CR8_BUG not in ended
                fault = bed_fault(ended if ended.startswith("timeout") else None, ended if aborted else None,
                                  ended if "L2 ended by triple fault" in ended else None,
                                  ended if STALE_INT3 in ended else None)
                crashed = r and any(not x.startswith("ZSINIT:") for x in kernel_bug_lines(r["l3"]))
                if not fault or crashed:
                    break
                retries.setdefault(run[0], []).append(f"attempt {attempt}: {ended}; {fails[:2]}")
                print(f"fwboot: {run[0]}: the test bed failed outside every guest ({ended[:200]}); retrying",
                      flush=True)
                # The one retry line format make test counts and lists (tests/lib/make_test.py).
                print(f"RETRY fwboot/{run[0]}: {' '.join(ended.split())[:300]}", flush=True)
    report = []
    ok = True
    for name, *_ in runs:
        r = results.get(name)
        fails = judge(name, *(r[k] for k in ("fw", "l3", "vmm", "rc"))) if r else ["did not run"]
        if endings.get(name) not in ("finished", None):
            fails.append(f"L2 did not finish the run: {endings.get(name)}")
        ok &= not fails
        zs_lines = [x for x in (r["fw"] if r else []) if "ZeroStart" in x]
        # What the guest kernel said about the hint (the patched one only).
        zs_lines += [x for x in (r["l3"] if r else []) if "zerostart:" in x or "ZSINIT: PASS" in x
                     or "ZSINIT: FAIL" in x]
        linux = any("ZSINIT:" in x for x in (r["l3"] if r else []))
        entry = {"name": name, "passed": not fails, "failures": fails, "l2_end": endings.get(name),
                 "retries": retries.get(name, []),
                 "linux_reached_init": linux,
                 "rc": r["rc"] if r else None, "wall_ms": r.get("wall_ms") if r else None,
                 "zerostart_log": zs_lines, "fw_log_lines": len(r["fw"]) if r else 0,
                 "fw_log_tail": r["fw"][-15:] if r else [], "l3_serial": r["l3"][-20:] if r else [],
                 "vmm": r["vmm"] if r else []}
        report.append(entry)
        print(f"fwboot: {name}: {'PASS' if not fails else 'FAIL'} rc={entry['rc']} "
              f"wall_ms={entry['wall_ms']} fw_log_lines={entry['fw_log_lines']} "
              f"l3_serial_lines={len(r['l3']) if r else 0} linux_init={linux} l2={endings.get(name)}")
        for z in zs_lines:
            print(f"    {z}")
        for v in entry["vmm"][-3:]:
            print(f"    VMM| {v}")
        for t in retries.get(name, []):
            print(f"    retried after {t}")
        if fails:
            # Where the firmware stopped (a hang shows only here: a killed
            # zerostart prints nothing of its own).
            for x in entry["fw_log_tail"][-12:]:
                print(f"    FW tail| {x}")
            for x in entry["l3_serial"][-8:]:
                print(f"    L3 tail| {x}")
        for f in fails:
            print(f"    FAIL: {f}")
    (OUT / "report.json").write_text(json.dumps({"runs": report}, indent=2) + "\n")
    print(f"fwboot: report {OUT / 'report.json'}, console {OUT / 'console.log'}")
    passed = sum(1 for e in report if e["passed"])
    print(f"fwboot: {passed} passed, {len(report) - passed} failed, 0 skipped; "
          f"{sum(len(e['retries']) for e in report)} L2 retries after a test-bed fault outside every guest")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
