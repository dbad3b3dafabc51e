#!/usr/bin/env bash
# make test-pool: the pool's crate tests, then the kill tests again on 2M
# hugetlb memfds and on a hugetlbfs mount (files that survive a daemon
# SIGKILL and must be scrubbed by the next daemon).
#
# Needs root for the hugetlb part: 2M pages are added through
# /proc/sys/vm/nr_hugepages and the old value is put back on exit, and a
# private hugetlbfs is mounted and unmounted again. Without root only the
# 4K tests run (with a note).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

cargo test --locked -p pool

if [ "$(id -u)" != 0 ]; then
  echo "test-pool: not root: skipping the 2M hugetlb and hugetlbfs kill tests" >&2
  exit 0
fi

hp_file=/proc/sys/vm/nr_hugepages
hp_old="$(cat "$hp_file")"
mnt="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-pool-hugetlbfs.XXXXXX")"
cleanup() {
  if mountpoint -q "$mnt"; then
    rm -f "$mnt"/zerostart-pool-* || true
    umount "$mnt" || echo "test-pool: could not unmount $mnt" >&2
  fi
  rmdir "$mnt" 2>/dev/null || true
  if [ "$(cat "$hp_file")" != "$hp_old" ]; then
    echo "$hp_old" >"$hp_file" || echo "test-pool: could not restore $hp_file to $hp_old" >&2
  fi
}
trap cleanup EXIT

# Tests run in parallel, each with up to two pools of 3 x 8 MiB.
need=192
free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
if [ "$free" -lt "$need" ]; then
  echo $((hp_old + need - free)) >"$hp_file"
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
  if [ "$free" -lt "$need" ]; then
    echo "test-pool: could only reserve $free of $need 2M hugepages" >&2
    exit 1
  fi
fi
mount -t hugetlbfs -o pagesize=2M,mode=0700 none "$mnt"

ZEROSTART_POOL_TEST_PAGE=2M ZEROSTART_POOL_TEST_HUGETLBFS="$mnt" \
  cargo test --locked -p pool --test kill -- --test-threads 4
echo "test-pool: kill tests passed on 4K shmem, 2M hugetlb memfds and hugetlbfs files"
