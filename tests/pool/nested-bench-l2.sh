#!/bin/sh
# Runs inside L2 of the nested test host (tests/nested-host, real kvm-amd):
# launch -> first vCPU instruction of the probe guest through zerostart with
# guest RAM from the pool vs prefault (populate, nt) vs no prefault.
# tests/pool/nested_bench.py delivers this file as /zs/nested-bench-l2.sh
# (with /zs/probe.bzImage) and boots L2 with zse2e.script=nested-bench-l2.sh.
# Every zerostart run is a whole command from /zs/nested-bench.cmds, which
# nested_bench.py built with options::vmm_cmd (`guest|size_gib|memory|cmd`,
# memory one of pool populate nt off); this script spells no run flag.
#
# L2 command line: zspool.sizes=1,4,8 zspool.reps=3 zspool.timeout=SECONDS
#   zspool.linux=GIB zspool.linux_reps=N zspool.kernel=NAME: after the probe
#   repetitions of that size, N interleaved rounds of the four methods booting
#   Linux (/zs/kernels/NAME with zsinit, which checks its memory is zero), then
#   one more probe boot from the pool (when the size keeps one pool): the
#   region a Linux guest just used must read zero in every hinted byte again
#   (method pool_after_linux). zspool.linux=0: no Linux boots.
#   zspool.methods=pool,populate,nt,off: the methods of each round.
#   zspool.leakcheck=GIB: at the end, proof that the zero check can fail in
#   here: a pool that keeps a returned region's pages and skips the zeroing (ZEROSTART_POOL_FAULT=
#   skip-zero:1, the daemon's test hook) leases a region to a Linux guest
#   (leak_linux), then the same region, "scrubbed", to the probe (leak_probe),
#   which must find the Linux guest's bytes (the harness fails the run if not).
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
# Output lines (parsed by nested_bench.py):
#   ZSPOOL-POOL event=started|stopped size_gib=N ms=N status=<json>
#   ZSPOOL-TIMELINE <zerostart timeline JSON on one line>
#   L3| <line>                    every line of the boot's guest console, before its sample
#   VMM| <line>                   zerostart's output, of a boot that failed
#   ZSPOOL-SAMPLE size_gib=N method=M rep=R guest=probe|linux|warmup rc=N wall_ms=N
#                 verdict=<the probe's or zsinit's verdict line>
#   ZSPOOL-FATAL <why>            (the run stops)
Z=/zs/zerostart
K=/zs/probe.bzImage
S=/tmp/pool.sock
CMDS=/zs/nested-bench.cmds
sizes=1,4,8
reps=3
tmo=300
linux=0
linux_reps=1
lkernel=patched
methods="pool populate nt off"
leak=0
pool_env=
for a in $(cat /proc/cmdline); do
  case "$a" in
    zspool.sizes=*) sizes=${a#zspool.sizes=};;
    zspool.reps=*) reps=${a#zspool.reps=};;
    zspool.timeout=*) tmo=${a#zspool.timeout=};;
    zspool.linux=*) linux=${a#zspool.linux=};;
    zspool.linux_reps=*) linux_reps=${a#zspool.linux_reps=};;
    zspool.kernel=*) lkernel=${a#zspool.kernel=};;
    zspool.methods=*) methods=$(echo "${a#zspool.methods=}" | tr ',' ' ');;
    zspool.leakcheck=*) leak=${a#zspool.leakcheck=};;
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
[ -f "$CMDS" ] || fatal "no command list $CMDS"

# The command line of guest $1 (probe, linux) at $2 GiB with memory $3.
cmd_of() {
  while IFS='|' read -r c_guest c_size c_mem c_cmd; do
    if [ "$c_guest" = "$1" ] && [ "$c_size" = "$2" ] && [ "$c_mem" = "$3" ]; then
      printf '%s\n' "$c_cmd"
      return 0
    fi
  done <"$CMDS"
  return 1
}

status_json() { "$Z" pool status --socket "$S" --json 2>/dev/null | tr -d ' \n'; }
field() { echo "$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"; }

# Until every byte of the pool is clean (bounded; the daemon must stay alive).
wait_clean() {
  "$Z" pool status --socket "$S" --wait-clean --timeout "$tmo" >/dev/null 2>/tmp/wait-clean.err && return 0
  kill -0 "$pool_pid" 2>/dev/null || { sed 's/^/POOL| /' /tmp/pool.log; fatal "pool daemon died"; }
  fatal "$(cat /tmp/wait-clean.err)"
}

pool_start() {
  rm -f "$S"
  t0=$(ms)
  env $pool_env "$Z" pool serve --socket "$S" --size "${1}G" --region-size "${1}G" --page 2M >/tmp/pool.log 2>&1 &
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

# method size_gib rep memory [guest]; memory: pool, populate, nt or off (the
# command list's); guest: probe (default), warmup (a probe boot that is
# reported but not counted) or linux (L3 Linux + zsinit).
# One boot, never repeated: a guest that crashed (the patched kernel under
# test, oops=panic) is the run failing, and booting it again would hide the
# crash behind the next attempt's verdict. Every boot's whole L3 console is
# printed (L3| lines) before the next boot overwrites its file, so the host
# judges it (nested_bench.py: any kernel bug line fails the boot) and keeps it
# in its console log.
boot() {
  b_method=$1 b_size=$2 b_rep=$3 guest=${5:-probe}
  # The command's own paths (nested_bench.py's L2_SERIAL, L2_TIMELINE).
  ser=/tmp/guest.serial; out=/tmp/vmm.out; tl=/tmp/timeline.json
  rm -f "$ser" "$out" "$tl"
  kind=probe
  [ "$guest" = linux ] && kind=linux
  cmd=$(cmd_of "$kind" "$b_size" "$4") || fatal "no command for $kind at $b_size GiB, memory $4 in $CMDS"
  eval "set -- $cmd"
  t0=$(ms)
  sh /zs/l2-timeout.sh "$tmo" "$@" >"$out" 2>&1 </dev/null
  rc=$?
  t1=$(ms)
  verdict=$(grep -a -m1 -E '^(ZSPROBE|ZSINIT): (PASS|FAIL)' "$ser" 2>/dev/null | tr -d '\r')
  [ -s "$tl" ] && echo "ZSPOOL-TIMELINE $(tr -d '\n' <"$tl")"
  if [ "$rc" != 0 ] || [ -z "$verdict" ]; then
    awk '{print "VMM| " $0}' "$out"
  fi
  [ -f "$ser" ] && tr -d '\r' <"$ser" | awk '{print "L3| " $0}'
  boots=$((boots + 1))
  echo "ZSPOOL-SAMPLE size_gib=$b_size method=$b_method rep=$b_rep guest=$guest rc=$rc wall_ms=$((t1 - t0)) verdict=$verdict"
}

# Each method once, in the order given (the pool idle before every boot).
round() { # size_gib rep keep guest
  for m in $methods; do
    case "$m" in
      pool)
        [ "$3" = 1 ] || pool_start "$1"
        wait_clean
        boot pool "$1" "$2" pool "$4"
        if [ "$3" = 1 ]; then wait_clean; else pool_stop "$1"; fi;;
      populate) boot populate "$1" "$2" populate "$4";;
      nt) boot nt "$1" "$2" nt "$4";;
      off) boot off "$1" "$2" off "$4";;
      *) fatal "zspool.methods: unknown method $m (pool, populate, nt, off)";;
    esac
  done
}

total_pages=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)
echo "ZSPOOL-BEGIN sizes=$sizes reps=$reps linux=$linux linux_reps=$linux_reps kernel=$lkernel free_hugepages=$total_pages cpus=$(nproc)"
# The first zerostart/KVM run of this L2 boot pays one-time costs (measured
# here: ~200-350 ms more in memory_ready/first_kvm_run): warm up first.
boots=0
boot warmup 1 0 off warmup
for g in $(echo "$sizes" | tr ',' ' '); do
  need=$((g * 512))
  [ "$need" -le "$total_pages" ] || fatal "$g GiB needs $need free 2M hugepages in L2, $total_pages reserved"
  keep=0
  [ $((2 * need)) -le "$total_pages" ] && keep=1
  [ "$keep" = 1 ] && pool_start "$g"
  r=1
  while [ "$r" -le "$reps" ]; do round "$g" "$r" "$keep" probe; r=$((r + 1)); done
  if [ "$g" = "$linux" ]; then
    [ -f "/zs/kernels/$lkernel" ] || fatal "no L3 kernel /zs/kernels/$lkernel"
    r=1
    while [ "$r" -le "$linux_reps" ]; do round "$g" "$r" "$keep" linux; r=$((r + 1)); done
    # The last lease's region was just used by a Linux guest: once scrubbed,
    # the next lease of it must read zero in every hinted byte.
    if [ "$keep" = 1 ]; then
      wait_clean
      boot pool_after_linux "$g" 1 pool
    fi
  fi
  [ "$keep" = 1 ] && pool_stop "$g"
done
if [ "$leak" -gt 0 ]; then
  [ -f "/zs/kernels/$lkernel" ] || fatal "no L3 kernel /zs/kernels/$lkernel"
  [ $((leak * 512)) -le "$total_pages" ] || fatal "leak check of $leak GiB: $total_pages 2M hugepages reserved"
  pool_env="ZEROSTART_TEST_SWITCHES=1 ZEROSTART_POOL_FAULT=skip-zero:1"
  pool_start "$leak"
  pool_env=
  boot leak_linux "$leak" 1 pool linux
  wait_clean
  boot leak_probe "$leak" 1 pool
  pool_stop "$leak"
fi
echo "ZSPOOL-END boots=$boots"
