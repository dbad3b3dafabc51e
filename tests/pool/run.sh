#!/usr/bin/env bash
# make test-pool: the pool's crate tests, then the kill tests, the holder
# attacks (tests/holders.rs) and the --hugetlbfs tests again on 2M hugetlb
# memfds and on a hugetlbfs mount (files that survive a daemon SIGKILL and
# are replaced, never reused, by the next daemon).
#
# Needs root for the hugetlb part: 2M pages are added through
# tests/lib/hugepages.sh, which gives them back however the script ends, and a
# private hugetlbfs is mounted and unmounted again. Without root only the
# 4K tests run (with a note).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

cargo test --locked -p pool

if [ "$(id -u)" != 0 ]; then
  # Under make (ZEROSTART_REQUIRE_HUGEPAGES=1) what the tests need must be had.
  if [ "${ZEROSTART_REQUIRE_HUGEPAGES:-}" = 1 ]; then
    echo "FAIL test-pool: not root, so the 2M hugetlb and hugetlbfs kill tests cannot reserve hugepages; run as root (or set ZEROSTART_REQUIRE_HUGEPAGES=0 to skip them)" >&2
    exit 1
  fi
  echo "SKIP test-pool: the 2M hugetlb and hugetlbfs kill tests: not root (hugepages cannot be reserved)" >&2
  exit 0
fi

# shellcheck source=../lib/hugepages.sh
source "$root/tests/lib/hugepages.sh"
mnt="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-pool-hugetlbfs.XXXXXX")"
work=
pool_pid=
stop_pool() { if [ -n "$pool_pid" ]; then kill "$pool_pid" 2>/dev/null || true; wait "$pool_pid" 2>/dev/null || true; pool_pid=; fi; }
cleanup() {
  stop_pool
  [ -z "$work" ] || rm -rf "$work"
  if mountpoint -q "$mnt"; then
    rm -f "$mnt"/zerostart-pool-* || true
    umount "$mnt" || echo "test-pool: could not unmount $mnt" >&2
  fi
  rmdir "$mnt" 2>/dev/null || true
}
# Runs before the hugepages this script added are given back.
hugepages_on_exit cleanup

# Tests run in parallel, each with up to two pools of 3 x 8 MiB.
hugepages_reserve 2048 192
mount -t hugetlbfs -o pagesize=2M,mode=0700 none "$mnt"

# --nocapture: a test that skips says SKIP and why.
ZEROSTART_POOL_TEST_PAGE=2M ZEROSTART_POOL_TEST_HUGETLBFS="$mnt" \
  cargo test --locked -p pool --test kill --test holders --test hugetlbfs -- --test-threads 4 --nocapture 2>&1 |
  tee "$mnt.log" | grep -E '^(test |SKIP|test result)' || true
grep -q '^test result: FAILED' "$mnt.log" && { grep -B2 -A12 'panicked' "$mnt.log" >&2; rm -f "$mnt.log"; exit 1; }
[ "$(grep -c '^test result: ok' "$mnt.log")" = 3 ] || { echo "test-pool: the 2M tests did not all run" >&2; tail -20 "$mnt.log" >&2; rm -f "$mnt.log"; exit 1; }
rm -f "$mnt.log"
echo "test-pool: kill, holder (vmsplice, io_uring, fd in flight) and --hugetlbfs tests passed on 4K shmem, 2M hugetlb memfds and hugetlbfs files"

# The VMM path: zerostart boots the probe guest from pool memory; the probe
# reads every hinted byte and must report them all zero. Three boots from a
# two-region pool, so a region is reused after a VM dirtied it; every lease
# must come back and be scrubbed without being retired.
if [ -n "${ZEROSTART_BIN:-}" ]; then
  Z="$ZEROSTART_BIN"
else
  Z="${CARGO_TARGET_DIR:-$root/target}/release/zerostart"
  cargo build --release --locked -p zerostart
fi
if ! "$Z" pool --help >/dev/null 2>&1; then
  echo "SKIP test-pool: the VM boots from pool memory: this zerostart has no 'pool' subcommand (prezero=pool not mounted)" >&2
  exit 0
fi
bash tests/probe/build.sh
# Until the pool's every byte is clean (scrubbed and not leased), at most
# 120 s; then one line naming the pool's state and its log.
pool_clean() {
  "$Z" pool status --socket "$work/pool.sock" --wait-clean --timeout 120 >/dev/null ||
    { echo "test-pool: $1 ($work/pool.log)" >&2; return 1; }
}
work="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-test-pool.XXXXXX")"
for page in 4K 2M; do
  hp=$([ "$page" = 2M ] && echo "hugepages=on," || true)
  "$Z" pool serve --socket "$work/pool.sock" --size 256M --region-size 128M --page "$page" --verify 2>"$work/pool.log" &
  pool_pid=$!
  for i in 1 2 3; do
    pool_clean "the $page pool never had every region clean (boot $i)"
    timeout 120 "$Z" run --kernel target/probe/probe.bzImage --serial "file=$work/serial" \
      --timeline "$work/tl.json" --memory "size=128M,${hp}prezero=pool:$work/pool.sock" 2>"$work/run.err" ||
      { echo "test-pool: zerostart run from a $page pool failed:" >&2; cat "$work/run.err" >&2; exit 1; }
    grep -q '^ZSPROBE: PASS hint=valid .* nonzero_bytes=0 ' "$work/serial" ||
      { echo "test-pool: probe verdict on $page pool memory (boot $i):" >&2; grep ZSPROBE "$work/serial" | tail -3 >&2; exit 1; }
    rm -f "$work/serial"
  done
  pool_clean "the $page pool did not scrub its 3 returned leases"
  "$Z" pool status --socket "$work/pool.sock" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["leases_total"] == 3 and s["retired_total"] == 0 and s["scrub_failures"] == 0, s
print("test-pool: 3 probe boots from a %s pool: every hinted byte zero; 3 leases returned and scrubbed (%d MiB), none retired" % (s["page"], s["scrubbed_bytes"] >> 20))'
  stop_pool
done
