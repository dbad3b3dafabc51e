"""The one Python encoder of the zerostart pre-zeroed hint (docs/hint-abi.md
v1), for the tests that hand a hint to the firmware or the kernel themselves.

Why a second encoder next to the VMM's (vmm/zerohint): the firmware and kernel
tests must not trust the code they check against, so this one is written
from the spec with the standard library only, and zstest's unit tests hold it
to the golden vectors in tests/vectors byte for byte.
"""

import base64
import struct
import zlib

MAGIC = b"ZSHINT01"
VERSION = 1
# magic version header_size entry_size reserved0 entry_count flags checksum reserved1
HEADER = struct.Struct("<8sHHHHIIII")
# start length flags page_shift reserved[3]
ENTRY = struct.Struct("<QQIB3x")
FLAG_SCRUB_REQUEST = 1
ENTRY_ZEROED = 1
# setup_data `type` of transport (a), the Linux x86 boot protocol list.
SETUP_ZEROSTART_HINT = 0x5A480001
SETUP_DATA = struct.Struct("<QII")  # next type len
MiB = 1 << 20
GiB = 1 << 30


def encode(entries, scrub=False):
    """The hint over entries [(start, length, page_shift)], in the order
    given. A zero hint's entries carry ZEROED; a scrub request (scrub=True)
    sets SCRUB_REQUEST and leaves ZEROED clear, as the spec requires. Nothing
    is validated: the tests build bad hints on purpose."""
    flags = FLAG_SCRUB_REQUEST if scrub else 0
    eflags = 0 if scrub else ENTRY_ZEROED
    body = b"".join(ENTRY.pack(s, n, eflags, shift) for s, n, shift in entries)

    def header(crc):
        return HEADER.pack(MAGIC, VERSION, HEADER.size, ENTRY.size, 0, len(entries), flags, crc, 0)

    return header(zlib.crc32(header(0) + body) & 0xFFFFFFFF) + body


def natural_shift(start, length):
    """The page_shift a range given without one gets: 21 (2 MiB backing)
    when it is 2 MiB aligned, else 12. Informational only to a consumer."""
    return 21 if (start | length) % (2 * MiB) == 0 else 12


TEXT_PARAM = "prezero.hint"


def text(hint):
    """hint in its text form (docs/hint-abi.md "Text form"): unpadded
    base64url, for the kernel parameter prezero.hint= and the SMBIOS OEM
    string with that prefix. Nothing is validated."""
    return base64.urlsafe_b64encode(bytes(hint)).rstrip(b"=").decode()


def setup_data(hint, next_addr=0):
    """hint as one node of a setup_data list (transport (a)): its `len` is
    the hint's exact size."""
    return SETUP_DATA.pack(next_addr, SETUP_ZEROSTART_HINT, len(hint)) + bytes(hint)
