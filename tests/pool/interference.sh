#!/usr/bin/env bash
# make bench-pool-interference: a memory-bandwidth-bound host workload's
# throughput while the pool fills (idle priority; normal priority; idle
# priority + bandwidth cap) vs while it is idle, interleaved in one run.
# Args: GIB REPS WORKLOAD_THREADS CAP_MIB_S WINDOW_S. Reserves GIB of 2M pages as
# root and gives them back on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The example binary, built by make (scripts build nothing).
bin="${1:?usage: interference.sh BIN ...: the pool example interference, built by make}"
shift
gib="${1:-4}"
reps="${2:-3}"
threads="${3:-1}"
cap="${4:-1024}"
window="${5:-5}"
export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the pages and runs this script again under
# ZS_HUGEPAGES=ok|short, giving them back however it ends.
[ -n "${_ZS_INTERFERENCE:-}" ] ||
  _ZS_INTERFERENCE=1 exec python3 -m zstest.hugepages --who interference --may-fail "2048:$((gib * 512))" -- \
    bash "$root/tests/pool/interference.sh" "$bin" "$gib" "$reps" "$threads" "$cap" "$window"
page=2M
if [ "$ZS_HUGEPAGES" != ok ]; then
  echo "interference: SKIP 2M: cannot reserve $((gib * 512)) pages; measuring on 4K shmem instead" >&2
  page=4K
fi
"$bin" "$page" "$gib" "$reps" "$threads" "$cap" "$window"
