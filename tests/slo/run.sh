#!/usr/bin/env bash
# make test-slo: runs tests/slo/example.toml through `zerostart slo` and
# checks its outputs (report.json, junit.xml parse; chart.png is a PNG),
# then a config whose SLO cannot hold must exit non-zero with the failure
# in both reports.
#
# Needs: /dev/kvm (the probe boots on it), qemu-system-x86_64 (TCG Linux),
# the probe (make probe), the Linux guest (tests/slo/prepare.sh, apt) and,
# for tests/slo/launch.toml, OVMF.fd / CLOUDHV.fd (firmware/build.sh,
# cached; `make test-slo` builds it first).
# The hugetlb scenario needs 512 free 2M pages and the pool 512 more:
# reserved as root and the old count put back on exit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${SLO_OUT:-$root/target/slo}"

# The chart's text needs a TrueType font (pure-Rust renderer, no fontconfig).
if [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  apt-get install -y -q fonts-dejavu-core >/dev/null
fi

# Built by make (mk/slo.mk: zerostart, the SLO runner, the probe, the Linux
# guest of tests/slo/prepare.sh, the firmware); this script builds nothing.
: "${ZEROSTART_BIN:?set ZEROSTART_BIN to a release zerostart (make test-slo builds it)}"
: "${SLO_BIN:?set SLO_BIN to the release zerostart-slo (make test-slo builds it)}"
: "${ZEROSTART_FIRMWARE_DIR:?set ZEROSTART_FIRMWARE_DIR to the directory of OVMF.fd (make test-slo passes the one make firmware builds)}"
export ZEROSTART_FIRMWARE_DIR

hp_file=/proc/sys/vm/nr_hugepages
hp_old="$(cat "$hp_file")"
restore() {
  if [ "$(cat "$hp_file")" != "$hp_old" ]; then
    echo "$hp_old" >"$hp_file" || echo "test-slo: could not restore $hp_file to $hp_old" >&2
  fi
}
trap restore EXIT
need=1024
free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
if [ "$free" -lt "$need" ]; then
  echo $((hp_old + need - free)) >"$hp_file"
fi

export ZEROSTART_BIN
SLO=("$SLO_BIN")
rm -rf "$out"
"${SLO[@]}" --config tests/slo/example.toml --out "$out"

check() {
  python3 - "$1" "$2" <<'PY'
import json, sys, xml.etree.ElementTree as ET
out, want_pass = sys.argv[1], sys.argv[2] == "pass"
r = json.load(open(f"{out}/report.json"))
assert r["pass"] is want_pass, f"report.json pass={r['pass']}"
cases = ET.parse(f"{out}/junit.xml").getroot().findall(".//testcase")
slos = [s for sc in r["scenarios"] for s in sc["slos"]]
assert len(cases) == len(slos), (len(cases), len(slos))
fails = sum(1 for c in cases if c.find("failure") is not None)
assert fails == r["counts"]["failed"], (fails, r["counts"])
assert (fails == 0) == want_pass
png = open(f"{out}/chart.png", "rb").read(8)
assert png == b"\x89PNG\r\n\x1a\n", "chart.png is not a PNG"
ran = [sc for sc in r["scenarios"] if sc["skipped"] is None]
assert ran and all(sc["reps"] for sc in ran)
print(f"test-slo: {out}: report.json ({len(ran)} scenarios ran), junit.xml ({len(cases)} testcases, {fails} failures), chart.png ok")
PY
}
check "$out" pass

rc=0
"${SLO[@]}" --config tests/slo/failing.toml --out "$out-failing" >/dev/null 2>&1 || rc=$?
if [ "$rc" = 0 ]; then
  echo "test-slo: an SLO that cannot hold exited 0" >&2
  exit 1
fi
check "$out-failing" fail

# Pool-backed boots, when this zerostart has `prezero=pool`.
if "$ZEROSTART_BIN" pool --help >/dev/null 2>&1; then
  pool_dir="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-slo-pool.XXXXXX")"
  export ZEROSTART_POOL_SOCKET="$pool_dir/pool.sock"
  # Four regions: the pool never hands a lessee's pages to the next one (a
  # returned region is replaced by fresh memory, docs/pool.md), and with
  # boots back to back the replacement must finish while the next boots
  # lease the others, so memory_ready measures a lease of ready memory.
  # With two, 3-4 of 10 boots waited 18-31 ms for a replacement.
  "$ZEROSTART_BIN" pool serve --socket "$ZEROSTART_POOL_SOCKET" --size 1G --region-size 256M 2>"$pool_dir/pool.log" &
  pool_pid=$!
  trap 'kill $pool_pid 2>/dev/null; wait $pool_pid 2>/dev/null; rm -rf "$pool_dir"; restore' EXIT
  # Until every region is clean, at most 120 s; else one line naming why.
  pool_clean() {
    "$ZEROSTART_BIN" pool status --socket "$ZEROSTART_POOL_SOCKET" --wait-clean --timeout 120 >/dev/null ||
      { echo "test-slo: the SLO pool was not clean before the $1 run ($pool_dir/pool.log)" >&2; return 1; }
  }
  # QEMU (TCG) through `zerostart launch` on the same pool: leases a region,
  # gets the hint over fw_cfg, boots OVMF + Linux (tests/slo/launch.toml).
  pool_clean launch
  "${SLO[@]}" --config tests/slo/launch.toml --out "$out-launch"
  check "$out-launch" pass
  python3 - "$out-launch" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/report.json"))
sc = next(s for s in r["scenarios"] if s["name"] == "qemu-tcg-linux-256M-launch-pool")
assert sc["skipped"] is None, sc["skipped"]
assert sc["launch"].startswith("pool:"), sc["launch"]
for rep in sc["reps"]:
    assert rep["ok"], rep["error"]
    for p in ("memory_ready", "first_output", "init_started", "test_done", "exit"):
        assert p in rep["phases"], (p, rep["phases"])
    assert rep["phases"]["memory_ready"] < rep["phases"]["init_started"], rep["phases"]
print(f"test-slo: {sc['name']}: {len(sc['reps'])} boots through zerostart launch, "
      f"memory_ready max {max(x['phases']['memory_ready'] for x in sc['reps']):.1f} ms")
PY

  pool_clean pool
  "${SLO[@]}" --config tests/slo/pool.toml --out "$out-pool"
  check "$out-pool" pass
else
  echo "SKIP test-slo: tests/slo/pool.toml, tests/slo/launch.toml: zerostart has no 'pool' subcommand" >&2
fi
echo "test-slo: passed"
