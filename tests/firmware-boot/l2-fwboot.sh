#!/bin/sh
# Replaces /zs/scenario.sh in the nested test host (L2) for firmware boots:
# runs `zerostart run --firmware` once per line of /zs/fwboot.txt
#   name|kernel|hint mode|mem_mib|timeout_s|zerostart extras
# (kernel: a name under /zs/kernels, e.g. debian-6.12 or patched; the patched
# kernel's console is not quiet, so its "zerostart:" hint lines are seen)
# and prints, per run:
#   ZSFW-BEGIN name=..
#   FW| <each line of the firmware's debug console (port 0x402), as it grows>
#   L3| <each line of the guest serial console>
#   VMM| <each line of zerostart's stdout/stderr>
#   ZSFW-END name=.. rc=N wall_ms=N
# --test-corrupt-hint is refused without this (see docs/security.md).
export ZEROSTART_TEST_SWITCHES=1
ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
while IFS='|' read -r name kernel mode mem tmo extra; do
  case "$name" in ''|'#'*) continue;; esac
  echo "ZSFW-BEGIN name=$name kernel=$kernel mode=$mode mem_mib=$mem"
  if [ ! -f "/zs/kernels/$kernel" ]; then
    echo "ZSFW-END name=$name rc=127 wall_ms=0 error=no-kernel-$kernel"
    continue
  fi
  # loglevel=5 after quiet: the kernel's warnings reach the bug-line judge.
  quiet="quiet loglevel=5"
  # The patched kernel: log the hint, and verify every clear it skips.
  [ "$kernel" = debian-6.12 ] || quiet="loglevel=7 prezero.verify=1"
  fw=/tmp/$name.fw; ser=/tmp/$name.serial; out=/tmp/$name.vmm
  t0=$(ms)
  : > "$fw"
  sh /zs/l2-timeout.sh "$tmo" /zs/zerostart run --firmware /zs/fw/CLOUDHV.fd \
    --kernel "/zs/kernels/$kernel" --initramfs /zs/l3-initramfs.cpio.gz \
    --cmdline "console=ttyS0 reboot=k panic=-1 oops=panic $quiet zsinit.check_pct=85" \
    --firmware-hint "$mode" --memory "size=${mem}M,hugepages=on" \
    --serial "file=$ser" --debugcon "$fw" $extra > "$out" 2>&1 < /dev/null &
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
