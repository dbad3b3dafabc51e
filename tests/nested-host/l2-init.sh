#!/bin/sh
# /init of the nested test host (L2): loads KVM, runs the scenarios, powers off.
# Every line the harness parses starts with ZSE2E-. Anything going wrong must
# end in poweroff, never in a shell waiting for input: the harness also has
# its own timeouts, but a silent hang wastes them.
/bin/busybox mkdir -p /proc /sys /dev /tmp /usr/bin /usr/sbin /sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
echo "ZSE2E-L2 up uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r) hugepages=$(cat /proc/sys/vm/nr_hugepages) mem_kb=$(awk '/MemTotal/{print $2}' /proc/meminfo)"
fatal() { echo "ZSE2E-FATAL $*"; poweroff -f; sleep 5; echo o > /proc/sysrq-trigger; }
for m in irqbypass kvm kvm-amd; do
  out=$(insmod /lib/modules/$m.ko 2>&1) || fatal "insmod $m: $out"
done
[ -c /dev/kvm ] || fatal "no /dev/kvm after loading kvm-amd (does the L2 CPU model have svm?)"
echo "ZSE2E-L2 kvm ready nested=$(cat /sys/module/kvm_amd/parameters/nested 2>/dev/null)"
sh /zs/scenario.sh /zs/scenarios.txt
echo "ZSE2E-DONE rc=$?"
poweroff -f
