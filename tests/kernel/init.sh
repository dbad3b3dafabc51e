#!/bin/busybox sh
# /init of the guest kernel tests' initramfs (zstest.guestkernel.build_initramfs
# puts it there with busybox and zsprobe): prints the ZS* lines they judge.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
read -r up _ </proc/uptime
echo "ZSINIT uptime_s=$up"
# The same point with printk's microseconds (uptime has 10 ms steps): the
# kernel stamps this line; measure.sh reads it as "init mark".
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null && echo "zsinit: mark" >/dev/kmsg
# Clears the boot skipped, before any probe adds its own.
f=/sys/kernel/debug/zerostart/pages_skipped
[ -f $f ] && echo "ZSBOOT pages_skipped=$(/bin/busybox cat $f)"
# zshib=1 (tests/kernel/cases.py "hibernate"): swap on /dev/vda, hibernate to it and power
# off; the kernel that resumes the image continues right here. zshib=2: the
# boot that should have resumed it came this far, so it did not.
zs=/sys/kernel/debug/zerostart
case " $(/bin/busybox cat /proc/cmdline) " in
*" zshib=1 "*)
	/bin/busybox mkswap /dev/vda >/dev/null && /bin/busybox swapon /dev/vda || echo "ZSHIB FAIL swap on /dev/vda"
	echo "ZSHIB before pages_skipped=$(/bin/busybox cat $zs/pages_skipped) pristine_pages=$(/bin/busybox cat $zs/pristine_pages)"
	echo shutdown >/sys/power/disk
	echo disk >/sys/power/state || echo "ZSHIB FAIL hibernate"
	echo "ZSHIB resumed pages_skipped=$(/bin/busybox cat $zs/pages_skipped) pristine_pages=$(/bin/busybox cat $zs/pristine_pages)" ;;
*" zshib=2 "*)
	echo "ZSHIB FAIL no image was resumed"; /bin/busybox poweroff -f ;;
esac
# zsreboot=MIB (tests/kernel/cases.py "reboot"), with a blank disk as
# /dev/vda: the kernel's zerostart lines as ZSKMSG (also under loglevel=1);
# then on the first boot (the disk says which) fill MIB of anonymous memory
# with zsprobe's secret, free it and reboot in place; the boot after it
# goes on as usual.
for a in $(/bin/busybox cat /proc/cmdline); do
	case "$a" in
	zsreboot=*)
		/bin/busybox dmesg | /bin/busybox grep -oE 'zerostart: (hint|ignoring|prezero).*' | /bin/busybox sed 's/^/ZSKMSG /'
		if [ "$(/bin/busybox dd if=/dev/vda bs=7 count=1 2>/dev/null)" != ZSBOOT1 ]; then
			printf ZSBOOT1 | /bin/busybox dd of=/dev/vda conv=fsync 2>/dev/null || echo "ZSBOOTFLAG FAIL cannot write /dev/vda"
			/zsprobe 0 "${a#zsreboot=}" fill
			echo "ZSREBOOT after filling ${a#zsreboot=} MiB"
			/bin/busybox reboot -f
		fi ;;
	esac
done
probe=""
for a in $(/bin/busybox cat /proc/cmdline); do
	case "$a" in
	zsprobe=*) probe="${a#zsprobe=}" ;;
	# zsmthp=64: map anonymous memory with 64 KiB mTHP folios (PTE-mapped)
	zsmthp=*) echo always >"/sys/kernel/mm/transparent_hugepage/hugepages-${a#zsmthp=}kB/enabled" ;;
	esac
done
if [ -n "$probe" ]; then
	/zsprobe $(echo "$probe" | /bin/busybox tr ',' ' ')
fi
# zsnt=MIB,FLAGS,REPS,C1,C2,...: huge page clear benchmark (measure-nt.sh):
# REPS rounds of "populate MIB of hugetlb (FLAGS: 2m or 1g)" once per
# setting Ci: "off" = the normal path, else NT stores in chunks of Ci KiB
# (0 = whole folio). Settings interleave within a round.
# zsntdirty=1: dirty the pool pages first (zsprobe's "dirty").
nt=/sys/module/clear_huge_nt/parameters
case " $(/bin/busybox cat /proc/cmdline) " in *" zsntdirty=1 "*) ZSNT_DIRTY=1 ;; esac
for a in $(/bin/busybox cat /proc/cmdline); do
	case "$a" in
	zsnt=*) set -- $(echo "${a#zsnt=}" | /bin/busybox tr ',' ' ')
		mib=$1 fl=$2 reps=$3; shift 3
		[ -d $nt ] && echo 2048 >$nt/min_kib
		for r in $(/bin/busybox seq 1 "$reps"); do
			for c in "$@"; do
				# A line without the NT patch has no $nt: every setting
				# is the kernel's own clear there.
				if [ -d $nt ]; then
					if [ "$c" = off ]; then echo 0 >$nt/enable; else echo 1 >$nt/enable; echo "$c" >$nt/chunk_kib; fi
					echo 0 >$nt/max_chunk_ns
				fi
				f=; [ "$fl" = 1g ] && f=1g
				out="$(/zsprobe "$mib" 0 $f ${ZSNT_DIRTY:+dirty})"
				echo "ZSNT size=$fl chunk=$c rep=$r max_chunk_ns=$([ -d $nt ] && /bin/busybox cat $nt/max_chunk_ns) $out"
			done
		done ;;
	esac
done
# pages_skipped before bytes_verified: a skip is counted before it is verified.
for f in active pages_skipped pages_elided bytes_verified verify_failures pristine_pages pristine_pages_at_boot verify scanned_pages scan_failures fault_batches fault_batch_misses fault_batch_pauses fault_batch_kib; do
	f=/sys/kernel/debug/zerostart/$f
	[ -f "$f" ] && echo "ZSDEBUGFS ${f##*/}=$(/bin/busybox cat "$f")"
done
[ -d $nt ] && echo "ZSNTSTAT pages=$(/bin/busybox cat $nt/pages) llc_kib=$(/bin/busybox cat $nt/llc_kib)"
# How the direct map is mapped: debug_pagealloc=on leaves no 2 MiB or 1 GiB
# page in it (case pagealloc reads this to know the option took effect).
echo "ZSDIRECTMAP $(/bin/busybox sed -n 's/^DirectMap\([0-9a-zA-Z]*\): *\([0-9]*\) kB$/\1=\2/p' /proc/meminfo | /bin/busybox tr '\n' ' ')"
echo "ZSMEM $(/bin/busybox grep -E '^(MemTotal|MemFree|HugePages_Total):' /proc/meminfo | /bin/busybox tr -s ' ' | /bin/busybox tr '\n' ' ')"
echo "ZSDONE"
/bin/busybox poweroff -f
