#!/usr/bin/env bash
# make bench-kernel: the same-run comparison in guest-kernel-patches/6.12/README.md.
# Boots bzImage (series, CONFIG_ZEROSTART_PREZERO=y) and bzImage-noprezero
# (same tree and config, option off) in QEMU TCG, both with the same honest
# pre-zeroed hint delivered as setup_data, with init_on_alloc=1 and =0, and
# reports boot to init, struct-page init, hugetlb populate, 4K first touch,
# and the memory HVO saves. One boot per cell; every number printed comes
# from this run.
#
# Env: ZS_MEASURE_MEMS="1 4 16" (GiB, boot-to-init rows), ZS_MEASURE_REPS=1,
# ZS_MEASURE_ONLY="boot huge anon mthp sparse nt hvo pf hugeread work ntcost"
# (rows to run; the last four are issue 17's, see "Bench rows" below and
# docs/kernel-measurements.md),
# ZS_MEASURE_LINE="6.12 7.3" (the kernel lines, one or more: each line's
# images come from `build.sh --line LINE --print`; default 6.12; with
# several, every row boots every line's images in the same run,
# interleaved, and the tables' first column names the line),
# ZS_MEASURE_OUT=dir (one line only: take bzImage and bzImage-noprezero
# from dir instead of the line's build; for work on the series),
# ZS_MEASURE_BASE=path (one line only: the baseline image when there is
# no bzImage-noprezero, e.g. the line's pristine kernel without the
# series; without either, every row that compares with and without the
# series prints SKIP and the reason, and only the "on"-only rows run),
# ZS_MEASURE_WORK=dir (logs; default $ZEROSTART_CACHE/kernel/measure),
# ZS_MEASURE_ON_ARGS="..." (extra kernel arguments for the "on" boots only,
# e.g. prezero.fault_batch=0, to find where a difference comes from).
# ZS_MEASURE_HUGEPAGESZ=2M|1G: the page size of the boot rows' hugetlb
# pool, half the guest (none at 1 GiB); default 2M. A 1G pool is
# allocated from memblock before the page allocator exists (no buddy
# allocation, no compound-page preparation of each page, no check of its
# struct pages): the boot rows then show what that path costs at scale.
# ZS_MEASURE_ICOUNT=1: boot with `-icount shift=0,sleep=off` (single-threaded
# TCG): the guest clock counts executed guest instructions (1 ns each) and
# jumps over idle time to the next timer, so /proc/uptime and printk times
# do not depend on host load. They are not the same from boot to boot:
# KASLR moves the memory layout, and two boots of one image with the same
# arguments and hint took 2379.1 M and 2021.9 M instructions (18 %;
# guest-kernel-patches/7.3/README.md), so compare two or more boots per
# cell. Times printed are then "10^9 guest instructions (icount)",
# a measure of guest work, not of time on real hardware: report them next
# to a wall-clock run (the default mode), never instead of it.
# A row is skipped when the host has less than MEM/2 + 4 GiB available
# (the -noprezero kernel clears, i.e. touches, all hugepages).
#
# "4K-mapped" first touch, for both kernels alike: THP on but its PMD size
# off ($THP4K; every mTHP size is off by default), no madvise, one write
# per 4 KiB page. Without the series every fault maps one 4 KiB page; with
# it, faults on pristine memory map a 64 KiB pristine folio with 16 PTEs
# (prezero.fault_batch). Every mapping is a 4 KiB PTE. (Fault batching
# follows the top-level THP policy like an mTHP size set to "inherit":
# under transparent_hugepage=never the series maps single pages too.)
# Time for a full run (REPS=1, MEMS="1 4 16", every row) on the shared
# 2-core host: 235 s; each extra repetition adds about as much.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MEMS="${ZS_MEASURE_MEMS:-1 4 16}"
THP4K="transparent_hugepage=always thp_anon=2M:never"
HPSZ="${ZS_MEASURE_HUGEPAGESZ:-2M}"
case "$HPSZ" in
2M) hp_mib=2 ;;
1G) hp_mib=1024 ;;
*) die "ZS_MEASURE_HUGEPAGESZ=$HPSZ is no x86 huge page size; use 2M or 1G" ;;
esac
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
ONLY=" ${ZS_MEASURE_ONLY:-boot huge anon mthp sparse nt hvo pf hugeread work ntcost} "
T0=$SECONDS
# Each line's images: make builds them (make bench-kernel depends on each
# line's build target); this takes them from the cache.
LINES="${ZS_MEASURE_LINE:-6.12}"
nlines=$(wc -w <<<"$LINES")
[ "$nlines" -ge 1 ] || die "ZS_MEASURE_LINE is empty; name one or more kernel lines, e.g. \"6.12 7.3\""
if [ "$nlines" -gt 1 ] && [ -n "${ZS_MEASURE_OUT:-}${ZS_MEASURE_BASE:-}" ]; then
	die "ZS_MEASURE_OUT and ZS_MEASURE_BASE name one line's images; set ZS_MEASURE_LINE to that one line"
fi
declare -A ON OFF OFF_WHY NO_NT_WHY
for L in $LINES; do
	case "$L" in
	6.12) la=() series="$ROOT/guest-kernel-patches/6.12/series" ;;
	*) la=(--line "$L") series="$ROOT/guest-kernel-patches/$L/series" ;;
	esac
	# Rows of the NT huge clear ("x86/mm: clear huge and gigantic pages
	# with non-temporal stores") say SKIP, and why, for a line without it.
	NO_NT_WHY[$L]=""
	grep -q "clear-huge-and-gigantic-pages-with-non-tempor" "$series" ||
		NO_NT_WHY[$L]="line $L has no NT huge clear patch (its series drops it: range clear_pages() measured faster, guest-kernel-patches/$L/README.md)"
	o="${ZS_MEASURE_OUT:-$("$ROOT/guest-kernel-patches/build.sh" "${la[@]}" --print || true)}"
	[ -f "$o/bzImage" ] || die "no bzImage in ${o:-the cache} for line $L; build it with \`guest-kernel-patches/build.sh${la[*]:+ ${la[*]}}\` or set ZS_MEASURE_OUT=dir"
	ON[$L]="$o/bzImage"
	# The baseline ("off"): the same tree without the series' features,
	# else the image ZS_MEASURE_BASE names. None: comparing rows say SKIP.
	OFF[$L]=""
	OFF_WHY[$L]=""
	if [ -f "$o/bzImage-noprezero" ]; then
		OFF[$L]="$o/bzImage-noprezero"
	elif [ -n "${ZS_MEASURE_BASE:-}" ]; then
		[ -f "$ZS_MEASURE_BASE" ] || die "ZS_MEASURE_BASE=$ZS_MEASURE_BASE is no file; name a bzImage without the series or unset it"
		OFF[$L]="$ZS_MEASURE_BASE"
	else
		OFF_WHY[$L]="no baseline for line $L: $o has no bzImage-noprezero and ZS_MEASURE_BASE is unset (build the line's pristine kernel and name it there)"
		log "${OFF_WHY[$L]}; rows that compare with and without the series print SKIP"
	fi
	log "line $L: on = ${ON[$L]}, off = ${OFF[$L]:-none}"
done
# The images a comparing row boots, LINE:SERIES; odd repetitions in this
# order, even ones reversed, so that no image always gets the warmer host.
KERNELS=""
for L in $LINES; do KERNELS="$KERNELS $L:on $L:off"; done
order() { if [ $(($1 % 2)) = 1 ]; then echo $KERNELS; else echo $KERNELS | tr ' ' '\n' | tac | tr '\n' ' '; fi; }
build_initramfs "$WORK"
INITRD="$WORK/initrd.cpio.gz"
# The bench initramfs (rows pf, hugeread, work): the same busybox, /zsbench
# (tests/kernel/zsbench.c) and bench-init.sh as /init.
BENCH_INITRD="$WORK/bench/initrd.cpio.gz"
build_bench_initramfs() {
	rm -rf "$WORK/bench" && mkdir -p "$WORK/bench"
	cp -a "$WORK/initramfs" "$WORK/bench/initramfs"
	gcc -O2 -static -Wall -Werror -o "$WORK/bench/initramfs/zsbench" "$ROOT/tests/kernel/zsbench.c" ||
		die "cannot build zsbench (gcc, libc6-dev)"
	install -m 755 "$ROOT/tests/kernel/bench-init.sh" "$WORK/bench/initramfs/init"
	(cd "$WORK/bench/initramfs" && find . | cpio -o -H newc --quiet | gzip -1) >"$BENCH_INITRD" ||
		die "cannot pack $BENCH_INITRD (cpio, gzip)"
}

# run NAME LINE:SERIES(on|off) MEM_MIB APPEND [extra QEMU args...]
# A boot that did not reach the init's last line, or whose kernel printed a
# crash, is recorded in $WORK/NAME.log.crashed: its row says CRASHED, it is
# listed at the end and the script exits non-zero. A crashed boot of the
# series is a result, never a row quietly left out of a table or median.
boots=0
crashed=()
# SERIES off is the line's baseline (OFF), whatever its file.
run() {
	local name="$1" kern="$2" mem="$3" append="$4" logf why img L="${2%%:*}"
	shift 4
	if [ "${kern##*:}" = on ]; then
		img="${ON[$L]}"
		append="$append ${ZS_MEASURE_ON_ARGS:-}"
	else
		img="${OFF[$L]}"
	fi
	logf="$WORK/$name.log"
	if [ -z "$img" ]; then
		echo "${OFF_WHY[$L]}" >"$logf.skipped"
		log "$name: SKIP: ${OFF_WHY[$L]}"
		return
	fi
	make_hinted_image "$WORK" "$name" "$img" "$(honest_hint_ranges "$mem")"
	boots=$((boots + 1))
	# A boot that never started (the harness could not build QEMU's
	# command line, no QEMU) is this script's failure, not a guest crash.
	qemu_boot "$logf" "$TMO" "$mem" "$WORK/$name.bzImage" "$append" \
		-initrd "$INITRD" $(hint_loader_args "$WORK/$name.blob") "${ICOUNT[@]}" "$@" ||
		[ -s "$logf" ] || die "$name: the boot did not start (no console log); the error above says why"
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

printf "| line | case | init_on_alloc | series | boot to init (%s) | Run /init (printk) | init mark (printk) | deferred struct-page init (ms) | hugetlb populate (ms) | 4K first touch (MiB/s) | pages skipped | fault batches |\n" "$CLOCK"
printf "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
# row NAME LABEL IOA LINE:SERIES
row() {
	local name="$1" label="$2" ioa="$3" line="${4%%:*}" series="${4##*:}"
	if [ -f "$WORK/$name.log.skipped" ]; then
		printf "| %s | %s | %s | %s | SKIP: %s | | | | | | | |\n" "$line" "$label" "$ioa" "$series" "$(cat "$WORK/$name.log.skipped")"
		return
	fi
	if [ -f "$WORK/$name.log.crashed" ]; then
		printf "| %s | %s | %s | %s | CRASHED: %s | | | | | | | |\n" "$line" "$label" "$ioa" "$series" "$(cat "$WORK/$name.log.crashed")"
		return
	fi
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$line" "$label" "$ioa" "$series" \
		"$(field "$name" ZSINIT uptime_s)" "$(ptime "$name" "Run /init as init")" "$(ptime "$name" "zsinit: mark")" "$(deferred_ms "$name")" \
		"$(field "$name" ZSPROBE hugetlb_ms)" "$(field "$name" ZSPROBE anon_mib_per_s)" \
		"$(field "$name" ZSDEBUGFS pages_skipped)" "$(field "$name" ZSDEBUGFS fault_batches)"
}

avail_gib() { awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo; }

for rep in $(seq 1 "$REPS"); do
	for ioa in 1 0; do
		want boot && for mem_g in $MEMS; do
			mem=$((mem_g * 1024))
			hp=$((mem / 2 / hp_mib))
			[ "$mem_g" = 1 ] && hp=0
			# A guest larger than the host (overcommit): QEMU's RAM is
			# mapped without reservation and backed as the guest touches
			# it. A boot that leaves its hugetlb pool untouched (the series
			# skips the pool's clears; init_on_alloc=0 clears none at boot)
			# touches only its struct pages and what it allocates; the
			# kernel without the series at init_on_alloc=1 clears the
			# whole 2M pool (half the guest), so it boots only where the
			# host has that much available (a 1G pool comes from memblock,
			# which clears nothing).
			over=()
			[ "$mem_g" -ge 16 ] && over=(-object "memory-backend-ram,id=zs-ram,size=${mem}M,reserve=off" -machine memory-backend=zs-ram)
			for k in $(order "$rep"); do
				n="boot-${mem_g}g-ioa$ioa-${k/:/-}-$rep"
				if [ "$HPSZ" = 2M ] && [ "$mem_g" -ge 16 ] && [ "$ioa" = 1 ] && [ "${k##*:}" = off ] && [ "$(avail_gib)" -lt $((mem_g / 2 + 4)) ]; then
					echo "the kernel without the series clears its $((mem_g / 2)) GiB hugetlb pool at boot; this host has $(avail_gib) GiB available" >"$WORK/$n.log.skipped"
					log "$n: SKIP: $(cat "$WORK/$n.log.skipped")"
				else
					run "$n" "$k" "$mem" "init_on_alloc=$ioa hugepagesz=$HPSZ hugepages=$hp" "${over[@]}"
				fi
				row "$n" "boot ${mem_g} GiB, hugepages=$hp ($HPSZ)" "$ioa" "$k"
			done
		done
		# Populate 75% of a 4 GiB guest: as hugetlb pages, then as 4K anon.
		for k in $(order "$rep"); do
			if want huge; then
				n="huge-4g-ioa$ioa-${k/:/-}-$rep"
				run "$n" "$k" 4096 "init_on_alloc=$ioa hugepages=1536 zsprobe=3072,0"
				row "$n" "4 GiB: populate 3 GiB hugetlb" "$ioa" "$k"
			fi
			# 4K-mapped (see the top): PMD THP and mTHP off, no madvise.
			if want anon; then
				n="anon-4g-ioa$ioa-${k/:/-}-$rep"
				run "$n" "$k" 4096 "init_on_alloc=$ioa $THP4K zsprobe=0,3072,thp"
				row "$n" "4 GiB: first touch 3 GiB 4K-mapped" "$ioa" "$k"
			fi
			# 6.12's 64 KiB mTHP enabled by the admin: one fault maps
			# 16 PTEs with one set_ptes(), still 4 KiB-mapped.
			if want mthp; then
				n="mthp-4g-ioa$ioa-${k/:/-}-$rep"
				run "$n" "$k" 4096 "init_on_alloc=$ioa transparent_hugepage=never zsmthp=64 zsprobe=0,3072,thp"
				row "$n" "4 GiB: first touch 3 GiB, 64 KiB mTHP" "$ioa" "$k"
			fi
		done
	done
done

# The price of fault batching: touch 1 byte per 64 KiB of 1 GiB (after a
# dense first touch of 1 GiB), 4K-mapped as above; RSS growth vs touched.
if want sparse; then
	for k in $KERNELS; do
		n="sparse-${k/:/-}"
		run "$n" "$k" 4096 "$THP4K zsprobe=0,1024,thp,sparse"
		printf "sparse touch, line %s, series %s: touched %s KiB (1 byte per 64 KiB of 1 GiB), RSS grew %s KiB\n" "${k%%:*}" "${k##*:}" \
			"$(field "$n" ZSPROBE sparse_touched_kib)" "$(field "$n" ZSPROBE sparse_rss_kib)"
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
	printf "\n| line | page size | chunk (KiB) | clear ms/GiB (each round) | median | longest chunk (us, median) |\n|---|---|---|---|---|---|\n"
	for L in $LINES; do
	why="${NO_NT_WHY[$L]}"
	if [ -n "$why" ]; then
		printf "| %s | SKIP: %s | | | | |\n" "$L" "$why"
		log "nt-$L: SKIP: $why"
		continue
	fi
	run "nt-$L" "$L:on" 4096 "prezero=off init_on_alloc=0 hugepagesz=1G hugepages=1 hugepagesz=2M hugepages=512 zsnt=1024,2m,$REPS,$chunks zsnt=1024,1g,$REPS,$chunks"
	[ ! -f "$WORK/nt-$L.log.crashed" ] ||
		printf "| %s | CRASHED: %s | | only the rounds before the crash are below | | |\n" "$L" "$(cat "$WORK/nt-$L.log.crashed")"
	for sz in 2m 1g; do
		for c in $(echo "$chunks" | tr ',' ' '); do
			grep -a "^ZSNT size=$sz chunk=$c " "$WORK/nt-$L.log" | tr -d '\r' | awk -v L="$L" -v sz="$sz" -v c="$c" 'BEGIN { n = 0 }
				{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
				  ms[n] = v["hugetlb_ms"] * 1024 / v["hugetlb_mib"]; lat[n] = v["max_chunk_ns"] / 1000; n++ }
				function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int(n / 2)] }
				END { if (!n) exit; s = ""; for (i = 0; i < n; i++) s = s sprintf("%.0f ", ms[i]);
				      printf "| %s | %s | %s | %s| %.0f | %s |\n", L, sz, c == "off" ? "normal path" : (c == 0 ? "whole" : c), s, med(ms, n), c == "off" ? "-" : sprintf("%.0f", med(lat, n)) }'
		done
	done
	done
fi

# HVO: MemFree with hugepages=1024 on a 4 GiB guest, vmemmap optimised or not.
if want hvo; then
	for L in $LINES; do
		for h in on off; do
			run "hvo-$L-$h" "$L:on" 4096 "hugepages=1024 hugetlb_free_vmemmap=$h"
			printf "HVO, line %s, %s: %s\n" "$L" "$h" "$(grep -a '^ZSMEM ' "$WORK/hvo-$L-$h.log" | tr -d '\r' | tail -1)"
		done
	done
fi

# ---------------------------------------------------------------- Bench rows
# Issue 17's rows (docs/kernel-measurements.md says what each shows and
# does not). Guests of ZS_MEASURE_BENCH_MEM MiB (default 1024), honest
# hint, the bench initramfs; "on" and "off" alternate which boots first.
#  pf:       will-it-scale page_fault1 (zsbench pf): 2 processes, 128 MiB
#            each, ZS_MEASURE_PF_SECS (default 10) s, 4 KiB faults (THP
#            off), init_on_alloc=1 and 0, with and without the series.
#  hugeread: the series' image only, prezero=off init_on_alloc=0 so that
#            every fault clears: fault 2 MiB pages (hugetlb, then THP) and
#            read each at once, NT huge clear on (clear_huge_nt.enable=1
#            min_kib=2048) and off (enable=0). TCG models no caches: this
#            row shows the clear's and the read's guest work, never the
#            cache cost; ntcost measures that on the host CPU.
#  work:     zsbench work (hash tables built and freed, 2 processes,
#            ZS_MEASURE_WORK_ROUNDS rounds of ZS_MEASURE_WORK_KEYS keys),
#            distro THP setting, init_on_alloc=1 and 0, with and without.
#  ntcost:   tests/kernel/ntcost.c on the host: rep stosb per 4 KiB (6.12),
#            rep stosb over ranges (7.3's clear_pages()) and movnti (0003)
#            clears of 256 KiB, 2 MiB, 64 MiB and 1 GiB blocks and the read
#            that follows.
BMEM="${ZS_MEASURE_BENCH_MEM:-1024}"
PF_SECS="${ZS_MEASURE_PF_SECS:-10}"
W_ROUNDS="${ZS_MEASURE_WORK_ROUNDS:-6}"
W_KEYS="${ZS_MEASURE_WORK_KEYS:-524288}"
# bench_row NAME LABEL IOA LINE:SERIES MODE: the ZSBENCH line(s) of MODE, as key=value
bench_row() {
	local name="$1" label="$2" ioa="$3" line="${4%%:*}" series="${4##*:}" mode="$5" vals
	if [ -f "$WORK/$name.log.skipped" ]; then
		printf "| %s | %s | %s | %s | SKIP: %s |\n" "$line" "$label" "$ioa" "$series" "$(cat "$WORK/$name.log.skipped")"
	elif [ -f "$WORK/$name.log.crashed" ]; then
		printf "| %s | %s | %s | %s | CRASHED: %s |\n" "$line" "$label" "$ioa" "$series" "$(cat "$WORK/$name.log.crashed")"
	else
		vals="$({ grep -a "^ZSBENCH mode=$mode " "$WORK/$name.log" || true; } | tr -d '\r' | cut -d' ' -f3- | paste -sd';')"
		printf "| %s | %s | %s | %s | %s |\n" "$line" "$label" "$ioa" "$series" "${vals:-no ZSBENCH line: see $WORK/$name.log}"
	fi
}
if want pf || want hugeread || want work; then
	build_bench_initramfs
	INITRD="$BENCH_INITRD"
	printf "\n| line | bench (%s) | init_on_alloc | series | result |\n|---|---|---|---|---|\n" "$CLOCK"
fi
for rep in $(seq 1 "$REPS"); do
	for ioa in 1 0; do
		for k in $(order "$rep"); do
			if want pf; then
				n="pf-ioa$ioa-${k/:/-}-$rep"
				run "$n" "$k" "$BMEM" "init_on_alloc=$ioa $THP4K zsbench=pf,2,$PF_SECS,128"
				bench_row "$n" "page_fault1 ${BMEM} MiB, 2x128 MiB, ${PF_SECS} s" "$ioa" "$k" pf
			fi
			if want work; then
				n="work-ioa$ioa-${k/:/-}-$rep"
				run "$n" "$k" "$BMEM" "init_on_alloc=$ioa zsbench=work,2,$W_ROUNDS,$W_KEYS"
				bench_row "$n" "hash tables ${BMEM} MiB, 2 procs x $W_ROUNDS rounds x $W_KEYS keys" "$ioa" "$k" work
			fi
		done
	done
	if want hugeread; then
		hp=$((BMEM / 2 / 2))
		mib=$((hp * 2 / 2))
		for L in $LINES; do
		for e in 1 0; do
			[ $((rep % 2)) = 0 ] && e=$((1 - e))
			n="hugeread-$L-nt$e-$rep"
			why="${NO_NT_WHY[$L]}"
			if [ "$e" = 1 ] && [ -n "$why" ]; then
				echo "$why" >"$WORK/$n.log.skipped"
				log "$n: SKIP: $why"
			else
				run "$n" "$L:on" "$BMEM" "prezero=off init_on_alloc=0 hugepages=$hp clear_huge_nt.min_kib=2048 clear_huge_nt.enable=$e zsbench=hugeread,$mib,hugetlb zsbench=hugeread,$mib,thp"
			fi
			bench_row "$n" "fault+read 2 MiB pages, $mib MiB, NT clear $([ "$e" = 1 ] && echo on || echo off)" 0 "$L:on" hugeread
		done
		done
	fi
done
if want ntcost; then
	gcc -O2 -Wall -Werror -o "$WORK/ntcost" "$ROOT/tests/kernel/ntcost.c" || die "cannot build ntcost (gcc)"
	printf "\n| host CPU (%s): clear a cold block, then read it | block | clear (us) | first read (us) | second read (us) |\n|---|---|---|---|---|\n" \
		"$(lscpu | sed -n 's/^Model name: *//p')"
	for b in 256 2048 65536 1048576; do
		# at least two blocks per area, and an area larger than the LLC
		buf=$((b / 512 > 1024 ? b / 512 : 1024))
		nice -n 10 "$WORK/ntcost" "$b" "$buf" "$((REPS < 5 ? 5 : REPS))" | tr -d '\r' | while read -r _ m bk _ _ c r1 r2; do
			printf "| %s | %s KiB | %s | %s | %s |\n" "${m#method=}" "${bk#block_kib=}" "${c#clear_us=}" "${r1#read1_us=}" "${r2#read2_us=}"
		done
	done
fi
log "logs in $WORK; took $((SECONDS - T0)) s"
if [ "${#crashed[@]}" -gt 0 ]; then
	log "${#crashed[@]} of $boots boots CRASHED (their rows say so):"
	for c in "${crashed[@]}"; do log "  $c"; done
	exit 1
fi
log "$boots boots, none crashed"
