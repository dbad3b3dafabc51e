"""Encode zerostart hints (docs/hint-abi.md) for the firmware QEMU tests.

Standalone on purpose (stdlib only): the tests must not trust the firmware's
own encoder to check the firmware.
"""

import struct
import zlib

MAGIC = b"ZSHINT01"
HEADER = struct.Struct("<8sHHHHIIII")  # magic version hsize esize res0 count flags crc res1
ENTRY = struct.Struct("<QQIB3x")
FLAG_SCRUB_REQUEST = 1
ENTRY_ZEROED = 1
MiB = 1 << 20
GiB = 1 << 30


def encode(entries, scrub=False):
    """entries: [(start, length, page_shift)], sorted, page aligned."""
    flags = FLAG_SCRUB_REQUEST if scrub else 0
    eflags = 0 if scrub else ENTRY_ZEROED
    body = b"".join(ENTRY.pack(s, n, eflags, shift) for s, n, shift in entries)
    head = HEADER.pack(MAGIC, 1, 32, 24, 0, len(entries), flags, 0, 0)
    crc = zlib.crc32(head + body) & 0xFFFFFFFF
    head = HEADER.pack(MAGIC, 1, 32, 24, 0, len(entries), flags, crc, 0)
    return head + body


def decode_entries(blob):
    count = struct.unpack_from("<I", blob, 0x10)[0]
    return [ENTRY.unpack_from(blob, 32 + 24 * i)[:2] for i in range(count)]


def q35_ram(mem):
    """Guest RAM ranges of QEMU's q35 machine for -m mem (bytes): below 4 GiB
    up to 2 GiB when RAM does not fit under 2.75 GiB (0xb0000000), else all
    of it; the rest from 4 GiB."""
    low = mem if mem < 0xB0000000 else 0x80000000
    ram = [(0, low)]
    if mem > low:
        ram.append((4 * GiB, mem - low))
    return ram


def adversarial_hint(mem, scrub=False):
    """A hint over all of the guest's RAM - including the first MiB, which
    the firmware must never publish - plus ranges that are not RAM at all
    (the PCI hole after low RAM, the flash below 4 GiB), which it must clip.
    Returns (blob, ram_entries, not_ram_entries)."""
    ram = q35_ram(mem)
    low_end = ram[0][1]
    entries = [(0, 0xA0000, 12), (MiB, low_end - MiB, 12)]
    not_ram = [(low_end, 64 * MiB, 12), (4 * GiB - 16 * MiB, 16 * MiB, 12)]
    entries.append(not_ram[0])
    entries.append(not_ram[1])
    if len(ram) > 1:
        entries.append((ram[1][0], ram[1][1], 21))
    entries.sort()
    return (encode(entries, scrub), [(s, n) for s, n, e in entries if (s, n, e) not in not_ram],
            [(s, n) for s, n, _ in not_ram])
