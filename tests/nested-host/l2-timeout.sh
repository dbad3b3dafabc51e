#!/bin/sh
# l2-timeout.sh SECONDS CMD...: runs a VMM inside L2 like
# `timeout -s KILL SECONDS CMD...` (exit status 137 when killed), but a VMM
# still running 3 s before the limit has its guest sampled first, on
# stderr (the VMM's own log, which every L2 harness prints):
#
#   HANG| thread <pid/task/tid> '<name>' state=<R|S|D> wchan=<kernel function>
#         syscall=<nr arg0 arg1>   (each thread of a process with a KVM vCPU)
#   HANG| kvm_exits_in_1s=N
#   HANG| top <count> reason <exit reason> rip <guest RIP>     (up to 5)
#
# Why: a guest that stops printing and never ends (CI, 2026-12-02: a QEMU
# microvm guest silent from uptime 0.56 s until the 240 s kill) left no
# trace of where it was. A vCPU thread (in ioctl 16, KVM_RUN 0xae80) asleep
# in kvm_vcpu_block/halt with no exits is a guest halted waiting for an
# interrupt that never came (the bed's lost interrupt, bed-qemu/README.md);
# one running with exits at one RIP is a guest spinning there (resolve the
# RIP against the L3 kernel's symbols; zsinit.iomem=1 prints its KASLR
# base). The sample uses a
# private tracefs instance, so the shutdown tracing of l2-pool.sh
# (kvmx_start/kvmx_line) is untouched.
tmo=$1
shift
# fd 3: the script's stderr, kept for the sample; nothing long-lived holds
# it (a lingering sleep would keep a reader of stderr waiting).
exec 3>&2
"$@" 3>&- &
pid=$!
t=/sys/kernel/tracing
snapshot() {
  # Every thread of each process holding a KVM vCPU (QEMU names its vCPU
  # threads only with -name debug-threads=on, so they are found by the
  # process): a vCPU thread in ioctl(KVM_RUN) (0xae80) shows "running" or
  # sleeps in the kernel's halt/block path.
  for p in /proc/[0-9]*; do
    ls -l "$p/fd" 2>/dev/null | grep -q 'kvm-vcpu' || continue
    for task in "$p"/task/[0-9]*; do
      st=$(sed 's/.*) //' "$task/stat" 2>/dev/null | cut -d' ' -f1)
      echo "HANG| thread ${task#/proc/} '$(cat "$task/comm" 2>/dev/null)' state=$st" \
        "wchan=$(cat "$task/wchan" 2>/dev/null) syscall=$(cut -d' ' -f1-3 "$task/syscall" 2>/dev/null)"
    done
  done
  [ -d "$t/events" ] || mount -t tracefs nodev "$t" 2>/dev/null
  i=$t/instances/zs-hang
  if [ -d "$t/events/kvm/kvm_exit" ] && { [ -d "$i" ] || mkdir "$i" 2>/dev/null; }; then
    echo 0 > "$i/tracing_on"
    echo > "$i/trace"
    echo 1 > "$i/events/kvm/kvm_exit/enable"
    echo 1 > "$i/tracing_on"
    sleep 1
    echo 0 > "$i/tracing_on"
    echo 0 > "$i/events/kvm/kvm_exit/enable"
    echo "HANG| kvm_exits_in_1s=$(grep -c 'kvm_exit:' "$i/trace")"
    grep -o 'reason [A-Za-z_0-9]* rip 0x[0-9a-f]*' "$i/trace" | sort | uniq -c | sort -rn | head -n 5 |
      sed 's/^ */HANG| top /'
    rmdir "$i" 2>/dev/null
  else
    echo "HANG| no kvm tracepoints in L2: exits not sampled"
  fi
}
# The watchdog: neither its stdout nor its sleeps hold the VMM's output
# (a harness pipes that into a reader that waits for every writer), and
# its sleep dies with it.
(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  if [ "$tmo" -gt 3 ]; then
    sleep $((tmo - 3)) 3>&- &
    s=$!
    wait "$s"
    kill -0 "$pid" 2>/dev/null || exit 0
    echo "HANG| still running after $((tmo - 3)) s of $tmo s: sampling the guest" >&3
    snapshot >&3 2>/dev/null
    sleep 2 3>&-
  else
    sleep "$tmo" 3>&- &
    s=$!
    wait "$s"
  fi
  kill -KILL "$pid" 2>/dev/null
) > /dev/null 2>&1 &
wd=$!
wait "$pid"
rc=$?
kill "$wd" 2>/dev/null
wait "$wd" 2>/dev/null
exit "$rc"
