"""The one QEMU boot-and-read-serial driver of the harness.

Why one: the e2e, launch/demo, firmware-boot and pool-bench harnesses each
started the nested test host (L2) under QEMU TCG and read its serial console
with their own reader, timeouts and kill; one of them polled a non-blocking
pipe. Every harness now boots L2 with `boot_l2` and reads lines with
`Console.next(deadline)`: every wait has a deadline, the whole QEMU process
group is killed however the harness ends, and the console goes to a log.

  with boot_l2(manifest, extra, l2_mem_mib, hugepages, log=path) as con:
      line = con.next(deadline)   # str; None at EOF; TimeoutError past deadline

`extra` (an l2image.Cpio) is appended to the cached L2 initramfs as a second
archive (the kernel unpacks concatenated archives), so scenario lists and
test binaries never rebuild the image.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import os
import queue
import re
import shutil
import socket
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, TextIO

from zstest import l2image, vmmargv

# The L2 CPU: AMD with SVM so kvm-amd loads. ZSE2E_L2_CPU overrides (experiments).
L2_CPU = os.environ.get("ZSE2E_L2_CPU", "EPYC,+svm")
# L2's accelerator: multi-threaded TCG, each L2 vCPU on its own host core.
# ZSE2E_L2_ACCEL overrides (experiments: tcg,thread=single).
L2_ACCEL = os.environ.get("ZSE2E_L2_ACCEL", "tcg,thread=multi")
# This machine backs its own memory lazily: the first touch of a page costs
# ~2.5 s/GiB. Without prealloc the first scenario that fills 4 GiB in L2 paid
# that inside zerostart's memory_ready (21.8 s vs 3.7 s on reuse), which is the
# outer host's cost, not zerostart's. QEMU touches L2's RAM up front instead.
L2_PREALLOC = os.environ.get("ZSE2E_L2_PREALLOC", "on") != "off"
# What QEMU prints when TCG or QEMU itself gives up (cpu_abort, g_assert, assert()).
L2_ABORT_RE = re.compile(r"^(qemu: fatal:|qemu-system-x86_64: .*(ssertion|fatal|tcg)|\*\*\s*ERROR:.*|.*: Assertion .* failed\.)")
# A guest kernel's own report of a bug: a guest that printed one failed,
# verdict or not, and is never booted again by a retry (rerun_after_bed_faults'
# `crashed`). The one pattern of every nested harness and of the pool bench's
# judge. BUG: covers KASAN, KFENCE and soft lockups ("BUG: KASAN: ...",
# "watchdog: BUG: soft lockup"), named too for whoever greps for them; a
# WARNING and an oops's RIP line only in the kernel's own form, so a program's
# "WARNING:" on the console is no kernel bug; a RIP in kernel mode (CS 0010)
# only: a dump's user-mode RIP (0033, the task the kernel interrupted)
# belongs to the WARNING or BUG line above it. Not a bug line: the WARN (and
# its RIP line) of prezero.verify catching a page, in the two functions that
# check skipped clears: that is verify doing its job, which a dirty control
# requires and every other scenario fails on by its verify_failures count.
VERIFY_WARN_FUNCS = r"(?:zerostart_verify_pages|zerostart_memmap_take_range)\+"
# The kernel's WARNING line: "WARNING: CPU: N PID: N at FILE:LINE FUNC" (6.12),
# "WARNING: at ..." (no task), "WARNING: FILE:LINE at FUNC, CPU#N: TASK" (7.3).
WARN_LINE_FORMS = r"(?:CPU: \d+ PID: |at |\S+:\d+ at )"
WARNING_HEAD = rf"WARNING: {WARN_LINE_FORMS}"
# lockdep's and RCU's reports begin with a WARNING line of their own
# ("WARNING: possible circular locking dependency detected", "WARNING:
# suspicious RCU usage"): any kernel message that begins with "WARNING: "
# and is not the WARN line above. Only at the start of a kernel message
# (after its printk time): "Speculative Return Stack Overflow: WARNING: See
# ..." (every nested guest's boot on this CPU model) and a program's
# "WARNING:" line are no kernel bug.
REPORT_WARNING = rf"\[\s*\d+\.\d+\] WARNING: (?!{WARN_LINE_FORMS})"
L3_KERNEL_BUG_RE = re.compile(r"Bad page state|BUG:|Oops:|Kernel panic|general protection fault|double fault|"
                              rf"{WARNING_HEAD}(?!.*{VERIFY_WARN_FUNCS})|{REPORT_WARNING}|"
                              rf"RIP: 0010:(?!{VERIFY_WARN_FUNCS})|soft lockup|hard LOCKUP|"
                              r"KFENCE: |KASAN: ")
# Inside verify's own report (its WARNING line up to the kernel's
# `---[ end trace ... ]---`), the register dump of a frame it interrupted
# is part of that report: verify checks a page at allocation, and when the
# allocation is a page fault taken in the kernel (copy_to_user filling a
# read() buffer: rep_movs_alternative), the WARN prints that frame's
# `RIP: 0010:` too. Every other kind of bug line still counts there.
# Captured: tests/zstest/captured/verify-warn-in-kernel-fault.log.
VERIFY_WARN_RE = re.compile(rf"{WARNING_HEAD}.*{VERIFY_WARN_FUNCS}")
END_TRACE_RE = re.compile(r"---\[ end trace [0-9a-f]+ \]---")
_KERNEL_RIP_RE = re.compile(r"RIP: 0010:")


def kernel_bug_lines(lines) -> list[str]:
    """The lines of LINES (a guest console, in order) that L3_KERNEL_BUG_RE
    fails a guest for, read as reports: a `RIP: 0010:` line inside one of
    prezero.verify's WARN reports belongs to that report (see above)."""
    out, in_verify = [], False
    for ln in lines:
        if VERIFY_WARN_RE.search(ln):
            in_verify = True
        elif in_verify and END_TRACE_RE.search(ln):
            in_verify = False
        m = L3_KERNEL_BUG_RE.search(ln)
        if not m:
            continue
        if in_verify and _KERNEL_RIP_RE.search(ln) and not L3_KERNEL_BUG_RE.search(_KERNEL_RIP_RE.sub("", ln)):
            continue
        out.append(ln)
    return out
# The console part of every L3 guest's kernel command line in the nested
# harnesses. quiet keeps the boot's info lines off the serial port (each
# byte is an I/O exit under nested TCG); loglevel=5 after it still prints
# KERN_WARNING and worse, so a WARNING reaches L3_KERNEL_BUG_RE. oops=panic
# and panic=-1: a crashed guest ends at once instead of at the timeout.
L3_CONSOLE_ARGS = "console=ttyS0 panic=-1 oops=panic quiet loglevel=5"
# What kernel_command puts before every guest kernel test's arguments: the
# console on the serial port, and panic=-1 so that a panic ends the boot
# (-no-reboot turns the reset into QEMU's exit). oops=panic, as every other
# harness boots its guests (L3_CONSOLE_ARGS): an oops ends the boot at once,
# its report kept on the console, instead of a guest that oopsed and hung
# holding its case until the timeout (the 6.12 hibernatectl resume of
# 2026-12-06's CI: an Oops on CPU 1, then 600 s of nothing). Any Oops fails
# a kernel case anyway (cases.boot_bug_lines), so no verdict changes. A
# kernel test that boots without -kernel (a boot loader's script) starts its
# line with it too.
KERNEL_TEST_ARGS = "console=ttyS0 panic=-1 oops=panic"
MIB = 1 << 20
# The nested host's own kernel saying one of its CPUs has spun for tens of
# seconds. In this bed that has been a CPU waiting for an IPI (a TLB flush)
# that the other CPU, halted with IF=1, never took: the emulator's lost
# interrupt (bed-qemu/README.md). Nothing after it will come in time, so
# Console.next stops the wait at once instead of at the scenario's deadline
# (10 min and more), and the harness takes its snapshot, which alone decides
# whether it was the bed's fault (bed_fault). L3 lines carry a prefix, so a
# guest's own lockup never matches.
L2_SOFT_LOCKUP_RE = re.compile(r"^\[\s*\d+\.\d+\] watchdog: BUG: soft lockup - CPU#\d+ stuck for \d+s!")


# L2's own kernel reporting a trap on an int3 in its text (6.1 prints
# "int3: 0000 [#1] ...", 6.12 "Oops: int3: 0000 ..."), and the Code: line
# of that report: the bytes around RIP, the one at RIP in <..>. An int3
# traps after itself, so the byte before <..> is the int3 the CPU took.
# The kernel writes int3 into its text only while it patches a static key
# or an alternative (text_poke_bp), and then poke_int3_handler takes the
# trap; the report comes only when the CPU took an int3 after the patch
# ended and the sync IPIs returned. When the byte there is no longer cc,
# the CPU ran code its memory did not hold: multi-threaded TCG's
# cross-modifying-code race (stop 26's note: Debian's stock kernel under
# QEMU 7.2, `sched_clock_cpu+0x9 Code: ... 66 <90> e8`). A correct CPU
# cannot do that whatever software runs on it. L3 lines carry a prefix,
# so a guest's own report never matches.
L2_INT3_OOPS_RE = re.compile(r"^\[\s*\d+\.\d+\] (?:Oops: )?int3: [0-9a-f]{4} \[#\d+\]")
L2_CODE_RE = re.compile(r"^\[\s*\d+\.\d+\] Code: (.*)$")
# How Console.stale_int3 begins, whichever way the proof came (firmware-boot
# finds the sign in its `ended` text by it).
STALE_INT3 = "L2 took an int3 its memory no longer holds"


def stale_int3_byte(code: str) -> str | None:
    """For the bytes of an int3 report's Code: line: the byte before the one
    in <..> (where the CPU took the int3) when it is not cc, else None
    (also when the line has no <..>, e.g. 'Unable to access opcode bytes')."""
    toks = code.split()
    for i, t in enumerate(toks):
        if t.startswith("<") and i > 0:
            prev = toks[i - 1].lower()
            return prev if re.fullmatch(r"[0-9a-f]{2}", prev) and prev != "cc" else None
    return None


class L2Stuck(TimeoutError):
    """Console.next read L2_SOFT_LOCKUP_RE, or an int3 report whose Code:
    line proves a stale int3 (stale_int3_byte): a timeout, not waited out."""

    def __init__(self, line: str, what: str = "nested host soft lockup"):
        super().__init__(f"{what}: {line.strip()}")


L2_BOOT_TIMEOUT_S = 180  # L2 boot to "kvm ready" under TCG (normally ~5-15 s)


# A kernel console message's timestamp. printk writes to the UART directly,
# while a user-space line goes through the tty and drains behind it, so a
# message can land inside a line the guest's programs print (seen:
# "... hugetlb_planted_found=16[    4.667137] zsprobe (55) used greatest
# stack depth: ..." and the line's own newline after it; and L2's
# "[  162.529693] hrtimer: interrupt took 12243080 ns" inside the launcher
# timeline's JSON, which the nested harness then could not parse).
PRINTK_AT = re.compile(r"\[\s*\d+\.\d{6}\] ")
# Lines the harnesses' guest-side programs print, none of which holds a
# kernel timestamp of its own: the test programs' and L2 scripts' ZS...
# lines and L2's relays of the VMM, firmware, QEMU log and KVM records
# (L3| lines carry the L3 kernel's own timestamps and are left alone).
HARNESS_LINE_PREFIXES = ("ZS", "VMM| ", "FW| ", "QLOG| ", "KVMX| ")


class Untangler:
    """Takes a kernel message out of a harness line it cut into, one console
    line at a time: the message becomes a line of its own and the cut line
    is joined to its rest (the next line), so a parser sees the line the
    program printed. Lines not starting with one of PREFIXES pass as they
    are."""

    def __init__(self, prefixes: tuple[str, ...] = HARNESS_LINE_PREFIXES):
        self.prefixes = prefixes
        self.cut: str | None = None

    def feed(self, line: str) -> list[str]:
        """The lines LINE completes (none while a cut line waits for its rest)."""
        out: list[str] = []
        if self.cut is not None:
            line, self.cut = self.cut + line, None
        m = PRINTK_AT.search(line)
        if m and m.start() > 0 and line.startswith(self.prefixes):
            out.append(line[m.start():])
            self.cut = line[:m.start()]
            return out
        out.append(line)
        return out

    def flush(self) -> list[str]:
        """A cut line whose rest never came (end of the console)."""
        cut, self.cut = self.cut, None
        return [] if cut is None else [cut]


class Console:
    """Reads a child's stdout on a thread so every wait can have a deadline.
    `log` is a path (written from the start) or an open file (appended to,
    left open: a harness that boots L2 several times keeps one log)."""

    def __init__(self, proc: subprocess.Popen, log: Path | TextIO, echo: bool, monitor: Path | None = None,
                 end_log: Path | None = None, kallsyms: str | None = None):
        self.proc, self.q = proc, queue.Queue()
        self.kallsyms = kallsyms  # L2 kernel's text symbols (l2image.l2_kallsyms), for snapshots
        self.monitor = monitor
        self.end_log = end_log
        self.owns_log = not hasattr(log, "write")
        self.log = open(log, "w", errors="replace") if self.owns_log else log
        self.echo = echo
        self.lines: list[str] = []
        self.stuck: str | None = None  # L2's soft-lockup line, once next() raised L2Stuck
        # 'in a soft lockup' or 'trapped on a stale int3': silent_host's words for `stuck`.
        self.stuck_what = "in a soft lockup"
        # 'L2 took an int3 its memory no longer holds (..)' (bed_fault's fourth sign).
        self.stale_int3: str | None = None
        self._int3: tuple[str, int] | None = None  # L2's int3 report line, and its index in `lines`
        # Where L2's kernel text and its kvm modules are, from l2-init.sh's
        # 'ZSE2E-L2 text=.. modules=..' line: snapshots name functions with it.
        self.l2_text: int | None = None
        self.l2_modules: list[tuple[str, int, int]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        u = Untangler()
        for raw in iter(self.proc.stdout.readline, b""):
            for line in u.feed(raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", "")):
                self.q.put(line)
        for line in u.flush():
            self.q.put(line)
        self.q.put(None)

    def next(self, deadline: float) -> str | None:
        """Next line, None at EOF; raises TimeoutError past `deadline`, and
        L2Stuck (a TimeoutError) on L2's own soft-lockup report."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            line = self.q.get(timeout=left)
        except queue.Empty:
            raise TimeoutError from None
        if line is not None:
            self.lines.append(line)
            self.log.write(line + "\n")
            self.log.flush()
            if self.echo:
                print(f"  | {line}", flush=True)
            if L2_SOFT_LOCKUP_RE.match(line):
                self.stuck = line.strip()
                raise L2Stuck(line)
            self._watch_int3(line)
            if line.startswith("ZSE2E-L2 text="):
                self.l2_text, self.l2_modules = parse_l2_layout(line)
        return line

    def _watch_int3(self, line: str) -> None:
        """Raises L2Stuck when `line` is the Code: line (within 40 lines) of
        an int3 report of L2's own kernel whose trapped byte is not cc."""
        if L2_INT3_OOPS_RE.match(line):
            self._int3 = (line.strip(), len(self.lines))
            return
        m = L2_CODE_RE.match(line)
        if not (m and self._int3 and len(self.lines) - self._int3[1] <= 40):
            return
        byte = stale_int3_byte(m.group(1))
        if byte is None:
            return
        oops = re.sub(r"^\[\s*[\d.]+\] ", "", self._int3[0])
        self._found_stale_int3(f"{oops[:60]}; the byte before RIP is {byte}, not cc")
        raise L2Stuck(line, "nested host took a stale int3")

    def _found_stale_int3(self, proof: str) -> None:
        """Records bed_fault's fourth sign: stale_int3, and `stuck` for silent_host's line."""
        self.stale_int3 = f"{STALE_INT3} ({proof}: multi-threaded TCG ran stale code)"
        self.stuck, self.stuck_what = self.stale_int3, "trapped on a stale int3"

    def exit_code(self, wait_s: float = 5) -> int | None:
        """QEMU's exit status once it has ended (None if it is still running after `wait_s`)."""
        try:
            return self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None

    def snapshot(self, commands: tuple[str, ...] = ("info status", "info cpus", "info registers -a"),
                 timeout_s: float = 5) -> str:
        """What the L2 QEMU's human monitor says to `commands`, then to `info
        lapic N` for each CPU `info cpus` lists, for a nested host that went
        silent while its QEMU still runs: whether L2's CPUs are halted (idle,
        waiting) or running, and where (RIP), and what each local APIC holds
        (an interrupt left in IRR of a halted CPU with IF set is one the
        emulator never delivered; see tests/nested-host/bed-qemu). One
        string; the reason in one line when the monitor cannot be asked."""
        if self.monitor is None or self.proc.poll() is not None:
            return "no monitor (QEMU not running or started without one)"
        out = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as so:
                so.settimeout(timeout_s)
                so.connect(str(self.monitor))

                def until_prompt() -> str:
                    buf = b""
                    while not buf.rstrip().endswith(b"(qemu)"):
                        chunk = so.recv(65536)
                        if not chunk:
                            break
                        buf += chunk
                    return buf.decode("utf-8", "replace")

                until_prompt()  # the banner
                todo = list(commands)
                while todo:
                    c = todo.pop(0)
                    if c == "sleep 2":
                        time.sleep(2)
                        continue
                    so.sendall(c.encode() + b"\n")
                    text = until_prompt().replace("\r", "")
                    out.append(f"(qemu) {c}\n" + text.rsplit("(qemu)", 1)[0].split("\n", 1)[-1].rstrip())
                    if c == "info cpus":
                        cpus = re.findall(r"CPU #(\d+)", out[-1])
                        todo += [f"info lapic {n}" for n in cpus]
                        # Each CPU's stack (words that point into text name
                        # its callers), then the registers again 2 s later:
                        # a CPU whose RIP did not move is spinning in place.
                        stacks = [cmd for n in cpus for cmd in (f"cpu {n}", STACK_CMD)]
                        # The APICs and stacks again too: an interrupt that
                        # waits in both dumps was not just raised at the
                        # first, and a trap frame in both is a CPU stuck on
                        # one trap (int3_loop_candidates).
                        todo += stacks + ["sleep 2", "info registers -a"] + [f"info lapic {n}" for n in cpus] + stacks
        except OSError as ex:
            out.append(f"monitor {self.monitor}: {ex}")
        return "\n".join(out)

    def silent_host(self) -> str | None:
        """For a harness that waited in vain for L2's output: None if L2's
        QEMU has exited (its status says more); otherwise takes snapshot()
        before the QEMU is killed, writes it to the console log and returns
        'nested host silent, its QEMU running; <snapshot_summary()>' for the
        failure line ('nested host in a soft lockup (<its line>), ...' when
        next() stopped on L2Stuck)."""
        if self.exit_code(0) is not None:
            return None
        snap = self.snapshot()
        self.log.write("ZS-SNAPSHOT of the silent nested host:\n" + snap + "\n")
        if not self.stale_int3:
            for cpu, ip in int3_loop_candidates(snap, self.symbolize):
                # What memory holds where the CPU trapped: `x` reads through
                # that CPU's page tables, as the CPU itself would.
                mem = self.snapshot((f"cpu {cpu}", f"x /1bx 0x{ip - 1:x}"))
                self.log.write(f"ZS-INT3 cpu{cpu} trapped from {ip:x}:\n{mem}\n")
                m = re.search(rf"^0*{ip - 1:x}: 0x([0-9a-f]{{2}})$", mem, re.M)
                if m and m.group(1) != "cc":
                    where = self.symbolize(ip - 1) or f"{ip - 1:x}"
                    self._found_stale_int3(f"cpu{cpu} stuck in the int3 handler on a trap from {where}, where "
                                           f"memory holds {m.group(1)}, not cc, in both dumps 2 s apart")
                    break
        self.log.flush()
        what = f"nested host {self.stuck_what} ({self.stuck[:200]})" if self.stuck else "nested host silent"
        return f"{what}, its QEMU running; {snapshot_summary(snap, self.symbolize)}"

    def symbolize(self, addr: int) -> str | None:
        """'function+0xoff' for an address in L2's kernel text, '[module]+0xoff'
        in one of the modules l2-init.sh listed, else None (also before L2
        printed its layout, or without a symbol table)."""
        return symbolize(addr, self.l2_text, self.l2_modules, self.kallsyms)

    def how_ended(self) -> str:
        """How the L2 QEMU's guest ended (zstest.qemu.how_it_ended) once it
        exited 0: 'power-off', 'reset', 'triple fault' or 'unknown (..)'."""
        return how_it_ended(self.end_log) if self.end_log else "unknown (no QEMU log)"

    def exit_story(self) -> str:
        """'its QEMU exited with status N' and, for status 0, how L2 ended;
        with QEMU's abort line when it reported one. For failure lines."""
        rc = self.exit_code()
        if rc is None:
            return "its QEMU's status unknown"
        abort = self.abort_line(rc)
        ended = self.how_ended()
        if ended == "triple fault" and self.end_log:
            detail = triple_fault_detail(self.end_log)
            ended += f": {detail}" if detail else ""
            # The whole dump into the console log: the temporary dir goes.
            text = self.end_log.read_text(errors="replace")
            self.log.write("ZS-QEMU-LOG of the nested host's triple fault:\n"
                           + text[text.find("Triple fault"):] + "\n")
            self.log.flush()
        return (f"its QEMU exited with status {rc}" + (f" (L2 ended by {ended})" if rc == 0 else "")
                + (f": {abort}" if abort else ""))

    def l2_triple_fault(self) -> str | None:
        """'L2 triple fault: <detail>' when L2's QEMU exited 0 because L2's
        own CPU shut down (bed_fault's third sign), else None."""
        if self.exit_code(0) != 0 or self.how_ended() != "triple fault":
            return None
        detail = triple_fault_detail(self.end_log) if self.end_log else ""
        return f"L2 triple fault{': ' + detail if detail else ''}"

    def abort_line(self, rc: int | None) -> str | None:
        """The line by which the L2 QEMU reported its own abort, when it exited
        non-zero with one: proof that a failure happened outside every guest."""
        return l2_abort(self.lines, rc)


def parse_l2_layout(line: str) -> tuple[int | None, list[tuple[str, int, int]]]:
    """From l2-init.sh's 'ZSE2E-L2 text=ffffffff.. modules=kvm_amd@0xffffffffc0..:155648,..':
    where L2's kernel text starts and (name, base, size) of each module."""
    m = re.search(r"\btext=([0-9a-f]{16})\b", line)
    mods = [(n, int(b, 16), int(z)) for n, b, z in re.findall(r"(\w+)@0x([0-9a-f]+):(\d+)", line)]
    return (int(m.group(1), 16) if m else None), mods


@functools.lru_cache(maxsize=4)
def _kallsyms(path: str) -> tuple[list[int], list[str]]:
    offs, names = [], []
    try:
        with open(path) as f:
            for ln in f:
                parts = ln.split()
                if len(parts) >= 3:
                    offs.append(int(parts[0], 16))
                    names.append(parts[2])
    except (OSError, ValueError):
        return [], []
    order = sorted(range(len(offs)), key=offs.__getitem__)
    return [offs[i] for i in order], [names[i] for i in order]


def symbolize(addr: int, text: int | None, modules: list[tuple[str, int, int]], kallsyms: str | None) -> str | None:
    """'function+0xoff' when `addr` lies in the kernel text that starts at
    `text` (the symbol table `kallsyms` holds offsets from _text, see
    l2image.l2_kallsyms), '[module]+0xoff' inside one of `modules`."""
    for name, base, size in modules:
        if base <= addr < base + size:
            return f"[{name}]+0x{addr - base:x}"
    if text is None or not kallsyms:
        return None
    offs, names = _kallsyms(kallsyms)
    off = addr - text
    if not offs or off < 0:
        return None
    i = bisect.bisect_right(offs, off) - 1
    # Past 16 KiB into a "function" is past the text the table covers.
    return f"{names[i]}+0x{off - offs[i]:x}" if i >= 0 and off - offs[i] < 0x4000 else None


# Each CPU's stack in a snapshot: 1 KiB from RSP, deep enough to reach the
# trap frame under the int3 handler's own calls. `$esp` is the whole RSP in
# x86_64 HMP (it has no `$rsp`).
STACK_CMD = "x /128xg $esp"


def snapshot_stacks(snap: str) -> list[dict[int, list[int]]]:
    """The stack words of each CPU in each pass of a snapshot (the first
    dump, and the one 2 s later), from its 'cpu N' + STACK_CMD sections."""
    passes: list[dict[int, list[int]]] = []
    secs = _sections(snap)
    for (c, _), (c2, out) in zip(secs, secs[1:]):
        if re.fullmatch(r"cpu \d+", c) and c2.startswith("x /") and c2.endswith("$esp"):
            n = int(c.split()[1])
            if not passes or n in passes[-1]:
                passes.append({})
            passes[-1][n] = [int(w, 16) for w in re.findall(r"\b0x([0-9a-f]{16})\b", out)]
    return passes


def kernel_trap_frames(words: list[int]) -> list[tuple[int, int]]:
    """(index, RIP) of each hardware trap frame (RIP, CS=0x10, RFLAGS, RSP,
    SS=0x18: what an x86_64 CPU pushes on an exception or interrupt taken
    in Linux's kernel mode) among a CPU's stack words, innermost first."""
    out = []
    for i in range(len(words) - 4):
        ip, cs, fl, sp, ss = words[i:i + 5]
        if (ip >> 47 == 0x1ffff and cs == 0x10 and ss == 0x18 and fl & 2 and fl < 1 << 22
                and sp >> 47 == 0x1ffff):
            out.append((i, ip))
    return out


def int3_loop_candidates(snap: str, symbolize) -> list[tuple[int, int]]:
    """(cpu, trap RIP) for each CPU that a snapshot shows handling an int3
    in both passes, on a trap frame with the same RIP both times: a CPU
    taking one int3 again and again. Linux's kprobes handler does that on
    purpose when the int3 is gone from memory ("the breakpoint instruction
    was removed right after we hit it": it backs RIP up and returns),
    which on a correct CPU runs the new instruction once; a CPU that still
    sees the int3 traps on it forever, with interrupts off. Handling an
    int3 means: the CPU's RIP, or a return address above the frame on its
    stack, is in a function named for int3 (asm_exc_int3, exc_int3,
    poke_int3_handler, kprobe_int3_handler). A CPU caught at the int3
    itself in one dump (RIP = the trap address - 1: the handler had backed
    RIP up over it, or the trap was not yet taken) and handling a trap
    from just after it in the other is the same loop (seen in `make demo`,
    2026-12-03: __schedule+0x1bc, then exc_int3 on a frame of
    __schedule+0x1bd); a CPU at one address in both dumps without a
    handler in either is not. The caller reads the byte before that RIP
    (Console.silent_host)."""
    passes = snapshot_stacks(snap)
    dumps = [out for c, out in _sections(snap) if c == "info registers -a"]
    if len(passes) < 2 or len(dumps) < 2 or not symbolize:
        return []
    rips = [[int(m.group(1), 16) for m in re.finditer(r"^RIP=([0-9a-f]+) ", d, re.M)] for d in dumps[:2]]

    def int3_frames(words: list[int], rip: int) -> set[int]:
        named = "int3" in (symbolize(rip) or "")
        return {ip for k, ip in kernel_trap_frames(words)
                if named or any("int3" in (symbolize(w) or "") for w in words[:k])}

    out = []
    for cpu in sorted(set(passes[0]) & set(passes[1])):
        if cpu >= min(len(rips[0]), len(rips[1])):
            continue
        h0 = int3_frames(passes[0][cpu], rips[0][cpu])
        h1 = int3_frames(passes[1][cpu], rips[1][cpu])
        same = (h0 & h1) or ({rips[0][cpu] + 1} & h1) | ({rips[1][cpu] + 1} & h0)
        if same:
            out.append((cpu, min(same)))
    return out


def _sections(snap: str) -> list[tuple[str, str]]:
    """(command, its output) for each '(qemu) command' of a snapshot."""
    parts = re.split(r"^\(qemu\) (.*)$", snap, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def snapshot_summary(snap: str, symbolize=None) -> str:
    """One line from Console.snapshot(): 'VM status: running; cpu0 RIP=..
    HLT=1 IF=1 IRR=236 ISR=- PPR=0x00; ..'. A halted CPU is idle (L2 waits
    for something), HLT=0 is L2 running code there. A CPU with IF=1 whose
    IRR holds a vector above its PPR, after the harness waited minutes for
    any output, has an interrupt the emulator did not deliver: the line
    then ends in 'UNDELIVERED INTERRUPT cpuN'. The snapshot's first line
    when it has none of this. With `symbolize` (Console.symbolize), each
    RIP is followed by its function and each CPU by the code addresses on
    its stack; with a second register dump, whether each RIP moved."""

    def vectors(apic: str, name: str) -> list[int]:
        line = re.search(rf"^{name}\t? (.*)$", apic, re.M)
        return [int(x) for x in re.findall(r"(\d+)(?:\(level\))?", line.group(1))] if line else []

    def apic_state(apic: str) -> tuple[list[int], list[int], int]:
        ppr_m = re.search(r"PPR 0x([0-9a-f]+)", apic)
        return vectors(apic, "IRR"), vectors(apic, "ISR"), int(ppr_m.group(1), 16) if ppr_m else 0

    def waiting(apic: str, flag_if: int) -> bool:
        # Can take an interrupt (IF=1) and holds one above its priority.
        irr, _, ppr = apic_state(apic)
        return bool(flag_if) and any(v >> 4 > ppr >> 4 for v in irr)

    def flag_if(m: re.Match) -> int:
        return (int(m.group(2), 16) >> 9) & 1

    status = [ln.strip() for ln in snap.splitlines() if ln.startswith("VM status")]
    secs = _sections(snap)
    dumps = [out for c, out in secs if c == "info registers -a"] or [snap]
    rip_re = re.compile(r"^RIP=([0-9a-f]+) RFL=([0-9a-f]+) .*HLT=([01])", re.M)
    regs = list(rip_re.finditer(dumps[0]))
    later = list(rip_re.finditer(dumps[1])) if len(dumps) > 1 else []
    passes = snapshot_stacks(snap)
    stacks = passes[0] if passes else {}
    apics: dict[int, str] = {}
    apics_later: dict[int, str] = {}
    for m in re.finditer(r"^dumping local APIC state for CPU\s*(\d+)(.*?)(?=^dumping local APIC|^\(qemu\)|\Z)",
                         snap, re.M | re.S):
        (apics_later if int(m.group(1)) in apics else apics)[int(m.group(1))] = m.group(2)

    cpus, lost = [], []
    for i, m in enumerate(regs):
        where = symbolize(int(m.group(1), 16)) if symbolize else None
        part = f"cpu{i} RIP={m.group(1)}" + (f" ({where})" if where else "") + f" HLT={m.group(3)} IF={flag_if(m)}"
        if i < len(later):
            rip2 = later[i].group(1)
            part += " same RIP 2 s later" if rip2 == m.group(1) else f" RIP={rip2} 2 s later"
        apic = apics.get(i)
        if apic is not None:
            irr, isr, ppr = apic_state(apic)
            part += (f" IRR={','.join(map(str, irr)) or '-'} ISR={','.join(map(str, isr)) or '-'}"
                     f" PPR=0x{ppr:02x}")
            # With a second dump 2 s later, only a CPU that waited in both
            # counts: one dump can catch a timer interrupt just raised.
            if waiting(apic, flag_if(m)) and (i not in apics_later or
                                              (i < len(later) and waiting(apics_later[i], flag_if(later[i])))):
                lost.append(f"cpu{i}")
        if symbolize and stacks.get(i):
            # Words on the stack that point into code, innermost first: the
            # callers, and stale return addresses among them; one per function.
            names: dict[str, str] = {}
            for w in stacks[i]:
                n = symbolize(w)
                if n:
                    names.setdefault(n.split("+")[0], n)
            if names:
                part += " stack: " + " < ".join(list(names.values())[:6])
        cpus.append(part)
    out = "; ".join(status + cpus) or (snap.splitlines() or ["empty snapshot"])[0]
    return out + (f"; UNDELIVERED INTERRUPT {','.join(lost)}" if lost else "")


def stuck_between_guests(silent: str | None, guest_in_flight: bool) -> str | None:
    """The nested host stuck (`silent`, Console.silent_host's line) while
    no guest ran: the harness had seen every begun scenario end (its VMM
    exited) and no next one begin, so no L3 existed for a CPU to be in, or
    None when that is not proven. The proof asks for L2's whole state:
    every CPU sampled twice (`2 s later`) with its APIC dump (`IRR=`); a
    snapshot missing either may have caught a CPU in a guest, and is not
    one. Seen 2026-12-03 (`make demo`, after the first scenario ended): L2's
    CPU 1 looping in its int3 handler with IF=0 and IPIs 236 and 251
    pending, while CPU 0 waited for it in text_poke_bp_batch() to enable a
    KVM trace event; an emulator fault of the bed, as in bed_fault."""
    if not silent or guest_in_flight:
        return None
    cpus = re.split(r"(?:^|; )(?=cpu\d+ )", silent.split("its QEMU running; ", 1)[-1])
    cpus = [c for c in cpus if re.match(r"cpu\d+ ", c)]
    if not cpus or not all("2 s later" in c and "IRR=" in c for c in cpus):
        return None
    return f"nested host stuck between guests: {silent}"


def bed_fault(silent: str | None, abort: str | None, triple: str | None = None,
              stale: str | None = None, guest_in_flight: bool = True) -> str | None:
    """Why a failed L2 boot is provably the test bed's own fault, outside
    every guest, or None when it may not be.

    Five signs qualify, all about the L2 QEMU (TCG) and the nested host's
    own CPU, never about what runs in a guest: its own abort line with a
    non-zero exit (`abort`, from Console.abort_line); a nested host stuck
    or silent whose snapshot (Console.silent_host) shows an UNDELIVERED
    INTERRUPT: a CPU with IF=1 holding a vector above its PPR in IRR for
    minutes, a state no correct x86 CPU stays in whatever software it
    runs; or a triple fault of L2 itself (`triple`, from
    Console.l2_triple_fault). A guest cannot cause the last: KVM intercepts
    a guest's shutdown and turns it into a #VMEXIT, and only Debian's L2
    kernel and KVM run at L2's CPL 0; the one seen (2026-11-27) was the
    emulator's, a page fault on L2's own IDT right after a #VMEXIT, at the
    instruction after VMRUN. Fourth, an int3 that L2's memory no longer
    held (`stale`, Console.stale_int3): L2's kernel reported the trap and
    its Code: line shows another byte there (L2_INT3_OOPS_RE), or a
    silent L2's CPU was handling an int3 in both dumps 2 s apart on the
    same trap frame, and the monitor read another byte than cc where it
    trapped (int3_loop_candidates): the CPU ran code that was no longer
    there. A guest that crashed, hung or printed a bad verdict is none of
    these. Fifth, L2 stuck (`silent`) while no guest ran at all
    (stuck_between_guests; `guest_in_flight`: a scenario had begun and not
    ended, the default for a harness that cannot tell): the scenarios that
    ended keep their results and only those not begun run again. Harnesses boot L2 again only for
    these, count it and report each one; they never retry a guest."""
    if abort:
        return abort
    if silent and "UNDELIVERED INTERRUPT" in silent:
        return silent
    return triple or stale or stuck_between_guests(silent, guest_in_flight) or None


def rerun_after_bed_faults(todo: list, boot, retries: list[str], bound: int, crashed, who: str) -> tuple[list, str | None]:
    """Runs `todo` (scenarios with a `.name`) through `boot(todo)` -> (results,
    fatal, fault) until every one has a result or the boot failed for a reason
    other than a test-bed fault (`fault`, from bed_fault). Results carry `.sc`
    and `.rc` (None: the scenario began but did not end).

    After a test-bed fault, L2 boots again for the scenarios not yet ended,
    the one it stopped in included, unless `crashed(result)` says that guest
    printed a kernel bug line: a guest crash is never retried. At most `bound`
    retries; each reason goes to `retries` and is printed under `who`, and as
    `RETRY <who>/<scenario>: <fault>` for make test's closing count. The one
    retry rule of every nested harness (e2e, launch and what runs on it)."""
    results: list = []
    while True:
        res, fatal, fault = boot(todo)
        finished = [r for r in res if r.rc is not None]
        left = [s for s in todo if s.name not in {r.sc.name for r in finished}]
        if (fault is None or any(crashed(r) for r in res if r.rc is None)
                or not left or len(retries) >= bound):
            return results + res, fatal
        results += finished
        retries.append(f"{fault} ({fatal})")
        print(f"{who}: the test bed failed outside every guest ({fault[:200]}); booting L2 again for "
              f"{len(left)} scenario(s) (retry {len(retries)} of at most {bound})", flush=True)
        # The one retry line format make test counts and lists (tests/lib/make_test.py).
        print(f"RETRY {who}/{'-'.join(str(left[0].name).split())}: {' '.join(fault.split())[:300]}", flush=True)
        todo = left


# How a QEMU run with -no-reboot ended when it exited 0. QEMU prints nothing
# of it, and a guest that powered off, one whose kernel reset the machine
# (panic=-1 after a panic, a reboot) and a triple fault all exit 0. Two
# cheap logs to one small file tell them apart: `-d cpu_reset` writes
# "Triple fault" (and a register dump at QEMU's own start-up resets), and
# the trace event qemu_system_shutdown_request fires for a power-off only:
# under -no-reboot a reset becomes a shutdown without it. Both the machine's
# QEMU 7.2 and the bed's 10.0 have the event. The builder spells the options
# (a spec's qemu.end_log, options::vmm_cmd's END_LOG_WHAT).
def end_log_path(log: Path) -> Path:
    """Where `boot` expects the QEMU log of a boot whose console goes to LOG:
    the command's qemu.end_log (kernel_command's end_log)."""
    log = Path(log)
    return log.with_name(log.name + ".qemu.log")


def how_it_ended(path: Path, rebooted: bool = False) -> str:
    """'power-off', 'triple fault', 'reset' (the guest asked for a reset:
    a kernel panic under panic=-1, or a reboot; no triple fault) or
    'unknown (...)' from the log a spec's qemu.end_log made. Meaningful
    only for a QEMU that exited 0. REBOOTED: the guest rebooted in place on
    purpose (boot's REBOOTS), where QEMU ran without -no-reboot, so every
    reset and triple fault rebooted and only a power-off could end it; a
    kernel's reboot may triple-fault on the way (x86's reboot falls through
    to a triple fault while TCG has not yet served the keyboard controller's
    reset), and a reset nobody announced was stopped by boot itself."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return f"unknown (no QEMU log: {e.strerror})"
    if rebooted:
        return "power-off" if "qemu_system_shutdown_request" in text else "unknown (no power-off)"
    if "Triple fault" in text:
        return "triple fault"
    if "qemu_system_shutdown_request" in text:
        return "power-off"
    if "CPU Reset" not in text:
        return "unknown (QEMU log empty: the options did not take)"
    return "reset"


def triple_fault_detail(path: Path) -> str:
    """From a log of the bed QEMU (bed-qemu/patches/0002): 'exception 0xd
    (error code 0x42) at RIP=... CR2=...'; '' when the log has none."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    m = re.search(r"^Triple fault: (exception \S+ \(error code \S+\))", text, re.M)
    if not m:
        return ""
    tail = text[m.end():]
    regs = [f"{k}={v}" for k in ("RIP", "EIP", "CR2", "CR3") for v in re.findall(rf"\b{k}=([0-9a-f]+)", tail)[:1]]
    return " ".join([m.group(1), "at", *regs])


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process group (QEMU and its helpers) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def l2_abort(lines: list[str], rc: int | None) -> str | None:
    """See Console.abort_line."""
    if rc is None or rc == 0:
        return None
    return next((ln for ln in reversed(lines) if L2_ABORT_RE.match(ln)), None)


@functools.lru_cache(maxsize=None)
def bed_qemu() -> Path:
    """The QEMU that runs L2: the pinned QEMU 10.0.2 built from its source
    tarball with the fix in tests/nested-host/bed-qemu/patches (without it,
    a race in TCG's VMRUN loses L2's interrupts and L2 goes silent; the
    README there says why not 10.2). Built once per input hash into the
    cache by bed-qemu/build.sh, whose progress goes to stderr."""
    script = l2image.REPO / "tests" / "nested-host" / "bed-qemu" / "build.sh"
    r = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise l2image.BuildError(f"{script} failed (exit {r.returncode}); its last lines above say why")
    return Path(lines[-1]) / "qemu-system-x86_64"


def qemu_binary() -> tuple[str, list[str]]:
    """The QEMU for L2 (bed_qemu(): the pinned 10.0.2, see
    tests/nested-host/versions.lock for why not the machine's 7.2, with one
    upstream fix) and the pinned package's data dirs;
    ZSE2E_L2_QEMU=/path/qemu-system-x86_64 with ZSE2E_L2_QEMU_DATA=dir:dir
    overrides."""
    if os.environ.get("ZSE2E_L2_QEMU"):
        return os.environ["ZSE2E_L2_QEMU"], [d for d in os.environ.get("ZSE2E_L2_QEMU_DATA", "").split(":") if d]
    _, dirs = l2image.pinned_qemu()
    return str(bed_qemu()), [str(d) for d in dirs]


def l2_command(manifest: dict, initrd: Path, l2_mem: int, hugepages: int, smp: int, append: str = "",
               accel: str = L2_ACCEL, prealloc: bool | None = None, disks: list[dict] | None = None,
               monitor: Path | None = None, end_log: Path | None = None,
               zerostart: Path | str | None = None) -> list[str]:
    """The QEMU command line that boots L2, from the one builder (zstest.vmmargv,
    asking ZEROSTART or the one vmmargv.zerostart_binary finds): `disks`: more
    virtio disks (spec dicts, options::vmm_cmd::Disk), e.g. the microvm
    rootfs; `monitor`: a unix socket for its human monitor (see
    Console.snapshot), else none; `end_log`: QEMU's log of how L2 ended
    (Console.how_ended); `prealloc`: touch L2's RAM up front (default
    L2_PREALLOC); `accel` as ZSE2E_L2_ACCEL spells it."""
    qemu, data = qemu_binary()
    # init_on_alloc=0 in L2 (the test bed, not the system under test): Debian's
    # default init_on_alloc=1 made reserving 4 GiB of hugepages at boot take 11 s under TCG.
    # loglevel=5 after quiet: L2's kernel warnings reach the console too (~9
    # lines at boot), so that an oops of the nested host's own kernel shows
    # its "Oops:" header and registers (KERN_DEFAULT, hidden by quiet alone).
    cmdline = (f"console=ttyS0 panic=-1 quiet loglevel=5 init_on_alloc=0 hugepages={hugepages} "
               + (append + " " if append else "") + os.environ.get("ZSE2E_L2_APPEND", ""))
    # No -machine before: QEMU's default, pc.
    opts = {"data_dirs": data, "machine": "pc", **vmmargv.accel_options(accel), "cpu": L2_CPU, "no_reboot": True,
            "monitor": {"unix": str(monitor)} if monitor else "none"}
    if end_log:
        opts["end_log"] = str(end_log)
    spec = {"vmm": "qemu", "binary": qemu, "cpus": smp,
            "memory": {"backing": "anonymous", "size_mib": l2_mem,
                       "prealloc": L2_PREALLOC if prealloc is None else prealloc},
            "kernel": manifest["vmlinuz"], "initrd": str(initrd), "cmdline": cmdline, "serial": "stdio",
            "qemu": opts}
    if disks:
        spec["disks"] = disks
    return vmmargv.build(spec, zerostart).argv


def l2_memory(manifest: dict, guest_mib: int) -> tuple[int, int]:
    """L2's RAM (MiB) and 2M hugepages for guests (or a pool) of `guest_mib`:
    the guest memory, L2's own 1.5 GiB and room for its initramfs twice."""
    init_mib = Path(manifest["initramfs"]).stat().st_size // MIB
    return guest_mib + 32 + 1536 + 2 * init_mib, guest_mib // 2 + 16


@contextlib.contextmanager
def boot_l2(manifest: dict, extra: l2image.Cpio, l2_mem: int, hugepages: int, *, log: Path | TextIO,
            smp: int = 2, append: str = "", echo: bool = False, accel: str = L2_ACCEL,
            prealloc: bool | None = None, disks: list[dict] | None = None,
            zerostart: Path | str | None = None) -> Iterator[Console]:
    """Boots L2 with `extra` appended to its initramfs and yields its Console;
    QEMU is killed and the temporary initrd removed on the way out. `disks`,
    `prealloc`, `accel`, `zerostart`: l2_command's."""
    tmp = Path(tempfile.mkdtemp(prefix="zstest-l2-"))
    try:
        initrd = tmp / "initrd.cpio"
        shutil.copyfile(manifest["initramfs"], initrd)
        with open(initrd, "ab") as f:
            extra.write(f)
        mon = tmp / "monitor.sock"
        end_log = tmp / "l2-qemu.log"  # how L2 ends when its QEMU exits 0 (Console.how_ended)
        cmd = l2_command(manifest, initrd, l2_mem, hugepages, smp, append, accel, prealloc, disks, mon, end_log,
                         zerostart)
        if isinstance(log, Path):
            log.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        con = None
        try:
            con = Console(proc, log, echo, mon, end_log, manifest.get("l2_kallsyms"))
            yield con
        finally:
            kill(proc)  # whatever happened, L2 does not outlive the harness
            if con and con.owns_log:
                con.log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- one-shot boots
# The kernel tests (tests/kernel) and the firmware tests (tests/firmware/qemu)
# boot a guest that powers itself off, and judge its log afterwards: `boot`
# runs such a QEMU to its end (or its deadline) with the same reader and kill
# as boot_l2. Their QEMU is the machine's (apt's qemu-system-x86), as before.
KERNEL_QEMU = os.environ.get("ZS_KERNEL_QEMU", "qemu-system-x86_64")


@dataclasses.dataclass
class Boot:
    """The outcome of one `boot`: QEMU's exit status (None when it was killed
    at its deadline), the wall time, the console lines and the log."""
    rc: int | None
    seconds: float
    lines: list[str]
    log: Path
    timeout: float
    end_log: Path | None = None
    # Set when the guest reset without announcing it (see boot's REBOOTS):
    # QEMU was stopped there, so the crashed kernel boots no further.
    unrequested_reset: str | None = None
    # Reboots in place the guest announced (boot's REBOOTS).
    rebooted: int = 0

    @property
    def ended(self) -> str:
        """How QEMU's guest ended (see how_it_ended) when QEMU exited 0."""
        return how_it_ended(self.end_log, self.rebooted > 0) if self.end_log else "unknown (no QEMU log)"

    @property
    def timed_out(self) -> bool:
        return self.rc is None

    def problem(self) -> str | None:
        """None when QEMU ran to its end and exited 0, else one line why.
        A guest panic still exits 0 (panic=-1 with -no-reboot), which is why
        callers also require the init's last line; any other status is QEMU
        failing (bad option, missing image, a TCG abort, a signal): the log
        then holds no boot to judge."""
        if self.unrequested_reset:
            return f"{self.unrequested_reset}; QEMU stopped there, the console is kept: {self.log}"
        if self.rc is None:
            return f"QEMU timed out after {self.timeout:g}s: {self.log}"
        if self.rc != 0:
            last = next((ln for ln in reversed(self.lines) if ln.strip()), "")
            return f"QEMU exited with status {self.rc}: {last} ({self.log})"
        return None


# A kernel's first console line, once per boot of the machine; and the line
# a guest prints right before it reboots on purpose (tests/kernel/init.sh).
KERNEL_BANNER_RE = re.compile(r"(^|\] )Linux version \d")
REBOOT_ANNOUNCED = "ZSREBOOT"


def boot(cmd: list[str], *, log: Path, timeout: float, echo: bool = False, reboots: int = 0) -> Boot:
    """Runs CMD (a QEMU whose guest powers off) with stdout and stderr read
    line by line into LOG, until it exits or TIMEOUT seconds pass; the QEMU
    process group is killed on the way out however this returns. CMD has
    QEMU log how it ended to end_log_path(LOG) (its spec's qemu.end_log, as
    kernel_command's end_log): Boot.ended.

    REBOOTS > 0 is for a CMD without -no-reboot whose guest reboots in place
    on purpose, up to REBOOTS times, each announced by a REBOOT_ANNOUNCED
    line: a kernel banner that no such line preceded is a reset nobody asked
    for (a panic under panic=-1, a triple fault), and QEMU is killed right
    there, so that a crashed kernel is never booted again."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    end_log = end_log_path(log)
    end_log.unlink(missing_ok=True)
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as e:  # no such QEMU binary: the same shape as a QEMU that exits at once
        log.write_text(f"{cmd[0]}: {e.strerror}\n")
        return Boot(127, 0.0, [f"{cmd[0]}: {e.strerror}"], log, timeout, end_log)
    con = Console(proc, log, echo)
    rc, eof, unrequested = None, False, None
    banners, announced = 0, 0
    try:
        while True:
            try:
                line = con.next(deadline)
            except TimeoutError:
                break
            if line is None:
                eof = True
                rc = con.exit_code(max(deadline - time.monotonic(), 0.1))
                break
            if line.startswith(REBOOT_ANNOUNCED):
                announced = min(announced + 1, reboots)
            elif KERNEL_BANNER_RE.search(line):
                banners += 1
                if banners > 1 + announced:
                    unrequested = f"the guest reset without announcing it (boot {banners}, {announced} reboot(s) announced)"
                    break
    finally:
        kill(proc)
        # The reader thread sees EOF once the group is gone: let it finish
        # before the pipe is closed.
        with contextlib.suppress(queue.Empty):
            while not eof and con.q.get(timeout=5) is not None:
                pass
        proc.stdout.close()
        con.log.close()
    return Boot(rc, time.monotonic() - t0, con.lines, log, timeout, end_log, unrequested, announced)


def tcg_thread() -> str:
    """TCG's thread mode for the kernel boots: ZS_TCG_THREAD (single|multi),
    default multi. The correctness suites set single (tests/kernel/run.py
    says why); timings keep multi."""
    return os.environ.get("ZS_TCG_THREAD", "multi")


def kernel_command(image: Path | str, append: str, mem_mib: int, extra: list[str] = (), *,
                   thread: str | None = None, smp: int = 2, cpu: str = "max", reboot: bool = False,
                   end_log: Path | None = None, spec: dict | None = None) -> list[str]:
    """The QEMU TCG direct-kernel boot of the guest kernel tests, from the
    one builder (zstest.vmmargv): serial on stdout, no devices but those of
    SPEC and EXTRA, `panic=-1` and -no-reboot so a panic ends QEMU instead
    of rebooting it. REBOOT leaves -no-reboot out, for a guest that reboots
    in place on purpose: run it with boot's REBOOTS, which stops QEMU at any
    reset the guest did not announce. END_LOG: QEMU's log of how the guest
    ended (boot reads end_log_path(its log)). SPEC: more of the spec
    (initrd, firmware, disks; its "qemu" dict merged into the QEMU options,
    e.g. machine, fw_cfg, debugcon); EXTRA: arguments appended as given."""
    # Before the builder: no -machine (QEMU's default, pc), -m in MiB.
    opts = {"machine": "pc", "accel": "tcg", "tcg_thread": thread or tcg_thread(), "cpu": cpu,
            "display": "nographic", "no_reboot": not reboot}
    if end_log:
        opts["end_log"] = str(end_log)
    more = dict(spec or {})
    opts.update(more.pop("qemu", {}))
    full = {"vmm": "qemu", "binary": KERNEL_QEMU, "cpus": smp, "memory": {"backing": "anonymous", "size_mib": mem_mib},
            "kernel": str(image), "cmdline": f"{KERNEL_TEST_ARGS} {append}", "serial": "stdio", **more,
            "qemu": opts}
    if extra:
        full["extra_args"] = list(extra)
    return vmmargv.build(full).argv
