#!/usr/bin/env bash
# The kernel suite moved to tests/kernel/run.py (case tables in cases.py);
# this name stays for the commands in guest-kernel-patches/*.md.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
exec python3 "$here/run.py" --suite kernel "$@"
