#!/usr/bin/env bash
# Runs a command (make's: the pool's kill, holder and --hugetlbfs crate
# tests) on 2M hugetlb memory: reserves 192 free 2M pages (tests run in
# parallel, each with up to two pools of 3 x 8 MiB), mounts a private
# hugetlbfs, exports ZEROSTART_POOL_TEST_PAGE=2M and
# ZEROSTART_POOL_TEST_HUGETLBFS=<mount>, and unmounts and gives the pages
# back however the command ends (zstest.hugepages).
#
#   with-hugetlbfs.sh -- command args...
#
# Needs root; without it says SKIP (or fails under make's
# ZEROSTART_REQUIRE_HUGEPAGES=1) and runs nothing.
set -euo pipefail
[[ ${1:-} == -- ]] && shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ "$(id -u)" != 0 ]; then
  if [ "${ZEROSTART_REQUIRE_HUGEPAGES:-}" = 1 ]; then
    echo "FAIL test-pool: not root, so the 2M hugetlb and hugetlbfs kill tests cannot reserve hugepages; run as root (or set ZEROSTART_REQUIRE_HUGEPAGES=0 to skip them)" >&2
    exit 1
  fi
  echo "SKIP test-pool: the 2M hugetlb and hugetlbfs kill tests: not root (hugepages cannot be reserved)" >&2
  exit 0
fi
export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the pages and runs this script again; they are
# given back after it ends, so after the unmount below.
[ -n "${_ZS_WITH_HUGETLBFS:-}" ] ||
  _ZS_WITH_HUGETLBFS=1 exec python3 -m zstest.hugepages --who test-pool 2048:192 -- \
    bash "$root/tests/pool/with-hugetlbfs.sh" -- "$@"
mnt="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-pool-hugetlbfs.XXXXXX")"
cleanup() {
  if mountpoint -q "$mnt"; then
    rm -f "$mnt"/zerostart-pool-* || true
    umount "$mnt" || echo "test-pool: could not unmount $mnt" >&2
  fi
  rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mount -t hugetlbfs -o pagesize=2M,mode=0700 none "$mnt"
# The --hugetlbfs tests must not skip here: the mount they need is this one.
ZEROSTART_REQUIRE_POOL_HUGETLBFS=1 ZEROSTART_POOL_TEST_PAGE=2M ZEROSTART_POOL_TEST_HUGETLBFS="$mnt" "$@"
