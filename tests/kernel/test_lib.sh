#!/usr/bin/env bash
# Unit test of tests/kernel/lib.sh's qemu_boot with the real QEMU: a QEMU
# that exits non-zero (here: a kernel image that does not exist) must fail
# the boot, not only a QEMU that times out.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
if qemu_boot "$d/boot.log" 60 128 "$d/no-such-bzImage" "" 2>"$d/err"; then
	echo "FAIL: qemu_boot returned success for a QEMU that exited with $(head -1 "$d/boot.log")" >&2
	exit 1
fi
grep -q "QEMU exited with status 1" "$d/err" ||
	{ echo "FAIL: qemu_boot did not name QEMU's exit status: $(cat "$d/err")" >&2; exit 1; }
echo "PASS: qemu_boot fails a boot whose QEMU exits non-zero ($(tr -d '\n' <"$d/err"))"
