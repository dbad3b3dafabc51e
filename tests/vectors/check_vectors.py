#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
"""Checks the golden vectors (vectors.json, and text.json for the text form:
kernel command line, SMBIOS OEM strings) against the project's one Python
reference of hint ABI v1, tests/zstest/hint.py, written from the spec with
only the Python standard library. If it and the Rust decoder both agree
with the vectors, the vectors say what the spec says.

usage: check_vectors.py [tests/vectors]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zstest.hint import ENTRY_ERRORS, decode_text, find_text, validate  # noqa: E402


def check_texts(vdir):
    """Checks text.json; returns the number of failures."""
    with open(os.path.join(vdir, "text.json")) as f:
        vectors = json.load(f)
    failures = 0
    seen = set()
    names = set()
    for v in vectors:
        name = v["name"]
        if name in names:
            print(f"{name}: duplicate text vector name", file=sys.stderr)
            failures += 1
        names.add(name)
        seen.add(v["expect"])
        got, text = find_text(v["transport"], v["input"])
        index = data = None
        if got == "ok":
            got, index, data = decode_text(text)
        if got == "ok":
            got, index, _, _ = validate(data, True, None)
        if (got, index) != (v["expect"], v.get("index")):
            print(f"{name}: expected {(v['expect'], v.get('index'))}, got {(got, index)}",
                  file=sys.stderr)
            failures += 1
        if "file" in v:
            with open(os.path.join(vdir, v["file"]), "rb") as f:
                want = f.read()
            if data != want:
                print(f"{name}: decoded bytes differ from {v['file']}", file=sys.stderr)
                failures += 1
    needed = ["ok", "Absent", "Duplicate", "TextTooLong", "TextBadChar", "TextBadLength",
              "TextNonCanonical"]
    missing = [n for n in needed if n not in seen]
    if missing:
        print(f"no text vector expects {missing}", file=sys.stderr)
        failures += 1
    if not failures:
        print(f"check_vectors.py: all {len(vectors)} text vectors agree with the Python "
              "tokenizer and decoder")
    return failures


def main():
    vdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(vdir, "vectors.json")) as f:
        vectors = json.load(f)
    failures = 0
    seen = set()
    for v in vectors:
        seen.add(v["expect"])
        with open(os.path.join(vdir, v["file"]), "rb") as f:
            data = f.read()
        got, index, flags, entries = validate(data, v["exact"], v.get("ram"))
        want = (v["expect"], v.get("index"))
        if (got, index) != want:
            print(f"{v['name']}: expected {want}, got {(got, index)}", file=sys.stderr)
            failures += 1
        elif got == "ok" and (flags, entries) != (v["flags"], v["entries"]):
            print(f"{v['name']}: decoded {flags} {entries}, vectors.json says "
                  f"{v['flags']} {v['entries']}", file=sys.stderr)
            failures += 1
        elif (index is not None) != (got in ENTRY_ERRORS):
            print(f"{v['name']}: index given for a non-entry error", file=sys.stderr)
            failures += 1
    names = ["Truncated", "BadMagic", "BadVersion", "BadHeaderSize", "TooManyEntries",
             "ReservedNonZero", "BadLength", "BadChecksum"] + list(ENTRY_ERRORS)
    missing = [n for n in ["ok"] + names if n not in seen]
    if missing:
        print(f"no vector expects {missing}", file=sys.stderr)
        failures += 1
    if not failures:
        print(f"check_vectors.py: all {len(vectors)} vectors agree with the Python validator")
    failures += check_texts(vdir)
    if failures:
        print(f"check_vectors.py: {failures} failures", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
