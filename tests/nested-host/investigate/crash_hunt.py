"""Investigation (not a harness, not run by make; nothing is retried): the demo's launch-direct-4g row N times in
one L2 boot, alternating the patched kernel with the same tree built with the series' option off
(bzImage-noprezero: same config otherwise) on exactly the same path, pool memory and hint
included. A crash with the option off too would point at the bed (or the kernel config), not at
the series. Each row is booted once; every console is kept.

First use, 2026-12-02 (N=90, 30 rows per arm, one L2 boot, 23 min): two
crashes, direct-4g-10-b (patched, fault_batch=0; while printing the start
counters, RIP = io_serial_in+0x14) and direct-4g-84-p (patched; in early
boot, RIP = pci_conf1_read, right after `in (%dx),%eax`), both "#PF on
instruction fetch, kernel, page not present" as in make demo; 0 of 30
with the option off. Every crash seen so far (4) is at the instruction right
after a port I/O instruction, that is, the first fetch after a VM exit.
Not significant between the arms at this size."""
import os, sys, argparse
from pathlib import Path
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent)); sys.path.insert(0, str(ROOT / "tests"))
os.chdir(ROOT)
import demo, launch
if len(sys.argv) != 4:
    sys.exit("usage: PYTHONPATH=tests python3 tests/nested-host/investigate/crash_hunt.py N OVMF.fd TAG "
             "(output in target/investigate/TAG; HUNT_MIB=4096)")
n = int(sys.argv[1]); fw = sys.argv[2]; tag = sys.argv[3]
mem = int(os.environ.get("HUNT_MIB", "4096"))
scs = []
# Three arms, interleaved: p = patched, b = patched with prezero.fault_batch=0 (no batched
# first-touch faults), n = the same tree with the option off.
arms = [("p", "patched", ""), ("b", "patched", " prezero.fault_batch=0"), ("n", "patched-noprezero", "")]
# HUNT_ARMS=p: only those arms; HUNT_EXTRA: more guest arguments for every row
# (e.g. prezero.verify=1). Every row gets zsinit.iomem=1: the kernel's
# physical base, for l2-hunt.sh's page-table walk at a crash.
arms = [a for a in arms if a[0] in os.environ.get("HUNT_ARMS", "pbn")]
arms = [(t, k, " " + f"{e} zsinit.iomem=1 {os.environ.get('HUNT_EXTRA', '')}".strip()) for t, k, e in arms]
for i in range(n):
    tag_, k, extra = arms[i % len(arms)]
    scs.append(demo.DemoScenario(f"direct-{mem // 1024}g-{i}-{tag_}", mem, source="pool",
                                 kernel=k, kind="launch-direct", guest_args=demo.workload_args(mem) + extra,
                                 timeout_s=150 + 45 * mem // 1024, note="hunt"))
a = argparse.Namespace(zerostart=None, firmware=fw)
zs, ovmf, _ = launch.inputs(a, "demo", need_patched=True)
def judge(r):
    demo.judge(r)
    r.failures = [f for f in r.failures if not (r.sc.kernel != "patched" and "skipped no clears" in f)]
out = ROOT / "target" / "investigate" / tag; out.mkdir(parents=True, exist_ok=True)
# pgscan (static, for L2's busybox userland): finds the guest's PGDs in its
# RAM at a crash, see pgscan.c.
pgscan = out / "pgscan"
import subprocess
subprocess.run(["gcc", "-static", "-O2", "-Wall", "-Werror", "-o", str(pgscan), str(HERE / "pgscan.c")], check=True)
res, fatal = launch.run_scenarios(scs, zs, ovmf, pool_mib=mem, region_mib=mem, smp=2,
                                  extra_files={"zs/pgscan": (pgscan.read_bytes(), 0o755)},
                                  console_log=out / "console.log", script=HERE / "l2-hunt.sh",
                                  judge_fn=judge)
for r in res:
    v = r.verdict() or {}
    print("HUNT", r.sc.name, "rc", r.rc, "verdict", v.get("status"), "fail", r.failures)
print("HUNT fatal", fatal)
