#!/bin/sh
# Sourced by the L2 scripts that run VMs on `zerostart pool` memory
# (l2-launch.sh, l2-demo.sh): L2's clock and the pool's start and idle wait.
# Reads /zs/launch.txt's first line "pool|pool_mib|region_mib".

# L2 uptime in ms (the scripts stamp guest serial lines with it).
ms() {
  read -r up _ < /proc/uptime
  s=${up%.*}; f=${up#*.}
  echo $((s * 1000 + 1$f * 10 - 1000))
}

list=/zs/launch.txt
sock=/tmp/pool.sock
[ -f "$list" ] || { echo "ZSE2E-FATAL no $list"; exit 1; }
IFS='|' read -r _ pool_mib region_mib < "$list"

# pool_start: the pool daemon on 2M pages, in the background; then waits
# until it is clean and prints ZSL-POOL (or ZSE2E-FATAL and exits).
pool_start() {
  /zs/zerostart pool serve --page 2M --size "${pool_mib}M" --region-size "${region_mib}M" \
    --socket "$sock" > /tmp/pool.log 2>&1 &
  pool_pid=$!
  t=$(ms)
  wait_clean || { sed 's/^/POOL| /' /tmp/pool.log; echo "ZSE2E-FATAL pool never became clean (waited 300 s)"; exit 1; }
  echo "ZSL-POOL ready ms=$(( $(ms) - t )) size_mib=$pool_mib region_mib=$region_mib"
}

# wait_clean: until every region is clean (the pool is idle: no measurement
# shares the CPUs with its fill or with replacing a returned region), at
# most 300 s; false (and the reason on stdout) if it never is.
wait_clean() {
  /zs/zerostart pool status --wait-clean --timeout 300 --socket "$sock" >/dev/null 2>/tmp/wait-clean.err && return 0
  sed 's/^/POOL| /' /tmp/wait-clean.err
  return 1
}

# pool_stop: the pool's final status, then the daemon ends.
pool_stop() {
  /zs/zerostart pool status --socket "$sock" | sed 's/^/POOL| /'
  kill "$pool_pid"
}
