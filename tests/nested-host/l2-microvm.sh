#!/bin/sh
# L2 script (zse2e.script=launch.sh) of `make test-microvm`: the real cloud
# VM (Debian rootfs on a virtio disk, a virtio NIC on a tap, vsock) booted
# to its app three ways on real kvm-amd in the nested host:
#   stock      QEMU 10 as operators run it: hugetlbfs prealloc=on, OVMF,
#              Debian's stock cloud kernel and initrd from the image;
#   launch     the same QEMU through `zerostart launch` on pool memory, the
#              hint over fw_cfg through OVMF, the patched kernel;
#   zerostart  zerostart's own VMM on the same pool, the patched kernel.
#
# The harness (tests/nested-host/microvm.py) attaches one copy-on-write
# view of the rootfs image per scenario to L2 (/dev/vda, /dev/vdb, ...).
# Here: the kernel modules for the devices, a bridge zsbr0 10.77.0.1/24
# with a DHCP server (busybox udhcpd; the guest's systemd-networkd asks
# it, and its "network_up" phase pings the router it hands out, i.e. this
# L2 host), one tap per scenario on the bridge.
#
# /zs/launch.txt: first line "pool|pool_mib|region_mib", then one scenario
# per line:  name|kind|mem_mib|kernel|timeout_s|tap|vmm_args|guest cmdline
# (vmm_args: the disk/NIC/vsock arguments in the syntax of what runs the VM:
# QEMU's for stock, zerostart launch's and zerostart run's own options; made by
# microvm.py). Output: the protocol of l2-launch.sh (ZSL-BEGIN / L3| <ms>
# <line> / VMM| / ZSL-TIMELINE / ZSL-END).
. /zs/l2-pool.sh

for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk \
  tun tap vhost_iotlb vhost vhost_net vsock vmw_vsock_virtio_transport_common vhost_vsock llc stp bridge; do
  out=$(insmod "/lib/modules/$m.ko" 2>&1) || { echo "ZSE2E-FATAL insmod $m: $out"; exit 1; }
done
mdev -s 2>/dev/null
for d in /dev/net/tun /dev/vhost-net /dev/vhost-vsock; do
  [ -c "$d" ] || { echo "ZSE2E-FATAL no $d after loading the modules"; exit 1; }
done
echo "ZSL-NOTE disks: $(ls /sys/block | tr '\n' ' ')"

brctl addbr zsbr0 && echo 0 > /sys/class/net/zsbr0/bridge/forward_delay && ip addr add 10.77.0.1/24 dev zsbr0 && ip link set zsbr0 up ||
  { echo "ZSE2E-FATAL cannot set up the bridge zsbr0"; exit 1; }
cat > /tmp/udhcpd.conf <<EOF
start 10.77.0.100
end 10.77.0.199
interface zsbr0
lease_file /tmp/udhcpd.leases
option subnet 255.255.255.0
option router 10.77.0.1
option lease 3600
EOF
touch /tmp/udhcpd.leases
udhcpd /tmp/udhcpd.conf || { echo "ZSE2E-FATAL udhcpd did not start"; exit 1; }

# tap_up NAME: a persistent tap on the bridge, up (the VMM opens it by name).
tap_up() {
  tunctl -t "$1" >/dev/null && brctl addif zsbr0 "$1" && ip link set "$1" up ||
    echo "ZSL-NOTE cannot set up tap $1"
}

tail -n +2 "$list" | while IFS='|' read -r name kind mem kernel tmo tap vmm_args gx; do
  [ "$kind" = stock ] || continue
  tap_up "$tap"
  stock_memory_ready "$name" "$mem"
  # shellcheck disable=SC2046,SC2086
  run "$name" "$tmo" $q -L /qemu/share $(stock_mem "$mem") -cpu host -smp 1 -bios /zs/fw/OVMF.fd \
    -nodefaults -no-user-config -display none -no-reboot -serial stdio $(qlog_args "$name") \
    -kernel "$kernel" $vmm_args -append "console=ttyS0 panic=-1 oops=panic $gx"
done

pool_start

tail -n +2 "$list" | while IFS='|' read -r name kind mem kernel tmo tap vmm_args gx; do
  case "$kind" in
  launch)
    tap_up "$tap"
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    # shellcheck disable=SC2046,SC2086
    run "$name" "$tmo" /zs/zerostart launch --vmm qemu --vmm-binary $q \
      --memory "size=${mem}M,source=pool:$sock" --firmware /zs/fw/OVMF.fd --timeline "/tmp/$name.tl.json" \
      $vmm_args -- \
      -L /qemu/share -machine q35,accel=kvm -cpu host -smp 1 -nodefaults -no-user-config \
      -display none -no-reboot -serial stdio $(qlog_args "$name") -kernel "$kernel" \
      -append "console=ttyS0 panic=-1 oops=panic $gx" ;;
  zerostart)
    tap_up "$tap"
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    # shellcheck disable=SC2086
    run "$name" "$tmo" /zs/zerostart run --kernel "$kernel" \
      --cmdline "console=ttyS0 reboot=k panic=-1 oops=panic $gx" --cpus boot=1 \
      --memory "size=${mem}M,hugepages=on,hugepage_size=2M,prezero=pool:$sock" \
      --serial tty --timeline "/tmp/$name.tl.json" $vmm_args ;;
  esac
done
pool_stop
