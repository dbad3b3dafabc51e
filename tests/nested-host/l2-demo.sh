#!/bin/sh
# L2 script (zse2e.script=demo.sh) of `make demo`: the same guest, the same
# workload, five ways, on real kvm-amd in the nested host:
#   stock      QEMU 10 with what operators run today: guest RAM on hugetlbfs
#              with prealloc=on (the host kernel zeroes every page before the
#              guest starts), OVMF without a hint, Debian's stock kernel
#              (init_on_alloc=1, its default);
#   stock-direct  the same with the kernel booted directly (SeaBIOS, no OVMF);
#   launch     the same QEMU started by `zerostart launch` on memory leased
#              from `zerostart pool` (zeroed off the launch path), the hint
#              over fw_cfg through the same OVMF, the patched kernel;
#   launch-direct  QEMU's direct kernel boot through `zerostart launch`: the
#              pool, the hint on the kernel command line, the patched kernel;
#   zerostart  zerostart's own VMM on the same pool, direct kernel boot,
#              the patched kernel.
#
# /zs/launch.txt: first line "pool|pool_mib|region_mib", then one scenario
# per line:  name|kind|mem_mib|kernel|timeout_s|guest cmdline extras
# Stock scenarios run first, before the pool takes the hugepages they use;
# the pool then fills (off the launch path: no measurement runs meanwhile)
# and the launch and zerostart scenarios follow. Output: the protocol of
# l2-launch.sh (ZSL-BEGIN / L3| <ms> <line> / VMM| / ZSL-TIMELINE / ZSL-END),
# so tests/nested-host/launch.py parses both. For stock QEMU, which has no
# timeline, memory_ready is measured right before its boot: the same QEMU
# command with -S, quit from the monitor once it is up (prealloc done).
. /zs/l2-pool.sh

tail -n +2 "$list" | while IFS='|' read -r name kind mem kernel tmo gx; do
  case "$kind" in stock) bios="-bios /zs/fw/OVMF.fd";; stock-direct) bios=;; *) continue;; esac
  stock_memory_ready "$name" "$mem"
  # shellcheck disable=SC2046,SC2086
  run "$name" "$tmo" $q -L /qemu/share $(stock_mem "$mem") -cpu host -smp 1 $bios \
    -nodefaults -no-user-config -display none -no-reboot -serial stdio \
    -kernel "/zs/kernels/$kernel" -initrd /zs/l3-initramfs.cpio.gz \
    -append "console=ttyS0 panic=-1 oops=panic quiet zsinit.halt=poweroff $gx"
done

pool_start

tail -n +2 "$list" | while IFS='|' read -r name kind mem kernel tmo gx; do
  case "$kind" in
  launch|launch-direct)
    fw="--firmware /zs/fw/OVMF.fd"
    [ "$kind" = launch-direct ] && fw=
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    # shellcheck disable=SC2086
    run "$name" "$tmo" /zs/zerostart launch --vmm qemu --vmm-binary $q \
      --memory "size=${mem}M,source=pool:$sock" $fw --timeline "/tmp/$name.tl.json" -- \
      -L /qemu/share -machine q35,accel=kvm -cpu host -smp 1 -nodefaults -no-user-config \
      -display none -no-reboot -serial stdio \
      -kernel "/zs/kernels/$kernel" -initrd /zs/l3-initramfs.cpio.gz \
      -append "console=ttyS0 panic=-1 oops=panic quiet zsinit.halt=poweroff $gx" ;;
  zerostart)
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    run "$name" "$tmo" /zs/zerostart run --kernel "/zs/kernels/$kernel" --initramfs /zs/l3-initramfs.cpio.gz \
      --cmdline "console=ttyS0 reboot=k panic=-1 oops=panic quiet $gx" --cpus boot=1 \
      --memory "size=${mem}M,hugepages=on,hugepage_size=2M,prezero=pool:$sock" \
      --serial tty --timeline "/tmp/$name.tl.json" ;;
  esac
done
pool_stop
