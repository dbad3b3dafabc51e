#!/usr/bin/env bash
# make bench-kernel: the same-run comparison in guest-kernel-patches/README.md.
# Boots bzImage (series, CONFIG_ZEROSTART_PREZERO=y) and bzImage-noprezero
# (same tree and config, option off) in QEMU TCG, both with the same honest
# pre-zeroed hint delivered as setup_data, with init_on_alloc=1 and =0, and
# reports boot to init, struct-page init, hugetlb populate, 4K first touch,
# and the memory HVO saves. One boot per cell; every number printed comes
# from this run.
#
# Env: ZS_MEASURE_MEMS="1 4 16" (GiB, boot-to-init rows), ZS_MEASURE_REPS=1,
# ZS_MEASURE_ONLY="boot huge anon mthp sparse nt hvo" (rows to run),
# ZS_MEASURE_OUT=dir (take bzImage and bzImage-noprezero from dir instead
# of the committed series' build; for work on the series),
# ZS_MEASURE_WORK=dir (logs; default $ZEROSTART_CACHE/kernel/measure),
# ZS_MEASURE_ON_ARGS="..." (extra kernel arguments for the "on" boots only,
# e.g. prezero.fault_batch=0, to find where a difference comes from).
# ZS_MEASURE_ICOUNT=1: boot with `-icount shift=0,sleep=off` (single-threaded
# TCG): the guest clock counts executed guest instructions (1 ns each) and
# jumps over idle time to the next timer, so /proc/uptime and printk times
# are deterministic (repeat boots agree to well under 1%) and independent
# of host load. Times printed are then "10^9 guest instructions (icount)",
# a measure of guest work, not of time on real hardware: report them next
# to a wall-clock run (the default mode), never instead of it.
# A row is skipped when the host has less than MEM/2 + 4 GiB available
# (the -noprezero kernel clears, i.e. touches, all hugepages).
#
# "4K-mapped" first touch, for both kernels alike: THP off
# (transparent_hugepage=never, which also leaves every mTHP size off), no
# madvise, one write per 4 KiB page. Without the series every fault maps
# one 4 KiB page; with it, faults on pristine memory map a 64 KiB pristine
# folio with 16 PTEs (prezero.fault_batch). Every mapping is a 4 KiB PTE.
# Time for a full run (REPS=1, MEMS="1 4 16", every row) on the shared
# 2-core host: 235 s; each extra repetition adds about as much.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMS="${ZS_MEASURE_MEMS:-1 4 16}"
REPS="${ZS_MEASURE_REPS:-1}"
TMO=900
ICOUNT=()
CLOCK="s"
if [ "${ZS_MEASURE_ICOUNT:-0}" = 1 ]; then
	export ZS_TCG_THREAD=single
	ICOUNT=(-icount shift=0,sleep=off)
	CLOCK="10^9 guest instructions, icount"
	TMO=2400
fi
WORK="${ZS_MEASURE_WORK:-$ZS_CACHE/kernel/measure}"
rm -rf "$WORK" && mkdir -p "$WORK"
install_test_deps
ONLY=" ${ZS_MEASURE_ONLY:-boot huge anon mthp sparse nt hvo} "
T0=$SECONDS
# make builds the images (make bench-kernel passes ZS_MEASURE_OUT); run
# directly, this takes the committed series' build from the cache.
OUT="${ZS_MEASURE_OUT:-$("$ROOT/guest-kernel-patches/build.sh" --print || true)}"
[ -f "$OUT/bzImage" ] && [ -f "$OUT/bzImage-noprezero" ] || die "no bzImage and bzImage-noprezero in ${OUT:-the cache}; build them with \`make kernel\` or set ZS_MEASURE_OUT=dir"
build_initramfs "$WORK"

# run NAME KERNEL(bzImage|bzImage-noprezero) MEM_MIB APPEND
# A boot that did not reach the init's last line, or whose kernel printed a
# crash, is recorded in $WORK/NAME.log.crashed: its row says CRASHED, it is
# listed at the end and the script exits non-zero. A crashed boot of the
# series is a result, never a row quietly left out of a table or median.
boots=0
crashed=()
run() {
	local name="$1" kern="$2" mem="$3" append="$4" logf why
	[ "$kern" = bzImage ] && append="$append ${ZS_MEASURE_ON_ARGS:-}"
	make_hinted_image "$WORK" "$name" "$OUT/$kern" "$(honest_hint_ranges "$mem")"
	logf="$WORK/$name.log"
	boots=$((boots + 1))
	qemu_boot "$logf" "$TMO" "$mem" "$WORK/$name.bzImage" "$append" \
		-initrd "$WORK/initrd.cpio.gz" $(hint_loader_args "$WORK/$name.blob") "${ICOUNT[@]}" || true
	why="$({ grep -aE -m1 'Kernel panic|Oops|BUG:|Bad page state|general protection fault' "$logf" || true; } | tr -d '\r')"
	[ -n "$why" ] || grep -aq "^ZSDONE" "$logf" || why="init did not finish"
	if [ -n "$why" ]; then
		echo "$why" >"$logf.crashed"
		crashed+=("$name ($kern): $why")
		log "$name: CRASHED: $why; see $logf"
	fi
}

field() { kv "$WORK/$1.log" "$2" "$3"; }
# printk time (s, microseconds) of the first kernel log line matching ERE
ptime() {
	{ grep -aE "^\[ *[0-9]+\.[0-9]+\] .*$2" "$WORK/$1.log" || true; } | head -1 | sed -E 's/^\[ *([0-9.]+)\].*/\1/'
}
deferred_ms() {
	grep -aoE "deferred pages initialised in [0-9]+ms" "$WORK/$1.log" | grep -oE "[0-9]+" | awk '{s+=$1} END {print s+0}'
}

printf "| case | init_on_alloc | series | boot to init (%s) | Run /init (printk) | init mark (printk) | deferred struct-page init (ms) | hugetlb populate (ms) | 4K first touch (MiB/s) | pages skipped | fault batches |\n" "$CLOCK"
printf "|---|---|---|---|---|---|---|---|---|---|---|\n"
row() {
	local name="$1" label="$2" ioa="$3" series="$4"
	if [ -f "$WORK/$name.log.crashed" ]; then
		printf "| %s | %s | %s | CRASHED: %s | | | | | | | |\n" "$label" "$ioa" "$series" "$(cat "$WORK/$name.log.crashed")"
		return
	fi
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$label" "$ioa" "$series" \
		"$(field "$name" ZSINIT uptime_s)" "$(ptime "$name" "Run /init as init")" "$(ptime "$name" "zsinit: mark")" "$(deferred_ms "$name")" \
		"$(field "$name" ZSPROBE hugetlb_ms)" "$(field "$name" ZSPROBE anon_mib_per_s)" \
		"$(field "$name" ZSDEBUGFS pages_skipped)" "$(field "$name" ZSDEBUGFS fault_batches)"
}

avail_gib() { awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo; }

for rep in $(seq 1 "$REPS"); do
	for ioa in 1 0; do
		want boot && for mem_g in $MEMS; do
			mem=$((mem_g * 1024))
			if [ "$mem_g" -ge 16 ] && [ "$(avail_gib)" -lt $((mem_g / 2 + 4)) ]; then
				log "skipping the ${mem_g} GiB row: only $(avail_gib) GiB available on the host"
				continue
			fi
			hp=$((mem / 2 / 2))
			[ "$mem_g" = 1 ] && hp=0
			# Alternate which kernel boots first, so that neither
			# always gets the warmer host.
			order="bzImage bzImage-noprezero"
			[ $((rep % 2)) = 0 ] && order="bzImage-noprezero bzImage"
			for k in $order; do
				s=on; [ "$k" = bzImage ] || s=off
				n="boot-${mem_g}g-ioa$ioa-$s-$rep"
				run "$n" "$k" "$mem" "init_on_alloc=$ioa hugepages=$hp"
				row "$n" "boot ${mem_g} GiB, hugepages=$hp" "$ioa" "$s"
			done
		done
		# Populate 75% of a 4 GiB guest: as hugetlb pages, then as 4K anon.
		for k in bzImage bzImage-noprezero; do
			s=on; [ "$k" = bzImage ] || s=off
			if want huge; then
				n="huge-4g-ioa$ioa-$s-$rep"
				run "$n" "$k" 4096 "init_on_alloc=$ioa hugepages=1536 zsprobe=3072,0"
				row "$n" "4 GiB: populate 3 GiB hugetlb" "$ioa" "$s"
			fi
			# 4K-mapped (see the top): THP and mTHP off, no madvise.
			if want anon; then
				n="anon-4g-ioa$ioa-$s-$rep"
				run "$n" "$k" 4096 "init_on_alloc=$ioa transparent_hugepage=never zsprobe=0,3072,thp"
				row "$n" "4 GiB: first touch 3 GiB 4K-mapped" "$ioa" "$s"
			fi
			# 6.12's 64 KiB mTHP enabled by the admin: one fault maps
			# 16 PTEs with one set_ptes(), still 4 KiB-mapped.
			if want mthp; then
				n="mthp-4g-ioa$ioa-$s-$rep"
				run "$n" "$k" 4096 "init_on_alloc=$ioa transparent_hugepage=never zsmthp=64 zsprobe=0,3072,thp"
				row "$n" "4 GiB: first touch 3 GiB, 64 KiB mTHP" "$ioa" "$s"
			fi
		done
	done
done

# The price of fault batching: touch 1 byte per 64 KiB of 1 GiB (after a
# dense first touch of 1 GiB), 4K-mapped as above; RSS growth vs touched.
if want sparse; then
	for k in bzImage bzImage-noprezero; do
		s=on; [ "$k" = bzImage ] || s=off
		run "sparse-$s" "$k" 4096 "transparent_hugepage=never zsprobe=0,1024,thp,sparse"
		printf "sparse touch, series %s: touched %s KiB (1 byte per 64 KiB of 1 GiB), RSS grew %s KiB\n" "$s" \
			"$(field "sparse-$s" ZSPROBE sparse_touched_kib)" "$(field "sparse-$s" ZSPROBE sparse_rss_kib)"
	done
fi

# Huge page clears with non-temporal stores (patch "x86/mm: clear huge and
# gigantic pages with non-temporal stores"): one boot, prezero=off and
# init_on_alloc=0 so that every fault really clears; populate 1 GiB of
# 2 MiB pages and one 1 GiB page, REPS rounds, each round once with the
# normal path ("off") and once per NT chunk size (KiB, 0 = whole folio).
# ms/GiB and the longest chunk (the longest stretch without cond_resched()).
if want nt; then
	chunks="off,4,64,256,1024,2048,0"
	run nt bzImage 4096 "prezero=off init_on_alloc=0 hugepagesz=1G hugepages=1 hugepagesz=2M hugepages=512 zsnt=1024,2m,$REPS,$chunks zsnt=1024,1g,$REPS,$chunks"
	printf "\n| page size | chunk (KiB) | clear ms/GiB (each round) | median | longest chunk (us, median) |\n|---|---|---|---|---|\n"
	[ ! -f "$WORK/nt.log.crashed" ] ||
		printf "| CRASHED: %s | | only the rounds before the crash are below | | |\n" "$(cat "$WORK/nt.log.crashed")"
	for sz in 2m 1g; do
		for c in $(echo "$chunks" | tr ',' ' '); do
			grep -a "^ZSNT size=$sz chunk=$c " "$WORK/nt.log" | tr -d '\r' | awk -v sz="$sz" -v c="$c" 'BEGIN { n = 0 }
				{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
				  ms[n] = v["hugetlb_ms"] * 1024 / v["hugetlb_mib"]; lat[n] = v["max_chunk_ns"] / 1000; n++ }
				function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int(n / 2)] }
				END { if (!n) exit; s = ""; for (i = 0; i < n; i++) s = s sprintf("%.0f ", ms[i]);
				      printf "| %s | %s | %s| %.0f | %s |\n", sz, c == "off" ? "normal path" : (c == 0 ? "whole" : c), s, med(ms, n), c == "off" ? "-" : sprintf("%.0f", med(lat, n)) }'
		done
	done
fi

# HVO: MemFree with hugepages=1024 on a 4 GiB guest, vmemmap optimised or not.
if want hvo; then
	for h in on off; do
		run "hvo-$h" bzImage 4096 "hugepages=1024 hugetlb_free_vmemmap=$h"
		printf "HVO %s: %s\n" "$h" "$(grep -a '^ZSMEM ' "$WORK/hvo-$h.log" | tr -d '\r' | tail -1)"
	done
fi
log "logs in $WORK; took $((SECONDS - T0)) s"
if [ "${#crashed[@]}" -gt 0 ]; then
	log "${#crashed[@]} of $boots boots CRASHED (their rows say so):"
	for c in "${crashed[@]}"; do log "  $c"; done
	exit 1
fi
log "$boots boots, none crashed"
