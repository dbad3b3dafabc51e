#!/bin/busybox sh
# /init of the bench initramfs (measure.sh rows pf, hugeread, work; see
# tests/kernel/zsbench.c): runs /zsbench once per zsbench=MODE,ARG,...
# kernel argument, in order, then prints the series' counters and ZSDONE,
# which measure.sh requires of every boot it reports.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
read -r up _ </proc/uptime
echo "ZSINIT uptime_s=$up"
for a in $(/bin/busybox cat /proc/cmdline); do
	case "$a" in
	zsbench=*) /zsbench $(echo "${a#zsbench=}" | /bin/busybox tr ',' ' ') || echo "ZSBENCH FAIL $a" ;;
	esac
done
for f in pages_skipped fault_batches; do
	f=/sys/kernel/debug/zerostart/$f
	[ -f "$f" ] && echo "ZSDEBUGFS ${f##*/}=$(/bin/busybox cat "$f")"
done
nt=/sys/module/clear_huge_nt/parameters
[ -d $nt ] && echo "ZSNTSTAT enable=$(/bin/busybox cat $nt/enable) pages=$(/bin/busybox cat $nt/pages) llc_kib=$(/bin/busybox cat $nt/llc_kib)"
echo "ZSDONE"
/bin/busybox poweroff -f
