#!/usr/bin/env python3
"""make test-vmm: boots the bare-metal probe guest (tests/probe) through
`zerostart run` on /dev/kvm with each memory backing, with and without the
pre-zeroed hint, with a corrupted and a dirty hint, several vCPUs and RAM
above the 3 GiB hole, and checks the probe's verdict line and the timeline
JSON. The table below is the suite; zstest.suite runs it.

  python3 tests/vmm/cases.py [--list] [CASE...]     (default: every case)
  make test-vmm VMM_CASES="4k 2m"                   (the same, built first)

ZEROSTART_BIN and PROBE_BZIMAGE name the release zerostart and the probe
(make builds them). Needs root for the 2M hugepage cases: the pool is grown
and given back at the end, even on failure or a signal (zstest.hugepages).
"""

import sys

from zstest.suite import Boot, Case, Reserve, main

MIB = 1 << 20
# Every booted case needs every phase, an i8042 reset exit and the prezero
# report (zstest.probe checks the report's schema).
PHASES = ("process_start", "memory_ready", "first_kvm_run", "kernel_started", "first_serial_output", "test_done",
          "exit")
VALID = "^ZSPROBE: PASS hint=valid "
ABSENT = "^ZSPROBE: PASS hint=absent "
CMD_VALID = "console=ttyS0 reboot=k panic=1 zsprobe.expect=valid"
CMD_ABSENT = "console=ttyS0 reboot=k panic=1 zsprobe.expect=absent"


def booted(name: str, verdict: str, check: str, *args: str) -> Boot:
    """A boot that must exit 0 with VERDICT on the serial line and CHECK (a
    Python expression over `j`, the timeline JSON) true."""
    return Boot(name, 0, verdict, args,
                check=f"j['exit'] == {{'reason': 'i8042 reset', 'kind': 'reset', 'code': 0}} and ({check})",
                phases=PHASES)


CASES = [
    Case("4k", booted(
        "4k", VALID,
        f"j['memory_bytes'] == 512*{MIB} and j['prezero']['backing'] == 'anon_4k' "
        f"and j['prezero']['hint_bytes'] > 500*{MIB}",
        "--memory", "size=512M,hugepages=off,thp=off", "--cmdline", CMD_VALID)),
    Case("4k-off", booted(
        "4k-off", ABSENT, "j['prezero']['mode'] == 'off' and j['prezero']['hint_ranges'] == 0",
        "--memory", "size=512M,hugepages=off,thp=off,prezero=off", "--cmdline", CMD_ABSENT)),
    Case("4k-prefault", booted(
        "4k-prefault", VALID,
        f"j['prezero']['bytes'] == 1024*{MIB} and j['prezero']['method'] in ('nt_engine', 'populate_write')",
        "--memory", "size=1G,thp=off,prefault=on", "--cmdline", CMD_VALID)),
    Case("thp", booted(
        "thp", VALID, "j['prezero']['backing'] == 'anon_thp'",
        "--memory", "size=512M", "--cmdline", CMD_VALID)),
    Case("2m", Reserve(2048, 256), booted(
        "2m", VALID, f"j['prezero']['backing'] == 'hugetlb_2m' and j['prezero']['bytes'] == 512*{MIB}",
        "--memory", "size=512M,hugepages=on,hugepage_size=2M,prefault=on", "--cmdline", CMD_VALID)),
    Case("2m-off", Reserve(2048, 256), booted(
        "2m-off", ABSENT, "j['prezero']['backing'] == 'hugetlb_2m' and j['prezero']['hint_ranges'] == 0",
        "--memory", "size=512M,hugepages=on,prezero=off", "--cmdline", CMD_ABSENT)),
    Case("checksum", booted(
        "checksum", "^ZSPROBE: FAIL hint=invalid error=BadChecksum", "True",
        "--memory", "size=512M", "--test-corrupt-hint=checksum")),
    # The checker must be able to fail: one planted byte is found.
    Case("dirty", booted(
        "dirty", "^ZSPROBE: FAIL hint=valid nonzero_bytes=1 ", "True",
        "--memory", "size=512M", "--test-corrupt-hint=dirty")),
    # --verify-hint catches the same planted byte before the guest runs.
    Case("verify-dirty", Boot(
        "verify-dirty", 1, "hinted-zero guest memory is not zero",
        ("--memory", "size=512M", "--test-corrupt-hint=dirty", "--verify-hint"))),
    Case("smp", booted(
        "smp", VALID, "j['vcpus'] == 4",
        "--cpus", "boot=4", "--memory", "size=512M", "--cmdline", CMD_VALID)),
    # Crosses the 3..4 GiB MMIO hole: two hint ranges.
    Case("4g", booted(
        "4g", "^ZSPROBE: PASS hint=valid ranges=2 ",
        f"j['memory_bytes'] == 4096*{MIB} and j['prezero']['hint_ranges'] == 2",
        "--memory", "size=4G", "--cmdline", CMD_VALID)),
]

if __name__ == "__main__":
    # --test-corrupt-hint is refused without ZEROSTART_TEST_SWITCHES (docs/security.md).
    sys.exit(main("test-vmm", CASES, sys.argv[1:], env={"ZEROSTART_TEST_SWITCHES": "1"}))
