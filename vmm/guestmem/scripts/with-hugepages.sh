#!/usr/bin/env bash
# Runs a command with at least N free hugepages of a size, then gives back
# exactly the pages it added (other users' changes to the pool are kept).
#   with-hugepages.sh <2048|1048576> <pages> -- command args...
# Without root, or if the kernel cannot find the memory, runs the command
# anyway (hugetlb tests then report themselves skipped).
set -euo pipefail
kb=$1 want=$2; shift 2; [[ ${1:-} == -- ]] && shift
d=/sys/kernel/mm/hugepages/hugepages-${kb}kB
added=0
if [[ -w $d/nr_hugepages ]]; then
    free=$(<"$d/free_hugepages") resv=$(<"$d/resv_hugepages") total=$(<"$d/nr_hugepages")
    short=$(( want - (free - resv) ))
    if (( short > 0 )); then
        echo $(( total + short )) > "$d/nr_hugepages" || true
        now=$(<"$d/nr_hugepages")
        added=$(( now - total ))
        echo "with-hugepages: ${kb}kB pool $total -> $now (wanted +$short)" >&2
    fi
fi
restore() {
    if (( added > 0 )); then
        cur=$(<"$d/nr_hugepages")
        echo $(( cur - added )) > "$d/nr_hugepages" || true
        echo "with-hugepages: ${kb}kB pool restored to $(<"$d/nr_hugepages")" >&2
    fi
}
trap restore EXIT
"$@"
