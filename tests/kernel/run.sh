#!/usr/bin/env bash
# make test-kernel: the guest kernel series, tested in QEMU TCG.
#  1. the kernel's copy of the golden vectors equals tests/vectors/ (no drift);
#  2. build (cached) bzImage with the series (guest-kernel-patches/build.sh);
#  3. KUnit: boot with kunit.filter_glob=zerostart*, parse KTAP, every suite
#     must be present and ok;
#  4. boot tests with the hint delivered as real setup_data (see mkhint.py):
#     honest hint, hint covering kernel+initrd+setup_data, corrupted hint,
#     scrub request, no hint, prezero=off; all with prezero.verify=2 (every
#     skipped clear checked, and every page still marked pristine scanned
#     after memblock_discard() and at late_initcall). Pass: no WARNING, no
#     verify or scan failure, no non-zero byte in memory handed to user
#     space, skipped clears > 0 exactly when a good hint is in effect (and
#     then both scans ran), and one warning line naming the error for a bad
#     hint;
#  4b. "memblock": memblock.reserved one entry short of full when memory is
#     released (prezero.test_fill_reserved), so that its array is doubled
#     into hinted memory: no page may be left marked pristine; "scanctl":
#     pages written after they were marked must all be reported (the
#     negative control of the verify and scan checks);
#  5. firmware boot ("efi"): zerostart's OVMF (firmware/build.sh, cached)
#     reads the hint from fw_cfg, claims its ranges as EfiLoaderData and
#     publishes them in the EFI configuration table; the kernel boots through
#     its EFI stub and must take the hint from that table (same pass
#     criteria as "good", with prezero.verify=2).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Correctness boots run single-threaded TCG: with thread=multi about 1 boot
# in 20 died with "Oops: int3" in sched_clock_tick while the kernel patched
# its own text (static keys), with and without a hint: a multi-threaded TCG
# cross-modifying-code race, not ours. Timings (measure.sh) keep multi.
export ZS_TCG_THREAD="${ZS_TCG_THREAD:-single}"

TMO="${ZEROSTART_KERNEL_TEST_TIMEOUT:-600}"
# ZS_TEST_ONLY="kunit good ..." runs a subset (names as in the boot cases).
ONLY=" ${ZS_TEST_ONLY:-kunit good cover corrupt scrub off nohint memblock scanctl hibernate hibernatectl hugedirty batch leak compact pool nt efi} "
MEM_MIB=2048
# ZS_TEST_WORK=dir: logs and scratch (default $ZEROSTART_CACHE/kernel/test-run).
WORK="${ZS_TEST_WORK:-$ZS_CACHE/kernel/test-run}"
rm -rf "$WORK" && mkdir -p "$WORK"

install_test_deps

# ---------------------------------------------------------------- 1. vectors
# The patch carries the golden vectors in kernel style (mm/zshint_*.h),
# generated from tests/vectors/ by gen-kernel-vectors.py: regenerate and
# compare with the copy inside the patch.
python3 "$KTEST/gen-kernel-vectors.py" "$ROOT/tests/vectors" "$WORK/gen" ||
	die "cannot generate the kernel's vectors from tests/vectors/"
check_copy() {
	local name="$1" patch
	patch="$(grep -l "^+++ b/mm/$name\$" "$ROOT"/guest-kernel-patches/patches/*.patch | head -1)"
	[ -n "$patch" ] || { fail "no patch adds mm/$name"; return; }
	# The added file's lines, from the patch text.
	awk -v f="+++ b/mm/$name" '
		$0 == f { on = 1; next }
		on && /^diff --git / { exit }
		on && /^@@/ { next }
		on && /^\+/ { print substr($0, 2) }' "$patch" >"$WORK/$name"
	if diff -u "$WORK/gen/$name" "$WORK/$name" >"$WORK/$name.diff"; then
		pass "mm/$name in $(basename "$patch") matches tests/vectors/"
	else
		fail "mm/$name in $(basename "$patch") differs from tests/vectors/ (regenerate with tests/kernel/gen-kernel-vectors.py and update the patch): $WORK/$name.diff"
	fi
}
check_copy zshint_vectors.h
check_copy zshint_errors.h

# ---------------------------------------------------------------- 2. build
# ZEROSTART_KERNEL_IMAGE=path tests an image built elsewhere (e.g. by
# build.sh --dev while working on the series) instead of the series' build.
IMG="$(kernel_image)"
log "kernel: $IMG"
build_initramfs "$WORK"

# ---------------------------------------------------------------- 3. KUnit
SUITES=(zerostart_hint zerostart_pristine clear_huge_nt)
# Patches that bring their own suite: required once `series` lists them.
series_adds() {
	grep -l "^+++ b/$1\$" $(sed -n 's|^patches/|'"$ROOT"'/guest-kernel-patches/patches/|p' \
		"$ROOT/guest-kernel-patches/series") >/dev/null 2>&1
}
series_adds mm/zerostart_memmap_test.c && SUITES+=(zerostart_memmap)
series_adds mm/zerostart_memblock_test.c && SUITES+=(zerostart_memblock)
series_adds mm/zerostart_freepaths_test.c && SUITES+=(zerostart_freepaths)
if ! want kunit; then
	:
elif qemu_boot "$WORK/kunit.log" "$TMO" "$MEM_MIB" "$IMG" \
	"kunit.enable=1 init_on_alloc=1 hugepages=2 movablecore=1G"; then
	# (hugepages and movablecore: the pool folio and the ZONE_MOVABLE
	# block that zerostart_freepaths frees and offlines. 1G, not 256M:
	# boot allocations such as the initrd, not yet freed when KUnit runs,
	# can pin the two top blocks, and the case needs one that offlines.)
	# KTAP without the printk timestamps.
	sed -E 's/^\[ *[0-9]+\.[0-9]+\] //' "$WORK/kunit.log" | tr -d '\r' >"$WORK/kunit.ktap"
	# Any suite that ran and failed fails the test, listed or not.
	for s in $(sed -nE 's/^not ok [0-9]+ (zerostart[a-z_]*|clear_huge_nt)$/\1/p' "$WORK/kunit.ktap"); do
		[[ " ${SUITES[*]} " == *" $s "* ]] || fail "KUnit suite $s: not ok"
	done
	for s in "${SUITES[@]}"; do
		if grep -qE "^ok [0-9]+ $s\$" "$WORK/kunit.ktap"; then
			pass "KUnit suite $s: ok"
		elif grep -qE "^not ok [0-9]+ $s\$" "$WORK/kunit.ktap"; then
			fail "KUnit suite $s: not ok"
		else
			fail "KUnit suite $s missing from $WORK/kunit.log"
		fi
	done
	# A case of ours that skipped tested nothing: its reason is a boot
	# option or a config this run should have given it.
	if grep -qE "^ +ok [0-9]+ zs_test_[a-z_]+ # SKIP" "$WORK/kunit.ktap"; then
		fail "KUnit: skipped: $(grep -E '^ +ok [0-9]+ zs_test_[a-z_]+ # SKIP' "$WORK/kunit.ktap" | head -5 | tr '\n' ';')"
	fi
	if grep -qE "^ *not ok " "$WORK/kunit.ktap"; then
		fail "KUnit: $(grep -E '^ *not ok ' "$WORK/kunit.ktap" | head -5 | tr '\n' ';')"
	fi
	pass "KUnit: $(grep -cE '^    ok [0-9]+ ' "$WORK/kunit.ktap") test cases ok"
else
	fail "KUnit boot did not finish: $WORK/kunit.log"
fi

# ---------------------------------------------------------------- 4. boots
RAM_END=$((MEM_MIB << 20))
# Honest: what a VMM would send, minus what QEMU and SeaBIOS wrote (the
# compressed kernel at 1 MiB, the setup_data page, the initrd and firmware
# tables near the top).
GOOD="$(honest_hint_ranges "$MEM_MIB")"
# Lying about what the boot path wrote: from 1 MiB to the end of RAM, i.e.
# over the compressed and decompressed kernel, the initrd (QEMU puts it at
# the top of RAM) and the hint itself. The kernel must remove all of that on
# its own. Left out: [RAM_END - 64 MiB, RAM_END - 4 MiB), where SeaBIOS and
# QEMU write data before the kernel starts (~108 KiB 16 MiB below the top
# here, see guest-kernel-patches/memmap.md "Finding"); the kernel cannot know
# of firmware writes, the ABI makes leaving them out the producer's job, and
# the boot data this case is about lies outside that window.
COVER_FW_LO=$((RAM_END - (64 << 20))) COVER_FW_HI=$((RAM_END - (4 << 20)))
COVER="$((1 << 20)):$((COVER_FW_LO - (1 << 20))),$COVER_FW_HI:$((RAM_END - COVER_FW_HI))"
PROBE="zsprobe=256,64"
COMMON="hugepages=128 prezero.verify=2 init_on_alloc=1 $PROBE"

# boot_case NAME EXPECT(skip|noskip|any) APPEND-EXTRA IMAGE [qemu args...]
# ("any": verify mode is off in the case, so skips cannot be checked here)
boot_case() {
	local name="$1" expect="$2" extra="$3" image="$4"
	shift 4
	local logf="$WORK/boot-$name.log" skipped failed
	if ! qemu_boot "$logf" "$TMO" "${CASE_MEM_MIB:-$MEM_MIB}" "$image" "$COMMON $extra" -initrd "$WORK/initrd.cpio.gz" "$@"; then
		fail "$name: QEMU did not complete the boot (timeout or exit status; see above)"
		return
	fi
	grep -aq "^ZSDONE" "$logf" || { fail "$name: init did not finish: $logf"; return; }
	if grep -aqE "WARNING:|BUG:|Oops" "$logf"; then
		fail "$name: kernel warning: $(grep -aE 'WARNING:|BUG:' "$logf" | head -2 | tr '\r\n' '  ')"
	fi
	skipped="$(kv "$logf" ZSDEBUGFS pages_skipped)"
	elided="$(kv "$logf" ZSDEBUGFS pages_elided)"
	failed="$(kv "$logf" ZSDEBUGFS verify_failures)"
	verified="$(kv "$logf" ZSDEBUGFS bytes_verified)"
	verified=$(( ${verified:-0} / 4096 ))
	[ "$expect" = any ] || [ "${failed:-x}" = 0 ] || fail "$name: verify_failures=${failed:-missing}"
	scan_check "$name" "$expect" "$extra"
	# The probe's sizes (the last zsprobe=HUGE_MIB,ANON_MIB,...): a part it
	# was asked to run must have reported, one it was not has no keys.
	local probe huge_mib anon_mib
	probe="$(echo " $COMMON $extra " | tr ' ' '\n' | sed -n 's/^zsprobe=//p' | tail -1)"
	huge_mib="$(echo "$probe" | cut -d, -f1)" anon_mib="$(echo "$probe" | cut -d, -f2)"
	for k in hugetlb_dirty_pages anon_dirty_pages; do
		case "$k" in
		hugetlb_*) [ "${huge_mib:-0}" -gt 0 ] || continue ;;
		anon_*) [ "${anon_mib:-0}" -gt 0 ] || continue ;;
		esac
		v="$(kv "$logf" ZSPROBE "$k")"
		[ "${v:-x}" = 0 ] || fail "$name: $k=${v:-missing} (memory handed to user space was not zero)"
		# The count's negative control (zsprobe.c): bytes planted into the
		# memory just counted must all be counted.
		planted_check "$name" "$logf" ZSPROBE "${k%_dirty_pages}"
	done
	case "$expect" in
	skip)
		# A skip in flight while debugfs is read may not be verified yet:
		# allow one 2 MiB folio of difference.
		if [ "${skipped:-0}" -gt 0 ] && [ $((${verified:-0} + 512)) -ge $((skipped + ${elided:-0})) ]; then
			pass "$name: $skipped pristine clears skipped, ${elided:-0} hugetlb re-clears elided, $verified pages verified zero, 0 failures"
		else
			fail "$name: expected skipped clears, got skipped=${skipped:-missing} verified=${verified:-missing}"
		fi ;;
	any) pass "$name: $skipped pristine clears skipped, no page handed to user space was dirty" ;;
	noskip)
		if [ "${skipped:-x}" = 0 ]; then
			pass "$name: no pristine clear skipped (${elided:-0} hugetlb re-clears elided, all verified)"
		else
			fail "$name: skipped=$skipped but no good hint was in effect"
		fi ;;
	esac
}

# planted_check NAME LOG PREFIX KEY: on the last PREFIX line, KEY_planted_found
# equals KEY_planted (> 0): the counter behind KEY's zero claim sees planted bytes.
planted_check() {
	local p f
	p="$(kv "$2" "$3" "$4_planted")"
	f="$(kv "$2" "$3" "$4_planted_found")"
	if [ -n "$p" ] && [ "$p" -gt 0 ] && [ "${f:-x}" = "$p" ]; then
		log "$1: negative control: $f of $p bytes planted after the $4 check were found"
	else
		fail "$1: negative control of the $4 check: planted=${p:-missing} found=${f:-missing} (the check cannot see a non-zero byte)"
	fi
}

# secret_check NAME: the probe's leak mode in boot NAME saw no page of the
# secret in freshly touched memory, and, as its negative control, the
# secret planted into 16 of those pages afterwards is seen by the same scan.
secret_check() {
	local v
	v="$(kv "$WORK/boot-$1.log" ZSPROBE leak_secret_pages)"
	if [ "${v:-x}" = 0 ]; then
		pass "$1: no page of the secret was seen in freshly touched memory"
	else
		fail "$1: leak_secret_pages=${v:-missing}"
	fi
	planted_check "$1" "$WORK/boot-$1.log" ZSPROBE leak
}

# scan_check NAME EXPECT EXTRA: in any boot, no line reports a marked page
# that is not zero; with the scans on (the last prezero.verify= is 2 or
# scan) and a hint in effect (EXPECT skip or any), both scans of the pages
# still marked pristine ran and found every one zero.
scan_check() {
	local logf="$WORK/boot-$1.log" n bad level
	bad="$(grep -ac 'marked pristine but is not zero' "$logf" || true)"
	[ "$bad" = 0 ] || fail "$1: $bad page(s) marked pristine but not zero: $(grep -a 'marked pristine but is not zero' "$logf" | head -2 | tr -d '\r' | tr '\n' ';')"
	[ "$2" != noskip ] || return 0
	level="$(echo " $COMMON $3 " | tr ' ' '\n' | sed -n 's/^prezero.verify=//p' | tail -1)"
	case "$level" in 2|scan) ;; *) return 0 ;; esac
	for at in memblock_discard late_initcall; do
		n="$({ grep -aE "zerostart: scan at $at: [0-9]+ pages marked pristine, 0 of them not zero" "$logf" || true; } | tr -d '\r' | sed -E 's/.*: ([0-9]+) pages.*/\1/' | tail -1)"
		if [ -n "$n" ] && [ "$n" -gt 0 ]; then
			log "$1: scan at $at: $n marked pages read zero"
		else
			fail "$1: no clean scan at $at (prezero.verify=2): $({ grep -a "scan at $at" "$logf" || true; } | tr -d '\r' | head -1)"
		fi
	done
}

# expect_line NAME REGEX: the boot log has exactly one line matching REGEX
expect_line() {
	local n
	n="$(grep -acE "$2" "$WORK/boot-$1.log" || true)"
	if [ "$n" = 1 ]; then
		pass "$1: '$(grep -aE "$2" "$WORK/boot-$1.log" | sed 's/^\[[^]]*\] //' | tr -d '\r')'"
	else
		fail "$1: expected one line matching /$2/, found $n"
	fi
}

make_hinted_image "$WORK" good "$IMG" "$GOOD"
if want good; then
	boot_case good skip "" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	expect_line good "zerostart: tracking [0-9]+ pristine pages"
fi
if want cover; then
	# The case's point needs the initrd inside the hint's top range.
	[ "$(stat -c %s "$WORK/initrd.cpio.gz")" -lt $((3 << 20)) ] ||
		fail "cover: the initrd is over 3 MiB, so it may not lie in the hint's top 4 MiB"
	make_hinted_image "$WORK" cover "$IMG" "$COVER"
	boot_case cover skip "" "$WORK/cover.bzImage" $(hint_loader_args "$WORK/cover.blob")
	expect_line cover "zerostart: hint from setup_data: 2 ranges"
fi
if want corrupt; then
	make_hinted_image "$WORK" corrupt "$IMG" "$GOOD" --corrupt
	boot_case corrupt noskip "" "$WORK/corrupt.bzImage" $(hint_loader_args "$WORK/corrupt.blob")
	expect_line corrupt "zerostart: ignoring pre-zeroed hint from setup_data: BadChecksum"
fi
if want scrub; then
	make_hinted_image "$WORK" scrub "$IMG" "$GOOD" --scrub
	boot_case scrub noskip "" "$WORK/scrub.bzImage" $(hint_loader_args "$WORK/scrub.blob")
	expect_line scrub "zerostart: ignoring pre-zeroed hint from setup_data: ScrubRequest"
fi
if want off; then
	boot_case off noskip "prezero=off" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	expect_line off "zerostart: prezero=off: ignoring the pre-zeroed hint"
fi
if want nohint; then
	boot_case nohint noskip "" "$IMG"
fi

# Allocations from memblock after the pristine snapshot (the memblock false
# zero): memblock.reserved one entry short of full when memblock_free_all()
# starts, and memblock's allocation limit lowered into hinted memory, so
# that memmap_init_reserved_pages() doubles the array into memory the hint
# covers (memblock=debug prints the doubling). The array is freed with
# memblock_free_late() at memblock_discard(); the scan right after, and the
# one at late_initcall, must find no page marked pristine that is not zero.
# Before the fix (snapshot at the start of memblock_free_all(), KEEP on
# every early free) the first scan reported the array's pages.
if want memblock; then
	boot_case memblock skip "prezero.test_fill_reserved=1 memblock=debug" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	expect_line memblock "zerostart: test: memblock.reserved filled to [0-9]+ of [0-9]+ entries"
	if grep -aqE "memblock: reserved is doubled to [0-9]+ at" "$WORK/boot-memblock.log"; then
		pass "memblock: $(grep -aE 'memblock: reserved is doubled to' "$WORK/boot-memblock.log" | head -1 | sed 's/^\[[^]]*\] //' | tr -d '\r')"
	else
		fail "memblock: memblock.reserved was not doubled: the case did not exercise the path"
	fi
fi

# Hibernation (series file "forget every pristine mark before hibernation"):
# a hibernation image restores the pristine bitmap but not the free pages,
# which the kernel that loaded the image has written meanwhile. Boot 1 (the
# honest hint, verify mode) puts swap on a virtio disk and hibernates to it;
# boot 2, with resume=, loads the image, and boot 1's /init continues: it
# first-touches 1200 MiB of anonymous memory. With the fix every mark was
# dropped before the image was made: no clear is skipped after the resume,
# and nothing is found dirty. hibernatectl keeps the marks
# (prezero.test_hibernate_keep, test builds only): verify mode must then
# catch pages the loading kernel wrote, or the case cannot fail.
# hibernate_case NAME EXTRA-APPEND clean|caught
hibernate_case() {
	local name="$1" extra="$2" expect="$3" swap="$WORK/$1.swap"
	local l1="$WORK/boot-$1.log" l2="$WORK/boot-$1-resume.log" n b r f d w
	local args="hugepages=0 prezero.verify=1 init_on_alloc=1 nokaslr zsprobe=0,1200 $extra"
	rm -f "$swap" && truncate -s 1G "$swap"
	if ! qemu_boot "$l1" "$TMO" "$MEM_MIB" "$WORK/good.bzImage" "$args zshib=1" -initrd "$WORK/initrd.cpio.gz" \
		$(hint_loader_args "$WORK/good.blob") -drive "file=$swap,if=virtio,format=raw"; then
		fail "$name: the hibernating boot timed out"; return
	fi
	b="$(kv "$l1" ZSHIB pristine_pages)"
	if ! grep -aq "PM: hibernation: hibernation exit\|PM: Image saving done\|PM: hibernation: Image saving done\|Image saving done" "$l1"; then
		fail "$name: no hibernation image was written: $(grep -aE 'ZSHIB FAIL|PM: ' "$l1" | tail -3 | tr -d '\r' | tr '\n' ';')"; return
	fi
	if ! qemu_boot "$l2" "$TMO" "$MEM_MIB" "$WORK/good.bzImage" "$args zshib=2 resume=/dev/vda" -initrd "$WORK/initrd.cpio.gz" \
		$(hint_loader_args "$WORK/good.blob") -drive "file=$swap,if=virtio,format=raw"; then
		fail "$name: the resuming boot timed out"; return
	fi
	if ! grep -aq "^ZSHIB resumed" "$l2" || ! grep -aq "^ZSDONE" "$l2"; then
		fail "$name: the image was not resumed to the end: $(grep -aE 'ZSHIB|PM: ' "$l2" | tail -3 | tr -d '\r' | tr '\n' ';')"; return
	fi
	r="$(kv "$l2" ZSHIB pages_skipped)" f="$(kv "$l2" ZSDEBUGFS verify_failures)"
	d="$(kv "$l2" ZSPROBE anon_dirty_pages)" n="$(kv "$l2" ZSDEBUGFS pages_skipped)"
	w="$(grep -acE 'WARNING:|BUG:|Oops' "$l2" || true)"
	case "$expect" in
	clean)
		if grep -aqE "zerostart: hibernation: dropped all [0-9]+ pristine marks" "$l1" && [ "${b:-0}" -gt 0 ] &&
			[ "$(kv "$l2" ZSHIB pristine_pages)" = 0 ] && [ "${n:-x}" = "${r:-y}" ] && [ "${f:-x}" = 0 ] &&
			[ "${d:-x}" = 0 ] && [ "$w" = 0 ]; then
			pass "$name: $b pristine marks dropped before the image was made; after the resume 0 marks, no clear skipped, 1200 MiB touched, 0 verify failures"
		else
			fail "$name: marks before=${b:-missing} after=$(kv "$l2" ZSHIB pristine_pages) skipped resumed=${r:-?} final=${n:-?} verify_failures=${f:-?} anon_dirty_pages=${d:-?} warnings=$w"
		fi ;;
	caught)
		if [ "${f:-0}" -gt 0 ]; then
			pass "$name: marks kept across the hibernation: verify caught ${f} pages the loading kernel had written"
		else
			fail "$name: marks kept across the hibernation but verify_failures=${f:-missing}: the hibernate case could not fail"
		fi ;;
	esac
}
want hibernate && hibernate_case hibernate "" clean
want hibernatectl && hibernate_case hibernatectl "prezero.test_hibernate_keep=1" caught

# A hugetlb pool folio that was used and freed must be cleared when it is
# faulted again, hint or not: the probe populates the whole 256 MiB pool
# (fresh folios the allocator cleared or found pristine: their clear is
# elided, 65536 pages), fills it with a pattern, unmaps it, and populates it
# again, which must clear every folio (free_huge_folio() drops HPG_zeroed)
# and read back zero. Verify mode off (scan only), so only the kernel's own
# logic stands between the pattern and user space.
if want hugedirty; then
	boot_case hugedirty any "prezero.verify=scan zsprobe=256,0,dirty" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	e="$(kv "$WORK/boot-hugedirty.log" ZSDEBUGFS pages_elided)"
	if [ "${e:-x}" = 65536 ]; then
		pass "hugedirty: only the first populate of the pool was elided (65536 pages); the dirtied folios were cleared on the second"
	else
		fail "hugedirty: pages_elided=${e:-missing}, want 65536: a freed, dirtied pool folio was faulted without its clear"
	fi
fi

# Negative control of the checks above: the kernel writes one byte into 16
# pages right after marking them pristine (prezero.test_dirty_pristine);
# verify mode and the scans must report all 16 (verify_failures=16, each
# with its pfn), the scans at least one of them.
if want scanctl; then
	logf="$WORK/boot-scanctl.log"
	if qemu_boot "$logf" "$TMO" "$MEM_MIB" "$WORK/good.bzImage" \
		"$COMMON prezero.test_dirty_pristine=16" -initrd "$WORK/initrd.cpio.gz" $(hint_loader_args "$WORK/good.blob"); then
		f="$(kv "$logf" ZSDEBUGFS verify_failures)"
		s="$(kv "$logf" ZSDEBUGFS scan_failures)"
		w="$(grep -ac 'zerostart: test: wrote into 16 pages marked pristine' "$logf" || true)"
		if [ "$w" = 1 ] && [ "${f:-x}" = 16 ] && [ "${s:-0}" -ge 1 ]; then
			pass "scanctl: 16 planted pages, verify_failures=16 ($s found by the scans)"
		else
			fail "scanctl: planted=$w verify_failures=${f:-missing} scan_failures=${s:-missing}: the checks do not see planted bytes"
		fi
	else
		fail "scanctl: QEMU did not complete the boot (timeout or exit status; see above)"
	fi
fi

# Fault batching (patch "map pristine memory in batches"): with THP and
# every mTHP size off, first-touch 256 MiB of anonymous memory without
# MADV_NOHUGEPAGE: faults must map pristine 64 KiB folios (fault_batches >
# 0), every byte verified zero by the kernel and read back zero by the
# probe; then touch 1 byte per 64 KiB of another 256 MiB and report the
# RSS it costs.
# batch_counters NAME: fault_batches > 0 and the batch size in effect.
batch_counters() {
	local logf="$WORK/boot-$1.log" b m k
	b="$(kv "$logf" ZSDEBUGFS fault_batches)"
	m="$(kv "$logf" ZSDEBUGFS fault_batch_misses)"
	k="$(kv "$logf" ZSDEBUGFS fault_batch_kib)"
	if [ "${b:-0}" -gt 0 ]; then
		pass "$1: $b pristine ${k:-?} KiB folios mapped by one fault each, ${m:-?} batches not pristine, $(kv "$logf" ZSDEBUGFS fault_batch_pauses) pauses"
	else
		fail "$1: expected fault_batches > 0, got ${b:-missing} (fault_batch_kib=${k:-missing})"
	fi
}
if want batch; then
	boot_case batch skip "transparent_hugepage=never zsprobe=0,256,thp,sparse,refuse" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	batch_counters batch
	# VMAs that forbid large folios must not be batched: 64 MiB touched
	# with MADV_NOHUGEPAGE, and after prctl(PR_SET_THP_DISABLE), against
	# 64 MiB touched plainly (1024 batches); a few batches from other
	# processes at the same time are tolerated.
	pl="$(kv "$WORK/boot-batch.log" ZSPROBE refuse_plain_batches)"
	ma="$(kv "$WORK/boot-batch.log" ZSPROBE refuse_madv_batches)"
	pr="$(kv "$WORK/boot-batch.log" ZSPROBE refuse_prctl_batches)"
	if [ "${pl:-0}" -ge 512 ] && [ "${ma:-999}" -ge 0 ] && [ "${ma:-999}" -lt 16 ] &&
		[ "${pr:-999}" -ge 0 ] && [ "${pr:-999}" -lt 16 ]; then
		pass "batch: 64 MiB touched: $pl batches plain, $ma with MADV_NOHUGEPAGE, $pr after PR_SET_THP_DISABLE"
	else
		fail "batch: refusal: plain=${pl:-missing} (want >= 512) madvise=${ma:-missing} prctl=${pr:-missing} (want < 16)"
	fi
	t="$(kv "$WORK/boot-batch.log" ZSPROBE sparse_touched_kib)"
	r="$(kv "$WORK/boot-batch.log" ZSPROBE sparse_rss_kib)"
	log "batch: sparse touch (1 byte per 64 KiB): ${t:-?} KiB touched, RSS grew ${r:-?} KiB"
fi
# Try to make batching leak: a child writes a secret into 256 MiB of
# anonymous memory and exits, the probe writes it into 256 MiB more and
# unmaps it, then first-touches 256 MiB in a batch-eligible area: the freed
# pages come back, are not pristine, and must be cleared. Verify mode is
# off (prezero.verify=scan: only the boot-time scans of the marks, which
# run before the probe) so that only the kernel's own logic stands between
# the secret and user space.
if want leak; then
	boot_case leak any "transparent_hugepage=never prezero.verify=scan zsprobe=0,256,thp,leak" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	batch_counters leak
	# The freed pages must really have come back through the batch path.
	m="$(kv "$WORK/boot-leak.log" ZSDEBUGFS fault_batch_misses)"
	if [ "${m:-0}" -gt 0 ]; then
		pass "leak: $m batch folios were recycled memory (not pristine) and were cleared"
	else
		fail "leak: fault_batch_misses=${m:-missing}: the test did not exercise a non-pristine batch"
	fi
	secret_check leak
fi

# The same with compaction between the free and the first touch: it
# migrates pages into pristine free memory and releases the free pages it
# isolated (mark_allocated() then __free_pages()); the secret must not come
# back either way.
if want compact; then
	boot_case compact any "transparent_hugepage=never prezero.verify=scan zsprobe=0,256,thp,leak,compact" "$WORK/good.bzImage" $(hint_loader_args "$WORK/good.blob")
	c="$(kv "$WORK/boot-compact.log" ZSPROBE compact_isolated)"
	if [ "${c:-0}" -gt 0 ]; then
		pass "compact: compaction isolated $c pages ($(kv "$WORK/boot-compact.log" ZSPROBE compact_migrated) migrated) between the free and the first touch"
	else
		fail "compact: compact_isolated=${c:-missing} ($(kv "$WORK/boot-compact.log" ZSPROBE compact_error)): compaction did nothing, the case cannot fail"
	fi
	secret_check compact
fi

# The boot-time hugetlb pool must come from pristine memory (patch "mm:
# release pristine memory to the page allocator first"): 4 GiB, the honest
# hint, a pool of 1024 2 MiB pages (half of RAM) and init_on_alloc=0, so
# that the pool's allocations (__GFP_ZERO while pristine memory exists) are
# about the only clears that can be skipped at boot. Counted when /init
# starts, before the probe skips more: without the patch the pool took 13
# blocks of memory the boot had written (the decompressor's footprint) and
# the count was ~6 300 short of the pool's 524 288 pages. With it, other
# skips at boot add ~500 pages, and a page freed during boot can merge
# into a free block that is handed out early (frees go to the head of the
# free lists, as they should): allow 4 such blocks (2048 pages).
if want pool; then
	make_hinted_image "$WORK" pool "$IMG" "$(honest_hint_ranges 4096)"
	COMMON="hugepages=1024 prezero.verify=2 init_on_alloc=0 $PROBE" CASE_MEM_MIB=4096 \
		boot_case pool skip "" "$WORK/pool.bzImage" $(hint_loader_args "$WORK/pool.blob")
	s="$(kv "$WORK/boot-pool.log" ZSBOOT pages_skipped)"
	min=$((1024 * 512 - 4 * 512))
	if [ "${s:-0}" -ge "$min" ]; then
		pass "pool: the boot-time pool of 1024 2 MiB pages came from pristine memory ($s clears skipped at boot, >= $min)"
	else
		fail "pool: ${s:-no} clears skipped at boot, < $min: the boot-time pool took memory the boot had written"
	fi
fi

# NT clearing of huge pages (patch "x86/mm: clear huge and gigantic pages
# with non-temporal stores"): prezero=off and init_on_alloc=0, so faults
# really clear; NT stores forced for 2 MiB pages too (the threshold is the
# LLC size). The probe fills the hugetlb pool with a pattern, unmaps it,
# populates it again and checks every byte is zero: 256 MiB of 2 MiB pages
# with 64 KiB chunks and whole-folio chunks, and one 1 GiB page.
if want nt; then
	# 4 GiB: a 1 GiB-aligned free gigantic page (RAM above 4 GiB).
	CASE_MEM_MIB=4096 boot_case nt noskip "prezero=off init_on_alloc=0 hugepagesz=1G hugepages=1 zsntdirty=1 zsnt=256,2m,1,64,0 zsnt=1024,1g,1,2048" "$IMG"
	logf="$WORK/boot-nt.log"
	n="$(grep -ac '^ZSNT .*hugetlb_dirty_pages=0 ' "$logf" || true)"
	# Negative control: each populate's count then saw the 16 bytes planted
	# into the pages it had just read back zero.
	c="$(grep -acE '^ZSNT .*hugetlb_planted_found=16([^0-9]|$)' "$logf" || true)"
	pages="$(kv "$logf" ZSNTSTAT pages)"
	want_pages=$(( (256 * 2 + 1024) * 256 ))
	[ "$c" = 3 ] || fail "nt: negative control: $c of 3 populates counted all 16 planted bytes: $(grep -a '^ZSNT ' "$logf" | tr -d '\r' | tr '\n' ';')"
	if [ "$n" = 3 ] && [ "${pages:-0}" -ge "$want_pages" ]; then
		pass "nt: 3 populates of dirtied pool pages (2 MiB x2 chunk sizes, 1 GiB) read back zero, and each count saw 16 planted bytes; $pages pages cleared with NT stores"
	else
		fail "nt: $n of 3 populates clean, NT pages ${pages:-missing} (want >= $want_pages): $(grep -a '^ZSNT ' "$logf" | tr -d '\r' | tr '\n' ';')"
	fi
fi

# ---------------------------------------------------------------- 5. firmware
if want efi; then
	FW_DIR="$(bash "$ROOT/firmware/build.sh" --print-dir)"
	if [ ! -f "$FW_DIR/OVMF.fd" ]; then
		log "building zerostart's OVMF (firmware/build.sh, cached in $FW_DIR)"
		bash "$ROOT/firmware/build.sh" >&2 || die "firmware/build.sh failed; see its log"
	fi
	# All RAM from 1 MiB: QEMU writes nothing to guest RAM on a firmware
	# boot (the kernel and initrd come through fw_cfg), and the firmware
	# publishes only what it claimed, free, at the end of PEI.
	python3 "$KTEST/mkhint.py" --ranges "$((1 << 20)):$((RAM_END - (1 << 20)))" \
		--out-hint "$WORK/efi.hint" || die "cannot build the fw_cfg hint"
	boot_case efi skip "" "$IMG" -machine q35 -bios "$FW_DIR/OVMF.fd" \
		-fw_cfg "name=opt/org.zerostart/prezeroed,file=$WORK/efi.hint" \
		-debugcon "file:$WORK/boot-efi.fw.log" -global isa-debugcon.iobase=0x402
	expect_line efi "zerostart: hint from EFI table: 1 ranges"
fi

if [ "$fails" -gt 0 ]; then
	die "$fails check(s) failed; logs in $WORK"
fi
log "all kernel tests passed (logs in $WORK)"
