"""`make test-microvm`: the real cloud VM boots to its app three ways, same rootfs, same L2.

The guest is guest-rootfs/ (Debian trixie, systemd, networkd on DHCP, the
workload zsapp: write-faults 75 % of MemAvailable, checks it, writes and
reads back a file on its disk, prints the patched kernel's counters, powers
off). In one boot of the nested test host (real kvm-amd in L2, docs/e2e.md),
each scenario gets its own copy-on-write view of the image (L2's /dev/vdX),
a tap on L2's bridge (DHCP and the ping target are L2 itself) and a vsock
CID:

  zerostart  (a) zerostart's VMM on pool memory, virtio-mmio disk/NIC/vsock
             (--disk/--net/--vsock), the patched kernel, prezero.verify=1;
  launch     (b) QEMU 10 through `zerostart launch` on pool memory, the hint
             over fw_cfg via OVMF, QEMU's virtio-pci devices, the patched
             kernel, prezero.verify=1;
  stock      (c) QEMU 10 as operators run it: hugetlbfs prealloc=on, OVMF,
             Debian's stock cloud kernel and initrd from the image;

and, with prezero.verify=1 only, the negative controls of (a) and (b) on
the whole real-VM chain: the same boots with a byte planted every 64 MiB
inside the hint (`--test-corrupt-hint dirty-spread`, after the pool lease,
before the guest runs), which the patched kernel's verify mode must catch
(verify_failures > 0) while the VM still boots to its app: a (a) or (b)
that passes with verify_failures 0 could not have seen a false "zero".

(`make demo` runs the same three with verify=False: prezero.verify=0, as in
production, since verify re-reads every page whose clear was skipped and
costs (a) and (b) seconds stock does not pay; zsapp's own sweep of what it
touched still runs, and the kernel must report that it verified nothing.)

Phases, ms from the VMM's (or launcher's) start, as L2 sees the guest's
console lines: memory_ready (the VMM's timeline; stock: QEMU -S up to its
monitor with RAM preallocated, measured right before), userspace_started,
network_up (the guest pinged L2 over the bridge), multi_user_reached,
app_ready. Writes target/microvm/report.json:
  scenarios: [{name, vmm, kernel, passed, disk_ok, net_ok, hint_seen,
               kernel_verify_failures, nonzero_bytes, phases_ms: {...}, ...}]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import launch
import run as e2e
from zstest import l2image as build
from zstest import vmmargv

REPO = build.REPO
OUT = REPO / "target" / "microvm"
MIB = 1 << 20
PHASES = ("userspace_started", "network_up", "multi_user_reached", "app_ready")
KINDS = ("zerostart", "launch", "stock")
LABEL = {"zerostart": "(a) zerostart VMM + pool + patched kernel",
         "launch": "(b) QEMU via zerostart launch + patched kernel",
         "stock": "(c) stock QEMU prealloc + Debian stock kernel"}
# The negative controls of (a) and (b): bytes planted inside the hint.
CONTROLS = ("zerostart", "launch")
CONTROL_LABEL = {k: f"{LABEL[k][:3]} control: {LABEL[k][4:]}, a byte planted every 64 MiB of the hint"
                 for k in CONTROLS}
PLANT = ["--test-corrupt-hint", "dirty-spread"]
PHASE_RE = re.compile(r"zsphase: (\w+) uptime_ms=(\d+)")
APP_RE = re.compile(r"zsapp: (PASS|FAIL) (.*)")
DISK_RE = re.compile(r"zsapp: disk (ok|FAIL) (.*)")
KCOUNT_RE = re.compile(r"zsapp: kernel (.*)")
# A vsock CID per scenario; 0-2 are reserved (hypervisor, local, host).
FIRST_CID = 3
ROOTFS_L2 = "/zs/rootfs"


@dataclass
class MicroScenario(launch.LaunchScenario):
    kind: str = "zerostart"
    tap: str = ""
    # The VM's disk, NIC and vsock as the command builder takes them
    # (disks, nets, vsock of zstest.vmmargv's specs).
    devices: dict = field(default_factory=dict)
    # prezero.verify=1 for the patched kernel: every skipped clear is re-read.
    verify: bool = True

    @property
    def config(self) -> str:
        """The report's name for this way: its kind, or KIND-dirty for a control."""
        return f"{self.kind}-dirty" if self.expect == "dirty" else self.kind

    def __post_init__(self) -> None:
        # Which VMM runs the guest, for the harness's progress lines.
        self.vmm = "zerostart" if self.kind == "zerostart" else "qemu"

    def spec(self) -> dict:
        """This way's start in L2 (zstest.vmmargv): (a) zerostart's VMM on
        the pool with its own --disk/--net/--vsock; (b) QEMU through
        `zerostart launch` on the pool, the launcher mapping the devices onto
        QEMU's (virtio-blk-pci, virtio-net-pci + vhost-net, vhost-vsock-pci);
        (c) stock QEMU with hugetlbfs prealloc, OVMF, Debian's kernel and
        initrd and the same devices. QEMU logs to /tmp/NAME.qlog."""
        m, tl = self.mem_mib, f"/tmp/{self.name}.tl.json"
        pool = f"pool:{vmmargv.L2_POOL_SOCKET}"
        plant = PLANT if self.expect == "dirty" else None
        if self.kind == "zerostart":
            return vmmargv.zerostart_run(
                self.kernel, f"console=ttyS0 reboot=k panic=-1 oops=panic {self.guest_args}",
                f"size={m}M,hugepages=on,hugepage_size=2M,prezero={pool}", "tty", tl, extra=plant,
                **self.devices)
        qemu = {**vmmargv.l2_qemu(1, log=f"/tmp/{self.name}.qlog"), "kernel": self.kernel,
                "cmdline": f"console=ttyS0 panic=-1 oops=panic {self.guest_args}", "serial": "stdio"}
        if self.kind == "launch":
            return vmmargv.launch(qemu, f"size={m}M,source={pool}", tl, firmware=vmmargv.L2_OVMF, extra=plant,
                                  **self.devices)
        # vhost=on: the kernel's vhost-net, as the launcher picks where /dev/vhost-net exists.
        nets = [{**n, "vhost": True} for n in self.devices["nets"]]
        return {**qemu, "memory": vmmargv.stock_memory(m), "firmware": vmmargv.L2_OVMF,
                "initrd": f"{ROOTFS_L2}/initrd.img", **self.devices, "nets": nets}

    def ready_spec(self) -> dict | None:
        return vmmargv.memory_ready_probe(self.mem_mib) if self.kind == "stock" else None

    def line(self, cmd: str, ready: str = "") -> str:
        """l2-microvm.sh's list line: name|kind|timeout_s|tap|memory_ready command|command."""
        return "|".join([vmmargv.list_field(x) for x in (self.name, self.kind, str(self.timeout_s), self.tap, ready)]
                        + [cmd])


def scenarios(mem_mib: int, timeout_s: int, verify: bool = True) -> list[MicroScenario]:
    """One per way, in KINDS order, then (verify only) the controls of CONTROLS; scenario i boots
    from L2's i-th disk (/dev/vda, vdb, ...) with its own tap and vsock CID.
    verify: prezero.verify=1 (the test) or =0 (the demo's timing, as in production; no controls,
    since verify=0 cannot catch a planted byte)."""
    out = []
    extra = os.environ.get("ZSE2E_GUEST_APPEND", "")
    ways = [(k, "pass") for k in KINDS] + ([(k, "dirty") for k in CONTROLS] if verify else [])
    for i, (kind, expect) in enumerate(ways):
        disk, tap, mac, cid = f"/dev/vd{chr(ord('a') + i)}", f"zstap{i}", f"52:54:00:77:00:{i + 1:02x}", FIRST_CID + i
        # quiet: systemd's status lines cost an I/O exit per byte on the serial console of a nested guest;
        # loglevel=5 after it: the kernel's warnings still reach the bug-line judge.
        gx = f"root=/dev/vda rw quiet loglevel=5 zsapp.poweroff=1 {extra}".strip()
        if kind in ("zerostart", "launch"):
            kernel = "/zs/kernels/patched"
            gx = f"prezero.verify={int(verify)} {gx}"
        else:
            kernel = f"{ROOTFS_L2}/vmlinuz"
        devices = {"disks": [{"path": disk}], "nets": [{"tap": tap, "mac": mac}], "vsock": {"cid": cid}}
        dirty = expect == "dirty"
        out.append(MicroScenario(f"microvm-{kind}{'-dirty' if dirty else ''}", mem_mib,
                                 source="prealloc" if kind == "stock" else "pool", kernel=kernel, kind=kind,
                                 expect=expect, tap=tap, devices=devices, guest_args=gx, timeout_s=timeout_s,
                                 note=CONTROL_LABEL[kind] if dirty else LABEL[kind], verify=verify))
    return out


def _first(r: launch.LaunchResult, rx: re.Pattern) -> tuple[int, re.Match] | None:
    for t, ln in r.l3:
        m = rx.search(ln)
        if m:
            return t, m
    return None


def phases(r: launch.LaunchResult) -> tuple[dict, dict]:
    """(ms from the VMM's start as L2 saw each phase line, the guest's own uptime_ms at each)."""
    seen, guest = {}, {}
    for t, ln in r.l3:
        m = PHASE_RE.search(ln)
        if m and m.group(1) in PHASES and m.group(1) not in seen and r.t0_ms is not None:
            seen[m.group(1)] = t - r.t0_ms
            guest[m.group(1)] = int(m.group(2))
    return seen, guest


def kernel_counters(r: launch.LaunchResult) -> dict:
    f = _first(r, KCOUNT_RE)
    if not f:
        return {}
    return {k: int(v) for k, v in (x.split("=", 1) for x in f[1].group(1).split() if "=" in x)}


def vsock_phases(r: launch.LaunchResult) -> list[dict]:
    """The guest's phases the VMM (or launcher) received over vsock, from its timeline (the entries
    of its phase list named after a guest phase)."""
    tl = r.timeline or {}
    entries = [p for k in ("guest_phases", "phases") for p in tl.get(k, []) if isinstance(p, dict)]
    return [p for p in entries if p.get("name") in PHASES]


def judge(r: launch.LaunchResult) -> None:
    sc, f = r.sc, r.failures
    if r.rc is None:
        f.append("no ZSL-END line (scenario did not finish)")
    elif r.rc != 0:
        f.append(f"the VMM exited {r.rc} (a clean power-off exits 0)")
    crash = next(iter(e2e.kernel_bug_lines(ln for _, ln in r.l3)), None)
    if crash:
        f.append(f"guest kernel crashed: {crash.strip()[:160]}")
    if r.shut_down():
        f.append(r.shut_down())
    seen, _ = phases(r)
    missing = [p for p in PHASES if p not in seen]
    if missing:
        f.append(f"phases never reported: {', '.join(missing)}")
    app = _first(r, APP_RE)
    if not app:
        f.append("no zsapp verdict")
    elif app[1].group(1) != "PASS":
        f.append(f"zsapp FAIL {app[1].group(2)}")
    disk = _first(r, DISK_RE)
    if not disk or disk[1].group(1) != "ok":
        f.append(f"disk check: {disk[1].group(0) if disk else 'no result'}")
    if not any("reboot: Power down" in ln for _, ln in r.l3):
        last = r.l3[-1][1] if r.l3 else "nothing"
        f.append(f"the guest did not power off (no 'reboot: Power down'; its serial output ended with "
                 f"{last[:120]!r}; {r.end_story()})")
    k = kernel_counters(r)
    if sc.kind == "stock":
        if k.get("pages_skipped", -1) > 0:
            f.append("the stock kernel reports skipped clears")
    else:
        if k.get("pages_skipped", -1) <= 0:
            f.append(f"the patched kernel skipped no clears (hint not used): {k}")
        if sc.expect == "dirty":
            # The control: verify mode itself must catch the planted bytes
            # (zsapp's sweep then finds none: verify clears what it catches).
            if k.get("verify_failures", -1) <= 0:
                f.append(f"prezero.verify=1 did not catch the bytes planted inside the hint: {k}")
        elif k.get("verify_failures", -1) != 0:
            f.append(f"prezero.verify found skipped clears non-zero: {k}")
        if sc.verify and k.get("bytes_verified", -1) <= 0:
            f.append(f"prezero.verify=1 but the kernel verified no bytes: {k}")
        if not sc.verify and k.get("bytes_verified", -1) != 0:
            f.append(f"prezero.verify=0 but the kernel verified bytes (the timing is not production's): {k}")
        got = {p.get("name") for p in vsock_phases(r)}
        if not set(PHASES) <= got:
            f.append(f"phases over vsock: got {sorted(got)}, want all of {list(PHASES)}")
    if (r.timeline or {}).get("phases") is None:
        f.append("no memory_ready measurement")


def row(r: launch.LaunchResult) -> dict:
    seen, guest = phases(r)
    k = kernel_counters(r)
    app = _first(r, APP_RE)
    disk = _first(r, DISK_RE)
    kv = {}
    if app:
        kv = {a: b for a, b in (x.split("=", 1) for x in app[1].group(2).split() if "=" in x)}
    tl = {p["name"]: p["t_ms"] for p in (r.timeline or {}).get("phases", []) if "t_ms" in p}
    nonzero = -1
    if kv:
        nonzero = int(kv.get("bad_pages", -1)) + int(kv.get("nonzero_fresh_pages", -1))
    return {
        "name": r.sc.name,
        "vmm": "zerostart" if r.sc.kind == "zerostart" else "qemu",
        "config": r.sc.config,
        "kernel": "stock" if r.sc.kind == "stock" else "patched",
        "memory_bytes": r.sc.mem_mib * MIB,
        "passed": not r.failures,
        "disk_ok": bool(disk and disk[1].group(1) == "ok"),
        "net_ok": "network_up" in seen,
        "hint_seen": k.get("pages_skipped", -1) > 0 or k.get("pristine_pages", -1) > 0,
        "kernel_verify_failures": k.get("verify_failures", -1),
        "nonzero_bytes": nonzero,
        "phases_ms": {"memory_ready": tl.get("memory_ready"), **{p: seen.get(p) for p in PHASES}},
        # The phases as a timeline, the shape the SLO runner reads from nested reports (tests/slo/microvm.toml).
        "timeline": [{"name": n, "t_ms": t} for n, t in
                     [("process_start", 0), ("memory_ready", tl.get("memory_ready")),
                      *((p, seen.get(p)) for p in PHASES), ("exit", r.wall_ms)] if t is not None],
        # additions
        "guest_uptime_ms": guest,
        "vsock_phases": vsock_phases(r),
        "kernel_counters": k,
        "zsapp": kv,
        "devices": r.sc.devices,
        "guest_args": r.sc.guest_args,
        "prezero_verify": r.sc.verify if r.sc.kind != "stock" else None,
        "vmm_rc": r.rc,
        "wall_ms_in_l2": r.wall_ms,
        "failures": r.failures,
        "note": r.sc.note,
    }


def table(rows: list[dict]) -> str:
    head = ("phase (ms from VMM start)", *(LABEL[k] for k in KINDS))
    by = {r["config"]: r for r in rows}
    lines = [head]
    for ph in ("memory_ready", *PHASES):
        lines.append((ph, *(e2e.fmt_ms((by.get(k) or {}).get("phases_ms", {}).get(ph)) for k in KINDS)))
    lines.append(("disk / net / hint", *(f"{'ok' if by[k]['disk_ok'] else 'FAIL'} / {'ok' if by[k]['net_ok'] else 'FAIL'} / "
                                         f"{'seen' if by[k]['hint_seen'] else '-'}" if k in by else "-" for k in KINDS)))
    lines.append(("verdict", *(("PASS" if by[k]["passed"] else "FAIL") if k in by else "MISSING" for k in KINDS)))
    if any(f"{k}-dirty" in by for k in KINDS):
        def control(k: str) -> str:
            c = by.get(f"{k}-dirty")
            if c is None:
                return "-" if k not in CONTROLS else "MISSING"
            return f"{c['kernel_verify_failures']} caught, {'PASS' if c['passed'] else 'FAIL'}"
        lines.append(("control: planted bytes", *(control(k) for k in KINDS)))
    return "\n".join(e2e.text_table(lines))


def rootfs_dir() -> Path:
    r = subprocess.run(["bash", str(REPO / "guest-rootfs" / "build.sh"), "--print"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        raise build.BuildError("no guest rootfs image; build it with `make rootfs` (guest-rootfs/build.sh)")
    return Path(r.stdout.strip().splitlines()[-1])


def run(a, zs: Path, ovmf: Path, console_log: Path = OUT / "console.log",
        verify: bool = True, l2_retries: list[str] | None = None) -> tuple[list[dict], str | None, int]:
    """Boots L2 once and runs the scenarios (`a.only` selects); returns (report rows, fatal, scenarios asked)."""
    img = rootfs_dir()
    mem = int(os.environ.get("ZSMICROVM_MEM_MIB", "2048"))
    scs = scenarios(mem, int(os.environ.get("ZSMICROVM_TIMEOUT_S", "600")), verify)
    if getattr(a, "only", None):
        want = set(a.only.split(","))
        scs = [s for s in scs if s.name in want]
    # Each scenario its own copy-on-write view of the image: the cached image is never written
    # (one per scenario of the whole list: scenario i boots from the i-th).
    every = scenarios(mem, 1, verify)
    # (Built by options::vmm_cmd; QEMU's default cache said, as `if=virtio` had it.)
    drives = [{"path": str(img / "rootfs.ext4"), "snapshot": True, "cache": "writeback"} for _ in every]
    files = {f"zs/rootfs/{n}": ((img / n).read_bytes(), 0o644) for n in ("vmlinuz", "initrd.img")}
    files["zs/l2-pool.sh"] = ((Path(__file__).parent / "l2-pool.sh").read_bytes(), 0o644)
    print(f"microvm: the Debian rootfs ({img}) to its app, {mem} MiB, three ways in one nested-host boot"
          f"{' (and the controls of two)' if verify else ''}:", flush=True)
    for s in scs:
        print(f"  {s.note}", flush=True)
    results, fatal = launch.run_scenarios(scs, zs, ovmf, pool_mib=mem, region_mib=mem, echo=a.verbose, smp=a.smp,
                                          console_log=console_log, extra_files=files,
                                          script=Path(__file__).parent / "l2-microvm.sh", judge_fn=judge,
                                          l2_disks=drives, l2_extra_mib=768, l2_retries=l2_retries)
    rows = [row(r) for r in results]
    for r in rows:
        r["rootfs"] = str(img)
    return rows, fatal, len(scs)


def ratio_line(rows: list[dict]) -> str:
    """app_ready of (a) and (b) against (c), the stock way."""
    by = {r["config"]: r["phases_ms"].get("app_ready") for r in rows if r["passed"]}
    s = by.get("stock")
    parts = [f"real VM app_ready: stock {e2e.fmt_ms(s)} ms"]
    for k in ("launch", "zerostart"):
        x = by.get(k)
        parts.append(f"{LABEL[k][4:]} {e2e.fmt_ms(x)} ms" + (f", {s / x:.2f}x" if s and x else ""))
    out = "; ".join(parts)
    mem = {r["config"]: r["phases_ms"].get("memory_ready") for r in rows if r["passed"]}
    if mem:
        out += ("\nreal VM memory_ready (the host-side zeroing zerostart takes off the launch path): " +
                ", ".join(f"{k} {e2e.fmt_ms(mem.get(k))} ms" for k in ("stock", "launch", "zerostart") if k in mem) +
                "\n(one run each, in one L2 boot: at 2 GiB most of the boot is systemd's userspace under TCG, "
                "which varies by tens of percent from run to run; what zerostart changes is memory_ready "
                "and the guest kernel's skipped clears, in report.json. (c) also boots through Debian's "
                "initrd, whose kernel has its virtio drivers as modules, where (a) and (b) have them "
                "built in: part of the userspace_started gap is that, not memory)")
    return out


def cmd_microvm(a) -> int:
    t0 = time.monotonic()
    zs, ovmf, _ = launch.inputs(a, "test-microvm", need_patched=True)
    OUT.mkdir(parents=True, exist_ok=True)
    retries: list[str] = []
    rows, fatal, asked = run(a, zs, ovmf, l2_retries=retries)
    path = OUT / "report.json"
    path.write_text(json.dumps({"scenarios": rows, "fatal": fatal, "firmware": str(ovmf), "l2_retries": retries},
                               indent=2) + "\n")
    print("\n" + table(rows) + "\n")
    print(ratio_line(rows))
    for r in rows:
        for fl in r["failures"]:
            print(f"FAIL: microvm: {r['name']}: {fl}")
        if r["passed"]:
            print(f"ok: microvm: {r['name']}")
    print(launch.retries_line("microvm", retries))
    print(f"microvm: report {path}; console log {OUT / 'console.log'}; {time.monotonic() - t0:.0f} s in all")
    ok = fatal is None and len(rows) == asked and all(r["passed"] for r in rows)
    if not ok:
        e2e.CONSOLE_LOG = OUT / "console.log"
        e2e.fail_loudly(fatal, [f"{r['name']}: {fl}" for r in rows for fl in r["failures"]])
        return 1
    print("microvm: PASS")
    return 0
