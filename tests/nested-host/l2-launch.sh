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
#   name|vmm|mem_mib|source|kernel|timeout_s|debugcon on/off|launcher extras|guest kernel command line
# (cloud-hypervisor's guest has its command line in the UKI already)
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
tail -n +2 "$list" | while IFS='|' read -r name vmm mem source kernel tmo dc lx cmdline; do
  case "$name" in ''|'#'*) continue;; esac
  wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
  # source: pool | prefault | none, optionally with more --memory keys
  # (pool,hint=off: the same memory without the hint, the demo's baseline)
  case "$source" in pool*) src="pool:$sock${source#pool}";; *) src=$source;; esac
  fw=/tmp/$name.fw; err=/tmp/$name.err; tl=/tmp/$name.tl.json; rcf=/tmp/$name.rc; ql=/tmp/$name.qlog
  rm -f "$fw" "$err" "$tl" "$rcf" "$ql"
  kvmx_start
  t0=$(ms)
  echo "ZSL-BEGIN name=$name t0_ms=$t0"
  {
    if [ "$vmm" = cloud-hypervisor ]; then
      # No debug console: CLOUDHV.fd logs to the serial port (its ZeroStart
      # lines arrive as L3 lines), and cloud-hypervisor's --debug-console
      # at 0x402 overlaps a device of its own (BusError(Overlap)).
      timeout -s KILL "$tmo" /zs/zerostart launch --vmm cloud-hypervisor --vmm-binary /zs/cloud-hypervisor \
        --memory "size=${mem}M,source=$src" --firmware /zs/fw/CLOUDHV.fd --timeline "$tl" $lx -- \
        --cpus boot=1 --disk "path=/zs/esp/$name.img,readonly=on" --serial tty --console off \
        2> "$err" < /dev/null
    elif [ "$vmm" = firecracker ]; then
      # Firecracker reads everything from its config file; the launcher
      # adds the hint to boot_args and hands it a sealed copy.
      printf '{"boot-source":{"kernel_image_path":"/zs/kernels/%s.vmlinux","initrd_path":"/zs/l3-initramfs.cpio.gz","boot_args":"%s"},"drives":[],"machine-config":{"vcpu_count":1,"mem_size_mib":%s}}\n' \
        "$kernel" "$cmdline" "$mem" > "/tmp/$name.fc.json"
      timeout -s KILL "$tmo" /zs/zerostart launch --vmm firecracker --vmm-binary /zs/firecracker \
        --memory "size=${mem}M,source=$src" --timeline "$tl" $lx -- \
        --config-file "/tmp/$name.fc.json" 2> "$err" < /dev/null
    elif [ "$vmm" = chv-direct ]; then
      timeout -s KILL "$tmo" /zs/zerostart launch --vmm cloud-hypervisor --vmm-binary /zs/cloud-hypervisor \
        --memory "size=${mem}M,source=$src" --timeline "$tl" $lx -- \
        --cpus boot=1 --kernel "/zs/kernels/$kernel" --initramfs /zs/l3-initramfs.cpio.gz \
        --cmdline "$cmdline" --serial tty --console off 2> "$err" < /dev/null
    else
      dcargs=
      [ "$dc" = on ] && dcargs="-debugcon file:$fw -global isa-debugcon.iobase=0x402"
      # qemu-direct: QEMU boots the kernel itself (SeaBIOS and its
      # linuxboot option ROM, no OVMF): the hint rides on -append.
      fwargs="--firmware /zs/fw/OVMF.fd"
      [ "$vmm" = qemu-direct ] && fwargs=
      timeout -s KILL "$tmo" /zs/zerostart launch --vmm qemu --vmm-binary /qemu/bin/qemu-system-x86_64 \
        --memory "size=${mem}M,source=$src" $fwargs --timeline "$tl" $lx -- \
        -L /qemu/share -machine q35,accel=kvm -cpu host -smp 1 -nodefaults -no-user-config \
        -display none -no-reboot -serial stdio $dcargs $(qlog_args "$name") \
        -kernel "/zs/kernels/$kernel" -initrd /zs/l3-initramfs.cpio.gz \
        -append "$cmdline" 2> "$err" < /dev/null
    fi
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
