#!/usr/bin/env bash
# make bench-kernel: the same-run comparison in guest-kernel-patches/README.md.
# Boots bzImage (series, CONFIG_ZEROSTART_PREZERO=y) and bzImage-noprezero
# (same tree and config, option off) in QEMU TCG, both with the same honest
# pre-zeroed hint delivered as setup_data, with init_on_alloc=1 and =0, and
# reports boot to init, struct-page init, hugetlb populate, 4K first touch,
# and the memory HVO saves. One boot per cell; every number printed comes
# from this run.
#
# Env: ZS_MEASURE_MEMS="1 4 16" (GiB, boot-to-init rows), ZS_MEASURE_REPS=1.
# A row is skipped when the host has less than MEM/2 + 4 GiB available
# (the -noprezero kernel clears, i.e. touches, all hugepages).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMS="${ZS_MEASURE_MEMS:-1 4 16}"
REPS="${ZS_MEASURE_REPS:-1}"
TMO=900
WORK="$ZS_CACHE/kernel/measure"
rm -rf "$WORK" && mkdir -p "$WORK"
install_test_deps
OUT="$("$ROOT/guest-kernel-patches/build.sh" | tail -1)"
build_initramfs "$WORK"

# The hint a VMM would send for a QEMU pc guest of MEM MiB: all RAM from
# 16 MiB up, minus the setup_data page, the top 64 MiB below 4 GiB (initrd,
# ACPI, SeaBIOS) and the PCI hole.
hint_ranges() {
	local mem=$(( $1 << 20 )) low high=0 r
	if [ "$mem" -ge $((0xe0000000)) ]; then low=$((0xc0000000)); high=$((mem - low)); else low=$mem; fi
	r="$((16 << 20)):$((HINT_ADDR - (16 << 20))),$((HINT_ADDR + 4096)):$((low - (64 << 20) - HINT_ADDR - 4096))"
	[ "$high" -gt 0 ] && r="$r,$((1 << 32)):$high"
	echo "$r"
}

# run NAME KERNEL(bzImage|bzImage-noprezero) MEM_MIB APPEND
run() {
	local name="$1" kern="$2" mem="$3" append="$4" logf
	make_hinted_image "$WORK" "$name" "$OUT/$kern" "$(hint_ranges "$mem")"
	logf="$WORK/$name.log"
	qemu_boot "$logf" "$TMO" "$mem" "$WORK/$name.bzImage" "$append" \
		-initrd "$WORK/initrd.cpio.gz" $(hint_loader_args "$WORK/$name.blob") || true
	grep -aq "^ZSDONE" "$logf" || log "$name: did not finish, see $logf"
}

field() { kv "$WORK/$1.log" "$2" "$3"; }
deferred_ms() {
	grep -aoE "deferred pages initialised in [0-9]+ms" "$WORK/$1.log" | grep -oE "[0-9]+" | awk '{s+=$1} END {print s+0}'
}

printf "| case | init_on_alloc | series | boot to init (s) | deferred struct-page init (ms) | hugetlb populate (ms) | 4K first touch (MiB/s) | pages skipped |\n"
printf "|---|---|---|---|---|---|---|---|\n"
row() {
	local name="$1" label="$2" ioa="$3" series="$4"
	printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$label" "$ioa" "$series" \
		"$(field "$name" ZSINIT uptime_s)" "$(deferred_ms "$name")" \
		"$(field "$name" ZSPROBE hugetlb_ms)" "$(field "$name" ZSPROBE anon_mib_per_s)" \
		"$(field "$name" ZSDEBUGFS pages_skipped)"
}

avail_gib() { awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo; }

for rep in $(seq 1 "$REPS"); do
	for ioa in 1 0; do
		for mem_g in $MEMS; do
			mem=$((mem_g * 1024))
			if [ "$mem_g" -ge 16 ] && [ "$(avail_gib)" -lt $((mem_g / 2 + 4)) ]; then
				log "skipping the ${mem_g} GiB row: only $(avail_gib) GiB available on the host"
				continue
			fi
			hp=$((mem / 2 / 2))
			[ "$mem_g" = 1 ] && hp=0
			for k in bzImage bzImage-noprezero; do
				s=on; [ "$k" = bzImage ] || s=off
				n="boot-${mem_g}g-ioa$ioa-$s-$rep"
				run "$n" "$k" "$mem" "init_on_alloc=$ioa hugepages=$hp"
				row "$n" "boot ${mem_g} GiB, hugepages=$hp" "$ioa" "$s"
			done
		done
		# Populate 75% of a 4 GiB guest: as hugetlb pages, then as 4K anon.
		for k in bzImage bzImage-noprezero; do
			s=on; [ "$k" = bzImage ] || s=off
			n="huge-4g-ioa$ioa-$s-$rep"
			run "$n" "$k" 4096 "init_on_alloc=$ioa hugepages=1536 zsprobe=3072,0"
			row "$n" "4 GiB: populate 3 GiB hugetlb" "$ioa" "$s"
			n="anon-4g-ioa$ioa-$s-$rep"
			run "$n" "$k" 4096 "init_on_alloc=$ioa zsprobe=0,3072"
			row "$n" "4 GiB: first touch 3 GiB 4K anon" "$ioa" "$s"
			# Same, with 6.12's 64 KiB mTHP enabled: one fault maps 16
			# PTEs with one set_ptes(), still 4 KiB-mapped.
			n="mthp-4g-ioa$ioa-$s-$rep"
			run "$n" "$k" 4096 "init_on_alloc=$ioa transparent_hugepage=never zsmthp=64 zsprobe=0,3072,thp"
			row "$n" "4 GiB: first touch 3 GiB, 64 KiB mTHP" "$ioa" "$s"
		done
	done
done

# HVO: MemFree with hugepages=1024 on a 4 GiB guest, vmemmap optimised or not.
for h in on off; do
	run "hvo-$h" bzImage 4096 "hugepages=1024 hugetlb_free_vmemmap=$h"
	printf "HVO %s: %s\n" "$h" "$(grep -a '^ZSMEM ' "$WORK/hvo-$h.log" | tr -d '\r' | tail -1)"
done
log "logs in $WORK"
