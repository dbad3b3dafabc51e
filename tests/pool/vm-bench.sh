#!/usr/bin/env bash
# Launch -> first vCPU instruction (zerostart's `first_kvm_run`) and
# memory_ready for guest RAM from the pool vs prefault vs no prefault,
# booting the probe guest on /dev/kvm. Needs a zerostart with
# `prezero=pool` mounted (ZEROSTART_BIN, default $CARGO_TARGET_DIR or target/, then release/zerostart),
# root (2M hugepages reserved and restored), `make probe`.
#
#   PYTHONPATH=tests tests/pool/vm-bench.sh [SIZES_GIB=1,4,8] [REPS=3]   (zstest.probe boots)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
Z="${ZEROSTART_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/zerostart}"
K="$root/target/probe/probe.bzImage"
sizes="${1:-1,4,8}"
reps="${2:-3}"
"$Z" pool --help >/dev/null 2>&1 || { echo "vm-bench: $Z has no 'pool' subcommand" >&2; exit 1; }
[ -f "$K" ] || { echo "vm-bench: $K missing; run make probe" >&2; exit 1; }

max=$(tr ',' '\n' <<<"$sizes" | sort -n | tail -1)
export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# zstest.hugepages reserves the pages and runs this script again, giving
# them back after it ends.
[ -n "${_ZS_VM_BENCH:-}" ] ||
  _ZS_VM_BENCH=1 exec python3 -m zstest.hugepages --who vm-bench "2048:$((max * 512))" -- \
    bash "$root/tests/pool/vm-bench.sh" "$sizes" "$reps"

work="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-vm-bench.XXXXXX")"
pool_pid=
cleanup() {
  if [ -n "$pool_pid" ]; then kill "$pool_pid" 2>/dev/null || true; wait "$pool_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

boot() { # label gib memory-opts
  local tl="$work/$1-$2g.json" out
  # zstest.probe boots and judges (exit 0, one PASS verdict, the timeline schema).
  out=$(ZEROSTART_BIN="$Z" PROBE_BZIMAGE="$K" WORK="$work" python3 -m zstest.probe "$1-$2g" 0 '^ZSPROBE: PASS' \
    -- --memory "size=$2G,$3") || { echo "vm-bench: $1 $2G: $out" >&2; exit 1; }
  python3 - "$tl" "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = {p["name"]: p["t_ms"] for p in d["phases"]}
print(json.dumps({"method": sys.argv[2], "gib": int(sys.argv[3]), "memory_ready_ms": t["memory_ready"],
                  "first_kvm_run_ms": t["first_kvm_run"], "exit_ms": t["exit"], "prezero": d["prezero"]["method"]}))
PY
}

for g in ${sizes//,/ }; do
  "$Z" pool serve --socket "$work/pool.sock" --size "${g}G" --region-size "${g}G" --page 2M 2>"$work/pool.log" &
  pool_pid=$!
  for _ in $(seq 1 $((reps + 1))); do
    "$Z" pool status --socket "$work/pool.sock" --wait-clean --timeout 300 >/dev/null
    boot pool "$g" "hugepages=on,prezero=pool:$work/pool.sock"
  done | tail -n "$reps"
  kill "$pool_pid"; wait "$pool_pid" 2>/dev/null || true; pool_pid=
  for _ in $(seq 1 "$reps"); do boot prefault_populate "$g" "hugepages=on,prefault=on,prefault_method=populate"; done
  for _ in $(seq 1 "$reps"); do boot prefault_nt "$g" "hugepages=on,prefault=on,prefault_method=nt"; done
  for _ in $(seq 1 "$reps"); do boot no_prefault "$g" "hugepages=on,prefault=off"; done
done
