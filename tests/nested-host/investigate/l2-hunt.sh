#!/bin/sh
# Investigation only (not a harness, not run by make; crash_hunt.py ships it
# into L2): l2-demo.sh's launch/launch-direct rows,
# with the L3 QEMU told to pause instead of exiting when the guest shuts down
# (-action shutdown=pause) and a monitor on a FIFO pair. When it pauses, the
# watcher asks QEMU for the registers and translates the guest's RIP and a
# few kernel addresses through the guest's page tables as they are in guest
# memory now (gva2gpa): if a triple-faulted guest's text still translates,
# its page tables in memory were intact and the failed fetch was the bed's;
# if not, guest memory changed. Then it quits QEMU. Lines: MON| ...
# Found on its first use (2026-12-02): under KVM a triple fault reaches QEMU
# after kvm-amd re-initialised the vCPU (the VMCB is undefined after a
# shutdown intercept), so the registers read are the reset state and the
# guest's CR3 and RIP are lost; only guest memory survives the pause. The
# RIP comes from L2's KVM trace (KVMX|); to check the page tables in memory
# the next version needs the kernel's physical base (boot with nokaslr, or
# have zsinit print /proc/iomem's "Kernel code") and walk them with xp.
. /zs/l2-pool.sh
HUNT_PGT=1

# mon_cmd FIFO CMD: one monitor command, never blocking on a FIFO no QEMU opened.
mon_cmd() {
  timeout 2 sh -c "echo '$2' > '$1.in'" 2>/dev/null
}

watch_pause() {
  n=$1 mon=$2 rp=$3
  timeout -s KILL 2000 cat "$mon.out" > "/tmp/$n.monlog" 2>/dev/null &
  catpid=$!
  while kill -0 "$rp" 2>/dev/null; do
    sleep 0.3
    mon_cmd "$mon" "info status" || continue
    sleep 0.2
    if grep -q "paused (shutdown)" "/tmp/$n.monlog" 2>/dev/null; then
      mon_cmd "$mon" "info registers"
      sleep 0.5
      rip=$(grep -o 'RIP=[0-9a-f]*' "/tmp/$n.monlog" | tail -1 | cut -d= -f2)
      if [ -n "$rip" ]; then
        mon_cmd "$mon" "gva2gpa 0x$rip"
        sleep 0.3
        mon_cmd "$mon" "x /2i 0x$rip"
        sleep 0.3
      fi
      # The kernel mapping's tables as they are in guest memory now: with
      # nokaslr the kernel is at 16 MiB and PA = VA - 0xffffffff80000000;
      # the addresses are the patched build's System.map (init_top_pgt[511],
      # level3_kernel_pgt[510], level2_kernel_pgt[8..31]: 16..64 MiB).
      if grep -q nokaslr /proc/cmdline 2>/dev/null || [ -n "$HUNT_PGT" ]; then
        mon_cmd "$mon" "xp /1gx 0x202cff8"; sleep 0.2
        mon_cmd "$mon" "xp /1gx 0x202fff0"; sleep 0.2
        mon_cmd "$mon" "xp /24gx 0x2030040"; sleep 0.4
      fi
      mon_cmd "$mon" "quit"
      sleep 0.5
      break
    fi
  done
  kill $catpid 2>/dev/null
  grep -v '^(qemu)' "/tmp/$n.monlog" 2>/dev/null | grep -E 'paused|RIP=|CR0=|CR3=|EFER|gpa:|Unmapped|Error|0xffff|^0000' | tr -d '\r' | sed "s/^/MON| $n /"
}

pool_start

# demo.py's list lines (l2-demo.sh's format): the launch rows' commands as
# built on the host, with QEMU told to pause at shutdown and a monitor on the
# FIFO pair added after its other arguments.
tail -n +2 "$list" | while IFS='|' read -r name kind tmo _tap _ready cmd; do
  case "$kind" in
  launch|launch-direct)
    wait_clean || echo "ZSL-NOTE name=$name pool not clean before the launch"
    mon=/tmp/$name.mon
    rm -f "$mon.in" "$mon.out"; mkfifo "$mon.in" "$mon.out"
    eval "set -- $cmd"
    run "$name" "$tmo" "$@" -action shutdown=pause -monitor "pipe:$mon" &
    runpid=$!
    watch_pause "$name" "$mon" "$runpid"
    wait $runpid
    rm -f "$mon.in" "$mon.out" ;;
  esac
done
pool_stop
