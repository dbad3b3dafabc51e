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
# zse2e.kvm_amd=a=1,b=0 on the L2 command line: kvm-amd module parameters (experiments).
# zse2e.script=NAME: run /zs/NAME (delivered in the harness's extra cpio, e.g.
# the pool benchmark's tests/pool/nested-bench-l2.sh) instead of the scenarios.
kvm_amd_args=
script=
for a in $(cat /proc/cmdline); do
  case "$a" in
    zse2e.kvm_amd=*) kvm_amd_args=$(echo "${a#zse2e.kvm_amd=}" | tr ',' ' ');;
    zse2e.script=*) script=${a#zse2e.script=};;
  esac
done
for m in irqbypass kvm kvm-amd; do
  args=; [ "$m" = kvm-amd ] && args=$kvm_amd_args
  out=$(insmod /lib/modules/$m.ko $args 2>&1) || fatal "insmod $m $args: $out"
done
[ -c /dev/kvm ] || fatal "no /dev/kvm after loading kvm-amd (does the L2 CPU model have svm?)"
p=/sys/module/kvm_amd/parameters
# Where this boot's kernel text (KASLR) and its kvm modules lie: a snapshot
# of a stuck L2 names the function at each CPU's RIP with it
# (zstest.qemu.parse_l2_layout, symbolize).
echo "ZSE2E-L2 text=$(awk '$3=="_text"{print $1; exit}' /proc/kallsyms) modules=$(awk '{printf "%s%s@%s:%s", (NR>1 ? "," : ""), $1, $6, $2}' /proc/modules)"
echo "ZSE2E-L2 kvm ready nested=$(cat $p/nested) npt=$(cat $p/npt) vgif=$(cat $p/vgif 2>/dev/null) nrips=$(cat $p/nrips 2>/dev/null) avic=$(cat $p/avic 2>/dev/null)"
if [ -n "$script" ]; then
  case "$script" in */*|.*) fatal "zse2e.script=$script: a file name under /zs expected";; esac
  [ -f "/zs/$script" ] || fatal "zse2e.script=$script: no /zs/$script in the L2 image"
  sh "/zs/$script"
else
  sh /zs/scenario.sh /zs/scenarios.txt
fi
echo "ZSE2E-DONE rc=$?"
poweroff -f
