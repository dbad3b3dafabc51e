#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
"""Checks the golden vectors (vectors.json, and text.json for the text form:
kernel command line, SMBIOS OEM strings) against the project's one Python
reference of hint ABI v1, tests/zstest/hint.py, written from the spec with
only the Python standard library. If it and the Rust decoder both agree
with the vectors, the vectors say what the spec says.

usage: check_vectors.py [tests/vectors] [--c-text FILE]

--c-text FILE: the text vectors of zshint_text_vectors.h as check_c_header
writes them; each is held to text.json (same transport and input) and to
the reference (the verdict, its index, the decoded bytes, their
validation), so the C header is checked without a C copy of the text form.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zstest.hint import ENTRY_ERRORS, decode_text, find_text, validate  # noqa: E402


def text_result(transport, inputs):
    """(result, index, decoded bytes) as text.json states a vector: the
    finder's or decoder's error (bytes None), else the validation of the
    decoded bytes."""
    got, text = find_text(transport, inputs)
    index = data = None
    if got == "ok":
        got, index, data = decode_text(text)
    if got == "ok":
        got, index, _, _ = validate(data, True, None)
    return got, index, data


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
        got, index, data = text_result(v["transport"], v["input"])
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


def text_verdict(transport, inputs):
    """What the reference makes of a text vector's input, split the way
    zshint_text_vectors.h states it: (text result, its index or 0, decoded
    bytes or b"", validation result, index or 0)."""
    got, index, data = text_result(transport, inputs)
    if data is None:
        return got, index or 0, b"", "ok", 0
    return "ok", 0, data, got, index or 0


def check_c_text(vdir, dump):
    """Checks check_c_header's dump of zshint_text_vectors.h; returns the
    number of failures."""
    with open(os.path.join(vdir, "text.json")) as f:
        by_name = {v["name"]: v for v in json.load(f)}
    with open(dump) as f:
        header = json.load(f)
    failures = 0
    if sorted(v["name"] for v in header) != sorted(by_name):
        print("zshint_text_vectors.h and text.json name different vectors: regenerate with "
              "`cargo run -p zerohint --example gen_vectors -- tests/vectors`", file=sys.stderr)
        failures += 1
    for h in header:
        v = by_name.get(h["name"])
        if v is None:
            continue
        inputs = [bytes.fromhex(x).decode("utf-8") for x in h["input"]]
        want_inputs = [v["input"]] if v["transport"] == "cmdline" else v["input"]
        if h["transport"] != v["transport"] or inputs != want_inputs:
            print(f"{h['name']}: the header's input differs from text.json's", file=sys.stderr)
            failures += 1
            continue
        # The ABI's error names; the C header spells "ok" of the binary form "Ok".
        said = (h["text_expect"], h["text_index"], bytes.fromhex(h["data"]),
                "ok" if h["expect"] == "Ok" else h["expect"], h["index"])
        ref = text_verdict(v["transport"], v["input"])
        if said != ref:
            what = "; its decoded bytes differ" if said[2] != ref[2] else ""
            print(f"{h['name']}: the header says {said[:2]} {said[3:]} ({len(said[2])} bytes), "
                  f"the reference {ref[:2]} {ref[3:]} ({len(ref[2])} bytes){what}: regenerate with "
                  "`cargo run -p zerohint --example gen_vectors -- tests/vectors`", file=sys.stderr)
            failures += 1
    if not failures:
        print(f"check_vectors.py: all {len(header)} text vectors of zshint_text_vectors.h agree "
              "with text.json and the Python reference")
    return failures


def main():
    args = sys.argv[1:]
    dump = None
    if "--c-text" in args:
        i = args.index("--c-text")
        if i + 1 >= len(args):
            print("check_vectors.py: --c-text needs a file; run check_c_header DIR FILE first",
                  file=sys.stderr)
            return 2
        dump = args[i + 1]
        del args[i:i + 2]
    vdir = args[0] if args else os.path.dirname(os.path.abspath(__file__))
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
    if dump:
        failures += check_c_text(vdir, dump)
    if failures:
        print(f"check_vectors.py: {failures} failures", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
