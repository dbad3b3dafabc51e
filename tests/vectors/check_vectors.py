#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
"""Independent second implementation of hint ABI v1 validation
(docs/hint-abi.md), written from the spec with only the Python standard
library, checked against every vector in vectors.json. If it and the Rust
decoder both agree with the vectors, the vectors say what the spec says.

usage: check_vectors.py [tests/vectors]
"""
import json
import os
import struct
import sys
import zlib

ENTRY_ERRORS = ("BadEntryFlags", "BadPageShift", "Misaligned", "EmptyRange",
                "Overflow", "Unsorted", "Overlapping", "OutOfRam")


def validate(data, exact, ram):
    """Returns ("ok", None, flags, entries) or (error, index, None, None)."""
    if len(data) < 32:
        return "Truncated", None, None, None
    magic, version, hsize, esize, res0, count, flags, crc, res1 = struct.unpack_from(
        "<8sHHHHIIII", data, 0)
    if magic != b"ZSHINT01":
        return "BadMagic", None, None, None
    if version != 1:
        return "BadVersion", None, None, None
    if hsize != 32 or esize != 24:
        return "BadHeaderSize", None, None, None
    if count > 512:
        return "TooManyEntries", None, None, None
    if res0 or res1 or flags & ~1:
        return "ReservedNonZero", None, None, None
    size = 32 + 24 * count
    if len(data) < size:
        return "Truncated", None, None, None
    if exact and len(data) > size:
        return "BadLength", None, None, None
    hint = bytearray(data[:size])
    hint[24:28] = b"\0\0\0\0"
    if zlib.crc32(bytes(hint)) != crc:
        return "BadChecksum", None, None, None
    scrub = flags & 1
    entries = []
    prev = None
    for i in range(count):
        start, length, eflags, shift = struct.unpack_from("<QQIB", data, 32 + 24 * i)
        reserved = data[32 + 24 * i + 21:32 + 24 * i + 24]
        if any(reserved) or eflags & ~1 or bool(eflags & 1) == bool(scrub):
            return "BadEntryFlags", i, None, None
        if shift not in (12, 21, 30):
            return "BadPageShift", i, None, None
        if start % 4096 or length % 4096:
            return "Misaligned", i, None, None
        if length == 0:
            return "EmptyRange", i, None, None
        if start + length >= 1 << 64:
            return "Overflow", i, None, None
        if prev is not None and start < prev[0]:
            return "Unsorted", i, None, None
        if prev is not None and start < prev[0] + prev[1]:
            return "Overlapping", i, None, None
        prev = (start, length)
        entries.append([start, length, eflags, shift])
    if ram is not None:
        for i, (start, length, _, _) in enumerate(entries):
            cur, end = start, start + length
            while cur < end:
                ends = [s + n for s, n in ram if s <= cur < s + n]
                if not ends:
                    return "OutOfRam", i, None, None
                cur = max(ends)
    return "ok", None, flags, entries


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
    if failures:
        print(f"check_vectors.py: {failures} failures", file=sys.stderr)
        return 1
    print(f"check_vectors.py: all {len(vectors)} vectors agree with the Python validator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
