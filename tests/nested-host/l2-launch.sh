#!/bin/sh
# L2 script (zse2e.script=launch.sh) for `zerostart launch` scenarios: QEMU
# (the pinned 10.x in /qemu) started by the launcher on memory leased from a
# `zerostart pool` running here, OVMF (ZeroStartPkg) at /zs/fw/OVMF.fd
# reading the hint over fw_cfg, the L3 guest's /init is zsinit; vmm
# qemu-direct: the same QEMU booting the kernel directly (SeaBIOS,
# /qemu/share/bios-256k.bin), the hint on its command line. Or
# cloud-hypervisor (/zs/cloud-hypervisor) with CLOUDHV.fd, booting the UKI
# on /zs/esp/<name>.img (kernel, initramfs and command line are in it);
# vmm chv-direct: the same cloud-hypervisor booting the kernel itself
# (--kernel, no firmware), the hint on --cmdline.
#
# /zs/launch.txt: first line "pool|size_mib|region_mib", then one scenario
# per line:
#   name|timeout_s|command
# command: the whole `zerostart launch ... -- <VMM args>` line, shell-quoted,
# built on the host by `zerostart vmm-argv` (tests/nested-host/launch.py,
# zstest.vmmargv): this script spells no VMM flag. The command writes the
# launcher's timeline to /tmp/NAME.tl.json, QEMU's debug console (when the
# row judges firmware lines) to /tmp/NAME.fw and QEMU's log to
# /tmp/NAME.qlog, where this script reads them; a Firecracker row's config
# file is in the image already (/zs/fc/NAME.json).
# Prints per scenario:
#   ZSL-BEGIN name=.. t0_ms=..           (L2 uptime just before the launch)
#   L3| <ms> <line>                      (guest serial, stamped with L2 uptime in ms as it arrives)
#   FW| <line>                           (ZeroStart lines of the firmware's debugcon log)
#   VMM| <line>                          (launcher + QEMU stderr)
#   QLOG| resets=N ended=.. <errors>     (QEMU's log, l2-pool.sh's qlog_line: how the
#                                         guest ended when QEMU exited 0: power-off,
#                                         reset or triple-fault)
#   KVMX| ..                             (L2 KVM's record of a guest that shut down, or a
#                                         count line; l2-pool.sh's kvmx_line)
#   ZSL-TIMELINE name=.. <launcher timeline JSON>
#   ZSL-END name=.. rc=.. wall_ms=..
export ZEROSTART_TEST_SWITCHES=1
. /zs/l2-pool.sh
pool_start
tail -n +2 "$list" | while IFS='|' read -r name tmo cmd; do
  case "$name" in ''|'#'*) continue;; esac
  wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
  fw=/tmp/$name.fw; err=/tmp/$name.err; tl=/tmp/$name.tl.json; rcf=/tmp/$name.rc; ql=/tmp/$name.qlog
  rm -f "$fw" "$err" "$tl" "$rcf" "$ql"
  kvmx_start
  t0=$(ms)
  echo "ZSL-BEGIN name=$name t0_ms=$t0"
  {
    eval "set -- $cmd"
    # timeout -s KILL that samples a guest still running near the limit.
    sh /zs/l2-timeout.sh "$tmo" "$@" 2> "$err" < /dev/null
    echo $? > "$rcf"
  } | while IFS= read -r line; do echo "L3| $(ms) $line"; done
  t1=$(ms)
  [ -f "$fw" ] && grep -a 'ZeroStart' "$fw" | tr -d '\r' | sed 's/^/FW| /'
  [ -f "$err" ] && sed 's/^/VMM| /' "$err"
  qlog_line "$name"
  kvmx_line
  [ -s "$tl" ] && echo "ZSL-TIMELINE name=$name $(tr -d '\n' < "$tl")"
  echo "ZSL-END name=$name rc=$(cat "$rcf" 2>/dev/null || echo 255) wall_ms=$((t1 - t0))"
done
pool_stop
