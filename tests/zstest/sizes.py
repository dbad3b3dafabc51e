"""The one size parser of the Python harness (binary units, as zerostart's own).

  parse_size("4G") == 4 << 30; parse_size("512m") == 512 << 20;
  parse_size("0x1000") == 4096; parse_size("4096") == 4096

  python3 -m zstest.sizes SIZE [--pages KIB]   prints bytes, or pages of KIB KiB (rounded up)
"""

from __future__ import annotations

import argparse
import sys

UNITS = {"k": 10, "m": 20, "g": 30, "t": 40}


def parse_size(text: str) -> int:
    """Bytes of `text`: a decimal or 0x number with an optional K/M/G/T suffix (powers of 1024)."""
    t = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    shift = UNITS.get(t[-1:], 0)
    digits = t[:-1] if shift else t
    try:
        n = int(digits, 16) if digits.startswith("0x") else int(digits)
    except ValueError:
        raise ValueError(f"'{text}' is not a size; write e.g. 4G, 512M or 0x1000") from None
    if n < 0:
        raise ValueError(f"'{text}' is negative; sizes are at least 0")
    return n << shift


def pages(text: str, page_kib: int) -> int:
    """Pages of `page_kib` KiB that cover `text` bytes."""
    page = page_kib << 10
    return (parse_size(text) + page - 1) // page


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size")
    ap.add_argument("--pages", type=int, metavar="KIB", help="print pages of this many KiB instead of bytes")
    a = ap.parse_args()
    try:
        print(pages(a.size, a.pages) if a.pages else parse_size(a.size))
    except ValueError as e:
        print(f"sizes: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
