#!/bin/sh
# Sourced by the L2 scripts that run VMs on `zerostart pool` memory
# (l2-launch.sh, l2-demo.sh, l2-microvm.sh): L2's clock, the pool's start
# and idle wait, the scenario protocol around one VMM run and stock QEMU's
# memory_ready measurement. No VMM flag is spelled here: every VMM command
# comes built from the host (zstest.vmmargv, `zerostart vmm-argv`).
# Reads /zs/launch.txt's first line "pool|pool_mib|region_mib|regions"
# (regions: a --regions list of several sizes adding up to pool_mib, or
# empty for pool_mib in regions of region_mib).

# L2 uptime in ms (the scripts stamp guest serial lines with it).
ms() {
  read -r up _ < /proc/uptime
  s=${up%.*}; f=${up#*.}
  echo $((s * 1000 + 1$f * 10 - 1000))
}

list=/zs/launch.txt
sock=/tmp/pool.sock
[ -f "$list" ] || { echo "ZSE2E-FATAL no $list"; exit 1; }
IFS='|' read -r _ pool_mib region_mib regions < "$list"

# pool_start: the pool daemon on 2M pages, in the background; then waits
# until it is clean and prints ZSL-POOL (or ZSE2E-FATAL and exits).
pool_start() {
  if [ -n "$regions" ]; then set -- --regions "$regions"
  else set -- --size "${pool_mib}M" --region-size "${region_mib}M"; fi
  /zs/zerostart pool serve --page 2M "$@" --socket "$sock" > /tmp/pool.log 2>&1 &
  pool_pid=$!
  t=$(ms)
  wait_clean || { sed 's/^/POOL| /' /tmp/pool.log; echo "ZSE2E-FATAL pool never became clean (waited 300 s)"; exit 1; }
  echo "ZSL-POOL ready ms=$(( $(ms) - t )) size_mib=$pool_mib region_mib=$region_mib regions=${regions:-uniform}"
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

# qlog_line NAME: "QLOG| resets=N ended=power-off|reset|triple-fault <up to 3
# error lines>" from /tmp/NAME.qlog, if the QEMU wrote one (its command logs
# every CPU reset, guest errors and the trace event
# qemu_system_shutdown_request, which fires for a guest's power-off only:
# under -no-reboot a reset or a triple fault also exits 0, silently; the
# flags are options::vmm_cmd's). (Under KVM a guest's triple fault reaches
# QEMU as a reset: it reads "reset" too.)
qlog_line() {
  ql=/tmp/$1.qlog
  [ -f "$ql" ] || return 0
  if grep -q 'Triple fault' "$ql"; then e=triple-fault
  elif grep -q qemu_system_shutdown_request "$ql"; then e=power-off
  else e=reset; fi
  echo "QLOG| resets=$(grep -c '^CPU Reset' "$ql") ended=$e $(grep -i -E 'triple|invalid|error' "$ql" | head -3 | tr '\n' ' ')"
}

# kvmx_start / kvmx_line: L2's KVM records every shutdown exit of an L3
# guest (SVM exit code 0x7f: the guest triple-faulted; the bed is AMD) with
# the guest's RIP, and every exception KVM injected into it. Under KVM a
# triple fault reaches QEMU as a plain reset with no registers, so this is
# the only place that says where the guest died. Costs nothing when no
# guest dies: the filter drops every other exit in the kernel.
kvm_trace=/sys/kernel/tracing
kvmx_start() {
  [ -d "$kvm_trace/events/kvm" ] || mount -t tracefs nodev "$kvm_trace" 2>/dev/null
  [ -d "$kvm_trace/events/kvm/kvm_exit" ] || return 0
  echo 0 > "$kvm_trace/tracing_on"
  echo > "$kvm_trace/trace"
  echo 'exit_reason == 127' > "$kvm_trace/events/kvm/kvm_exit/filter"
  echo 1 > "$kvm_trace/events/kvm/kvm_exit/enable"
  echo 1 > "$kvm_trace/events/kvm/kvm_inj_exception/enable"
  echo 1 > "$kvm_trace/tracing_on"
}
kvmx_line() {
  [ -d "$kvm_trace/events/kvm/kvm_exit" ] || return 0
  echo 0 > "$kvm_trace/tracing_on"
  echo 0 > "$kvm_trace/events/kvm/kvm_exit/enable"
  echo 0 > "$kvm_trace/events/kvm/kvm_inj_exception/enable"
  grep -v '^#' "$kvm_trace/trace" > /tmp/kvmx.txt
  # Injected #GPs are routine (a guest probing MSRs): the lines only when
  # a guest shut down, a count otherwise.
  if grep -q kvm_exit /tmp/kvmx.txt; then
    tail -n 12 /tmp/kvmx.txt | sed 's/^ */KVMX| /'
  else
    n=$(grep -c kvm_inj_exception /tmp/kvmx.txt)
    echo "KVMX| shutdown_exits=0 injected_exceptions=$n"
    # A storm (a guest stuck re-taking a fault) says which exceptions and
    # shows its first and last lines: the only record of where it spun.
    if [ "$n" -gt 100 ]; then
      grep -o 'kvm_inj_exception: .*' /tmp/kvmx.txt | sort | uniq -c | sort -rn | head -n 5 | sed 's/^ */KVMX| count /'
      grep kvm_inj_exception /tmp/kvmx.txt | head -n 3 | sed 's/^ */KVMX| first /'
      grep kvm_inj_exception /tmp/kvmx.txt | tail -n 3 | sed 's/^ */KVMX| last /'
    fi
  fi
}

# run NAME TIMEOUT CMD...: the scenario protocol around one VMM run.
run() {
  name=$1 tmo=$2; shift 2
  err=/tmp/$name.err; rcf=/tmp/$name.rc; fw=/tmp/$name.fw
  rm -f "$err" "$rcf" "$fw" "/tmp/$name.qlog"
  kvmx_start
  t0=$(ms)
  echo "ZSL-BEGIN name=$name t0_ms=$t0"
  {
    # timeout -s KILL that samples a guest still running near the limit
    # (HANG| lines on the VMM's stderr).
    sh /zs/l2-timeout.sh "$tmo" "$@" 2> "$err" < /dev/null
    echo $? > "$rcf"
  } | while IFS= read -r line; do echo "L3| $(ms) $line"; done
  t1=$(ms)
  # The firmware's ZeroStart lines, where the command gave QEMU a debug
  # console file (the launch rows that judge them).
  [ -f "$fw" ] && grep -a 'ZeroStart' "$fw" | tr -d '\r' | sed 's/^/FW| /'
  [ -f "$err" ] && sed 's/^/VMM| /' "$err"
  qlog_line "$name"
  kvmx_line
  [ -s "/tmp/$name.tl.json" ] && echo "ZSL-TIMELINE name=$name $(tr -d '\n' < "/tmp/$name.tl.json")"
  echo "ZSL-END name=$name rc=$(cat "$rcf" 2>/dev/null || echo 255) wall_ms=$((t1 - t0))"
}

# stock_memory_ready NAME CMD...: stock QEMU has no timeline, so its
# memory_ready is measured right before its boot: CMD is the same QEMU with
# the same memory arguments, -S and its monitor on stdio (built on the host,
# zstest.vmmargv.memory_ready_probe), quit from the monitor once it is up
# (prealloc done). Writes the timeline /tmp/NAME.tl.json that run() reports.
stock_memory_ready() {
  mr_name=$1; shift
  t=$(ms)
  echo quit | "$@" > "/tmp/$mr_name.mr" 2>&1
  mr=$(( $(ms) - t ))
  echo "{\"phases\":[{\"name\":\"process_start\",\"t_ms\":0},{\"name\":\"memory_ready\",\"t_ms\":$mr}]}" > "/tmp/$mr_name.tl.json"
}
