#!/bin/sh
# Runs each scenario of the list (one per line, '|'-separated):
#   name|vmm|kernel|mem_mib|memopts|cpus|timeout_s|l3 cmdline|command
# inside L2 and prints, per scenario:
#   ZSE2E-BEGIN name=.. vmm=.. kernel=.. mem_mib=.. memory=..
#   L3| <each line of the L3 serial console>
#   VMM| <each line of the VMM's own stdout/stderr>
#   ZSE2E-TIMELINE name=.. <timeline JSON on one line>   (zerostart only)
#   ZSE2E-END name=.. rc=N wall_ms=N
# command: the VMM's whole command line, shell-quoted, built on the host by
# `zerostart vmm-argv` (tests/nested-host/run.py, zstest.vmmargv): this
# script spells no VMM flag. It writes the serial console to
# /tmp/NAME.serial and zerostart's timeline to /tmp/NAME.timeline.json,
# where this script reads them.
# vmm is "zerostart" (the VMM under test) or "qemu" (the baseline).
# --test-corrupt-hint is refused without this (see docs/security.md).
export ZEROSTART_TEST_SWITCHES=1
list=${1:-/zs/scenarios.txt}
ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
[ -f "$list" ] || { echo "ZSE2E-FATAL no scenario list $list"; exit 1; }
# Each scenario runs once: a crash of the L3 guest is a failure of the run
# (the harness cannot prove it happened outside the kernel under test). Only
# an abort of the L2 QEMU itself is retried, by run.py, outside L2.

run_once() {
  rm -f "$ser" "$out" "$tl"
  if [ ! -f "$k" ]; then
    echo "no kernel $k in the L2 image" > "$out"; rc=127
  elif [ "$vmm" = zerostart ] && [ ! -x /zs/zerostart ]; then
    echo "zerostart binary not in the L2 image" > "$out"; rc=127
  elif [ "$vmm" = zerostart ] || [ "$vmm" = qemu ]; then
    eval "set -- $vmmcmd"
    # timeout -s KILL that samples a guest still running near the limit
    # (HANG| lines, in the VMM's output).
    sh /zs/l2-timeout.sh "$tmo" "$@" > "$out" 2>&1 < /dev/null
    rc=$?
  else
    echo "unknown vmm $vmm" > "$out"; rc=2
  fi
}

while IFS='|' read -r name vmm kernel mem memopts cpus tmo cmd vmmcmd; do
  case "$name" in ''|'#'*) continue;; esac
  echo "ZSE2E-BEGIN name=$name vmm=$vmm kernel=$kernel mem_mib=$mem memory=$memopts cpus=$cpus"
  k=/zs/kernels/$kernel
  ser=/tmp/$name.serial; out=/tmp/$name.vmm; tl=/tmp/$name.timeline.json
  free=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
  echo "ZSE2E-INFO name=$name l2_free_hugepages=$free cmdline=$cmd"
  t0=$(ms)
  run_once
  t1=$(ms)
  [ "$rc" = 137 ] && echo "ZSE2E-TIMEOUT name=$name after ${tmo}s (killed)"
  [ -f "$ser" ] && tr -d '\r' < "$ser" | sed 's/^/L3| /'
  [ -f "$out" ] && sed 's/^/VMM| /' "$out"
  [ -s "$tl" ] && echo "ZSE2E-TIMELINE name=$name $(tr -d '\n' < "$tl")"
  echo "ZSE2E-END name=$name rc=$rc wall_ms=$((t1 - t0))"
done < "$list"
