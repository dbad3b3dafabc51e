#!/usr/bin/env python3
"""Runs zerostart end-to-end scenarios on real KVM inside the nested test host.

Why: this machine's /dev/kvm cannot boot Linux, so the harness boots the L2
image (zstest.l2image) under QEMU TCG with an emulated AMD SVM CPU, lets L2 run
each scenario (zerostart or the QEMU baseline booting an L3 Linux guest whose
/init is tests/guest-init/zsinit), streams L2's serial console, and turns the
ZSE2E-/ZSINIT: lines into target/e2e/report.json. Every wait is bounded; on
any failure or timeout it kills QEMU, saves target/e2e/console.log and prints
its tail.

  run.py e2e   [--vmm zerostart|qemu] [--only NAME,...]
  run.py demo  (direct on a host with vmx/svm, else inside the nested host)
  run.py launch [--only NAME,...]  (`zerostart launch` + QEMU + pool + OVMF in L2; launch.py)

Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from zstest import l2image as build
from zstest import timeline as tlschema
from zstest import vmmargv
from zstest.hugepages import HugePages
from zstest.qemu import (L2_BOOT_TIMEOUT_S, L2_CPU, L3_CONSOLE_ARGS, L3_KERNEL_BUG_RE, Console, kernel_bug_lines, bed_fault, boot_l2, l2_memory,
                         rerun_after_bed_faults)

REPO = build.REPO
OUT = REPO / "target" / "e2e"
MIB = 1 << 20
CONSOLE_LOG = OUT / "console.log"
# The zerostart that builds the L2 command lines (zstest.vmmargv): the
# static one the image ships, set by cmd_e2e; None: another host build.
ZEROSTART: Path | None = None
REQUIRED_PHASES = ["process_start", "memory_ready", "first_kvm_run", "init_started", "test_done", "exit"]
GRACE_S = 60  # harness slack over each scenario's in-L2 timeout
# Share of the L3 guest's MemAvailable that every scenario checks (guest_args).
CHECK_PCT = 85
# The L2 QEMU (TCG) itself aborting is outside every guest: L2 is booted again
# for the scenarios it had not finished, at most this many times, and each
# time is recorded. A crash of the L3 guest is never retried.
L2_ABORT_RETRIES = int(os.environ.get("ZSE2E_L2_RETRIES", "2"))

@dataclass
class Scenario:
    name: str
    vmm: str  # "zerostart" | "qemu"
    kernel: str  # name under /zs/kernels in L2
    mem_mib: int
    prezero: str  # "auto" | "off": zerostart's --memory hint=on | hint=off
    expect_hint: str  # "valid" | "absent" | "invalid(<Err>)"
    cpus: int = 1
    # In-L2 limit per attempt; the slowest clean run here was ~55 s (4 GiB, busy host).
    timeout_s: int = int(os.environ.get("ZSE2E_TIMEOUT", "240"))
    guest_args: str = ""
    note: str = ""
    vmm_args: str = ""  # extra zerostart arguments (test-only corruption switches)
    expect_nonzero: bool = False  # a planted non-zero byte must be found
    expect_exit: str = ""  # text zerostart's exit line must contain, e.g. "exit=acpi poweroff"

    def memory_opts(self) -> str:
        """zerostart --memory after size=; ZSE2E_HUGEPAGES=off is for debugging VMM builds without them."""
        huge = os.environ.get("ZSE2E_HUGEPAGES", "on")
        opts = f"hugepages={huge},hugepage_size=2M," if huge == "on" else "hugepages=off,"
        return opts + f"prefault=on,hint={'off' if self.prezero == 'off' else 'on'}"

    def cmdline(self) -> str:
        """The L3 kernel's command line (scenario.sh's ZSE2E-INFO prints it).
        oops=panic: a crashed guest ends at once (panic=-1 resets it) instead
        of hanging to the timeout."""
        return f"{L3_CONSOLE_ARGS} reboot=k {self.guest_args}"

    def spec(self) -> dict | None:
        """This scenario's start in L2 (zstest.vmmargv; None: a VMM the
        builder has no spec for, which scenario.sh reports as unknown).
        Serial console and timeline go where scenario.sh reads them."""
        ser, tl = f"/tmp/{self.name}.serial", f"/tmp/{self.name}.timeline.json"
        kernel = f"/zs/kernels/{self.kernel}"
        if self.vmm == "zerostart":
            return vmmargv.zerostart_run(kernel, self.cmdline(), f"size={self.mem_mib}M,{self.memory_opts()}",
                                         {"file": ser}, tl, cpus=self.cpus, initrd=vmmargv.L2_INITRAMFS,
                                         extra=shlex.split(self.vmm_args))
        if self.vmm == "qemu":
            # microvm with qboot; zsinit.halt=poweroff: microvm restarts the
            # guest on reset despite -no-reboot.
            spec = vmmargv.l2_microvm(self.cpus)
            spec.update(memory={"backing": "memfd-hugetlb", "size_mib": self.mem_mib, "prealloc": True},
                        kernel=kernel, initrd=vmmargv.L2_INITRAMFS,
                        cmdline=f"{self.cmdline()} zsinit.halt=poweroff", serial={"file": ser})
            return spec
        return None

    def line(self, cmd: str) -> str:
        """scenario.sh's list line; CMD: the VMM command, shell-quoted (last:
        the only field that may hold a '|')."""
        return "|".join([vmmargv.list_field(x) for x in (
            self.name, self.vmm, self.kernel, str(self.mem_mib), self.memory_opts(), str(self.cpus),
            str(self.timeout_s), self.cmdline())] + [cmd])


def commands(scenarios: list[Scenario], zerostart: Path | None) -> dict[str, str]:
    """Each scenario's VMM command (shell-quoted), from ZEROSTART's
    `vmm-argv` (zstest.vmmargv finds another host build if None)."""
    return {s.name: (vmmargv.build(spec, zerostart).shell() if (spec := s.spec()) else "") for s in scenarios}


def guest_args(mem_mib: int) -> str:
    # A hugetlb pool in the guest lets zsinit check (and time) 2 MiB pages too.
    # zsinit.check_pct=85: every scenario faults in and reads 85 % of the
    # guest's MemAvailable, so the memory a scenario claims is zero is most
    # of what the hint covered, not a 64 MiB sample (which the dirty-hint
    # control showed can miss a planted byte). Not 100 %: the guest's own
    # kernel and page cache need the rest, and an OOM kill would end the check.
    huge = 128 if mem_mib >= 4096 else 64
    extra = os.environ.get("ZSE2E_GUEST_APPEND", "")
    return f"hugepages={huge} zsinit.check_pct={CHECK_PCT} zsinit.populate_mib={huge * 2} {extra}".strip()


def e2e_scenarios(l3: str) -> list[Scenario]:
    """The issue's scenarios. `l3` is the kernel under test (patched when built)."""
    return [
        Scenario("zs-prezero-4g", "zerostart", l3, 4096, "auto", "valid", guest_args=guest_args(4096),
                 note="2M hugepages, prefault, prezero on: hint valid, memory zero, full timeline"),
        Scenario("zs-noprezero-4g", "zerostart", l3, 4096, "off", "absent", guest_args=guest_args(4096),
                 note="prezero off: no hint"),
        Scenario("zs-stock612-hint-1g", "zerostart", "debian-6.12", 1024, "auto", "valid",
                 guest_args=guest_args(1024),
                 note="stock Debian 6.12 kernel boots with the hint present and ignores it"),
        Scenario("zs-prezero-1g", "zerostart", l3, 1024, "auto", "valid", guest_args=guest_args(1024),
                 note="1 GiB guest timeline (4 GiB is zs-prezero-4g)"),
        Scenario("zs-corrupt-hint-1g", "zerostart", l3, 1024, "auto", "invalid(BadChecksum)",
                 guest_args=guest_args(1024), vmm_args="--test-corrupt-hint checksum",
                 note="zerostart flips a bit of the hint: the guest must reject it, not trust it"),
        *([Scenario("zs-prezero-verify-1g", "zerostart", l3, 1024, "auto", "valid",
                     guest_args=guest_args(1024) + " prezero.verify=1",
                     note="the patched kernel checks every clear it skips (prezero.verify=1): no failures")]
          if l3 == "patched" else []),
        *([Scenario("zs-dirty-hint-1g", "zerostart", l3, 1024, "auto", "valid",
                     guest_args=guest_args(1024), vmm_args="--test-corrupt-hint dirty-spread",
                     expect_nonzero=True,
                     note="zerostart plants a byte in every 64 MiB of the hinted ranges: a kernel that trusts "
                          "the hint skips clearing them, and the default check of every scenario must see "
                          "one (a single byte can sit in the 20 % the check never reads)")]
          if l3 == "patched" else []),
        Scenario("zs-acpi-off-poweroff-1g", "zerostart", l3, 1024, "auto", "valid",
                 guest_args=guest_args(1024) + " zsinit.halt=poweroff i8042.noaux i8042.nomux i8042.nopnp"
                                               " i8042.dumbkbd",
                 vmm_args="--acpi off", expect_exit="exit=halted: every vCPU stopped with interrupts off",
                 note="without ACPI, Linux's poweroff halts every CPU with interrupts off: zerostart must "
                      "notice and end the VM (exit code 0) instead of waiting forever"),
        Scenario("qemu-baseline-4g", "qemu", l3, 4096, "off", "absent", guest_args=guest_args(4096),
                 note="QEMU microvm inside L2 on the same kernel: the baseline VMM"),
    ]


def demo_scenario(l3: str) -> Scenario:
    return Scenario("demo-4g", "zerostart", l3, 4096, "auto", "valid", guest_args=guest_args(4096),
                    note="4 GiB, 2M hugepages, prefault, pre-zeroed")


# --------------------------------------------------------------------------
# parsing


@dataclass
class Result:
    sc: Scenario
    rc: int | None = None
    wall_ms: int | None = None
    verdict: dict = field(default_factory=dict)
    timeline_json: dict | None = None
    l3_lines: list[str] = field(default_factory=list)
    vmm_lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def kv(s: str) -> dict:
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", s))


def check_pct_shortfall(guest_args: str, v: dict) -> str | None:
    """The README's claim for the e2e rows, asserted: with zsinit.check_pct=P
    the guest read back at least P % of its MemAvailable (as zsinit counts
    it: whole MiB, P capped at 95). None when it did, or when the row asks
    for a fixed size instead."""
    m = re.search(r"(?:^|\s)zsinit\.check_pct=(\d+)", guest_args)
    if not m:
        return None
    avail_kib = int(v.get("mem_available_kib", "0"))
    if avail_kib <= 0:
        return "the guest did not report its MemAvailable (mem_available_kib), so check_pct cannot be checked"
    pct = min(int(m.group(1)), 95)
    want = avail_kib // 1024 * pct // 100 * MIB
    got = int(v.get("zero_checked_bytes", "0"))
    if got < want:
        return (f"the guest read back {got // MIB} MiB, less than zsinit.check_pct={pct} % of its "
                f"MemAvailable ({want // MIB} of {avail_kib // 1024} MiB)")
    return None


def parse_verdict(line: str) -> dict:
    m = re.search(r"ZSINIT: (PASS|FAIL) (.*)", line)
    if not m:
        return {}
    d = kv(m.group(2))
    d["status"] = m.group(1)
    r = re.search(r"reason=(.*)$", m.group(2))
    if r:
        d["reason"] = r.group(1)
    return d


def judge(r: Result) -> None:
    sc, v = r.sc, r.verdict
    if r.rc is None:
        r.failures.append("no ZSE2E-END line (scenario did not finish)")
    elif r.rc != 0:
        r.failures.append(f"VMM exited {r.rc}")
    boots = sum(1 for ln in r.l3_lines if "ZSINIT: START" in ln)
    if boots > 1:
        r.failures.append(f"the L3 guest booted {boots} times (reset did not end the VMM)")
    if not v:
        r.failures.append("no ZSINIT verdict line from the L3 guest")
    else:
        want = sc.expect_hint
        hint = v.get("hint", "?")
        if want.startswith("invalid("):
            # The guest must refuse the hint and say so; nothing else may fail.
            if hint != want:
                r.failures.append(f"expected hint={want}, guest saw hint={hint}")
            if v["status"] == "FAIL" and not v.get("reason", "").startswith("hint rejected"):
                r.failures.append(f"guest verdict FAIL for another reason: {v.get('reason', '?')}")
        elif sc.expect_nonzero:
            # The leak test: the checker must catch the planted byte.
            if int(v.get("nonzero_bytes", "0")) == 0:
                r.failures.append("the planted non-zero byte was not found: the leak went unnoticed")
        elif v["status"] != "PASS":
            r.failures.append(f"guest verdict FAIL: {v.get('reason', '?')}")
        if not sc.expect_nonzero and int(v.get("nonzero_bytes", "1")) != 0:
            r.failures.append(f"guest saw {v.get('nonzero_bytes')} non-zero bytes")
        if int(v.get("zero_checked_bytes", "0")) == 0:
            r.failures.append("guest checked no memory")
        short = check_pct_shortfall(sc.guest_args, v)
        if short:
            r.failures.append(short)
        if want == "valid" and hint == "valid" and int(v.get("hinted_checked_bytes", "0")) <= 0:
            # A pass that read no hinted frame says nothing about the hint.
            r.failures.append("the hint was valid but the guest checked no hinted memory (hinted_checked_bytes=0)")
        if want == "valid" and not (hint == "valid" and int(v.get("ranges", "0")) > 0):
            r.failures.append(f"expected a valid non-empty hint, guest saw hint={hint} ranges={v.get('ranges')}")
        if want == "absent" and hint != "absent":
            r.failures.append(f"expected no hint, guest saw hint={hint}")
        skipped = int(v.get("kernel_pages_skipped", "-1"))
        if sc.kernel.startswith("patched") and want == "valid" and skipped == 0:
            r.failures.append("the patched kernel skipped no clears despite a valid hint")
        if want != "valid" and skipped > 0:
            # Without a valid hint nothing may be skipped: that would be trusting garbage.
            r.failures.append(f"the kernel skipped {skipped} page clears without a valid hint")
        if "prezero.verify=1" in sc.guest_args and int(v.get("kernel_bytes_verified", "0")) <= 0:
            r.failures.append("prezero.verify=1 but the kernel verified no bytes")
    bugs = [ln.strip() for ln in kernel_bug_lines(r.l3_lines)]
    if bugs:
        r.failures.append(f"the L3 kernel reported {len(bugs)} bug line(s): {bugs[0][:160]}")
    if sc.expect_exit and not any(sc.expect_exit in ln for ln in r.vmm_lines):
        exits = [ln.strip() for ln in r.vmm_lines if "exit=" in ln]
        r.failures.append(f"expected zerostart to end with '{sc.expect_exit}', got {exits or 'no exit line'}")
    if sc.vmm == "zerostart":
        if r.timeline_json is None:
            r.failures.append("no timeline JSON from zerostart")
        else:
            # The checked schema (zstest.timeline), with the phases every scenario must reach.
            r.failures += [f"timeline JSON: {p}" for p in tlschema.check(r.timeline_json, "run", REQUIRED_PHASES)]


def timeline_of(r: Result) -> list[dict]:
    if r.timeline_json is not None:
        return [{"name": p["name"], "t_ms": p["t_ms"]} for p in r.timeline_json.get("phases", [])
                if "name" in p and "t_ms" in p]
    # The QEMU baseline has no boot-timer device: only what L2 measured around it.
    if r.wall_ms is not None:
        return [{"name": "process_start", "t_ms": 0}, {"name": "exit", "t_ms": r.wall_ms}]
    return []


def report_entry(r: Result) -> dict:
    v = r.verdict
    mem = r.sc.mem_mib * MIB
    if r.timeline_json and isinstance(r.timeline_json.get("memory_bytes"), int):
        mem = r.timeline_json["memory_bytes"]
    hint = v.get("hint", "unknown")
    e = {
        "name": r.sc.name,
        "passed": not r.failures,
        "guest_mem_bytes": mem,
        "hint_seen": hint != "absent" and hint != "unknown",
        "zero_checked_bytes": int(v.get("zero_checked_bytes", 0)),
        "nonzero_bytes": int(v.get("nonzero_bytes", 0)),
        "timeline": timeline_of(r),
        # additions
        "vmm": r.sc.vmm,
        "kernel": r.sc.kernel,
        "guest_kernel_release": v.get("kernel"),
        "prezero": r.sc.prezero,
        "hint": hint,
        "hint_ranges": int(v.get("ranges", 0)),
        "hinted_bytes": int(v.get("hinted_bytes", 0)),
        "hinted_checked_bytes": int(v.get("hinted_checked_bytes", 0)),
        "populate_ms": int(v.get("populate_ms", 0)),
        "guest_uptime_ms_at_verdict": int(v.get("uptime_ms", 0)),
        # The patched kernel's debugfs zerostart/ counters; -1: not exposed (stock kernel).
        "kernel_pages_skipped": int(v.get("kernel_pages_skipped", -1)),
        "kernel_bytes_verified": int(v.get("kernel_bytes_verified", -1)),
        "kernel_verify_failures": int(v.get("kernel_verify_failures", -1)),
        "vmm_rc": r.rc,
        "wall_ms_in_l2": r.wall_ms,
        "failures": r.failures,
        "note": r.sc.note,
    }
    if r.timeline_json:
        for k in ("prezero", "exit", "memory_bytes"):
            if k in r.timeline_json:
                e[f"zerostart_{k}"] = r.timeline_json[k]
    return e


# --------------------------------------------------------------------------
# running L2


def run_nested(scenarios: list[Scenario], manifest: dict, echo: bool, smp: int,
               l2_retries: list[str] | None = None) -> tuple[list[Result], str | None]:
    """Runs every scenario in L2; returns results and a fatal error, if any.

    When the boot fails by a fault of the test bed itself
    (zstest.qemu.bed_fault: the L2 QEMU's own abort, or an interrupt its
    TCG never delivered), L2 boots again for the scenarios not yet finished,
    the one it was in included unless its guest printed a kernel bug line,
    up to L2_ABORT_RETRIES times; each retry's reason is appended to
    `l2_retries`."""
    retries = l2_retries if l2_retries is not None else []
    return rerun_after_bed_faults(
        list(scenarios), lambda todo: _run_l2(todo, manifest, echo, smp, attempt=len(retries)), retries,
        L2_ABORT_RETRIES if l2_retries is not None else 0,
        lambda r: bool(kernel_bug_lines(r.l3_lines)), "e2e")


def _run_l2(scenarios: list[Scenario], manifest: dict, echo: bool, smp: int,
            attempt: int = 0) -> tuple[list[Result], str | None, str | None]:
    """Boots L2 once and runs every scenario: results, fatal error and, when
    the boot failed by a fault of the test bed, why (zstest.qemu.bed_fault)."""
    max_mem = max(s.mem_mib for s in scenarios)
    l2_mem, hugepages = l2_memory(manifest, max_mem)
    # The scenario list rides as a second cpio archive after the cached image.
    lst = build.Cpio()
    cmds = commands(scenarios, ZEROSTART)
    lst.file("zs/scenarios.txt", ("\n".join(s.line(cmds[s.name]) for s in scenarios) + "\n").encode())
    print(f"e2e: booting L2 (TCG, -cpu {L2_CPU}, {l2_mem} MiB, {hugepages} x 2M hugepages) "
          f"for {len(scenarios)} scenario(s)", flush=True)
    log = CONSOLE_LOG if attempt == 0 else CONSOLE_LOG.with_suffix(f".l2-retry{attempt}.log")
    with boot_l2(manifest, lst, l2_mem, hugepages, log=log, smp=smp, echo=echo, zerostart=ZEROSTART) as con:
        results, fatal = _drive(con, scenarios)
        if not fatal:
            return results, None, None
        silent = con.silent_host() if fatal.startswith("timeout") else None
        if silent:
            # The nested host went silent: where L2's CPUs are and what their
            # APICs hold go into the console log and the failure line.
            fatal += f" ({silent})"
        elif fatal.startswith("L2 exited"):
            fatal += f" ({con.exit_story()})"  # its status, and how L2 ended: reset, triple fault, power-off
        triple = con.l2_triple_fault() if fatal.startswith("L2 exited") else None
        # _drive adds a scenario it was in to `results` with no rc.
        return results, fatal, bed_fault(silent, con.abort_line(con.exit_code()), triple, con.stale_int3,
                                         guest_in_flight=any(r.rc is None for r in results))


def _drive(con: Console, scenarios: list[Scenario]) -> tuple[list[Result], str | None]:
    results: list[Result] = []
    by_name = {s.name: s for s in scenarios}
    t_start = time.monotonic()
    overall = t_start + L2_BOOT_TIMEOUT_S + sum(s.timeout_s + GRACE_S for s in scenarios)
    deadline = t_start + L2_BOOT_TIMEOUT_S
    cur: Result | None = None
    try:
        while True:
            line = con.next(min(deadline, overall))
            if line is None:
                if cur:
                    return results, f"L2 exited during scenario {cur.sc.name}"
                if len(results) < len(scenarios):
                    return results, "L2 exited before running every scenario"
                return results, None
            if line.startswith("ZSE2E-FATAL"):
                return results, line
            if line.startswith("ZSE2E-L2 kvm ready"):
                print(f"e2e: L2 up with /dev/kvm after {time.monotonic() - t_start:.1f} s", flush=True)
            elif line.startswith("ZSE2E-BEGIN"):
                name = kv(line).get("name")
                if name not in by_name:
                    return results, f"L2 started unknown scenario {name}"
                cur = Result(by_name[name])
                deadline = time.monotonic() + cur.sc.timeout_s + GRACE_S
                print(f"e2e: [{name}] running ({cur.sc.vmm}, kernel {cur.sc.kernel}, "
                      f"{cur.sc.mem_mib} MiB, prezero={cur.sc.prezero})", flush=True)
            elif cur and line.startswith("L3| "):
                cur.l3_lines.append(line[4:])
                if "ZSINIT: PASS" in line or "ZSINIT: FAIL" in line:
                    cur.verdict = parse_verdict(line)
            elif cur and line.startswith("ZSE2E-TIMEOUT"):
                cur.failures.append(f"timed out in L2 after {cur.sc.timeout_s} s")
            elif cur and line.startswith("VMM| "):
                cur.vmm_lines.append(line[5:])
            elif cur and line.startswith("ZSE2E-TIMELINE"):
                js = line.split(" ", 2)[2] if line.count(" ") >= 2 else ""
                try:
                    cur.timeline_json = json.loads(js)
                except json.JSONDecodeError as e:
                    cur.failures.append(f"timeline JSON unparsable: {e}")
            elif cur and line.startswith("ZSE2E-END"):
                d = kv(line)
                cur.rc = int(d.get("rc", "-1"))
                cur.wall_ms = int(d.get("wall_ms", "0"))
                judge(cur)
                results.append(cur)
                status = "PASS" if not cur.failures else "FAIL: " + "; ".join(cur.failures)
                print(f"e2e: [{cur.sc.name}] {status} ({cur.wall_ms} ms in L2)", flush=True)
                cur = None
                deadline = overall
            elif line.startswith("ZSE2E-DONE"):
                deadline = min(overall, time.monotonic() + 30)
    except TimeoutError:
        where = f"scenario {cur.sc.name}" if cur else ("L2 boot" if not results else "L2")
        if cur:
            cur.failures.append("harness timeout")
            results.append(cur)
        return results, f"timeout waiting for {where} after {time.monotonic() - t_start:.0f} s"


# --------------------------------------------------------------------------
# output


def write_report(results: list[Result], fatal: str | None, manifest: dict | None, path: Path,
                 l2_retries: list[str] | None = None, skipped: list[str] | None = None) -> dict:
    rep = {
        "scenarios": [report_entry(r) for r in results],
        "fatal": fatal,
        "l2_retries": l2_retries or [],
        "skipped": skipped or [],
        "l2": {k: manifest.get(k) for k in ("hash", "l2_kernel_release", "packages", "zerostart_sha256")}
        if manifest else None,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep, indent=2) + "\n")
    return rep


def text_table(rows: list[tuple]) -> list[str]:
    """Rows of strings, the first a header, as left-aligned columns with a rule under the header."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    out.insert(1, "  ".join("-" * x for x in w))
    return out


def summary(rep: dict) -> str:
    rows = [("scenario", "ok", "vmm", "kernel", "mem", "hint", "zero-checked", "nonzero", "populate",
             "init_started", "exit")]
    for s in rep["scenarios"]:
        tl = {p["name"]: p["t_ms"] for p in s["timeline"]}
        rows.append((s["name"], "PASS" if s["passed"] else "FAIL", s["vmm"], s["kernel"],
                     f"{s['guest_mem_bytes'] // MIB}M", s["hint"] + (f"/{s['hint_ranges']}" if s["hint_ranges"] else ""),
                     f"{s['zero_checked_bytes'] // MIB}M", str(s["nonzero_bytes"]), f"{s['populate_ms']}ms",
                     fmt_ms(tl.get("init_started")), fmt_ms(tl.get("exit"))))
    out = text_table(rows)
    for s in rep["scenarios"]:
        for f in s["failures"]:
            out.append(f"  {s['name']}: {f}")
    for c in rep.get("l2_retries", []):
        out.append(f"  L2 booted again after a test-bed fault (outside every guest): {c[:160]}")
    return "\n".join(out)


def fmt_ms(v) -> str:
    return "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)


def timeline_table(phases: list[dict], baseline: list[dict] | None = None,
                   baseline_title: str = "baseline_t_ms") -> str:
    """phase | t_ms | delta_ms [| the same phase in a same-run baseline]."""
    base = {p["name"]: p["t_ms"] for p in baseline or []}
    head = ("phase", "t_ms", "delta_ms") + ((baseline_title,) if baseline is not None else ())
    rows = [head]
    prev = None
    for p in phases:
        t = p["t_ms"]
        row = (p["name"], f"{t:.1f}", "" if prev is None else f"{t - prev:.1f}")
        if baseline is not None:
            row += (f"{base[p['name']]:.1f}" if p["name"] in base else "-",)
        rows.append(row)
        prev = t
    n = len(head)
    w = [max(len(r[i]) for r in rows) for i in range(n)]
    lines = ["  ".join(r[i].ljust(w[i]) if i == 0 else r[i].rjust(w[i]) for i in range(n)) for r in rows]
    lines.insert(1, "-" * (sum(w) + 2 * (n - 1)))
    return "\n".join(lines)


def fail_loudly(fatal: str | None, failures: list[str] | None = None) -> None:
    """Prints the console tail, then the reasons again as the very last lines:
    CI shows the end of the output, and the end must name what failed."""
    log = CONSOLE_LOG
    print(f"\ne2e: FAILED{': ' + fatal if fatal else ''}", file=sys.stderr)
    if log.exists():
        lines = log.read_text(errors="replace").splitlines()
        # A stuck nested host's snapshot (registers of every CPU) fills the
        # end of the log; what L2 and its guests printed before it is what
        # tells how it got stuck, and the failure line sums the snapshot up.
        snap = max((i for i, ln in enumerate(lines) if ln.startswith("ZS-SNAPSHOT")), default=None)
        tail = lines[-80:] if snap is None else lines[max(0, snap - 60):snap]
        where = "" if snap is None else " before the snapshot of the stuck nested host (summed up above)"
        print(f"e2e: last {len(tail)} lines of {log}{where}:", file=sys.stderr)
        for line in tail:
            print(f"  {line}", file=sys.stderr)
    reasons = ([fatal] if fatal else []) + list(failures or [])
    for r in reasons or ["no scenario named a failure; see the summary above"]:
        print(f"FAILED: {r}", file=sys.stderr)


# --------------------------------------------------------------------------
# entry points


def l3_kernel_name(kernels: dict) -> str:
    if "patched" in kernels:
        return "patched"
    if os.environ.get("E2E_KERNEL") == "patched":
        # `make test-nested-host` asked for the kernel under test: testing stock instead would pass without it.
        raise build.BuildError("E2E_KERNEL=patched but no patched guest kernel is built "
                               "(guest-kernel-patches/build.sh --print names none); build it with `make kernel`, "
                               "or run with E2E_KERNEL=stock to test stock Debian 6.12 on purpose")
    print("e2e: patched guest kernel not built (guest-kernel-patches/build.sh --print names none; ZS_L3_KERNEL unset); "
          "the L3 kernel under test is stock Debian 6.12", flush=True)
    return "debian-6.12"


def zerostart_path(arg: str | None) -> Path | None:
    p = Path(arg) if arg else vmmargv.static_zerostart()
    return p if p.exists() else None


def cmd_e2e(a) -> int:
    t0 = time.monotonic()
    global ZEROSTART
    zs = zerostart_path(a.zerostart)
    ZEROSTART = zs
    kernels = build.default_l3_kernels()
    manifest = build.build_l2(kernels, zs, with_qemu=True)
    l3 = l3_kernel_name(manifest["l3_kernels"])
    scs = e2e_scenarios(l3)
    if a.vmm:
        if a.vmm == "qemu":
            # zerostart's test-only corruption switches have no QEMU equivalent: those scenarios go.
            scs = [s for s in scs if not s.vmm_args]
        for s in scs:
            s.vmm = a.vmm
            if a.vmm == "qemu":
                s.expect_hint = "absent"
    if a.only:
        want = set(a.only.split(","))
        scs = [s for s in scs if s.name in want]
        if not scs:
            print(f"e2e: --only {a.only} matches no scenario", file=sys.stderr)
            return 2
    if a.repeat > 1:
        import copy
        scs = [copy.replace(s, name=f"{s.name}-r{i}") if hasattr(copy, "replace") else
               Scenario(**{**s.__dict__, "name": f"{s.name}-r{i}"}) for s in scs for i in range(a.repeat)]
    if zs is None and any(s.vmm == "zerostart" for s in scs):
        print("e2e: warning: no static zerostart binary (make e2e-zerostart); its scenarios will fail",
              flush=True)
    # Scenarios that need the patched kernel are left out on a stock one: say so.
    skipped = [] if a.only or a.vmm else \
        [f"{s.name}: needs the patched kernel, the kernel under test is {l3}"
         for s in e2e_scenarios("patched") if s.name not in {x.name for x in scs}]
    for s in skipped:
        print(f"SKIP {s}", flush=True)
    l2_retries: list[str] = []
    results, fatal = run_nested(scs, manifest, a.verbose, a.smp, l2_retries)
    rep = write_report(results, fatal, manifest, Path(a.report), l2_retries, skipped)
    print("\n" + summary(rep))
    print(f"\ne2e: report {a.report}; console log {CONSOLE_LOG}; {time.monotonic() - t0:.0f} s total")
    print(counts_line(results, scs, skipped, l2_retries))
    ok = fatal is None and len(results) == len(scs) and all(not r.failures for r in results) and scs
    if not ok:
        fail_loudly(fatal, [f"{r.sc.name}: {fl}" for r in results for fl in r.failures])
        return 1
    print("e2e: all scenarios passed")
    return 0


def counts_line(results: list[Result], scs: list[Scenario], skipped: list[str], l2_retries: list[str]) -> str:
    """One line for `make test`'s summary (tests/lib/make-test.sh): checks that
    passed, failed (a scenario that never reported counts as failed) and
    skipped, and L2 retries (test-bed faults outside every guest)."""
    passed = sum(1 for r in results if not r.failures)
    failed = len(scs) - passed
    return (f"e2e: {passed} passed, {failed} failed, {len(skipped)} skipped; "
            f"{len(l2_retries)} L2 retries after a test-bed fault outside every guest")


def host_has_hw_virt() -> bool:
    try:
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    except OSError:
        return False
    return bool({"vmx", "svm"} & set(flags.split()))


def cmd_demo(a) -> int:
    """`make demo`: the side-by-side of demo.py in the nested host; `--direct`: zerostart alone on this
    host's /dev/kvm (hosts with vmx/svm, where the nested host is not needed for one VM)."""
    if a.direct:
        if not host_has_hw_virt():
            print("demo: note: this CPU has no vmx/svm; a software /dev/kvm may not boot Linux", flush=True)
        zs = zerostart_path(a.zerostart)
        if zs is None:
            print("demo: no static zerostart binary; run `make demo` (it builds one)", file=sys.stderr)
            return 1
        return demo_direct(zs, build.default_l3_kernels(), a.timeout)
    import demo  # noqa: E402  (imports this module)
    return demo.cmd_demo(a)


def show_demo(tl: dict, verdict: dict, path: Path, baseline: list[dict] | None = None) -> None:
    print("\nzerostart boot timeline (4 GiB, 2M hugepages, prefault, pre-zeroed):")
    print(timeline_table(tl.get("phases", []), baseline, "prezero_off_t_ms"))
    if baseline is not None:
        print("(prezero_off_t_ms: the same VM with --memory prezero=off, same L2 boot, just after)")
    if "prezero" in tl:
        print(f"prezero: {json.dumps(tl['prezero'])}")
    if verdict:
        print(f"guest: hint={verdict.get('hint')} ranges={verdict.get('ranges')} "
              f"zero_checked={int(verdict.get('zero_checked_bytes', 0)) // MIB} MiB "
              f"nonzero={verdict.get('nonzero_bytes')} populate={verdict.get('populate_ms')} ms"
              + (f" kernel_pages_skipped={verdict['kernel_pages_skipped']}"
                 if int(verdict.get("kernel_pages_skipped", -1)) >= 0 else "")
              + f" kernel={verdict.get('kernel')}")
    print(f"timeline JSON: {path}\n")


def demo_direct(zs: Path, kernels: dict, timeout_s: int | None) -> int:
    """On a host with hardware virtualization: zerostart runs right here."""
    kernel_name = l3_kernel_name(kernels)
    if kernel_name == "patched":
        kernel = kernels["patched"]
    else:
        debs = build.fetch_packages()
        kernel = build.kernel_of(build.unpack(debs["l3-kernel-debian-6.12"]))[0]
    initrd = build.build_l3_initramfs()
    sc = demo_scenario(kernel_name)
    if timeout_s:
        sc.timeout_s = timeout_s
    # The guest's 2M pages: grown for this boot and the pages added given
    # back however it ends (zstest.hugepages says on stderr why it could not,
    # and what to run: as root, or with that many pages reserved).
    pools = HugePages("demo")
    OUT.mkdir(parents=True, exist_ok=True)
    tl_path, ser = OUT / "demo-timeline.json", OUT / "demo-serial.log"
    try:
        if not pools.reserve(2048, sc.mem_mib // 2):
            return 1
        spec = vmmargv.zerostart_run(str(kernel), sc.cmdline(), f"size={sc.mem_mib}M,{sc.memory_opts()}",
                                     {"file": str(ser)}, str(tl_path), cpus=sc.cpus, initrd=str(initrd))
        cmd = vmmargv.build({**spec, "binary": str(zs)}, zs).argv
        print("demo: " + " ".join(cmd), flush=True)
        try:
            rc = subprocess.run(cmd, timeout=sc.timeout_s).returncode
        except subprocess.TimeoutExpired:
            print(f"demo: zerostart did not finish within {sc.timeout_s} s", file=sys.stderr)
            return 1
    finally:
        pools.restore()
    verdict = {}
    if ser.exists():
        for line in ser.read_text(errors="replace").splitlines():
            if "ZSINIT: PASS" in line or "ZSINIT: FAIL" in line:
                verdict = parse_verdict(line)
    if not tl_path.exists():
        print(f"demo: zerostart exited {rc} without a timeline; serial log {ser}", file=sys.stderr)
        return 1
    show_demo(json.loads(tl_path.read_text()), verdict, tl_path)
    return 0 if rc == 0 and verdict.get("status") == "PASS" else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["e2e", "demo", "launch", "microvm"])
    ap.add_argument("--firmware", help="launch, demo, microvm: OVMF.fd (make passes the one `make firmware` builds)")
    ap.add_argument("--zerostart", help="static zerostart binary (default $CARGO_TARGET_DIR or target/, then x86_64-unknown-linux-gnu/static/zerostart)")
    ap.add_argument("--chart-bin", help="demo: vmm/slo's demo_chart example (make demo builds it)")
    ap.add_argument("--vmm", choices=["zerostart", "qemu"], help="run every e2e scenario with this VMM")
    ap.add_argument("--only", help="comma-separated scenario names")
    ap.add_argument("--repeat", type=int, default=1, help="run each scenario N times (flakiness hunts)")
    ap.add_argument("--report", default=str(OUT / "report.json"))
    # 2 by default so zerostart's parallel pre-zeroing runs threaded in L2 (with
    # QEMU 10 in L2: 10 of 10 clean boots; QEMU 7.2 crashed with 1 or 2).
    ap.add_argument("--smp", type=int, default=2, help="L2 vCPUs (default 2)")
    ap.add_argument("--direct", action="store_true", help="demo: only zerostart, on this host's /dev/kvm (needs vmx/svm)")
    ap.add_argument("--timeout", type=int, help="demo --direct: seconds before zerostart is killed")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo the whole L2 console")
    a = ap.parse_args()
    global CONSOLE_LOG
    # Runs with their own report keep their own console log: parallel runs must not clobber.
    if a.cmd in ("launch", "microvm"):
        import launch  # noqa: E402  (imports this module)
        import microvm  # noqa: E402
        try:
            return launch.cmd_launch(a) if a.cmd == "launch" else microvm.cmd_microvm(a)
        except build.BuildError as e:
            print(f"{a.cmd}: error: {e}", file=sys.stderr)
            return 1
    if a.cmd == "demo":
        CONSOLE_LOG = OUT / "demo-console.log"
    elif Path(a.report).resolve() != (OUT / "report.json").resolve():
        CONSOLE_LOG = Path(a.report).with_suffix(".console.log")
    try:
        return cmd_e2e(a) if a.cmd == "e2e" else cmd_demo(a)
    except build.BuildError as e:
        print(f"e2e: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
