#!/bin/sh
# L2 script (zse2e.script=launch.sh) of `make test-microvm`: the real cloud
# VM (Debian rootfs on a virtio disk, a virtio NIC on a tap, vsock) booted
# to its app three ways on real kvm-amd in the nested host:
#   stock      QEMU 10 as operators run it: hugetlbfs prealloc=on, OVMF,
#              Debian's stock cloud kernel and initrd from the image;
#   launch     the same QEMU through `zerostart launch` on pool memory, the
#              hint over fw_cfg through OVMF, the patched kernel;
#   zerostart  zerostart's own VMM on the same pool, the patched kernel;
#   *-dirty    (make test-microvm only) launch and zerostart again with a
#              byte planted every 64 MiB of the hint, the negative controls
#              (the only rows run with ZEROSTART_TEST_SWITCHES=1).
#
# The harness (tests/nested-host/microvm.py) attaches one copy-on-write
# view of the rootfs image per scenario to L2 (/dev/vda, /dev/vdb, ...).
# Here: the kernel modules for the devices, a bridge zsbr0 10.77.0.1/24
# with a DHCP server (busybox udhcpd; the guest's systemd-networkd asks
# it, and its "network_up" phase pings the router it hands out, i.e. this
# L2 host), one tap per scenario on the bridge.
#
# /zs/launch.txt: first line "pool|pool_mib|region_mib|regions" (l2-pool.sh), then one scenario
# per line (the line of l2-demo.sh):
#   name|kind|timeout_s|tap|memory_ready command|command
# The commands are whole, shell-quoted, built on the host by `zerostart
# vmm-argv` (tests/nested-host/microvm.py, zstest.vmmargv): this script
# spells no VMM flag. The memory_ready command (stock only) is the stock
# QEMU with the same memory, -S and its monitor on stdio. Output: the
# protocol of l2-launch.sh (ZSL-BEGIN / L3| <ms> <line> / VMM| /
# ZSL-TIMELINE / ZSL-END).
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

tail -n +2 "$list" | while IFS='|' read -r name kind tmo tap ready cmd; do
  [ "$kind" = stock ] || continue
  tap_up "$tap"
  eval "set -- $ready"
  stock_memory_ready "$name" "$@"
  eval "set -- $cmd"
  run "$name" "$tmo" "$@"
done

pool_start

tail -n +2 "$list" | while IFS='|' read -r name kind tmo tap _ready cmd; do
  case "$kind" in
  launch|zerostart)
    tap_up "$tap"
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    # The negative controls plant bytes with a test switch; the ways
    # themselves run as operators run them, with the switches locked.
    case "$name" in
    *-dirty) export ZEROSTART_TEST_SWITCHES=1 ;;
    *) unset ZEROSTART_TEST_SWITCHES ;;
    esac
    eval "set -- $cmd"
    run "$name" "$tmo" "$@" ;;
  esac
done
pool_stop
