#!/usr/bin/env bash
# make test-pool, the VMM part: zerostart boots the probe guest from pool
# memory (4K shmem and 2M hugetlb pools). The pool's crate tests and its
# kill, holder and --hugetlbfs tests on 2M memory are make's
# (mk/pool.mk, tests/pool/with-hugetlbfs.sh); this script builds nothing.
#
#   ZEROSTART_BIN=... PROBE_BZIMAGE=... tests/pool/run.sh
#
# Needs root for the 2M pool: its pages are added through
# zstest.hugepages, which gives them back however the script ends.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
Z="${ZEROSTART_BIN:?set ZEROSTART_BIN to a release zerostart (make test-pool builds it)}"
K="${PROBE_BZIMAGE:?set PROBE_BZIMAGE to the probe guest (make probe builds it)}"
[ -x "$Z" ] && [ -f "$K" ] || { echo "test-pool: $Z or $K missing; run make test-pool" >&2; exit 1; }

pages="4K"
if [ "$(id -u)" = 0 ]; then
  pages="4K 2M"
elif [ "${ZEROSTART_REQUIRE_HUGEPAGES:-}" = 1 ]; then
  echo "FAIL test-pool: not root, so the 2M pool cannot reserve hugepages; run as root (or set ZEROSTART_REQUIRE_HUGEPAGES=0 to skip it)" >&2
  exit 1
else
  echo "SKIP test-pool: probe boots from a 2M pool: not root (hugepages cannot be reserved)" >&2
fi

export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the 2M pool's pages and runs this script again,
# giving them back after it ends.
if [ "$pages" != 4K ] && [ -z "${_ZS_TEST_POOL:-}" ]; then
  _ZS_TEST_POOL=1 exec python3 -m zstest.hugepages --who test-pool 2048:192 -- bash "$root/tests/pool/run.sh"
fi
work=
pool_pid=
stop_pool() { if [ -n "$pool_pid" ]; then kill "$pool_pid" 2>/dev/null || true; wait "$pool_pid" 2>/dev/null || true; pool_pid=; fi; }
cleanup() {
  stop_pool
  [ -z "$work" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The VMM path: zerostart boots the probe guest from pool memory; the probe
# reads every hinted byte and must report them all zero. Three boots from a
# two-region pool, so a region is reused after a VM dirtied it; every lease
# must come back and be scrubbed without being retired.
if ! "$Z" pool --help >/dev/null 2>&1; then
  echo "SKIP test-pool: the VM boots from pool memory: this zerostart has no 'pool' subcommand (prezero=pool not mounted)" >&2
  exit 0
fi
# Until the pool's every byte is clean (scrubbed and not leased), at most
# 120 s; then one line naming the pool's state and its log.
pool_clean() {
  "$Z" pool status --socket "$work/pool.sock" --wait-clean --timeout 120 >/dev/null ||
    { echo "test-pool: $1 ($work/pool.log)" >&2; return 1; }
}
work="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-test-pool.XXXXXX")"
for page in $pages; do
  hp=$([ "$page" = 2M ] && echo "hugepages=on," || true)
  "$Z" pool serve --socket "$work/pool.sock" --size 256M --region-size 128M --page "$page" --verify 2>"$work/pool.log" &
  pool_pid=$!
  for i in 1 2 3; do
    pool_clean "the $page pool never had every region clean (boot $i)"
    # zstest.probe boots and judges (exit 0, one verdict, the timeline schema).
    ZEROSTART_BIN="$Z" PROBE_BZIMAGE="$K" WORK="$work" python3 -m zstest.probe "pool-$page-boot$i" 0 \
      '^ZSPROBE: PASS hint=valid .* nonzero_bytes=0 ' --timeout 120 \
      --check "j['prezero']['method'] == 'pool_lease'" -- --memory "size=128M,${hp}prezero=pool:$work/pool.sock" ||
      { echo "test-pool: probe boot $i from a $page pool failed (above)" >&2; exit 1; }
  done
  pool_clean "the $page pool did not scrub its 3 returned leases"
  "$Z" pool status --socket "$work/pool.sock" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["leases_total"] == 3 and s["retired_total"] == 0 and s["scrub_failures"] == 0, s
print("test-pool: 3 probe boots from a %s pool: every hinted byte zero; 3 leases returned and scrubbed (%d MiB), none retired" % (s["page"], s["scrubbed_bytes"] >> 20))'
  stop_pool
done
