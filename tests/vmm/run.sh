#!/usr/bin/env bash
# make test-vmm: boots the bare-metal probe guest through `zerostart run` on
# /dev/kvm with each memory backing, with and without the pre-zeroed hint,
# with a corrupted and a dirty hint, several vCPUs and RAM above the 3 GiB
# hole, and checks the probe's verdict line and the timeline JSON.
#
#   tests/vmm/run.sh [CASE...]     (default: every case)
#
# Needs root for the 2M hugepage cases: the pool is grown and given back on
# exit, even on failure or a signal (tests/lib/hugepages.sh).
set -euo pipefail
# --test-corrupt-hint is refused without this (see docs/security.md).
export ZEROSTART_TEST_SWITCHES=1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

if [ ! -c /dev/kvm ]; then
  echo "test-vmm: /dev/kvm is missing; these tests need KVM (load kvm_intel/kvm_amd)" >&2
  exit 1
fi

# Built by make (scripts build nothing): the release zerostart and the probe.
Z="${ZEROSTART_BIN:?set ZEROSTART_BIN to a release zerostart (make test-vmm builds it)}"
K="${PROBE_BZIMAGE:?set PROBE_BZIMAGE to the probe guest (make probe builds it)}"
[ -x "$Z" ] && [ -f "$K" ] || { echo "test-vmm: $Z or $K missing; run make test-vmm" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/zerostart-test-vmm.XXXXXX")"
hugepages_who=test-vmm
# shellcheck source=../lib/hugepages.sh
source "$root/tests/lib/hugepages.sh"
hugepages_on_exit 'rm -rf "$work"'

# Grows the 2M pool so that at least $1 pages are free.
reserve_2m() { hugepages_reserve 2048 "$1"; }

passed=0
failed=0
failures=()

# run_case NAME EXPECTED_EXIT VERDICT_REGEX CHECKS -- zerostart run args...
# CHECKS is a Python expression over `j` (the timeline JSON) or "-" for a
# run that must not boot (then VERDICT_REGEX matches zerostart's stderr).
# The boot and the judging are zstest.probe's (shared with the red team);
# every booted case also needs every phase, an i8042 reset exit and the
# prezero report.
export ZEROSTART_BIN="$Z" PROBE_BZIMAGE="$K" WORK="$work"
phases=process_start,memory_ready,first_kvm_run,kernel_started,first_serial_output,test_done,exit
run_case() {
  local name=$1 want_rc=$2 want=$3 checks=$4
  shift 5
  local extra=()
  [ "$checks" = "-" ] || extra=(--phases "$phases" --check "j['exit'] == {'reason': 'i8042 reset', 'kind': 'reset', 'code': 0} and ($checks)")
  if python3 -m zstest.probe "$name" "$want_rc" "$want" "${extra[@]}" -- "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
}

MIB=$((1 << 20))
valid="^ZSPROBE: PASS hint=valid "
absent="^ZSPROBE: PASS hint=absent "
cmd_valid="console=ttyS0 reboot=k panic=1 zsprobe.expect=valid"
cmd_absent="console=ttyS0 reboot=k panic=1 zsprobe.expect=absent"

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(4k 4k-off 4k-prefault thp 2m 2m-off checksum dirty verify-dirty smp 4g)

for c in "${cases[@]}"; do
  case "$c" in
    4k)
      run_case 4k 0 "$valid" "j['memory_bytes'] == 512*$MIB and j['prezero']['backing'] == 'anon_4k' and j['prezero']['hint_bytes'] > 500*$MIB" -- \
        --memory size=512M,hugepages=off,thp=off --cmdline "$cmd_valid" ;;
    4k-off)
      run_case 4k-off 0 "$absent" "j['prezero']['mode'] == 'off' and j['prezero']['hint_ranges'] == 0" -- \
        --memory size=512M,hugepages=off,thp=off,prezero=off --cmdline "$cmd_absent" ;;
    4k-prefault)
      run_case 4k-prefault 0 "$valid" "j['prezero']['bytes'] == 1024*$MIB and j['prezero']['method'] in ('nt_engine', 'populate_write')" -- \
        --memory size=1G,thp=off,prefault=on --cmdline "$cmd_valid" ;;
    thp)
      run_case thp 0 "$valid" "j['prezero']['backing'] == 'anon_thp'" -- \
        --memory size=512M --cmdline "$cmd_valid" ;;
    2m)
      reserve_2m 256
      run_case 2m 0 "$valid" "j['prezero']['backing'] == 'hugetlb_2m' and j['prezero']['bytes'] == 512*$MIB" -- \
        --memory size=512M,hugepages=on,hugepage_size=2M,prefault=on --cmdline "$cmd_valid" ;;
    2m-off)
      reserve_2m 256
      run_case 2m-off 0 "$absent" "j['prezero']['backing'] == 'hugetlb_2m' and j['prezero']['hint_ranges'] == 0" -- \
        --memory size=512M,hugepages=on,prezero=off --cmdline "$cmd_absent" ;;
    checksum)
      run_case checksum 0 "^ZSPROBE: FAIL hint=invalid error=BadChecksum" "True" -- \
        --memory size=512M --test-corrupt-hint=checksum ;;
    dirty)
      # The checker must be able to fail: one planted byte is found.
      run_case dirty 0 "^ZSPROBE: FAIL hint=valid nonzero_bytes=1 " "True" -- \
        --memory size=512M --test-corrupt-hint=dirty ;;
    verify-dirty)
      # --verify-hint catches the same planted byte before the guest runs.
      run_case verify-dirty 1 "hinted-zero guest memory is not zero" "-" -- \
        --memory size=512M --test-corrupt-hint=dirty --verify-hint ;;
    smp)
      run_case smp 0 "$valid" "j['vcpus'] == 4" -- \
        --cpus boot=4 --memory size=512M --cmdline "$cmd_valid" ;;
    4g)
      # Crosses the 3..4 GiB MMIO hole: two hint ranges.
      run_case 4g 0 "^ZSPROBE: PASS hint=valid ranges=2 " "j['memory_bytes'] == 4096*$MIB and j['prezero']['hint_ranges'] == 2" -- \
        --memory size=4G --cmdline "$cmd_valid" ;;
    *)
      echo "test-vmm: unknown case $c" >&2
      exit 2 ;;
  esac
done

echo "test-vmm: $passed passed, $failed failed"
echo "$passed passed, $failed failed"
if [ "$failed" -gt 0 ]; then
  echo "test-vmm: failed cases: ${failures[*]}" >&2
  exit 1
fi
