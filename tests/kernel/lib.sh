# shellcheck shell=bash
# Shared helpers of the kernel measurements (measure.sh, memmap-measure.sh),
# sourced. Thin wrappers over zstest.guestkernel, the boot kit the kernel
# test suite (run.py) uses: the same initramfs, hint and QEMU TCG boot
# (zstest.qemu), so a measurement boots exactly as the tests do.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ZS_CACHE="${ZEROSTART_CACHE:-$HOME/.cache/zerostart}"
# make sets PYTHONPATH to tests/; this does too, for a direct run.
export PYTHONPATH="$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"
export ZS_KIT_WHO="${ZS_KIT_WHO:-${0##*/}}"

die() { echo "$ZS_KIT_WHO: $*" >&2; exit 1; }
log() { echo "$ZS_KIT_WHO: $*" >&2; }
_kit() { python3 -m zstest.guestkernel "$@"; }

install_test_deps() {
	python3 -c 'import sys; from zstest import guestkernel as g
try:
    g.install_test_deps(sys.argv[1])
except g.KitError as e:
    sys.exit(f"{sys.argv[1]}: {e}")' "$ZS_KIT_WHO"
}
# build_initramfs DIR -> DIR/initrd.cpio.gz (DIR/initramfs: the tree)
build_initramfs() { _kit initramfs "$1"; }
# qemu_boot LOG TIMEOUT MEM_MIB IMAGE APPEND [extra qemu args...]: 0 when
# QEMU ran to its end with status 0 (ZS_TCG_THREAD: single|multi, default multi)
qemu_boot() { _kit boot "$@"; }
# make_hinted_image DIR NAME BZIMAGE RANGES [mkhint flags] -> DIR/NAME.bzImage, DIR/NAME.blob
make_hinted_image() { _kit hinted "$@"; }
hint_loader_args() { _kit loader-args "$1"; }
# honest_hint_ranges MEM_MIB: the hint a VMM would send for a QEMU pc guest
honest_hint_ranges() { _kit honest-ranges "$1"; }

# `want NAME` is true when NAME is in $ONLY (" a b c ").
want() { [[ "$ONLY" == *" $1 "* ]]; }

# kv LOG PREFIX KEY: value of KEY=... on the last line starting with PREFIX
kv() {
	{ grep -a "^$2 " "$1" || true; } | tr ' \r' '\n\n' | { grep -a "^$3=" || true; } | tail -1 | cut -d= -f2
}
