# shellcheck shell=bash
# Hugepage pool handling for test scripts, in one place: grow a pool for a
# run and give the pages back however the script ends.
# The Python suites (zstest.suite) use tests/zstest/hugepages.py, a port
# with the same rules and messages: keep the two in step.
#
#   source "$root/tests/lib/hugepages.sh"
#   hugepages_on_exit cleanup           # the script's own cleanup (instead of `trap cleanup EXIT`)
#   hugepages_reserve 2048 256          # at least 256 free 2M pages, or return 1 with one line saying why
#   hugepages_reserve 1048576 1 || ...  # same for 1G pages (a fragmented host cannot always)
#
# "Free" is free_hugepages - resv_hugepages: pages another process has
# reserved with mmap are not ours to count. Sizes are in kB as in
# /sys/kernel/mm/hugepages/hugepages-<kB>kB.
#
# Restore: on EXIT, INT and TERM (also after a failure under `set -e`) every
# pool this shell grew loses exactly the pages this shell added, which puts
# it back to its old value unless another process changed it meanwhile (then
# that process's change is kept). The registered exit commands run first, so
# a hugetlbfs mount is gone before its pages are given back.
#
# Nesting is safe: sourcing twice is a no-op, repeated reserves of one size
# add up, and a child script that sources this file keeps its own record and
# gives back only what it added (children end first, so pools unwind in
# order). Do not set your own EXIT/INT/TERM trap after sourcing: use
# hugepages_on_exit.

if [ -z "${_hugepages_sourced:-}" ]; then
  _hugepages_sourced=1
  declare -gA _hugepages_added=()
  _hugepages_exit_cmds=()

  # Prefix for messages; scripts may set it (default: the script's name).
  hugepages_who="${hugepages_who:-${0##*/}}"

  _hugepages_dir() { echo "/sys/kernel/mm/hugepages/hugepages-${1}kB"; }

  # Free pages of size $1 kB not reserved by anybody.
  hugepages_free() {
    local d
    d=$(_hugepages_dir "$1")
    echo $(($(<"$d/free_hugepages") - $(<"$d/resv_hugepages")))
  }

  # hugepages_reserve KB N: grow the KB pool until N pages are free.
  hugepages_reserve() {
    local kb=$1 need=$2 d free total now
    d=$(_hugepages_dir "$kb")
    if [ ! -e "$d/nr_hugepages" ]; then
      echo "$hugepages_who: this kernel has no ${kb}kB hugepages ($d is missing)" >&2
      return 1
    fi
    free=$(hugepages_free "$kb")
    [ "$free" -lt "$need" ] || return 0
    total=$(<"$d/nr_hugepages")
    if [ ! -w "$d/nr_hugepages" ]; then
      echo "$hugepages_who: need $need free ${kb}kB hugepages but only $free are free, and $d/nr_hugepages is not writable (run as root, or: echo $((total + need - free)) | sudo tee $d/nr_hugepages)" >&2
      return 1
    fi
    # The write fails (or gives fewer pages) when the kernel cannot find
    # the memory; what it did give is recorded and given back all the same.
    echo $((total + need - free)) >"$d/nr_hugepages" 2>/dev/null || true
    now=$(<"$d/nr_hugepages")
    _hugepages_added[$kb]=$((${_hugepages_added[$kb]:-0} + now - total))
    free=$(hugepages_free "$kb")
    if [ "$free" -lt "$need" ]; then
      echo "$hugepages_who: could only get $free of $need free ${kb}kB hugepages (pool $total -> $now): the kernel cannot find that much contiguous memory; free some memory or reserve hugepages at boot (hugepages=N on the kernel command line)" >&2
      return 1
    fi
    echo "$hugepages_who: ${kb}kB hugepage pool $total -> $now for $need free pages" >&2
  }

  # Gives back every page this shell added (idempotent).
  hugepages_restore() {
    local kb d cur target
    for kb in "${!_hugepages_added[@]}"; do
      [ "${_hugepages_added[$kb]}" -gt 0 ] || continue
      d=$(_hugepages_dir "$kb")
      cur=$(<"$d/nr_hugepages")
      target=$((cur - ${_hugepages_added[$kb]}))
      [ "$target" -ge 0 ] || target=0
      if echo "$target" >"$d/nr_hugepages"; then
        _hugepages_added[$kb]=0
        echo "$hugepages_who: ${kb}kB hugepage pool restored to $(<"$d/nr_hugepages")" >&2
      else
        echo "$hugepages_who: could not restore $d/nr_hugepages to $target" >&2
      fi
    done
  }

  # hugepages_on_exit CMD...: run CMD (eval'd) at exit, before the pools are
  # given back.
  hugepages_on_exit() { _hugepages_exit_cmds+=("$*"); }

  _hugepages_at_exit() {
    local rc=$? cmd
    trap - EXIT
    for cmd in "${_hugepages_exit_cmds[@]}"; do
      eval "$cmd" || true
    done
    hugepages_restore || true
    exit "$rc"
  }
  trap _hugepages_at_exit EXIT
  # A signal ends the script through the EXIT trap, with the usual status.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
fi
