#!/usr/bin/env bash
# Boot tests for series file 0006, "mm: skip clearing pristine struct pages
# in deferred init" (guest-kernel-patches/memmap.md), in QEMU TCG like
# run.sh; part of `make test-kernel`:
#   honest   4 GiB guest, the hint a VMM sends (measure.sh's): memblock puts
#            the memmap above 4 GiB, in hinted memory; struct pages must skip
#            their clear, every one verified zero (prezero.verify=1), no
#            WARNING, and the probe must find user memory zero;
#   planted  same hint, but 256 KiB of 0xa5 planted (QEMU -device loader)
#            inside the memmap's backing that the honest boot reported (struct
#            pages of ZONE_NORMAL, initialised by deferred init): the
#            hint lies there. Verify must catch it (WARNING naming a pfn,
#            "N not zero" with N > 0), clear those struct pages, and boot on;
#   off      prezero.memmap=off: nothing skipped;
#   nohint   no hint: nothing marked.
# nokaslr keeps the memmap at the same place in every boot.
# Env: ZEROSTART_KERNEL_IMAGE (default: the series' build), ZS_TEST_ONLY.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export ZS_TCG_THREAD="${ZS_TCG_THREAD:-single}"

TMO="${ZEROSTART_KERNEL_TEST_TIMEOUT:-900}"
ONLY=" ${ZS_TEST_ONLY:-honest planted off nohint} "
MEM_MIB=4096
WORK="$ZS_CACHE/kernel/memmap-test"
rm -rf "$WORK" && mkdir -p "$WORK"

install_test_deps
IMG="$(kernel_image)"
log "kernel: $IMG"
build_initramfs "$WORK"

# measure.sh's honest hint for a 4 GiB pc guest.
HINT="$(honest_hint_ranges "$MEM_MIB")"
make_hinted_image "$WORK" hinted "$IMG" "$HINT"
APPEND="nokaslr prezero.verify=2 init_on_alloc=1 hugepages=256 zsprobe=256,64"

# boot NAME IMAGE APPEND-EXTRA [qemu args]: boots, checks the common part.
boot() {
	local name="$1" image="$2" extra="$3" logf="$WORK/$1.log"
	shift 3
	if ! qemu_boot "$logf" "$TMO" "$MEM_MIB" "$image" "$APPEND $extra" -initrd "$WORK/initrd.cpio.gz" "$@"; then
		fail "$name: QEMU did not complete the boot (timeout or exit status; see above)"; return 1
	fi
	grep -aq "^ZSDONE" "$logf" || { fail "$name: init did not finish: $logf"; return 1; }
	for k in hugetlb_dirty_pages anon_dirty_pages; do
		v="$(kv "$logf" ZSPROBE "$k")"
		[ "${v:-x}" = 0 ] || fail "$name: $k=${v:-missing} (memory handed to user space was not zero)"
	done
	v="$(kv "$logf" ZSDEBUGFS verify_failures)"
	[ "${v:-x}" = 0 ] || fail "$name: page verify_failures=${v:-missing}"
	# prezero.verify=2: pages still marked pristine were scanned too.
	v="$(grep -ac 'marked pristine but is not zero' "$logf" || true)"
	[ "$v" = 0 ] || fail "$name: $v page(s) marked pristine but not zero (scan)"
	return 0
}
# Numbers from "memmap: N struct pages initialised without clearing ..., F not zero"
skipped() { grep -aoE "memmap: [0-9]+ struct pages initialised without clearing" "$WORK/$1.log" | grep -oE "[0-9]+" | head -1; }
notzero() { grep -aoE "[0-9]+ not zero" "$WORK/$1.log" | grep -oE "^[0-9]+" | head -1; }
no_warning() {
	if grep -aqE "WARNING:|BUG:|Oops" "$WORK/$1.log"; then
		fail "$1: kernel warning: $(grep -aE 'WARNING:|BUG:|Oops' "$WORK/$1.log" | head -2 | tr '\r\n' '  ')"
	fi
}

RANGE=""
if want honest || want planted; then
	if boot honest "$WORK/hinted.bzImage" "" $(hint_loader_args "$WORK/hinted.blob"); then
		no_warning honest
		RANGE="$(grep -aoE "on pristine memory within \[mem 0x[0-9a-f]+-0x[0-9a-f]+\]" "$WORK/honest.log" | grep -oE "0x[0-9a-f]+" | tr '\n' ' ' || true)"
		s="$(skipped honest || true)" z="$(notzero honest || true)"
		if [ -n "$RANGE" ] && [ "${s:-0}" -gt 0 ] && [ "${z:-x}" = 0 ]; then
			pass "honest: $s struct pages initialised without clearing, all verified zero (memmap on pristine [$RANGE])"
		else
			fail "honest: expected skipped struct-page clears, 0 not zero; got range='$RANGE' skipped=${s:-missing} notzero=${z:-missing}"
		fi
	fi
fi

if want planted; then
	if [ -z "$RANGE" ]; then
		fail "planted: needs the memmap range from the honest boot"
	else
		read -r lo hi <<<"$RANGE"
		# 256 KiB of 0xa5, 8 MiB below the end of the memmap's backing: 4096
		# struct pages of ZONE_NORMAL (memmap sections are laid out in pfn
		# order), which deferred struct-page init initialises.
		at=$(( (hi - (8 << 20)) & ~0xfff ))
		python3 -c 'import sys; sys.stdout.buffer.write(b"\xa5" * (256 << 10))' >"$WORK/pattern.bin"
		if boot planted "$WORK/hinted.bzImage" "" $(hint_loader_args "$WORK/hinted.blob") \
			-device "loader,file=$WORK/pattern.bin,addr=$at,force-raw=on"; then
			z="$(notzero planted || true)"
			if [ "${z:-0}" -gt 0 ] && [ "$z" -le 4096 ] &&
				grep -aqE "zerostart: struct page of pfn 0x[0-9a-f]+ was treated as pristine but is not zero" "$WORK/planted.log"; then
				pass "planted: verify caught $z struct pages on planted non-zero memory at $(printf '%#x' "$at"), warned, cleared them, booted on"
			else
				fail "planted: expected verify to catch 1..4096 struct pages at $(printf '%#x' "$at"), got notzero=${z:-missing}"
			fi
		fi
	fi
fi

if want off; then
	if boot off "$WORK/hinted.bzImage" "prezero.memmap=off" $(hint_loader_args "$WORK/hinted.blob"); then
		no_warning off
		if grep -aq "zerostart: memmap: prezero.memmap=off: clearing every struct page" "$WORK/off.log" &&
			! grep -aq "struct pages initialised without clearing" "$WORK/off.log"; then
			pass "off: prezero.memmap=off clears every struct page"
		else
			fail "off: expected the prezero.memmap=off line and no skipped struct page"
		fi
	fi
fi

if want nohint; then
	if boot nohint "$IMG" ""; then
		no_warning nohint
		if grep -aq "on pristine memory" "$WORK/nohint.log"; then
			fail "nohint: struct pages marked pristine without a hint"
		else
			pass "nohint: no struct page marked pristine"
		fi
	fi
fi

if [ "$fails" -gt 0 ]; then
	die "$fails check(s) failed; logs in $WORK"
fi
log "all memmap tests passed (logs in $WORK)"
