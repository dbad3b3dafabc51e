#!/usr/bin/env bash
# make bench-pool: memory-ready time for 1/4/8 GiB (or the sizes given):
# pool lease vs fresh hugetlb + NT zero vs MADV_POPULATE_WRITE vs no
# prefault. Reserves enough 2M hugepages for the largest size as root and
# restores the old count on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
sizes="${1:-1,4,8}"
reps="${2:-3}"
max=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -1)
need=$((max * 512))

cargo build --release --locked -p pool --example memready
# shellcheck source=../lib/hugepages.sh
source "$root/tests/lib/hugepages.sh"
hugepages_reserve 2048 "$need"
"${CARGO_TARGET_DIR:-$root/target}/release/examples/memready" "$sizes" "$reps"
