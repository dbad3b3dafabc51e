#!/usr/bin/env python3
"""make test-pool, the VMM part: zerostart boots the probe guest from pool
memory, 4K shmem and 2M hugetlb pools. The table below is the suite;
zstest.suite runs it. The pool's crate tests and its kill, holder and
--hugetlbfs tests on 2M memory are make's (mk/pool.mk,
tests/pool/with-hugetlbfs.sh).

Per page size: a two-region pool (256M in 128M regions, --verify), three
probe boots from it, so a region is reused after a VM dirtied it, and after
the first a negative control (a byte planted in the lease, which
--verify-hint must refuse before the guest runs); before
each boot the pool must have every region clean (`zerostart pool status
--wait-clean`), the probe must read every hinted byte zero, and at the end
every lease (4) must have come back and been scrubbed without being retired.

  python3 tests/pool/cases.py [--list] [CASE...]     (default: every case)

ZEROSTART_BIN and PROBE_BZIMAGE name the release zerostart and the probe
(make builds them). The 2M case needs root: the pool's pages are grown and
given back at the end, even on failure or a signal (zstest.hugepages);
without root it says SKIP, or fails under ZEROSTART_REQUIRE_HUGEPAGES=1.
"""

import json
import os
import subprocess
import sys

from zstest import suite
from zstest.suite import Boot, Case, Do, Reserve, main

VERDICT = "^ZSPROBE: PASS hint=valid .* nonzero_bytes=0 "
CLEAN_TIMEOUT_S = 120


def zerostart(*args: str) -> list[str]:
    return [os.environ.get("ZEROSTART_BIN", "zerostart"), *args]


def serve(page: str):
    """Starts the pool daemon for PAGE (stopped when the run ends)."""
    def step(r):
        if subprocess.run(zerostart("pool", "--help"), capture_output=True).returncode != 0:
            r.skip("the VM boots from pool memory: this zerostart has no 'pool' subcommand (prezero=pool not mounted)")
            r.abandon()
        suite.serve(r, zerostart("pool", "serve", "--socket", str(r.work / f"pool-{page}.sock"), "--size", "256M",
                                 "--region-size", "128M", "--page", page, "--verify"), r.work / f"pool-{page}.log")
    return step


def clean(page: str, why: str):
    """Until the pool's every byte is clean (scrubbed and not leased), at most
    CLEAN_TIMEOUT_S; else one line naming the pool's state and its log."""
    def step(r):
        p = subprocess.run(zerostart("pool", "status", "--socket", str(r.work / f"pool-{page}.sock"), "--wait-clean",
                                     "--timeout", str(CLEAN_TIMEOUT_S)),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if p.returncode != 0:
            r.fail(f"{why}: {(p.stderr.strip().splitlines() or [''])[-1]} ({r.work / f'pool-{page}.log'})")
            r.abandon()
    return step


def status(page: str):
    """Every lease came back and was scrubbed; none retired, no scrub failed."""
    def step(r):
        p = subprocess.run(zerostart("pool", "status", "--socket", str(r.work / f"pool-{page}.sock"), "--json"),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        try:
            s = json.loads(p.stdout)
        except ValueError:
            r.fail(f"pool status --json printed no JSON (exit {p.returncode}): {p.stderr.strip()}")
            return
        if s.get("leases_total") == 4 and s.get("retired_total") == 0 and s.get("scrub_failures") == 0:
            r.ok(f"3 probe boots and a refused control from a {s['page']} pool: every hinted byte zero; "
                 f"4 leases returned and scrubbed "
                 f"({s['scrubbed_bytes'] >> 20} MiB), none retired")
        else:
            r.fail(f"want 4 leases, 0 retired, 0 scrub failures: {s}")
    return step


def pool_case(name: str, page: str, memory: str, *first):
    steps = [*first, Do(f"serve-{page}", serve(page))]
    mem = ("--memory", f"size=128M,{memory}prezero=pool:{{work}}/pool-{page}.sock")
    for i in (1, 2, 3):
        steps.append(Do(f"clean-{page}-{i}", clean(page, f"the {page} pool never had every region clean (boot {i})")))
        steps.append(Boot(f"pool-{page}-boot{i}", 0, VERDICT, mem, check="j['prezero']['method'] == 'pool_lease'"))
        if i == 1:
            # The negative control of --verify-hint on pool memory: a byte
            # planted in the leased region is refused before the guest
            # runs; the region goes back dirty, and the next boots (which
            # reuse it) must still read every hinted byte zero.
            steps.append(Boot(f"pool-{page}-control-verify", 1, "hinted-zero guest memory is not zero",
                              (*mem, "--test-corrupt-hint=dirty", "--verify-hint")))
    steps.append(Do(f"clean-{page}-end", clean(page, f"the {page} pool did not scrub its 3 returned leases")))
    steps.append(Do(f"status-{page}", status(page)))
    return Case(name, *steps)


# Without root the 2M pool cannot have its pages: SKIP, unless make asks
# for every hugepage test to run (ZEROSTART_REQUIRE_HUGEPAGES=1).
SKIP_2M = (None if os.environ.get("ZEROSTART_REQUIRE_HUGEPAGES") == "1"
           else "probe boots from a 2M pool: the hugepages cannot be reserved (not root?)")

CASES = [
    pool_case("4k", "4K", ""),
    pool_case("2m", "2M", "hugepages=on,", Reserve(2048, 192, skip=SKIP_2M)),
]

if __name__ == "__main__":
    # --test-corrupt-hint (the control) is refused without ZEROSTART_TEST_SWITCHES.
    sys.exit(main("test-pool", CASES, sys.argv[1:], env={"ZEROSTART_TEST_SWITCHES": "1"}))
