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
# /zs/launch.txt: first line "pool|size_mib|region_mib|regions" (l2-pool.sh), then one scenario
# per line:
#   name|timeout_s|command
# command: the whole `zerostart launch ... -- <VMM args>` line, shell-quoted,
# built on the host by `zerostart vmm-argv` (tests/nested-host/launch.py,
# zstest.vmmargv): this script spells no VMM flag. The command writes the
# launcher's timeline to /tmp/NAME.tl.json, QEMU's debug console (when the
# row judges firmware lines) to /tmp/NAME.fw and QEMU's log to
# /tmp/NAME.qlog, where this script reads them; a Firecracker row's config
# file is in the image already (/zs/fc/NAME.json).
# Prints per scenario (l2-pool.sh's run(), as every L2 script):
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
  rm -f "/tmp/$name.tl.json"
  eval "set -- $cmd"
  run "$name" "$tmo" "$@"
done
pool_stop
