#!/usr/bin/env bash
# Same-run measurement for the memmap patch(es) (guest-kernel-patches/6.12/memmap.md).
# Boots each image of ZS_MM_IMAGES ("name=path[,extra,kernel,args] ...", e.g.
# one image with and without prezero.memmap=off) in QEMU TCG (-cpu max
# -smp ${ZS_MM_SMP:-2}, thread=multi),
# with the honest hint measure.sh uses (all RAM from 16 MiB up minus the
# setup_data page, the top 64 MiB below 4 GiB and the PCI hole), init_on_alloc=1,
# hugepages=50% of RAM (none at 1 GiB), and prints per boot: boot to init,
# deferred struct-page init (padata), struct pages not cleared, and, for an
# image built with tests/kernel/memmap-timing.diff applied (line
# "zsmm-timing kcycles: ..."), the serial early steps in TSC kcycles
# (TCG's rdtsc reads the host TSC, or with icount counts instructions;
# printk time is 0 before tsc_init()).
# Env: ZS_MM_MEMS="1 4 16" (GiB), ZS_MM_REPS=3, ZS_MM_APPEND (extra args),
#      ZS_MM_WORK (logs; default $ZEROSTART_CACHE/kernel/memmap-measure).
set -uo pipefail   # no -e: a missing log line must not end the run
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGES="${ZS_MM_IMAGES:?set ZS_MM_IMAGES=\"name=/path/bzImage ...\"}"
MEMS="${ZS_MM_MEMS:-1 4 16}"
REPS="${ZS_MM_REPS:-3}"
SMP="${ZS_MM_SMP:-2}"
WORK="${ZS_MM_WORK:-$ZS_CACHE/kernel/memmap-measure}"
# ZS_MM_ICOUNT=1: -icount shift=0 (single-threaded TCG): the guest clock and
# TSC count executed instructions (1 ns each), so the numbers measure guest
# work and do not depend on the load of the shared host. Without it: wall
# clock, multi-threaded TCG.
THREAD=multi ICOUNT=""
if [ "${ZS_MM_ICOUNT:-0}" = 1 ]; then THREAD=single ICOUNT="-icount shift=0"; fi
mkdir -p "$WORK"
install_test_deps
build_initramfs "$WORK" || die "cannot build the initramfs"
# ZS_MM_INITCALLS=1: boot with initcall_debug (KERN_DEBUG: kept off the slow
# serial console) and have /init print the initcall lines from dmesg, to
# list the slowest initcalls per boot.
if [ "${ZS_MM_INITCALLS:-0}" = 1 ]; then
	sed -i 's|^echo "ZSDONE"$|/bin/busybox dmesg \| /bin/busybox grep -E "initcall .* after [0-9]+ usecs" \| /bin/busybox sed "s/^/ZSIC /"\necho "ZSDONE"|' "$WORK/initramfs/init"
	grep -q '^/bin/busybox dmesg' "$WORK/initramfs/init" || die "cannot add the initcall dump to /init"
	(cd "$WORK/initramfs" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.cpio.gz"
	ZS_MM_APPEND="initcall_debug ${ZS_MM_APPEND:-}"
fi

printf "| image | GiB | rep | boot to init (s) | deferred init (ms) | struct pages not cleared | early steps (host kcycles) | slowest initcalls (ms) |\n|---|---|---|---|---|---|---|---|\n"
for rep in $(seq 1 "$REPS"); do
	for mem_g in $MEMS; do
		mem=$((mem_g * 1024)); hp=$((mem / 4)); [ "$mem_g" = 1 ] && hp=0
		for spec in $IMAGES; do
			name="${spec%%=*}" img="${spec#*=}" extra=""
			case "$img" in *,*) extra="$(echo "${img#*,}" | tr ',' ' ')"; img="${img%%,*}" ;; esac
			n="$name-${mem_g}g-$rep"
			make_hinted_image "$WORK" "$n" "$img" "$(honest_hint_ranges "$mem")"
			logf="$WORK/$n.log"
			ZS_TCG_THREAD="$THREAD" qemu_boot "$logf" 900 "$mem" "$WORK/$n.bzImage" \
				"init_on_alloc=1 hugepages=$hp $extra ${ZS_MM_APPEND:-}" \
				-initrd "$WORK/initrd.cpio.gz" $(hint_loader_args "$WORK/$n.blob") \
				$([ "$SMP" = 2 ] || echo "-smp $SMP") $ICOUNT || true
			grep -aq "^ZSDONE" "$logf" || log "$n: did not finish, see $logf"
			di="$( (grep -aoE "deferred pages initialised in [0-9]+ms" "$logf" || true) | grep -oE "[0-9]+" | awk '{s+=$1} END {print s+0}')"
			sk="$( (grep -aoE "memmap: [0-9]+ struct pages initialised without clearing" "$logf" || true) | grep -oE "[0-9]+" | head -1 || true)"
			tm="$( (grep -a "zsmm-timing kcycles:" "$logf" || true) | tail -1 | sed -E 's/.*kcycles: //' | tr -d '\r')"
			ic="$( (grep -aoE "^ZSIC .*initcall [^ ]+ returned [0-9-]+ after [0-9]+ usecs" "$logf" || true) |
				sed -E 's/.*initcall ([^ ]+) returned [0-9-]+ after ([0-9]+) usecs/\2 \1/' | sort -rn | head -5 |
				awk '{printf "%s %.1f; ", $2, $1 / 1000}')"
			printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$mem_g" "$rep" \
				"$(kv "$logf" ZSINIT uptime_s)" "$di" "${sk:-0}" "$tm" "$ic"
		done
	done
done
log "logs in $WORK"
