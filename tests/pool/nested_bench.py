#!/usr/bin/env python3
"""Pool vs prefault vs no prefault, launch -> first vCPU instruction, in the nested host.

Why: natively (tests/pool/vm-bench.sh) the VM part runs on this machine's
software KVM; the nested test host (tests/nested-host) has a real kvm-amd.
This boots L2 once with tests/pool/nested-bench-l2.sh and the probe guest,
which runs, for each size, interleaved repetitions of four ways to get guest
RAM ready: a lease from `zerostart pool` (prezero=pool), prefault with
MADV_POPULATE_WRITE, prefault with the NT-store engine, and no prefault.
Every boot's zerostart timeline, the probe's verdict (it reads every
hinted byte) and the guest's whole console are collected; any boot that
fails, whose console has a kernel bug line (zstest.qemu.L3_KERNEL_BUG_RE),
or whose probe does not PASS with a valid hint and zero non-zero bytes fails
the run (exit 1). No boot is ever repeated: a crash of the patched kernel is
the run failing, its console kept in the report and the console log.

  nested_bench.py [--sizes 1,4,8] [--reps 3] [--linux 4 --linux-reps 2]
                  [--report target/pool-nested/report.json]

--linux GIB adds, for that size, rounds of the same four methods booting L3
Linux with tests/guest-init/zsinit (which checks memory zero; the patched
kernel when built), then one more probe boot from the pool region the Linux
guest used.

Writes the report (every sample and the medians) and prints the table.
Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

from zstest import l2image as build
from zstest import timeline as tlschema
from zstest import vmmargv
from zstest.qemu import L2_BOOT_TIMEOUT_S, Console, boot_l2, kernel_bug_lines, l2_memory

HERE = Path(__file__).resolve().parent

REPO = build.REPO
OUT = REPO / "target" / "pool-nested"
METHODS = ["pool", "populate", "nt", "off"]
METHOD_TITLE = {
    "pool": "pool (`prezero=pool`)",
    "populate": "`prefault=on,prefault_method=populate`",
    "nt": "`prefault=on,prefault_method=nt`",
    "off": "`prefault=off`",
}
PHASES = ["memory_ready", "first_kvm_run", "kernel_started", "init_started", "exit"]
# Linux has no kernel_started marker; its init_started is zsinit's first instruction.
LINUX_PHASES = ["memory_ready", "first_kvm_run", "init_started", "test_done", "exit"]
MIB = 1 << 20


# The zerostart run of each boot of nested-bench-l2.sh, built here by the one
# builder (options::vmm_cmd through zstest.vmmargv) and delivered as
# /zs/nested-bench.cmds: `guest|size_gib|memory|command`, the command
# shell-quoted; the script looks its line up and runs it with
# `eval "set -- $cmd"`, spelling no zerostart flag itself.
L2_CMDS = "zs/nested-bench.cmds"
# The script's paths (its ser=, tl=): the guest console and the timeline it reads back.
L2_SERIAL = "/tmp/guest.serial"
L2_TIMELINE = "/tmp/timeline.json"
L2_PROBE = "/zs/probe.bzImage"
# zerostart run's --memory beyond size= per way to get RAM ready (the
# script's methods; pool_after_linux and the leak check lease from the pool).
MEMORY = {
    "pool": f"hugepages=on,prezero=pool:{vmmargv.L2_POOL_SOCKET}",
    "populate": "hugepages=on,hugepage_size=2M,prefault=on,prefault_method=populate",
    "nt": "hugepages=on,hugepage_size=2M,prefault=on,prefault_method=nt",
    "off": "hugepages=on,hugepage_size=2M,prefault=off",
}
# As tests/nested-host/scenario.sh boots it (oops=panic: a crash ends the
# guest at once), but loglevel=5 instead of quiet: a WARNING (KERN_WARNING)
# reaches the console, where the host's bug-line judge sees it.
LINUX_CMDLINE = ("console=ttyS0 reboot=k panic=-1 oops=panic loglevel=5 hugepages=128 zsinit.check_mib=64 "
                 "zsinit.populate_mib=256")


def boot_spec(guest: str, size_gib: int, memory: str, kernel: str) -> dict:
    """The zerostart run spec of one boot: GUEST probe (the probe bzImage) or
    linux (/zs/kernels/KERNEL with zsinit), SIZE_GIB of RAM got ready the
    way MEMORY (a MEMORY key) says."""
    spec = {"vmm": "zerostart-run", "binary": vmmargv.L2_ZEROSTART, "kernel": L2_PROBE,
            "memory": vmmargv.zerostart_memory(f"size={size_gib}G,{MEMORY[memory]}"),
            "serial": {"file": L2_SERIAL}, "timeline": L2_TIMELINE}
    if guest == "linux":
        spec.update(kernel=f"/zs/kernels/{kernel}", initrd=vmmargv.L2_INITRAMFS, cmdline=LINUX_CMDLINE)
    return spec


def command_lines(sizes: list[int], linux: int, leak: int, kernel: str,
                  zerostart: Path | str | None = None) -> list[str]:
    """The lines of L2_CMDS: every (guest, size, memory) the script may boot:
    the probe at each size and at 1 GiB (the warm-up), Linux at the --linux
    and --leak-check sizes."""
    probe_sizes = sorted({1, *sizes, *([leak] if leak else [])})
    linux_sizes = sorted({g for g in (linux, leak) if g})
    out = []
    for guest, gs in (("probe", probe_sizes), ("linux", linux_sizes)):
        for g in gs:
            for m in MEMORY:
                cmd = vmmargv.build(boot_spec(guest, g, m, kernel), zerostart).shell()
                out.append("|".join([guest, str(g), m, cmd]))
    return out


def parse_sample(line: str) -> dict:
    head, _, verdict = line.partition(" verdict=")
    d = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", head))
    return {"size_gib": int(d["size_gib"]), "method": d["method"], "rep": int(d["rep"]),
            "guest": d.get("guest", "probe"), "rc": int(d["rc"]), "wall_ms_in_l2": int(d["wall_ms"]),
            "verdict": verdict.strip()}


def kernel_bugs(s: dict) -> list[str]:
    """The guest console's kernel bug lines (zstest.qemu.L3_KERNEL_BUG_RE), each
    a failure that names the line: a crash, oops or warning of the kernel under
    test fails its boot whatever its verdict, and is never retried."""
    return [f"L3 kernel bug line: {ln.strip()[:300]}" for ln in kernel_bug_lines(s.get("l3", []))
            if not ln.startswith(("ZSINIT:", "ZSPROBE:"))]


def judge(s: dict, patched: bool) -> list[str]:
    """Why a sample fails: the boot must work, its guest console must hold no
    kernel bug line and the guest must find only zero bytes."""
    if s["method"] == "leak_probe":
        return kernel_bugs(s) + judge_leak(s)
    f = kernel_bugs(s)
    if s["rc"] != 0:
        f.append(f"zerostart exited {s['rc']}")
    v = s["verdict"]
    linux = s["guest"] == "linux"
    if not v.startswith("ZSINIT: PASS" if linux else "ZSPROBE: PASS"):
        f.append(f"guest verdict: {v or 'none'}")
    kv = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", v))
    if kv.get("hint") != "valid":
        f.append(f"expected a valid hint, the guest saw hint={kv.get('hint')}")
    if kv.get("nonzero_bytes") != "0":
        f.append(f"non-zero bytes: {kv.get('nonzero_bytes')}")
    checked = int(kv.get("zero_checked_bytes" if linux else "zero_bytes", "0"))
    s["zero_bytes_checked"] = checked
    if linux:
        # zsinit checks 64 MiB of anonymous memory and its hugetlb pool, not all RAM.
        if checked == 0:
            f.append("zsinit checked no memory")
        s["kernel_pages_skipped"] = int(kv.get("kernel_pages_skipped", "-1"))
        if patched and s["kernel_pages_skipped"] <= 0:
            f.append("the patched kernel skipped no clears despite a valid hint")
    elif checked < s["size_gib"] * 1024 * MIB // 2:
        f.append(f"probe checked only {checked} bytes")
    tl = s.get("timeline") or {}
    f += [f"timeline JSON: {p}" for p in tl.get("schema", [])]
    missing = [p for p in (LINUX_PHASES if linux else PHASES) if p not in tl.get("t_ms", {})]
    if missing:
        f.append(f"timeline lacks {missing}")
    want = "pool_lease" if s["method"].startswith(("pool", "leak")) else None
    got = tl.get("prezero_method")
    if want and got != want:
        f.append(f"prezero.method {got}, expected {want}")
    if not want and got == "pool_lease":
        f.append("a non-pool boot leased from the pool")
    return f


def judge_leak(s: dict) -> list[str]:
    """The leak check: from a pool that skipped zeroing, the probe MUST see the last guest's bytes."""
    kv = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", s["verdict"]))
    s["zero_bytes_checked"] = int(kv.get("zero_bytes", "0"))
    if not s["verdict"].startswith("ZSPROBE: FAIL") or int(kv.get("nonzero_bytes", "0")) <= 0:
        return [f"leak check: a region whose scrub skipped the zeroing was not caught: {s['verdict'] or 'no verdict'}"]
    return []


def drive(con: Console, deadline: float, patched: bool) -> tuple[list[dict], list[dict], str | None]:
    samples: list[dict] = []
    want = None  # from ZSPOOL-END: how many boots L2 ran
    pools: list[dict] = []
    pending_tl: dict | None = None
    pending_l3: list[str] = []  # the L3| lines of the boot whose sample comes next
    t0 = time.monotonic()
    try:
        while True:
            line = con.next(deadline)
            if line is None:
                if want is None:
                    return samples, pools, "L2 exited before the benchmark ended"
                return samples, pools, None if len(samples) == want else f"{len(samples)} of {want} boots reported"
            if line.startswith(("ZSE2E-FATAL", "ZSPOOL-FATAL")):
                return samples, pools, line
            if line.startswith("ZSE2E-L2 kvm ready"):
                print(f"pool-nested: L2 up with /dev/kvm after {time.monotonic() - t0:.1f} s", flush=True)
            elif line.startswith("L3| "):
                pending_l3.append(line[len("L3| "):])
            elif line.startswith("ZSPOOL-BEGIN"):
                print(f"pool-nested: {line[len('ZSPOOL-'):]}", flush=True)
            elif line.startswith("ZSPOOL-TIMELINE "):
                js = json.loads(line.split(" ", 1)[1])
                schema = tlschema.check(js, "run")
                pending_tl = {
                    "schema": schema,
                    "t_ms": {p["name"]: p["t_ms"] for p in js.get("phases", []) if "t_ms" in p},
                    "prezero_method": (js.get("prezero") or {}).get("method"),
                    "prezero": js.get("prezero"),
                    "exit": js.get("exit"),
                }
            elif line.startswith("ZSPOOL-SAMPLE "):
                s = parse_sample(line)
                s["timeline"], pending_tl = pending_tl, None
                s["l3"], pending_l3 = pending_l3, []
                s["failures"] = judge(s, patched)
                samples.append(s)
                t = s["timeline"]["t_ms"] if s["timeline"] else {}
                print(f"pool-nested: {s['guest']:<6} {s['size_gib']} GiB {s['method']:<8} rep {s['rep']}: "
                      f"memory_ready {t.get('memory_ready', '-')} first_kvm_run {t.get('first_kvm_run', '-')} "
                      f"exit {t.get('exit', '-')} ms  "
                      + (("ok (leak caught)" if s["method"] == "leak_probe" else "PASS") if not s["failures"]
                         else "FAIL: " + "; ".join(s["failures"])),
                      flush=True)
            elif line.startswith("ZSPOOL-POOL "):
                head, _, st = line.partition(" status=")
                d = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", head))
                try:
                    status = json.loads(st)
                except json.JSONDecodeError:
                    status = {"unparsable": st}
                pools.append({"event": d["event"], "size_gib": int(d["size_gib"]), "ms": int(d["ms"]),
                              "status": status})
                if d["event"] == "started":
                    print(f"pool-nested: pool of {d['size_gib']} GiB clean {d['ms']} ms after start", flush=True)
            elif line.startswith("ZSPOOL-END"):
                want = int(line.partition("boots=")[2] or -1)
                deadline = min(deadline, time.monotonic() + 30)
    except TimeoutError:
        if want is not None and len(samples) == want:
            return samples, pools, None  # done; only L2's poweroff was slow
        return samples, pools, f"timeout after {time.monotonic() - t0:.0f} s ({len(samples)} boots done)"


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def table(samples: list[dict], sizes: list[int], guest: str = "probe") -> str:
    if guest == "linux":
        phases = ("memory_ready", "first_kvm_run", "init_started", "exit")
        rows = ["| GiB | method | memory_ready | first_kvm_run | init_started (zsinit) | exit |"]
    else:
        phases = ("memory_ready", "first_kvm_run", "kernel_started", "exit")
        rows = ["| GiB | method | memory_ready | first_kvm_run | kernel_started (first instruction) "
                "| exit (probe scanned all hinted RAM) |"]
    rows.append("|---:|---|---|---|---|---|")
    for g in sizes:
        for m in METHODS:
            ss = [s for s in samples if s["size_gib"] == g and s["method"] == m and s["guest"] == guest
                  and s["timeline"]]
            if not ss:
                continue
            cells = []
            for ph in phases:
                xs = [s["timeline"]["t_ms"].get(ph) for s in ss]
                xs = [x for x in xs if x is not None]
                fmt = (lambda x: f"{x:.1f}") if ph == "memory_ready" else (lambda x: f"{x:.0f}")
                cells.append(" / ".join(fmt(x) for x in xs) + (f" (**{fmt(median(xs))}**)" if xs else ""))
            rows.append(f"| {g} | {METHOD_TITLE[m]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def medians(samples: list[dict], sizes: list[int]) -> list[dict]:
    out = []
    for guest in ("probe", "linux"):
        for g in sizes:
            for m in METHODS:
                ss = [s for s in samples if s["size_gib"] == g and s["method"] == m and s["guest"] == guest
                      and s["timeline"]]
                if ss:
                    out.append(medians_of(ss, guest, g, m))
    return out


def medians_of(ss: list[dict], guest: str, g: int, m: str) -> dict:
    return {"guest": guest, "size_gib": g, "method": m, "n": len(ss), **{
        f"{ph}_ms": median([s["timeline"]["t_ms"][ph] for s in ss if ph in s["timeline"]["t_ms"]])
        for ph in sorted(set(PHASES) | set(LINUX_PHASES))}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,8", help="guest sizes in GiB (default 1,4,8)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each method per size (default 3)")
    ap.add_argument("--report", default=str(OUT / "report.json"))
    ap.add_argument("--zerostart", default=str(vmmargv.static_zerostart()))
    ap.add_argument("--probe", default=str(REPO / "target" / "probe" / "probe.bzImage"))
    ap.add_argument("--linux", type=int, default=0, help="also boot L3 Linux at this size (GiB; 0: no)")
    ap.add_argument("--linux-reps", type=int, default=2, help="interleaved rounds of the Linux boots (default 2)")
    ap.add_argument("--methods", default=",".join(METHODS), help="methods of each round (default pool,populate,nt,off)")
    ap.add_argument("--leak-check", type=int, default=0,
                    help="GiB: also prove the zero check catches a pool that skipped zeroing (needs an L3 kernel)")
    ap.add_argument("--reserve-gib", type=int, default=0,
                    help="2M hugepages to reserve in L2, GiB (default: the largest size; a size whose pool "
                         "and prefault guest fit together, 2 x size, keeps one pool for all its repetitions)")
    ap.add_argument("--smp", type=int, default=2, help="L2 vCPUs (default 2, as the e2e runs)")
    ap.add_argument("--boot-timeout", type=int, default=300, help="in-L2 limit per boot, seconds")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo the whole L2 console")
    a = ap.parse_args()
    try:
        sizes = [int(x) for x in a.sizes.split(",")]
    except ValueError:
        print(f"pool-nested: --sizes {a.sizes}: comma-separated whole GiB expected, e.g. 1,4,8", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1 or a.reps < 1 or a.linux_reps < 1:
        print("pool-nested: --sizes needs sizes >= 1 GiB, --reps and --linux-reps >= 1", file=sys.stderr)
        return 2
    methods = a.methods.split(",")
    if not methods or set(methods) - set(METHODS):
        print(f"pool-nested: --methods {a.methods}: choose from {','.join(METHODS)}", file=sys.stderr)
        return 2
    if a.linux and a.linux not in sizes:
        print(f"pool-nested: --linux {a.linux} is not one of --sizes {a.sizes}", file=sys.stderr)
        return 2
    zs, probe = Path(a.zerostart), Path(a.probe)
    for p, how in ((zs, "make e2e-zerostart"), (probe, "make probe")):
        if not p.exists():
            print(f"pool-nested: {p} missing; build it with `{how}`", file=sys.stderr)
            return 1
    report = Path(a.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    console_log = report.with_suffix(".console.log")
    t_start = time.monotonic()
    try:
        manifest = build.build_l2(build.default_l3_kernels(), zs, with_qemu=False)
    except build.BuildError as e:
        print(f"pool-nested: error: {e}", file=sys.stderr)
        return 1

    # Hugepages for the largest guest only by default (see nested-bench-l2.sh), +16 pages slack.
    reserve = max(a.reserve_gib, max(sizes), a.leak_check)
    hugepages = reserve * 512 + 16
    l2_mem, _ = l2_memory(manifest, reserve * 1024)
    kernel = "patched" if "patched" in manifest["l3_kernels"] else "debian-6.12"
    # Only to bound the wait: L2 reports how many boots it ran (ZSPOOL-END).
    most = 3 + len(sizes) * len(methods) * a.reps + len(methods) * a.linux_reps
    extra = build.Cpio()
    extra.file("zs/nested-bench-l2.sh", (HERE / "nested-bench-l2.sh").read_bytes(), 0o755)
    extra.file("zs/probe.bzImage", probe.read_bytes())
    try:
        cmds = command_lines(sizes, a.linux, a.leak_check, kernel, zs)
    except vmmargv.VmmArgvError as e:
        print(f"pool-nested: error: {e}", file=sys.stderr)
        return 1
    extra.file(L2_CMDS, ("\n".join(cmds) + "\n").encode())
    append = (f"zse2e.script=nested-bench-l2.sh zspool.sizes={','.join(map(str, sizes))} "
                  f"zspool.reps={a.reps} zspool.timeout={a.boot_timeout} "
                  f"zspool.linux={a.linux} zspool.linux_reps={a.linux_reps} zspool.kernel={kernel} "
              f"zspool.methods={','.join(methods)} zspool.leakcheck={a.leak_check}")
    print(f"pool-nested: booting L2 (TCG, {l2_mem} MiB, {hugepages} x 2M hugepages, {a.smp} vCPUs) "
          f"for up to {most} boots", flush=True)
    with boot_l2(manifest, extra, l2_mem, hugepages, log=console_log, smp=a.smp, echo=a.verbose,
                 append=append, zerostart=zs) as con:
        # Bounded: L2 boot plus a generous per-boot budget (each boot also has its in-L2 limit).
        deadline = time.monotonic() + L2_BOOT_TIMEOUT_S + most * 90 + len(sizes) * a.reps * 60
        samples, pools, fatal = drive(con, deadline, kernel == "patched")

    failures = [f"{s['size_gib']} GiB {s['method']} rep {s['rep']}: {f}" for s in samples for f in s["failures"]]
    for p in pools:
        st = p["status"]
        if st.get("scrub_failures", 0) or st.get("retired_total", 0):
            failures.append(f"pool of {p['size_gib']} GiB: scrub_failures={st.get('scrub_failures')} "
                            f"retired={st.get('retired_total')}")
    if fatal:
        failures.insert(0, fatal)
    if a.leak_check and not any(s["method"] == "leak_probe" for s in samples) and not fatal:
        failures.append("the leak check did not run")
    rep = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes_gib": sizes,
        "reps": a.reps,
        "methods": methods,
        "leak_check_gib": a.leak_check,
        "linux": {"size_gib": a.linux, "reps": a.linux_reps, "kernel": kernel} if a.linux else None,
        "l2": {"mem_mib": l2_mem, "hugepages_2m": hugepages, "smp": a.smp, "hash": manifest.get("hash"),
               "zerostart_sha256": manifest.get("zerostart_sha256")},
        "medians": medians(samples, sizes),
        "samples": samples,
        "pool_events": pools,
        "failures": failures,
        "passed": not failures,
        "seconds": round(time.monotonic() - t_start),
    }
    report.write_text(json.dumps(rep, indent=2) + "\n")
    print("\nms from zerostart's process start, every sample in run order, median in bold:\n")
    print(table(samples, sizes))
    if a.linux:
        print(f"\nL3 Linux ({kernel} kernel, zsinit), same L2 boot:\n")
        print(table(samples, sizes, "linux"))
    for s in samples:
        if s["method"] in ("warmup", "pool_after_linux", "leak_linux", "leak_probe"):
            t = (s["timeline"] or {}).get("t_ms", {})
            print(f"{s['method']}: {s['size_gib']} GiB, memory_ready {t.get('memory_ready')} ms, "
                  f"exit {t.get('exit')} ms: {s['verdict']}")
    print(f"\npool-nested: report {report}; console {console_log}; {rep['seconds']} s total")
    if failures:
        print("pool-nested: FAILED", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        tail = console_log.read_text(errors="replace").splitlines()[-40:] if console_log.exists() else []
        for ln in tail:
            print(f"  | {ln}", file=sys.stderr)
        return 1
    print("pool-nested: every boot passed (every hinted byte the probe read was zero, zsinit saw only zero)"
          + ("; the leak check caught the pool that skipped zeroing" if a.leak_check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
