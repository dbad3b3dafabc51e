#!/usr/bin/env bash
# Runs a command with at least N free hugepages of a size, then gives back
# exactly the pages it added (zstest.hugepages; also on failure or a
# signal). Nest it for several sizes.
#   with-hugepages.sh <2048|1048576> <pages> -- command args...
# Without root, or if the kernel cannot find the memory, runs the command
# anyway (hugetlb tests then report themselves skipped, or fail with
# ZEROSTART_REQUIRE_HUGEPAGES=1).
set -euo pipefail
kb=$1 want=$2; shift 2; [[ ${1:-} == -- ]] && shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
export PYTHONPATH="$root/tests${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m zstest.hugepages --who with-hugepages --may-fail "$kb:$want" -- "$@"
