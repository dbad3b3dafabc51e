#!/usr/bin/env python3
"""Pool vs prefault vs no prefault, launch -> first vCPU instruction, in the nested host.

Why: natively (tests/pool/vm-bench.sh) the VM part runs on this machine's
software KVM; the nested test host (tests/nested-host) has a real kvm-amd.
This boots L2 once with tests/pool/nested-bench-l2.sh and the probe guest,
which runs, for each size, interleaved repetitions of four ways to get guest
RAM ready: a lease from `zerostart pool` (prezero=pool), prefault with
MADV_POPULATE_WRITE, prefault with the NT-store engine, and no prefault.
Every boot's zerostart timeline and the probe's verdict (it reads every
hinted byte) are collected; any boot that fails or whose probe does not
PASS with a valid hint and zero non-zero bytes fails the run (exit 1).

  nested-bench.py [--sizes 1,4,8] [--reps 3] [--report target/pool-nested/report.json]

Writes the report (every sample and the medians) and prints the table.
Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "nested-host"))
import build  # noqa: E402
import run  # noqa: E402

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
MIB = 1 << 20


def parse_sample(line: str) -> dict:
    head, _, verdict = line.partition(" verdict=")
    d = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", head))
    return {"size_gib": int(d["size_gib"]), "method": d["method"], "rep": int(d["rep"]),
            "rc": int(d["rc"]), "wall_ms_in_l2": int(d["wall_ms"]), "verdict": verdict.strip()}


def judge(s: dict) -> list[str]:
    """Why a sample fails: the boot must work and the probe must find only zero bytes."""
    f = []
    if s["rc"] != 0:
        f.append(f"zerostart exited {s['rc']}")
    v = s["verdict"]
    if not v.startswith("ZSPROBE: PASS"):
        f.append(f"probe verdict: {v or 'none'}")
    kv = dict(m.groups() for m in re.finditer(r"(\w+)=(\S+)", v))
    if kv.get("hint") != "valid":
        f.append(f"expected a valid hint, probe saw hint={kv.get('hint')}")
    if kv.get("nonzero_bytes") != "0":
        f.append(f"non-zero bytes in hinted RAM: {kv.get('nonzero_bytes')}")
    if int(kv.get("zero_bytes", "0")) < s["size_gib"] * 1024 * MIB // 2:
        f.append(f"probe checked only {kv.get('zero_bytes')} bytes")
    s["zero_bytes_checked"] = int(kv.get("zero_bytes", "0"))
    tl = s.get("timeline") or {}
    missing = [p for p in PHASES if p not in tl.get("t_ms", {})]
    if missing:
        f.append(f"timeline lacks {missing}")
    want = "pool_lease" if s["method"] == "pool" else None
    got = tl.get("prezero_method")
    if want and got != want:
        f.append(f"prezero.method {got}, expected {want}")
    if not want and got == "pool_lease":
        f.append("a non-pool boot leased from the pool")
    return f


def drive(con: run.Console, deadline: float, want: int) -> tuple[list[dict], list[dict], str | None]:
    samples: list[dict] = []
    pools: list[dict] = []
    pending_tl: dict | None = None
    t0 = time.monotonic()
    try:
        while True:
            line = con.next(deadline)
            if line is None:
                return samples, pools, None if len(samples) == want else "L2 exited early"
            if line.startswith(("ZSE2E-FATAL", "ZSPOOL-FATAL")):
                return samples, pools, line
            if line.startswith("ZSE2E-L2 kvm ready"):
                print(f"pool-nested: L2 up with /dev/kvm after {time.monotonic() - t0:.1f} s", flush=True)
            elif line.startswith("ZSPOOL-BEGIN"):
                print(f"pool-nested: {line[len('ZSPOOL-'):]}", flush=True)
            elif line.startswith("ZSPOOL-TIMELINE "):
                js = json.loads(line.split(" ", 1)[1])
                pending_tl = {
                    "t_ms": {p["name"]: p["t_ms"] for p in js.get("phases", []) if "t_ms" in p},
                    "prezero_method": (js.get("prezero") or {}).get("method"),
                    "prezero": js.get("prezero"),
                    "exit": js.get("exit"),
                }
            elif line.startswith("ZSPOOL-SAMPLE "):
                s = parse_sample(line)
                s["timeline"], pending_tl = pending_tl, None
                s["failures"] = judge(s)
                samples.append(s)
                t = s["timeline"]["t_ms"] if s["timeline"] else {}
                print(f"pool-nested: {s['size_gib']} GiB {s['method']:<8} rep {s['rep']}: "
                      f"memory_ready {t.get('memory_ready', '-')} first_kvm_run {t.get('first_kvm_run', '-')} "
                      f"exit {t.get('exit', '-')} ms  {'PASS' if not s['failures'] else 'FAIL: ' + '; '.join(s['failures'])}",
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
                deadline = min(deadline, time.monotonic() + 30)
    except TimeoutError:
        return samples, pools, f"timeout after {time.monotonic() - t0:.0f} s ({len(samples)} of {want} boots done)"


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def table(samples: list[dict], sizes: list[int]) -> str:
    rows = ["| GiB | method | memory_ready | first_kvm_run | kernel_started (first instruction) "
            "| exit (probe scanned all hinted RAM) |",
            "|---:|---|---|---|---|---|"]
    for g in sizes:
        for m in METHODS:
            ss = [s for s in samples if s["size_gib"] == g and s["method"] == m and s["timeline"]]
            if not ss:
                continue
            cells = []
            for ph in ("memory_ready", "first_kvm_run", "kernel_started", "exit"):
                xs = [s["timeline"]["t_ms"].get(ph) for s in ss]
                xs = [x for x in xs if x is not None]
                fmt = (lambda x: f"{x:.1f}") if ph == "memory_ready" else (lambda x: f"{x:.0f}")
                cells.append(" / ".join(fmt(x) for x in xs) + (f" (**{fmt(median(xs))}**)" if xs else ""))
            rows.append(f"| {g} | {METHOD_TITLE[m]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def medians(samples: list[dict], sizes: list[int]) -> list[dict]:
    out = []
    for g in sizes:
        for m in METHODS:
            ss = [s for s in samples if s["size_gib"] == g and s["method"] == m and s["timeline"]]
            out.append({"size_gib": g, "method": m, "n": len(ss), **{
                f"{ph}_ms": median([s["timeline"]["t_ms"][ph] for s in ss if ph in s["timeline"]["t_ms"]])
                for ph in PHASES}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,8", help="guest sizes in GiB (default 1,4,8)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each method per size (default 3)")
    ap.add_argument("--report", default=str(OUT / "report.json"))
    ap.add_argument("--zerostart", default=str(REPO / "target" / "x86_64-unknown-linux-gnu" / "static" / "zerostart"))
    ap.add_argument("--probe", default=str(REPO / "target" / "probe" / "probe.bzImage"))
    ap.add_argument("--smp", type=int, default=2, help="L2 vCPUs (default 2, as the e2e runs)")
    ap.add_argument("--boot-timeout", type=int, default=300, help="in-L2 limit per boot, seconds")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo the whole L2 console")
    a = ap.parse_args()
    try:
        sizes = [int(x) for x in a.sizes.split(",")]
    except ValueError:
        print(f"pool-nested: --sizes {a.sizes}: comma-separated whole GiB expected, e.g. 1,4,8", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1 or a.reps < 1:
        print("pool-nested: --sizes needs sizes >= 1 GiB and --reps >= 1", file=sys.stderr)
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

    # Hugepages for the largest guest only (see nested-bench-l2.sh), +16 pages slack.
    hugepages = max(sizes) * 512 + 16
    init_mib = Path(manifest["initramfs"]).stat().st_size // MIB
    l2_mem = max(sizes) * 1024 + 32 + 1536 + 2 * init_mib
    want = len(sizes) * len(METHODS) * a.reps
    extra = build.Cpio()
    extra.file("zs/nested-bench-l2.sh", (HERE / "nested-bench-l2.sh").read_bytes(), 0o755)
    extra.file("zs/probe.bzImage", probe.read_bytes())
    tmp = Path(tempfile.mkdtemp(prefix="zspool-"))
    proc = None
    try:
        initrd = tmp / "initrd.cpio"
        shutil.copyfile(manifest["initramfs"], initrd)
        with open(initrd, "ab") as f:
            extra.write(f)
        append = (f"zse2e.script=nested-bench-l2.sh zspool.sizes={','.join(map(str, sizes))} "
                  f"zspool.reps={a.reps} zspool.timeout={a.boot_timeout}")
        cmd = run.l2_command(manifest, initrd, l2_mem, hugepages, a.smp, append)
        print(f"pool-nested: booting L2 (TCG, {l2_mem} MiB, {hugepages} x 2M hugepages, {a.smp} vCPUs) "
              f"for {want} probe boots", flush=True)
        import subprocess
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        con = run.Console(proc, console_log, a.verbose)
        # Bounded: L2 boot plus a generous per-boot budget (each boot also has its in-L2 limit).
        deadline = time.monotonic() + run.L2_BOOT_TIMEOUT_S + want * 60 + len(sizes) * a.reps * 120
        samples, pools, fatal = drive(con, deadline, want)
    finally:
        if proc is not None:
            run.kill(proc)
        shutil.rmtree(tmp, ignore_errors=True)

    failures = [f"{s['size_gib']} GiB {s['method']} rep {s['rep']}: {f}" for s in samples for f in s["failures"]]
    for p in pools:
        st = p["status"]
        if st.get("scrub_failures", 0) or st.get("retired_total", 0):
            failures.append(f"pool of {p['size_gib']} GiB: scrub_failures={st.get('scrub_failures')} "
                            f"retired={st.get('retired_total')}")
    if fatal:
        failures.insert(0, fatal)
    if len(samples) != want and not fatal:
        failures.insert(0, f"{len(samples)} of {want} boots reported")
    rep = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes_gib": sizes,
        "reps": a.reps,
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
    print(f"\npool-nested: report {report}; console {console_log}; {rep['seconds']} s total")
    if failures:
        print("pool-nested: FAILED", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        tail = console_log.read_text(errors="replace").splitlines()[-40:] if console_log.exists() else []
        for ln in tail:
            print(f"  | {ln}", file=sys.stderr)
        return 1
    print("pool-nested: every boot passed (probe: every hinted byte zero)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
