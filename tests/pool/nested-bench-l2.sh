#!/bin/sh
# Runs inside L2 of the nested test host (tests/nested-host, real kvm-amd):
# launch -> first vCPU instruction of the probe guest through zerostart with
# guest RAM from the pool vs prefault (populate, nt) vs no prefault.
# tests/pool/nested-bench.py delivers this file as /zs/nested-bench-l2.sh
# (with /zs/probe.bzImage) and boots L2 with zse2e.script=nested-bench-l2.sh.
#
# L2 command line: zspool.sizes=1,4,8 zspool.reps=3 zspool.timeout=SECONDS
#
# Memory: L2 reserves hugepages for the largest size only (8 GiB, not 16).
# A size whose pool and whose prefault guest fit together (2 x size <= the
# reservation: 1 and 4 GiB) keeps one pool for all its repetitions, so later
# leases get regions scrubbed after the previous VM; a size that does not (8
# GiB) starts a fresh pool for each pool boot and stops it before that
# repetition's prefault boots. The methods run interleaved either way
# (pool, populate, nt, off, pool, ...), and every boot starts with the pool
# idle (clean), so its background scrub never competes with a measurement.
#
# Output lines (parsed by nested-bench.py):
#   ZSPOOL-POOL event=started|stopped size_gib=N ms=N status=<json>
#   ZSPOOL-TIMELINE <zerostart timeline JSON on one line>
#   ZSPOOL-SAMPLE size_gib=N method=M rep=R rc=N wall_ms=N verdict=<the probe's verdict line>
#   VMM| / L3| lines of a failed boot
#   ZSPOOL-FATAL <why>            (the run stops)
Z=/zs/zerostart
K=/zs/probe.bzImage
S=/tmp/pool.sock
sizes=1,4,8
reps=3
tmo=300
for a in $(cat /proc/cmdline); do
  case "$a" in
    zspool.sizes=*) sizes=${a#zspool.sizes=};;
    zspool.reps=*) reps=${a#zspool.reps=};;
    zspool.timeout=*) tmo=${a#zspool.timeout=};;
  esac
done
ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
pool_pid=
fatal() {
  echo "ZSPOOL-FATAL $*"
  [ -n "$pool_pid" ] && kill "$pool_pid" 2>/dev/null
  exit 1
}
[ -x "$Z" ] || fatal "no zerostart in the L2 image"
[ -f "$K" ] || fatal "no probe guest /zs/probe.bzImage"

status_json() { "$Z" pool status --socket "$S" --json 2>/dev/null | tr -d ' \n'; }
field() { echo "$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"; }

# Until every byte of the pool is clean (bounded; the daemon must stay alive).
wait_clean() {
  end=$(($(ms) + tmo * 1000))
  while :; do
    j=$(status_json)
    size=$(field "$j" size_bytes)
    clean=$(field "$j" clean_bytes)
    [ -n "$size" ] && [ "$size" = "$clean" ] && return 0
    kill -0 "$pool_pid" 2>/dev/null || { sed 's/^/POOL| /' /tmp/pool.log; fatal "pool daemon died"; }
    [ "$(ms)" -gt "$end" ] && fatal "pool not clean after ${tmo}s: $j"
    sleep 0.1
  done
}

pool_start() {
  rm -f "$S"
  t0=$(ms)
  "$Z" pool serve --socket "$S" --size "${1}G" --region-size "${1}G" --page 2M >/tmp/pool.log 2>&1 &
  pool_pid=$!
  wait_clean
  echo "ZSPOOL-POOL event=started size_gib=$1 ms=$(($(ms) - t0)) status=$(status_json)"
}

pool_stop() {
  wait_clean
  echo "ZSPOOL-POOL event=stopped size_gib=$1 ms=0 status=$(status_json)"
  kill "$pool_pid"
  wait "$pool_pid"
  pool_pid=
}

boot() { # method size_gib rep memory-opts
  ser=/tmp/probe.serial; out=/tmp/vmm.out; tl=/tmp/timeline.json
  rm -f "$ser" "$out" "$tl"
  t0=$(ms)
  timeout -s KILL "$tmo" "$Z" run --kernel "$K" --serial "file=$ser" --timeline "$tl" \
    --memory "size=${2}G,$4" >"$out" 2>&1 </dev/null
  rc=$?
  t1=$(ms)
  verdict=$(grep -a -m1 -E '^ZSPROBE: (PASS|FAIL)' "$ser" 2>/dev/null | tr -d '\r')
  [ -s "$tl" ] && echo "ZSPOOL-TIMELINE $(tr -d '\n' <"$tl")"
  if [ "$rc" != 0 ] || [ -z "$verdict" ]; then
    sed 's/^/VMM| /' "$out"
    [ -f "$ser" ] && tr -d '\r' <"$ser" | tail -20 | sed 's/^/L3| /'
  fi
  echo "ZSPOOL-SAMPLE size_gib=$2 method=$1 rep=$3 rc=$rc wall_ms=$((t1 - t0)) verdict=$verdict"
}

total_pages=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
echo "ZSPOOL-BEGIN sizes=$sizes reps=$reps free_hugepages=$total_pages cpus=$(nproc)"
for g in $(echo "$sizes" | tr ',' ' '); do
  need=$((g * 512))
  [ "$need" -le "$total_pages" ] || fatal "$g GiB needs $need free 2M hugepages in L2, $total_pages reserved"
  keep=0
  [ $((2 * need)) -le "$total_pages" ] && keep=1
  [ "$keep" = 1 ] && pool_start "$g"
  r=1
  while [ "$r" -le "$reps" ]; do
    [ "$keep" = 1 ] || pool_start "$g"
    wait_clean
    boot pool "$g" "$r" "hugepages=on,prezero=pool:$S"
    if [ "$keep" = 1 ]; then wait_clean; else pool_stop "$g"; fi
    boot populate "$g" "$r" "hugepages=on,hugepage_size=2M,prefault=on,prefault_method=populate"
    boot nt "$g" "$r" "hugepages=on,hugepage_size=2M,prefault=on,prefault_method=nt"
    boot off "$g" "$r" "hugepages=on,hugepage_size=2M,prefault=off"
    r=$((r + 1))
  done
  [ "$keep" = 1 ] && pool_stop "$g"
done
echo "ZSPOOL-END"
