#!/usr/bin/env bash
# Unit test of tests/lib/wait.sh: a wait that cannot end gives up on time
# and names what it waited for; one that can end returns at once.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/wait.sh"
t0=$SECONDS
if err="$(wait_until 1 "the never-true thing" false 2>&1)"; then
  echo "FAIL: wait_until returned success for a command that never succeeds" >&2; exit 1
fi
[[ "$err" == *"gave up after 1s waiting for the never-true thing"* ]] ||
  { echo "FAIL: wait_until's message does not name what it waited for: '$err'" >&2; exit 1; }
[ $((SECONDS - t0)) -le 3 ] || { echo "FAIL: wait_until 1 took $((SECONDS - t0))s" >&2; exit 1; }
wait_until 5 "true" true || { echo "FAIL: wait_until failed on a command that succeeds" >&2; exit 1; }
echo "PASS: tests/lib/wait.sh gives up after its timeout, naming what it waited for"
