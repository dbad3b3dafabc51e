#!/usr/bin/env bash
# make bench-pool-first-fill: a new region made clean with one zeroing (the
# kernel's, at populate: what the pool does) vs two (populate + engine
# zeroing), and daemon start to all clean, interleaved. Args: GIB REPS.
# Reserves GIB of 2M pages as root and gives them back on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The example binary, built by make (scripts build nothing).
bin="${1:?usage: first-fill.sh BIN ...: the pool example first_fill, built by make}"
shift
gib="${1:-1}"
reps="${2:-5}"
export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the pages and runs this script again under
# ZS_HUGEPAGES=ok|short, giving them back however it ends.
[ -n "${_ZS_FIRST_FILL:-}" ] ||
  _ZS_FIRST_FILL=1 exec python3 -m zstest.hugepages --who first-fill --may-fail "2048:$((gib * 512))" -- \
    bash "$root/tests/pool/first-fill.sh" "$bin" "$gib" "$reps"
[ "$ZS_HUGEPAGES" = ok ] || echo "first-fill: SKIP 2M: cannot reserve $((gib * 512)) pages; 4K shmem instead" >&2
"$bin" "$gib" "$reps"
