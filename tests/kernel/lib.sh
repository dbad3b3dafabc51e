# Shared helpers for the guest kernel tests (sourced by run.sh, measure.sh).
# Boots happen in QEMU TCG: this machine's /dev/kvm cannot run Linux.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KTEST="$ROOT/tests/kernel"
ZS_CACHE="${ZEROSTART_CACHE:-$HOME/.cache/zerostart}"
# Where the hint's setup_data entry is placed in guest RAM (128 MiB): above
# everything QEMU and SeaBIOS put in low memory, below the initrd at the top.
HINT_ADDR=$((128 << 20))

die() { echo "test-kernel: $*" >&2; exit 1; }
log() { echo "test-kernel: $*" >&2; }

install_test_deps() {
	local need=() p
	for p in qemu-system-x86 busybox-static cpio gcc libc6-dev python3; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
	done
	if [ ${#need[@]} -gt 0 ]; then
		log "installing ${need[*]}"
		local sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
			die "could not install ${need[*]}; install them with apt-get and re-run"
	fi
}

# build_initramfs DIR: busybox + /init + zsprobe -> DIR/initrd.cpio.gz
build_initramfs() {
	local dir="$1" root="$1/initramfs"
	rm -rf "$root" && mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev"
	cp /bin/busybox "$root/bin/busybox"
	gcc -O2 -static -Wall -Werror -o "$root/zsprobe" "$KTEST/zsprobe.c" || die "cannot build zsprobe (gcc, libc6-dev)"
	cat >"$root/init" <<'EOF'
#!/bin/busybox sh
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
# zshib=1 (run.sh "hibernate"): swap on /dev/vda, hibernate to it and power
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
				if [ "$c" = off ]; then echo 0 >$nt/enable; else echo 1 >$nt/enable; echo "$c" >$nt/chunk_kib; fi
				echo 0 >$nt/max_chunk_ns
				f=; [ "$fl" = 1g ] && f=1g
				out="$(/zsprobe "$mib" 0 $f ${ZSNT_DIRTY:+dirty})"
				echo "ZSNT size=$fl chunk=$c rep=$r max_chunk_ns=$(/bin/busybox cat $nt/max_chunk_ns) $out"
			done
		done ;;
	esac
done
# pages_skipped before bytes_verified: a skip is counted before it is verified.
for f in pages_skipped pages_elided bytes_verified verify_failures pristine_pages pristine_pages_at_boot verify scanned_pages scan_failures fault_batches fault_batch_misses fault_batch_pauses fault_batch_kib; do
	f=/sys/kernel/debug/zerostart/$f
	[ -f "$f" ] && echo "ZSDEBUGFS ${f##*/}=$(/bin/busybox cat "$f")"
done
[ -d $nt ] && echo "ZSNTSTAT pages=$(/bin/busybox cat $nt/pages) llc_kib=$(/bin/busybox cat $nt/llc_kib)"
echo "ZSMEM $(/bin/busybox grep -E '^(MemTotal|MemFree|HugePages_Total):' /proc/meminfo | /bin/busybox tr -s ' ' | /bin/busybox tr '\n' ' ')"
echo "ZSDONE"
/bin/busybox poweroff -f
EOF
	chmod +x "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$dir/initrd.cpio.gz"
}

# qemu_boot LOG TIMEOUT MEM IMAGE APPEND [extra qemu args...]
qemu_boot() {
	local logf="$1" tmo="$2" mem="$3" image="$4" append="$5"
	shift 5
	local t0=$SECONDS rc=0
	timeout "$tmo" qemu-system-x86_64 -accel "tcg,thread=${ZS_TCG_THREAD:-multi}" -cpu max -m "$mem" -smp 2 \
		-nographic -no-reboot -nodefaults -serial stdio \
		-kernel "$image" -append "console=ttyS0 panic=-1 $append" "$@" \
		</dev/null >"$logf" 2>&1 || rc=$?
	if [ "$rc" = 124 ]; then
		log "QEMU timed out after ${tmo}s: $logf"
		return 1
	fi
	# Any other non-zero status is QEMU failing (bad option, missing image,
	# a TCG abort, a signal): the log holds no boot to judge. A guest panic
	# still exits 0 here (panic=-1 with -no-reboot), which is why callers
	# also require the init's last line.
	if [ "$rc" != 0 ]; then
		log "QEMU exited with status $rc: $(grep -av '^\s*$' "$logf" | tail -1 | tr -d '\r') ($logf)"
		return 1
	fi
	echo "$((SECONDS - t0))" >"$logf.wall"
	return 0
}

# make_hinted_image DIR NAME BZIMAGE RANGES [mkhint flags] -> DIR/NAME.bzImage, DIR/NAME.blob
make_hinted_image() {
	local dir="$1" name="$2" image="$3" ranges="$4"
	shift 4
	# mkhint imports zstest (tests/): make sets PYTHONPATH; so does this, for a direct run.
	PYTHONPATH="$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}" python3 "$KTEST/mkhint.py" --ranges "$ranges" --addr "$HINT_ADDR" --bzimage "$image" \
		--out-image "$dir/$name.bzImage" --out-blob "$dir/$name.blob" "$@"
}

hint_loader_args() { echo "-device loader,file=$1,addr=$HINT_ADDR,force-raw=on"; }

# honest_hint_ranges MEM_MIB: the hint a VMM would send for a QEMU pc guest
# of MEM_MIB: all RAM from 16 MiB up, minus the setup_data page, the top
# 64 MiB below the low RAM end (initrd, ACPI, SeaBIOS write there before the
# kernel runs) and the PCI hole; all RAM above 4 GiB.
honest_hint_ranges() {
	local mem=$(( $1 << 20 )) low high=0 r
	if [ "$mem" -ge $((0xe0000000)) ]; then low=$((0xc0000000)); high=$((mem - low)); else low=$mem; fi
	r="$((16 << 20)):$((HINT_ADDR - (16 << 20))),$((HINT_ADDR + 4096)):$((low - (64 << 20) - HINT_ADDR - 4096))"
	[ "$high" -gt 0 ] && r="$r,$((1 << 32)):$high"
	echo "$r"
}

# Case bookkeeping of the test scripts: `want NAME` is true when NAME is in
# $ONLY (" a b c "), fail/pass report one line and count failures.
fails=0
want() { [[ "$ONLY" == *" $1 "* ]]; }
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
pass() { echo "ok: $*" >&2; }

# kernel_image: $ZEROSTART_KERNEL_IMAGE (an image built elsewhere, e.g. by
# build.sh --dev while working on the series) or the series' bzImage (built
# if needed); dies if there is none.
kernel_image() {
	local img
	if [ -n "${ZEROSTART_KERNEL_IMAGE:-}" ]; then
		img="$ZEROSTART_KERNEL_IMAGE"
	else
		img="$("$ROOT/guest-kernel-patches/build.sh" | tail -1)/bzImage"
	fi
	[ -f "$img" ] || die "no kernel image at $img"
	echo "$img"
}

# kv LOG PREFIX KEY: value of KEY=... on the last line starting with PREFIX
kv() {
	{ grep -a "^$2 " "$1" || true; } | tr ' \r' '\n\n' | { grep -a "^$3=" || true; } | tail -1 | cut -d= -f2
}
