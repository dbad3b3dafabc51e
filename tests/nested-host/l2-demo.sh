#!/bin/sh
# L2 script (zse2e.script=demo.sh) of `make demo`: the same guest, the same
# workload, five ways, on real kvm-amd in the nested host:
#   stock      QEMU 10 with what operators run today: guest RAM on hugetlbfs
#              with prealloc=on (the host kernel zeroes every page before the
#              guest starts), OVMF without a hint, Debian's stock kernel
#              (init_on_alloc=1, its default);
#   stock-direct  the same memory, the kernel booted directly on QEMU's
#              microvm (qboot, no PCI, no OVMF);
#   launch     the same QEMU started by `zerostart launch` on memory leased
#              from `zerostart pool` (zeroed off the launch path), the hint
#              over fw_cfg through the same OVMF, the patched kernel;
#   launch-direct  that microvm direct boot through `zerostart launch`: the
#              pool, the hint on the kernel command line, the patched kernel;
#   zerostart  zerostart's own VMM on the same pool, direct kernel boot,
#              the patched kernel.
#
# /zs/launch.txt: first line "pool|pool_mib|region_mib|regions" (l2-pool.sh), then one scenario
# per line (the line of l2-microvm.sh, tap empty):
#   name|kind|timeout_s|tap|memory_ready command|command
# The commands are whole, shell-quoted, built on the host by `zerostart
# vmm-argv` (tests/nested-host/demo.py, zstest.vmmargv): this script spells
# no VMM flag. The memory_ready command (stock kinds only) is the stock
# QEMU with the same memory, -S and its monitor on stdio.
# Stock scenarios run first, before the pool takes the hugepages they use;
# the pool then fills (off the launch path: no measurement runs meanwhile)
# and the launch and zerostart scenarios follow. Output: the protocol of
# l2-launch.sh (ZSL-BEGIN / L3| <ms> <line> / VMM| / ZSL-TIMELINE / ZSL-END),
# so tests/nested-host/launch.py parses both. For stock QEMU, which has no
# timeline, memory_ready is measured right before its boot (l2-pool.sh's
# stock_memory_ready); the others write /tmp/NAME.tl.json themselves.
. /zs/l2-pool.sh

tail -n +2 "$list" | while IFS='|' read -r name kind tmo _tap ready cmd; do
  case "$kind" in stock|stock-direct) ;; *) continue;; esac
  eval "set -- $ready"
  stock_memory_ready "$name" "$@"
  eval "set -- $cmd"
  run "$name" "$tmo" "$@"
done

pool_start

tail -n +2 "$list" | while IFS='|' read -r name kind tmo _tap _ready cmd; do
  case "$kind" in
  launch|launch-direct|zerostart)
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    eval "set -- $cmd"
    run "$name" "$tmo" "$@" ;;
  esac
done
pool_stop
