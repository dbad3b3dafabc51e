#!/bin/busybox sh
# /init of the SLO Linux guest: prints the phase markers the harness
# timestamps, does a little work that needs the kernel up, powers off.
/bin/busybox mount -t proc proc /proc
echo "ZS-MARK init_started"
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
read -r up _ </proc/uptime
mem=$(/bin/busybox awk '/MemTotal/ {print $2}' /proc/meminfo)
echo "ZS-MARK test_done uptime_s=$up memtotal_kb=$mem cpus=$(/bin/busybox nproc)"
/bin/busybox poweroff -f
