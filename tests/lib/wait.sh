# shellcheck shell=bash
# Bounded waits for test scripts: every wait gives up after a deadline and
# says what it waited for, so a stuck daemon fails the run instead of
# hanging it (and CI's own timeout, which names nothing).
#
#   source "$root/tests/lib/wait.sh"
#   wait_until 60 "the pool to scrub every region" cmd args...
#
# Runs `cmd args...` every 0.1 s until it succeeds (returns 0) or SECONDS
# have passed (returns 1 after one line on stderr naming WHAT and the
# deadline). The command's own output is discarded.

wait_until() {
  local tmo=$1 what=$2 end
  shift 2
  end=$((SECONDS + tmo))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "${wait_who:-${0##*/}}: gave up after ${tmo}s waiting for $what" >&2
      return 1
    fi
    sleep 0.1
  done
}
