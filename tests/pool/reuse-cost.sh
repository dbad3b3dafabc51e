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
# shellcheck source=../lib/hugepages.sh
source "$root/tests/lib/hugepages.sh"
hugepages_reserve 2048 $((gib * 512)) || echo "reuse-cost: SKIP: 2M: cannot reserve $((gib * 512)) pages" >&2
"$bin" "$gib" "$reps"
