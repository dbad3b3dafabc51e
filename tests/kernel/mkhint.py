#!/usr/bin/env python3
"""Build a zerostart hint (docs/hint-abi.md v1) wrapped in an x86 setup_data
entry, and a copy of a bzImage whose boot header points at it.

Why: QEMU's direct kernel boot builds boot_params itself and has no option
for extra setup_data. It does keep the header's `setup_data` field (0x250)
from the image when it adds no entries of its own, so the test places the
setup_data entry in guest RAM with `-device loader` and points a copy of the
bzImage at it: the kernel then receives the hint through exactly the same
transport (a) a boot loader or the zerostart VMM uses.

usage: mkhint.py --ranges START:LEN[,START:LEN...] --addr GPA
                 --bzimage IN --out-image OUT --out-blob BLOB
                 [--corrupt] [--scrub]
       mkhint.py --ranges START:LEN[,...] --out-hint HINT
                 (the bare hint, for the fw_cfg file the firmware reads)
"""
import argparse
import struct
import sys

from zstest import hint as zshint
from zstest.sizes import parse_size


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", required=True, help="START:LEN,... (suffixes k/m/g)")
    ap.add_argument("--addr", help="guest-physical address of the setup_data entry")
    ap.add_argument("--bzimage")
    ap.add_argument("--out-image")
    ap.add_argument("--out-blob")
    ap.add_argument("--out-hint", help="write the bare hint (fw_cfg opt/org.zerostart/prezeroed) here")
    ap.add_argument("--corrupt", action="store_true", help="flip one bit of an entry (BadChecksum)")
    ap.add_argument("--scrub", action="store_true", help="set SCRUB_REQUEST (kernel must reject)")
    args = ap.parse_args()
    setup_args = (args.addr, args.bzimage, args.out_image, args.out_blob)
    if not args.out_hint and not all(setup_args):
        ap.error("need --addr, --bzimage, --out-image and --out-blob (or --out-hint)")

    ranges = []
    for item in args.ranges.split(","):
        start, length = item.split(":")
        ranges.append((parse_size(start), parse_size(length)))
    hint = zshint.encode_ranges(ranges, args.scrub, args.corrupt)
    if args.out_hint:
        open(args.out_hint, "wb").write(hint)
    if not all(setup_args):
        return
    addr = parse_size(args.addr)
    blob = zshint.setup_data(hint)

    image = bytearray(open(args.bzimage, "rb").read())
    if image[0x202:0x206] != b"HdrS" or struct.unpack_from("<H", image, 0x206)[0] < 0x209:
        sys.exit("mkhint: %s is not a bzImage with boot protocol >= 2.09" % args.bzimage)
    if struct.unpack_from("<Q", image, 0x250)[0] != 0:
        sys.exit("mkhint: %s already has a setup_data pointer" % args.bzimage)
    struct.pack_into("<Q", image, 0x250, addr)
    open(args.out_image, "wb").write(image)
    open(args.out_blob, "wb").write(blob)


if __name__ == "__main__":
    main()
