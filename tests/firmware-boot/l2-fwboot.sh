#!/bin/sh
# Replaces /zs/scenario.sh in the nested test host (L2) for firmware boots:
# runs `zerostart run --firmware` once per line of /zs/fwboot.txt
#   name|kernel|hint mode|mem_mib|timeout_s|command
# command: the whole zerostart command line, shell-quoted, built on the host
# by `zerostart vmm-argv` (tests/firmware-boot/run.py spec(), zstest.vmmargv):
# this script spells no zerostart flag. It writes the firmware's debug
# console to /tmp/NAME.fw and the serial console to /tmp/NAME.serial, where
# this script reads them. Prints, per run:
#   ZSFW-BEGIN name=..
#   FW| <each line of the firmware's debug console (port 0x402), as it grows>
#   L3| <each line of the guest serial console>
#   VMM| <each line of zerostart's stdout/stderr>
#   ZSFW-END name=.. rc=N wall_ms=N
# --test-corrupt-hint is refused without this (see docs/security.md).
export ZEROSTART_TEST_SWITCHES=1
ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
while IFS='|' read -r name kernel mode mem tmo cmd; do
  case "$name" in ''|'#'*) continue;; esac
  echo "ZSFW-BEGIN name=$name kernel=$kernel mode=$mode mem_mib=$mem"
  if [ ! -f "/zs/kernels/$kernel" ]; then
    echo "ZSFW-END name=$name rc=127 wall_ms=0 error=no-kernel-$kernel"
    continue
  fi
  fw=/tmp/$name.fw; ser=/tmp/$name.serial; out=/tmp/$name.vmm
  t0=$(ms)
  : > "$fw"
  eval "set -- $cmd"
  sh /zs/l2-timeout.sh "$tmo" "$@" > "$out" 2>&1 < /dev/null &
  zpid=$!
  # The firmware log is streamed while it grows: if L2 itself dies, the
  # console still shows how far the firmware got.
  n=0
  show() {
    c=$(wc -l < "$fw")
    if [ "$c" -gt "$n" ]; then
      sed -n "$((n + 1)),${c}p" "$fw" | tr -d '\r' | sed 's/^/FW| /'
      n=$c
    fi
  }
  while kill -0 "$zpid" 2>/dev/null; do sleep 2; show; done
  wait "$zpid"
  rc=$?
  t1=$(ms)
  show
  [ -f "$ser" ] && tr -d '\r' < "$ser" | sed 's/^/L3| /'
  [ -f "$out" ] && sed 's/^/VMM| /' "$out"
  echo "ZSFW-END name=$name rc=$rc wall_ms=$((t1 - t0))"
done < /zs/fwboot.txt
