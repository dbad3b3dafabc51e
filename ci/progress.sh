#!/usr/bin/env bash
# progress.sh NAME COLD_S CMD...: runs CMD (a cached build: kernel, firmware,
# rootfs, the nested host's QEMU) and, when it is still running after 15 s
# (a cache hit ends sooner and prints nothing), says what it builds and how
# long that takes here, then a line every 60 s until it ends:
#   progress: guest kernel 6.12 is building (expected ~20m00s: a cold build on a 2-core machine; cached afterwards)
#   progress: guest kernel 6.12 still building, 1m15s so far (expected ~20m00s: ...)
# COLD_S: a cold build's duration on the 2-core reference machine, used
# until this machine has measured one; a run longer than 60 s records its
# own duration in $ZEROSTART_CACHE/durations/NAME for the next estimate
# (a partial rebuild records its shorter time too, and the line says the
# estimate is the last build, cold or partial).
# CMD's stdout, stderr and exit status pass through unchanged (callers
# read build.sh's printed path from stdout); the progress lines go to stderr.
# PROGRESS_SHARED=N (make demo's side-by-side builds): N builds share the
# cores, so each takes longer than the estimate, which is for a build alone;
# the lines say so instead of promising the alone time.
# PROGRESS_FIRST_S / PROGRESS_EVERY_S / PROGRESS_RECORD_S (15, 60, 60):
# the first line, the interval and the shortest run recorded (for tests).
set -u
first=${PROGRESS_FIRST_S:-15} every=${PROGRESS_EVERY_S:-60} record=${PROGRESS_RECORD_S:-60}
[ $# -ge 3 ] || { echo "usage: ci/progress.sh NAME COLD_SECONDS CMD..." >&2; exit 2; }
name=$1 cold=$2; shift 2
cache=${ZEROSTART_CACHE:-$HOME/.cache/zerostart}
rec="$cache/durations/$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_')"
fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
if [ -s "$rec" ] && read -r last < "$rec" && [ "$last" -gt 0 ] 2>/dev/null; then
	expect="~$(fmt "$last"): its last build here, cold or partial"
else
	expect="~$(fmt "$cold"): a cold build on a 2-core machine"
fi
shared=${PROGRESS_SHARED:-1}
if [ "$shared" -gt 1 ] 2>/dev/null; then
	expect="$expect, alone; longer now: $shared builds share the cores"
fi
t0=$SECONDS
# One-second sleeps: a sleep left behind when the heartbeat is killed holds
# the caller's stderr (a pipe, under make | tee) open for at most 1 s.
(
	i=0
	while sleep 1; do
		i=$((i + 1))
		[ "$i" = "$first" ] && echo "progress: $name is building (expected $expect; cached afterwards)" >&2
		[ "$i" -gt "$first" ] && [ $(((i - first) % every)) = 0 ] &&
			echo "progress: $name still building, $(fmt "$i") so far (expected $expect)" >&2
	done
) &
beat=$!
"$@"
rc=$?
kill "$beat" 2>/dev/null
wait "$beat" 2>/dev/null
took=$((SECONDS - t0))
if [ "$rc" = 0 ] && [ "$took" -ge "$record" ]; then
	mkdir -p "$(dirname "$rec")" && echo "$took" > "$rec"
	echo "progress: $name built in $(fmt "$took")" >&2
fi
exit "$rc"
