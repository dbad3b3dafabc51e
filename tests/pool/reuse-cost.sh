#!/usr/bin/env bash
# make bench-pool-reuse: what making a returned region clean costs per GiB,
# in-place NT zeroing (the old, unsafe way) vs punch + repopulate vs a new
# file (what the pool does), 4K shmem and 2M hugetlb, interleaved in one
# run. Reserves the 2M pages as root and gives them back on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The example binary, built by make (scripts build nothing).
bin="${1:?usage: reuse-cost.sh BIN ...: the pool example reuse_cost, built by make}"
shift
gib="${1:-1}"
reps="${2:-5}"
export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the pages and runs this script again under
# ZS_HUGEPAGES=ok|short, giving them back however it ends.
[ -n "${_ZS_REUSE_COST:-}" ] ||
  _ZS_REUSE_COST=1 exec python3 -m zstest.hugepages --who reuse-cost --may-fail "2048:$((gib * 512))" -- \
    bash "$root/tests/pool/reuse-cost.sh" "$bin" "$gib" "$reps"
[ "$ZS_HUGEPAGES" = ok ] || echo "reuse-cost: SKIP: 2M: cannot reserve $((gib * 512)) pages" >&2
"$bin" "$gib" "$reps"
