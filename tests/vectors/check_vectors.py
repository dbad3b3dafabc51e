#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
"""Independent second implementation of hint ABI v1 validation
(docs/hint-abi.md), written from the spec with only the Python standard
library, checked against every vector in vectors.json and, for the text
form (kernel command line, SMBIOS OEM strings), text.json. If it and the
Rust decoder both agree with the vectors, the vectors say what the spec
says.

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


TEXT_PREFIX = b"prezero.hint="
TEXT_MAX_CHARS = 1024
B64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
# The kernel's isspace() (lib/ctype.c, Latin-1): ASCII white space and 0xa0.
KERNEL_SPACE = frozenset(b" \t\n\v\f\r") | {0xA0}


def kernel_params(line):
    """Yields (param, value or None) as the kernel's parse_args()/next_arg()
    split the command line `line` (bytes), stopping at a `--` token. A '"'
    toggles quoting anywhere in a token; a token that starts with '"' loses
    it and, if it ends with '"', that one too; a value that starts with '"'
    loses it and, if the token ends with '"', that one too. The line ends at
    a NUL, as a C string does."""
    line = line.split(b"\0", 1)[0]
    pos, n = 0, len(line)
    while pos < n and line[pos] in KERNEL_SPACE:
        pos += 1
    while pos < n:
        quoted = line[pos] == ord('"')
        start = pos + 1 if quoted else pos
        end, in_quote, equals = start, quoted, None
        while end < n and not (line[end] in KERNEL_SPACE and not in_quote):
            if equals is None and line[end] == ord("=") and end > start:
                equals = end
            if line[end] == ord('"'):
                in_quote = not in_quote
            end += 1
        token = line[start:end]
        ends_with_quote = token.endswith(b'"')
        if equals is None:
            param, value = token[:-1] if quoted and ends_with_quote else token, None
        else:
            param, value = line[start:equals], line[equals + 1:end]
            if value.startswith(b'"'):
                value = value[1:-1] if ends_with_quote else value[1:]
            elif quoted and ends_with_quote:
                value = value[:-1]
        pos = end + 1 if end < n else end
        while pos < n and line[pos] in KERNEL_SPACE:
            pos += 1
        if value is None and param == b"--":
            return
        yield param, value


def find_text(transport, inputs):
    """Returns ("ok", text bytes) or (result name, None)."""
    if transport == "cmdline":
        # A bare name (no "=") is the parameter with an empty text.
        found = [v or b"" for p, v in kernel_params(inputs.encode("utf-8"))
                 if p == b"prezero.hint"]
    else:
        found = [s.encode("utf-8")[len(TEXT_PREFIX):] for s in inputs
                 if s.encode("utf-8").startswith(TEXT_PREFIX)]
    if not found:
        return "Absent", None
    if len(found) > 1:
        return "Duplicate", None
    return "ok", found[0]


def decode_text(text):
    """Returns ("ok", None, bytes) or (text error, index, None); strict
    base64url by hand: no padding, no other alphabet, canonical tail."""
    if len(text) > TEXT_MAX_CHARS:
        return "TextTooLong", None, None
    for i, c in enumerate(text):
        if c not in B64URL:
            return "TextBadChar", i, None
    if len(text) % 4 == 1:
        return "TextBadLength", None, None
    value = 0
    for c in text:
        value = value << 6 | B64URL.index(c)
    spare = len(text) * 6 % 8
    if value & ((1 << spare) - 1):
        return "TextNonCanonical", None, None
    nbytes = len(text) * 6 // 8
    return "ok", None, (value >> spare).to_bytes(nbytes, "big")


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
