#!/usr/bin/env bash
# The memmap boots moved to tests/kernel/cases.py (memmap_table), run by
# run.py; this name stays for the commands in guest-kernel-patches/*.md.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
exec python3 "$here/run.py" --suite memmap "$@"
