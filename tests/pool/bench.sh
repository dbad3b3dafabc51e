#!/usr/bin/env bash
# make bench-pool: memory-ready time for 1/4/8 GiB (or the sizes given):
# pool lease vs fresh hugetlb + NT zero vs MADV_POPULATE_WRITE vs no
# prefault. Reserves enough 2M hugepages for the largest size as root and
# restores the old count on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The example binary, built by make (scripts build nothing).
bin="${1:?usage: bench.sh BIN ...: the pool example memready, built by make}"
shift
sizes="${1:-1,4,8}"
reps="${2:-3}"
max=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -1)
need=$((max * 512))

export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the pages, runs the benchmark and gives them
# back however it ends.
exec python3 -m zstest.hugepages --who bench-pool "2048:$need" -- "$bin" "$sizes" "$reps"
