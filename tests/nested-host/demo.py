"""`make demo`: what zerostart is for, side by side with what users run today.

The same guest and workload, at 1, 4 and 8 GiB, five ways, in one boot of
the nested test host (real kvm-amd in L2, see docs/e2e.md):

  stock          QEMU 10, guest RAM on hugetlbfs with prealloc=on, OVMF,
                 Debian's stock 6.12 kernel (init_on_alloc=1, its default);
  stock-direct   the same QEMU and memory, the kernel booted directly on
                 `-machine microvm` (qboot, -kernel, no PCI), as most
                 fast-boot QEMU users run it;
  launch         the same QEMU through `zerostart launch`: RAM leased from
                 `zerostart pool` (zeroed before the launch), the hint over
                 fw_cfg through the same OVMF (ZeroStartPkg), the patched
                 kernel;
  launch-direct  that microvm direct boot through `zerostart launch`: the
                 pool, the hint on the kernel command line, the patched
                 kernel, no firmware detour;
  zerostart      zerostart's own VMM on the same pool, the patched kernel.

The workload (tests/guest-init/zsinit, the guest's /init) touches 75 % of
RAM as a database buffer pool or a JVM with AlwaysPreTouch would: half as a
boot-time pool of 2 MiB hugetlb pages it populates, half as 4 KiB
anonymous memory it first-touches (MAP_POPULATE write faults), then reads
every byte back (it must be zero). Phases, ms from the VMM's (or launcher's) start, as L2 sees them:
memory_ready (guest RAM ready: the launcher's and zerostart's own
timelines; for stock QEMU the same command with -S up to its monitor,
measured right before its boot), init_started (zsinit's first line),
app_ready (its APP_READY line: both areas write-faulted; the read-back of
every byte, which must be zero, comes after and is not timed).

Then the real cloud VM (tests/nested-host/microvm.py, `make test-microvm`):
the Debian rootfs with systemd, a virtio disk, NIC and vsock, to its app,
the same three ways, in a second L2 boot (ZSDEMO_REAL_VM=0 leaves it out).

Writes target/demo/report.json (the launch report's row shape),
target/demo/microvm-report.json and target/demo/chart.png, and prints the
tables and the ratio lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import launch
import run as e2e
from zstest import l2image as build
from zstest import vmmargv
from zstest.qemu import L3_CONSOLE_ARGS

OUT = build.REPO / "target" / "demo"
MIB = 1 << 20
KINDS = ("stock", "stock-direct", "launch", "launch-direct", "zerostart")
LABEL = {"stock": "stock QEMU prealloc", "stock-direct": "stock QEMU microvm prealloc, direct boot",
         "launch": "QEMU + zerostart launch", "launch-direct": "QEMU microvm direct boot + zerostart launch",
         "zerostart": "zerostart VMM"}
# The boot path of each kind (row "boot"): the zerostart VMM boots the kernel directly too.
BOOT = {"stock": "uefi", "stock-direct": "direct", "launch": "uefi", "launch-direct": "direct",
        "zerostart": "direct"}


@dataclass
class DemoScenario(launch.LaunchScenario):
    kind: str = "launch"  # stock | launch | zerostart

    def __post_init__(self) -> None:
        # Which VMM runs the guest, for the harness's progress lines.
        self.vmm = {"zerostart": "zerostart", "stock-direct": "microvm-direct",
                    "launch-direct": "microvm-direct"}.get(self.kind, "qemu")

    def spec(self) -> dict:
        """This row's start in L2 (zstest.vmmargv): stock QEMU as operators
        run it (hugetlbfs prealloc, OVMF or a direct boot), QEMU through
        `zerostart launch` on the pool (OVMF or direct), or zerostart's VMM
        on the pool; each writes or gets its timeline at /tmp/NAME.tl.json."""
        m, kernel, tl = self.mem_mib, f"/zs/kernels/{self.kernel}", f"/tmp/{self.name}.tl.json"
        append = f"{L3_CONSOLE_ARGS} zsinit.halt=poweroff {self.guest_args}"
        if self.kind == "zerostart":
            return vmmargv.zerostart_run(
                kernel, f"{L3_CONSOLE_ARGS} reboot=k {self.guest_args}",
                f"size={m}M,hugepages=on,hugepage_size=2M,prezero=pool:{vmmargv.L2_POOL_SOCKET}", "tty", tl,
                initrd=vmmargv.L2_INITRAMFS)
        # The direct rows boot microvm with qboot; the UEFI rows q35 with OVMF.
        base = vmmargv.l2_microvm(1) if self.kind.endswith("-direct") else vmmargv.l2_qemu(1)
        qemu = {**base, "kernel": kernel, "initrd": vmmargv.L2_INITRAMFS, "cmdline": append, "serial": "stdio"}
        uefi = self.kind in ("stock", "launch")
        if self.kind.startswith("stock"):
            qemu["memory"] = vmmargv.stock_memory(m)
            if uefi:
                qemu["firmware"] = vmmargv.L2_OVMF
            return qemu
        return vmmargv.launch(qemu, f"size={m}M,source=pool:{vmmargv.L2_POOL_SOCKET}", tl,
                              firmware=vmmargv.L2_OVMF if uefi else None)

    def ready_spec(self) -> dict | None:
        return vmmargv.memory_ready_probe(self.mem_mib) if self.kind.startswith("stock") else None

    def line(self, cmd: str, ready: str = "") -> str:
        """l2-demo.sh's (and l2-microvm.sh's) list line:
        name|kind|timeout_s|tap|memory_ready command|command."""
        return "|".join([vmmargv.list_field(x) for x in (self.name, self.kind, str(self.timeout_s), "", ready)]
                        + [cmd])


def workload_args(mem_mib: int) -> str:
    """75 % of RAM: 37.5 % as boot-time 2 MiB hugetlb pages populated, 37.5 % as 4 KiB anonymous memory."""
    huge = mem_mib * 3 // 16
    return (f"hugepages={huge} zsinit.populate_mib={huge * 2} zsinit.huge_check_mib={huge * 2} "
            f"zsinit.check_mib={mem_mib * 3 // 8} {os.environ.get('ZSE2E_GUEST_APPEND', '')}").strip()


def scenarios(sizes_mib: list[int], patched: str, stock: str) -> list[DemoScenario]:
    out = []
    for kind in KINDS:
        for m in sizes_mib:
            plain = kind.startswith("stock")
            out.append(DemoScenario(f"{kind}-{m // 1024}g", m, source="prealloc" if plain else "pool",
                                    kernel=stock if plain else patched, kind=kind,
                                    guest_args=workload_args(m), timeout_s=150 + 45 * m // 1024,
                                    note=LABEL[kind]))
    return out


def judge(r: launch.LaunchResult) -> None:
    """The demo's checks: the VMM ended cleanly, the workload finished and read only zeros, and the
    patched kernel used the hint (stock must not have one)."""
    f, v = r.failures, r.verdict()
    if r.rc is None:
        f.append("no ZSL-END line (scenario did not finish)")
    elif r.rc != 0:
        f.append(f"the VMM exited {r.rc}")
    if not v:
        f.append(r.no_verdict())
        return
    if v["status"] != "PASS":
        f.append(f"guest verdict FAIL: {v.get('reason', '?')}")
    if r.shut_down():
        f.append(r.shut_down())
    if int(v.get("nonzero_bytes", -1)) != 0:
        f.append(f"the workload read {v.get('nonzero_bytes')} non-zero bytes")
    skipped = int(v.get("kernel_pages_skipped", -1))
    plain = r.sc.kind.startswith("stock")
    if plain and skipped > 0:
        f.append("the stock kernel reports skipped clears")
    if not plain and skipped <= 0:
        f.append("the patched kernel skipped no clears (hint not used)")
    if (r.timeline or {}).get("phases") is None:
        f.append("no memory_ready measurement")


def row(r: launch.LaunchResult) -> dict:
    out = launch.row(r)
    out["vmm"] = "zerostart" if r.sc.kind == "zerostart" else "qemu"
    out["boot"] = BOOT[r.sc.kind]
    out["config"] = r.sc.kind
    out["memory_source"] = r.sc.source
    return out


def chart(bin_path: str | None, report: Path, png: Path) -> str:
    """Draws the PNG with plotters (vmm/slo's demo_chart example, built by make); returns a note."""
    if not bin_path or not Path(bin_path).exists():
        return f"chart not drawn: no demo_chart binary ({bin_path}; make demo builds it)"
    r = subprocess.run([bin_path, str(report), str(png)], cwd=build.REPO, capture_output=True, text=True)
    if r.returncode != 0:
        return f"chart not drawn: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
    return f"chart {png}"


def table(rows: list[dict], sizes: list[int]) -> str:
    by = {(r["config"], r["memory_bytes"] // MIB): r for r in rows}
    head = ("size", "config", "kernel", "memory_ready", "init_started", "app_ready", "skipped clears", "ok")
    lines = [head]
    for m in sizes:
        for k in KINDS:
            r = by.get((k, m))
            if r is None:
                lines.append((f"{m // 1024} GiB", LABEL[k], "-", "-", "-", "-", "-", "MISSING"))
                continue
            p = r["phases_ms"]
            sk = r["kernel_pages_skipped"]
            lines.append((f"{m // 1024} GiB", LABEL[k], r["kernel"], *(e2e.fmt_ms(p[x]) for x in
                          ("memory_ready", "init_started", "app_ready")), str(sk) if sk >= 0 else "-",
                          "PASS" if r["passed"] else "FAIL"))
    out = e2e.text_table(lines)
    return "\n".join(out)


def ratios(rows: list[dict], sizes: list[int]) -> list[str]:
    by = {(r["config"], r["memory_bytes"] // MIB): r["phases_ms"] for r in rows if r["passed"]}

    def get(k, m, ph):
        return (by.get((k, m)) or {}).get(ph)
    out = []
    for m in sizes:
        s = get("stock", m, "app_ready")
        parts = [f"app_ready {m // 1024} GiB: stock {e2e.fmt_ms(s)} ms"]
        for k in ("launch", "zerostart"):
            x = get(k, m, "app_ready")
            parts.append(f"{LABEL[k]} {e2e.fmt_ms(x)} ms" + (f", {s / x:.2f}x" if s and x else ""))
        out.append("; ".join(parts))
    # Direct boot: the launcher against stock QEMU booted the same way, and
    # against zerostart's own VMM (which boots directly too).
    for m in sizes:
        s, x, z = (get(k, m, "app_ready") for k in ("stock-direct", "launch-direct", "zerostart"))
        out.append(f"app_ready {m // 1024} GiB, direct boot: stock {e2e.fmt_ms(s)} ms; {LABEL['launch-direct']} "
                   f"{e2e.fmt_ms(x)} ms" + (f", {s / x:.2f}x (target >= 4x)" if s and x else "")
                   + (f"; its speed vs the zerostart VMM {z / x:.2f}x (target >= 0.8x)" if z and x else ""))
    lo, hi = min(sizes), max(sizes)
    parts = []
    for k in KINDS:
        a, b = get(k, lo, "memory_ready"), get(k, hi, "memory_ready")
        parts.append(f"{LABEL[k]} {b / a:.2f}x" if a and b else f"{LABEL[k]} -")
    out.append(f"memory_ready {hi // 1024} GiB / {lo // 1024} GiB: " + ", ".join(parts))
    return out


VMM_SIZE_MIB = 4096


def vmm_scenarios(chv: bool, fc: bool) -> list[launch.LaunchScenario]:
    """The VMMs operators install, as released, through `zerostart launch`
    (issue 28's target: the patched kernel skips its clears with verify on,
    0 failures; app_ready against the same VMM without the hint, same run):
    per VMM the hint, the same without it (hint=off: same memory, same
    kernel), and the hint with prezero.verify=1. cloud-hypervisor boots the
    kernel itself on pool memory (hint on --cmdline); Firecracker allocates
    its own memory (source=none, hint in boot_args)."""
    m = VMM_SIZE_MIB
    out = []
    for on, vmm, tag, src in ((chv, "chv-direct", "chv-direct", "pool"), (fc, "firecracker", "fc", "none")):
        if not on:
            continue
        for suffix, source, extra in (("", src, ""), ("-nohint", f"{src},hint=off", ""),
                                      ("-verify", src, "prezero.verify=1")):
            out.append(launch.LaunchScenario(
                f"{tag}{suffix}-{m // 1024}g", m, vmm=vmm, source=source, kernel="patched",
                guest_args=f"{workload_args(m)} {extra}".strip(), timeout_s=150 + 45 * m // 1024,
                note=f"{vmm} through zerostart launch{' without the hint' if suffix == '-nohint' else ''}"))
    return out


def judge_vmm(r: launch.LaunchResult) -> None:
    """A VMM row: the guest passed its zero check; with the hint the kernel
    skipped clears (and with verify found none wrong), without it none."""
    f, v = r.failures, r.verdict()
    if r.rc != 0:
        f.append(f"the launcher exited {r.rc}")
    if not v:
        f.append(r.no_verdict())
        return
    if v["status"] != "PASS" or int(v.get("nonzero_bytes", -1)) != 0:
        f.append(f"guest verdict {v['status']}, nonzero_bytes={v.get('nonzero_bytes')}")
    if r.shut_down():
        f.append(r.shut_down())
    skipped = int(v.get("kernel_pages_skipped", -1))
    if "hint=off" in r.sc.source:
        if skipped != 0:
            f.append(f"{skipped} clears skipped without a hint")
    elif skipped <= 0:
        f.append("the patched kernel skipped no clears (hint not used)")
    if "prezero.verify=1" in r.sc.guest_args and int(v.get("kernel_verify_failures", -1)) != 0:
        f.append(f"verify failures: {v.get('kernel_verify_failures')}")


def vmms(a, zs, ovmf) -> bool:
    """cloud-hypervisor and Firecracker rows when they are on PATH (they are
    in no package registry: docs/launch.md), in an L2 boot of their own."""
    chv, why = launch.cloud_hypervisor()
    fc, fc_why = launch.firecracker()
    for name, path, reason in (("cloud-hypervisor", chv, why), ("firecracker", fc, fc_why)):
        if path is None:
            print(f"demo: SKIP {name} rows: {reason}", flush=True)
    scs = vmm_scenarios(chv is not None, fc is not None)
    if a.only:
        scs = [s for s in scs if s.name in set(a.only.split(","))]
    if not scs:
        return True
    print(f"\ndemo: the VMMs operators install, as released ({', '.join(str(p) for p in (chv, fc) if p)}), "
          f"through zerostart launch at {VMM_SIZE_MIB // 1024} GiB: with the hint, without it, and with "
          "prezero.verify=1:", flush=True)
    retries: list[str] = []
    # Firecracker's guest RAM is its own anonymous memory in L2, beside the pool.
    results, fatal = launch.run_scenarios(scs, zs, ovmf, pool_mib=VMM_SIZE_MIB, region_mib=VMM_SIZE_MIB,
                                          echo=a.verbose, smp=a.smp, console_log=OUT / "vmm-console.log",
                                          judge_fn=judge_vmm, l2_retries=retries,
                                          l2_extra_mib=VMM_SIZE_MIB + 512 if fc else 0)
    rows = [launch.row(r) for r in results]
    rep = OUT / "vmm-report.json"
    rep.write_text(json.dumps({"scenarios": rows, "fatal": fatal, "l2_retries": retries}, indent=2) + "\n")
    print(launch.retries_line("demo (VMMs)", retries))
    lines = [("row", "vmm", "boot", "memory", "hint", "init_started", "app_ready", "skipped clears",
              "verify failures", "ok")]
    for r in rows:
        p = r["phases_ms"]
        lines.append((r["name"], r["vmm"], r["boot"], r["memory_source"], r["hint_transport"] or "off",
                      e2e.fmt_ms(p["init_started"]), e2e.fmt_ms(p["app_ready"]), str(r["kernel_pages_skipped"]),
                      str(r["kernel_verify_failures"]) if "verify" in r["name"] else "-",
                      "PASS" if r["passed"] else "FAIL"))
    print("\n" + "\n".join(e2e.text_table(lines)) + "\n")
    by = {r["name"]: r["phases_ms"]["app_ready"] for r in rows if r["passed"]}
    for tag, label in (("chv-direct", "cloud-hypervisor"), ("fc", "Firecracker")):
        h, n = by.get(f"{tag}-{VMM_SIZE_MIB // 1024}g"), by.get(f"{tag}-nohint-{VMM_SIZE_MIB // 1024}g")
        if h and n:
            print(f"app_ready {VMM_SIZE_MIB // 1024} GiB, {label}: without the hint {e2e.fmt_ms(n)} ms, "
                  f"with it {e2e.fmt_ms(h)} ms, {n / h:.2f}x (same run, same kernel)")
    for r in rows:
        for fl in r["failures"]:
            print(f"demo: {r['name']}: {fl}")
    print(f"demo: VMM report {rep}; console log {OUT / 'vmm-console.log'}")
    return fatal is None and len(rows) == len(scs) and all(r["passed"] for r in rows)


def real_vm(a, zs, ovmf) -> bool:
    """The real-VM row: the Debian rootfs (systemd, disk, network, vsock) to its app, the same three
    ways (tests/nested-host/microvm.py), in a second L2 boot. Prints its phase table and ratio line."""
    import microvm  # noqa: E402
    print("\ndemo: the real cloud VM: Debian rootfs, systemd, virtio disk + NIC + vsock, 2 GiB, "
          "its app touching 75 % of RAM, the same three ways (prezero.verify=0 as in production; "
          "`make test-microvm` runs them with verify=1):", flush=True)
    retries: list[str] = []
    rows, fatal, asked = microvm.run(a, zs, ovmf, console_log=OUT / "microvm-console.log", verify=False,
                                     l2_retries=retries)
    rep = OUT / "microvm-report.json"
    rep.write_text(json.dumps({"scenarios": rows, "fatal": fatal, "l2_retries": retries}, indent=2) + "\n")
    print(launch.retries_line("demo (real VM)", retries))
    print("\n" + microvm.table(rows) + "\n")
    print(microvm.ratio_line(rows))
    for r in rows:
        for fl in r["failures"]:
            print(f"demo: {r['name']}: {fl}")
    print(f"demo: real-VM report {rep}; console log {OUT / 'microvm-console.log'}")
    return fatal is None and len(rows) == asked and all(r["passed"] for r in rows)


def cmd_demo(a) -> int:
    t0 = time.monotonic()
    zs, ovmf, _ = launch.inputs(a, "demo", need_patched=True)
    sizes = [int(x) * 1024 for x in os.environ.get("ZSDEMO_SIZES_GIB", "1,4,8").split(",")]
    scs = scenarios(sizes, "patched", "debian-6.12")
    if a.only:
        want = set(a.only.split(","))
        scs = [s for s in scs if s.name in want]
    if not scs:
        # --only named VMM rows alone.
        ok = vmms(a, zs, ovmf)
        print("demo: PASS" if ok else "demo: FAIL")
        return 0 if ok else 1
    print("demo: the same guest and workload (75 % of RAM touched: half 2M hugetlb, half 4K anonymous) at "
          f"{', '.join(f'{m // 1024} GiB' for m in sizes)}, {len(KINDS)} ways, in the nested KVM test host "
          "(QEMU TCG, -cpu EPYC,+svm, real kvm-amd):", flush=True)
    for k in KINDS:
        print(f"  {LABEL[k]}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    big = max(sizes)
    retries: list[str] = []
    results, fatal = launch.run_scenarios(scs, zs, ovmf, pool_mib=big, region_mib=big, echo=a.verbose, smp=a.smp,
                                          console_log=OUT / "console.log",
                                          script=Path(__file__).parent / "l2-demo.sh", judge_fn=judge,
                                          l2_retries=retries)
    rows = [row(r) for r in results]
    path = OUT / "report.json"
    path.write_text(json.dumps({"scenarios": rows, "fatal": fatal, "firmware": str(ovmf),
                                "sizes_mib": sizes, "l2_retries": retries}, indent=2) + "\n")
    print(launch.retries_line("demo", retries))
    print("\n" + table(rows, sizes) + "\n")
    for ln in ratios(rows, sizes):
        print(ln)
    print(f"\ndemo: report {path}; {chart(getattr(a, 'chart_bin', None), path, OUT / 'chart.png')}; console log {OUT / 'console.log'}; "
          f"{time.monotonic() - t0:.0f} s in all")
    for r in rows:
        for fl in r["failures"]:
            print(f"demo: {r['name']}: {fl}")
    ok = fatal is None and len(results) == len(scs) and all(r["passed"] for r in rows)
    ok = vmms(a, zs, ovmf) and ok
    if os.environ.get("ZSDEMO_REAL_VM", "1") != "0" and not a.only:
        ok = real_vm(a, zs, ovmf) and ok
    if not ok:
        e2e.CONSOLE_LOG = OUT / "console.log"
        e2e.fail_loudly(fatal, [f"{r['name']}: {fl}" for r in rows for fl in r["failures"]])
        return 1
    print("demo: PASS")
    return 0
