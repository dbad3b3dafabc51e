#!/bin/sh
# Investigation only (not a harness, not run by make; crash_hunt.py ships it
# into L2): l2-demo.sh's launch/launch-direct rows,
# with the L3 QEMU told to pause instead of exiting when the guest shuts down
# (-action shutdown=pause) and a monitor on a FIFO pair. When it pauses, the
# watcher takes the guest's RIP from L2's KVM trace and walks the kernel's
# page tables for it as they are in guest memory now (walk(), with xp):
# present entries all the way down mean the guest's tables were intact and
# the failed fetch was the bed's; a missing or changed entry means guest
# memory changed. Then it quits QEMU. Lines: MON| ...
# Found on its first use (2026-12-02): under KVM a triple fault reaches QEMU
# after kvm-amd re-initialised the vCPU (the VMCB is undefined after a
# shutdown intercept), so the registers read are the reset state; only
# guest memory survives the pause. The kernel's physical base comes from
# the guest itself (zsinit.iomem=1 prints /proc/iomem's "Kernel code").
. /zs/l2-pool.sh

# mon_cmd FIFO CMD: one monitor command, never blocking on a FIFO no QEMU opened.
mon_cmd() {
  timeout 2 sh -c "echo '$2' > '$1.in'" 2>/dev/null
}

# xp1 ADDR: one guest-physical qword, read through the monitor (hex, 0x...).
xp1() {
  a=$(printf '%016x' "$1")
  mon_cmd "$mon" "xp /1gx 0x$a"; sleep 0.3
  tr -d '\r' < "/tmp/$n.monlog" | grep -a "^$a:" | tail -1 | awk '{print $2}'
}

# walk RIP: the guest's kernel page-table walk for RIP as it is in guest
# memory now, from init_top_pgt (physical base from zsinit.iomem=1's
# "Kernel code" line): every level's entry, then the whole PMD table and,
# if RIP's PMD entry points to a PTE table, that table too. Present
# entries all the way down mean the guest's tables were intact and the
# failed fetch was the bed's; a missing or changed entry means guest
# memory changed.
# scan_base: for a guest that died before zsinit printed its kernel's
# physical base: every 2 MiB-aligned candidate base b in guest RAM whose
# init_top_pgt[511] (at b + off + 0xff8) reads b + off + 0x3067, i.e.
# points at level3_kernel_pgt three pages on, as in every healthy boot
# (off = init_top_pgt - _text, learnt from an earlier row). Prints the
# base in hex (no 0x) or nothing.
scan_base() {
  [ -f /tmp/hunt-ksyms ] || return 0
  read -r stp stx < /tmp/hunt-ksyms
  off=$(( stp - stx ))
  : > /tmp/scan.cmds
  b=$(( 16 << 20 ))
  while [ $b -lt $(( 8 << 30 )) ]; do
    printf 'xp /1gx 0x%x\n' $(( b + off + 0xff8 )) >> /tmp/scan.cmds
    b=$(( b + (2 << 20) ))
  done
  timeout 60 sh -c "cat /tmp/scan.cmds > '$mon.in'" 2>/dev/null
  sleep 5
  tr -d '\r' < "/tmp/$n.monlog" | grep -a -E '^[0-9a-f]{16}: 0x[0-9a-f]{16}$' | while read -r a v; do
    a=$(( 0x${a%:} )); base=$(( a - off - 0xff8 ))
    [ $(( v )) -eq $(( base + off + 0x3067 )) ] && printf '%x\n' $base && echo "MON| $n scan: kernel base $(printf 0x%x $base) (init_top_pgt[511] points 3 pages on)" >&2
  done | head -1
}

walk() {
  tr -d '\r' < "/tmp/$n.l3" > "/tmp/$n.l3c"
  kc=$(grep -a 'ZSINIT: IOMEM .*Kernel code' "/tmp/$n.l3c" | head -1 | sed 's/.*IOMEM *//' | cut -d- -f1 | tr -d ' ')
  [ -n "$kc" ] || kc=$(scan_base)
  [ -n "$kc" ] || { echo "MON| $n walk: no kernel base (no zsinit line, scan found none)"; return; }
  # The low 48 bits of the VA (ash's arithmetic is signed 64-bit).
  va=$(( 0x$(echo "$1" | sed 's/^0x//' | tail -c 13) ))
  pgd=$(( (va >> 39) & 511 )); pud=$(( (va >> 30) & 511 )); pmd=$(( (va >> 21) & 511 )); pte=$(( (va >> 12) & 511 ))
  # init_top_pgt's offset from _text, from the guest's own kallsyms (both
  # in the kernel's 1 GiB window: their low 32 bits differ by the offset).
  tx=$(grep -a 'ZSINIT: KSYM .* _text$' "/tmp/$n.l3c" | head -1 | awk '{print $3}' | tail -c 9)
  tp=$(grep -a 'ZSINIT: KSYM .* init_top_pgt$' "/tmp/$n.l3c" | head -1 | awk '{print $3}' | tail -c 9)
  # A guest that died before zsinit: the offsets an earlier row printed
  # (the same kernel image).
  if [ -z "$tx" ] && [ -f /tmp/hunt-ksyms ]; then read -r tp tx < /tmp/hunt-ksyms; tp=${tp#0x}; tx=${tx#0x}; fi
  [ -n "$tx" ] && [ -n "$tp" ] || { echo "MON| $n walk: no KSYM lines for _text/init_top_pgt"; return; }
  top=$(( 0x$kc + 0x$tp - 0x$tx ))
  echo "0x$tp 0x$tx" > /tmp/hunt-ksyms
  mask=$(( 0x000ffffffffff000 ))
  v1=$(xp1 $((top + pgd * 8)))
  echo "MON| $n walk va=$1 kernel_code=0x$kc init_top_pgt=$(printf 0x%x $top) idx=$pgd/$pud/$pmd/$pte pgd=$v1"
  [ -n "$v1" ] && [ $(( v1 & 1 )) -eq 1 ] || return
  l3=$(( v1 & mask )); v2=$(xp1 $((l3 + pud * 8)))
  echo "MON| $n walk pud@$(printf 0x%x $l3)=$v2"
  [ -n "$v2" ] && [ $(( v2 & 0x81 )) -eq 1 ] || return
  l2=$(( v2 & mask ))
  mon_cmd "$mon" "xp /512gx $(printf 0x%x $l2)"; sleep 1
  v3=$(xp1 $((l2 + pmd * 8)))
  echo "MON| $n walk pmd@$(printf 0x%x $l2)=$v3"
  [ -n "$v3" ] && [ $(( v3 & 0x81 )) -eq 1 ] || return
  l1=$(( v3 & mask ))
  mon_cmd "$mon" "xp /512gx $(printf 0x%x $l1)"; sleep 1
  v4=$(xp1 $((l1 + pte * 8)))
  echo "MON| $n walk pte@$(printf 0x%x $l1)=$v4"
}

# pgscan_all VA: every PGD of the paused guest found in its RAM (the
# QEMU's largest open file: the pool's memfd), each walked for VA; the
# CPU's CR3 is lost at the triple fault, so all candidates.
pgscan_all() {
  [ -n "${e511:-}" ] && [ -n "${e508:-}" ] && [ -x /zs/pgscan ] || { echo "MON| $n pgscan: no init_top_pgt entries or no /zs/pgscan"; return; }
  qp=$(pidof qemu-system-x86_64 | awk '{print $1}')
  f=$(for x in /proc/$qp/fd/*; do stat -L -c '%s %n' "$x" 2>/dev/null; done | sort -n | tail -1)
  sz=${f%% *}; f=${f#* }
  # q35's low RAM: all of it below 2.75 GiB, else 2 GiB (launch's layout::qemu_q35).
  if [ "$sz" -ge $(( 0xb0000000 )) ]; then le=$(( 0x80000000 )); else le=$sz; fi
  echo "MON| $n pgscan $f size=$sz low_end=$le init_top_pgt[511]=$e511 [508]=$e508"
  /zs/pgscan "$f" "$le" "$e511" "$e508" "$1" 2>&1 | sed "s/^/MON| $n /"
}

# tables: every whole table the walks dumped (2 qwords a line), once.
tables() {
  tr -d '\r' < "/tmp/$n.monlog" | grep -a -E '^[0-9a-f]{16}: 0x[0-9a-f]+ 0x' | sort -u | sed "s/^/MON| $n table /"
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
      # The RIP is lost with the vCPU's reset (kvm-amd re-inits it on a
      # shutdown intercept); L2's KVM trace has it.
      rip=$(grep -a 'reason shutdown' /sys/kernel/tracing/trace 2>/dev/null | tail -1 | grep -o 'rip 0x[0-9a-f]*' | cut -d' ' -f2)
      echo "MON| $n paused, shutdown rip=$rip"
      if [ -n "$rip" ]; then
        # The RIP in L2's own kernel and modules (h9's row 29 died at
        # 0xffffffffc0476dcc, unmapped in the guest: is it kvm_amd's?).
        l2sym "$rip"
        walk "$rip"
        # Where the #PF's delivery went: the IDT (IDTR holds its read-only
        # alias in the CPU entry area), the handler's text; and
        # init_top_pgt whole (the kernel half of every process's PGD).
        e511=$v1
        walk 0xfffffe0000000000
        e508=$v1
        pgscan_all "$rip"
        for sym in idt_table asm_exc_page_fault; do
          k=$(grep -a "ZSINIT: KSYM .* $sym\$" "/tmp/$n.l3c" | head -1 | awk '{print $3}')
          [ -n "$k" ] && walk "0x$k"
        done
        [ -n "${top:-}" ] && mon_cmd "$mon" "xp /512gx $(printf 0x%x $top)" && sleep 1
        tables
      elif [ ! -f /tmp/hunt-walked ]; then
        # The tool's own check, once: a guest that powered off cleanly
        # must walk to a present PTE/PMD for io_serial_out.
        touch /tmp/hunt-walked
        k=$(tr -d '\r' < "/tmp/$n.l3" | grep -a 'ZSINIT: KSYM .* io_serial_out$' | head -1 | awk '{print $3}')
        [ -n "$k" ] && walk "0x$k" && tables
      fi
      mon_cmd "$mon" "quit"
      sleep 0.5
      break
    fi
  done
  kill $catpid 2>/dev/null
  grep -a 'paused\|Error' "/tmp/$n.monlog" 2>/dev/null | grep -v '^(qemu)' | tr -d '\r' | head -5 | sed "s/^/MON| $n /"
}

# l2sym RIP: the nearest symbol at or below RIP in L2's /proc/kallsyms
# (fixed-width lowercase hex compares as strings) and L2's modules.
l2sym() {
  r=$(echo "$1" | sed 's/^0x//')
  awk -v r="$r" '$1 <= r && $1 > best { best = $1; line = $0 } END { print "MON| '"$n"' l2 kallsyms: " line }' /proc/kallsyms
  sed "s/^/MON| $n l2 module: /" /proc/modules | grep -E 'kvm|svm' | head -3
}

# hunt_run NAME TIMEOUT CMD...: l2-pool.sh's run(), with the L3 console
# also kept in /tmp/NAME.l3 for walk().
hunt_run() {
  name=$1 tmo=$2; shift 2
  err=/tmp/$name.err; rcf=/tmp/$name.rc
  rm -f "$err" "$rcf" "/tmp/$name.qlog" "/tmp/$name.l3"
  kvmx_start
  t0=$(ms)
  echo "ZSL-BEGIN name=$name t0_ms=$t0"
  {
    timeout -s KILL "$tmo" "$@" 2> "$err" < /dev/null
    echo $? > "$rcf"
  } | tee "/tmp/$name.l3" | while IFS= read -r line; do echo "L3| $(ms) $line"; done
  t1=$(ms)
  [ -f "$err" ] && sed 's/^/VMM| /' "$err"
  qlog_line "$name"
  kvmx_line
  [ -s "/tmp/$name.tl.json" ] && echo "ZSL-TIMELINE name=$name $(tr -d '\n' < "/tmp/$name.tl.json")"
  echo "ZSL-END name=$name rc=$(cat "$rcf" 2>/dev/null || echo 255) wall_ms=$((t1 - t0))"
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
    hunt_run "$name" "$tmo" "$@" -action shutdown=pause -monitor "pipe:$mon" &
    runpid=$!
    watch_pause "$name" "$mon" "$runpid"
    wait $runpid
    rm -f "$mon.in" "$mon.out" ;;
  esac
done
pool_stop
