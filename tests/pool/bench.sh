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
hp_file=/proc/sys/vm/nr_hugepages
hp_old="$(cat "$hp_file")"
restore() {
  if [ "$(cat "$hp_file")" != "$hp_old" ]; then
    echo "$hp_old" >"$hp_file" || echo "bench-pool: could not restore $hp_file to $hp_old" >&2
  fi
}
trap restore EXIT
free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
if [ "$free" -lt "$need" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bench-pool: need $need free 2M hugepages ($free free); run as root to reserve them" >&2
    exit 1
  fi
  echo $((hp_old + need - free)) >"$hp_file"
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
  if [ "$free" -lt "$need" ]; then
    echo "bench-pool: could only reserve $free of $need 2M hugepages" >&2
    exit 1
  fi
fi
"${CARGO_TARGET_DIR:-$root/target}/release/examples/memready" "$sizes" "$reps"
