"""The one Python reference of the zerostart pre-zeroed hint (docs/hint-abi.md
v1): its encoder, for the tests that hand a hint to the firmware or the
kernel themselves, and its validator and text-form decoder, which
tests/vectors/check_vectors.py holds to every golden vector.

Why a reference next to the real implementations (Rust vmm/zerohint, EDK2
ZeroHintLib, the kernel's C, tests/guest-init/zshint.c): the firmware and
kernel tests must not trust the code they check against, so this one is
written from the spec with the standard library only; it agreeing with the
vectors, as the Rust crate that generates them does, is what says the
vectors say what the spec says. One module, so a test-side encoder and a
test-side validator cannot drift apart.

  encode(entries, scrub) / encode_ranges(ranges, ...) -> bytes
  validate(data, exact, ram) -> ("ok", None, flags, entries) | (error, index, None, None)
  text(hint) -> str; find_text(transport, inputs); decode_text(text)
  kernel_params(line): the kernel's parse_args() split of a command line
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
# The ABI's limits (docs/hint-abi.md).
MAX_ENTRIES = 512
PAGE_SHIFTS = (12, 21, 30)


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


def encode_ranges(ranges, scrub=False, corrupt=False):
    """The hint over RANGES [(start, length)], each with its natural_shift.
    CORRUPT flips one bit of the first entry after the checksum is taken
    (a BadChecksum hint, the tests' negative control)."""
    hint = bytearray(encode([(s, n, natural_shift(s, n)) for s, n in ranges], scrub))
    if corrupt:
        hint[HEADER.size + 9] ^= 0x10
    return bytes(hint)


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


ENTRY_ERRORS = ("BadEntryFlags", "BadPageShift", "Misaligned", "EmptyRange",
                "Overflow", "Unsorted", "Overlapping", "OutOfRam")


def validate(data, exact, ram):
    """Returns ("ok", None, flags, entries) or (error, index, None, None)."""
    if len(data) < HEADER.size:
        return "Truncated", None, None, None
    magic, version, hsize, esize, res0, count, flags, crc, res1 = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        return "BadMagic", None, None, None
    if version != VERSION:
        return "BadVersion", None, None, None
    if hsize != HEADER.size or esize != ENTRY.size:
        return "BadHeaderSize", None, None, None
    if count > MAX_ENTRIES:
        return "TooManyEntries", None, None, None
    if res0 or res1 or flags & ~FLAG_SCRUB_REQUEST:
        return "ReservedNonZero", None, None, None
    size = HEADER.size + ENTRY.size * count
    if len(data) < size:
        return "Truncated", None, None, None
    if exact and len(data) > size:
        return "BadLength", None, None, None
    hint = bytearray(data[:size])
    hint[24:28] = b"\0\0\0\0"
    if zlib.crc32(bytes(hint)) != crc:
        return "BadChecksum", None, None, None
    scrub = flags & FLAG_SCRUB_REQUEST
    entries = []
    prev = None
    for i in range(count):
        at = HEADER.size + ENTRY.size * i
        start, length, eflags, shift = ENTRY.unpack_from(data, at)
        reserved = data[at + 21:at + ENTRY.size]
        if any(reserved) or eflags & ~ENTRY_ZEROED or bool(eflags & ENTRY_ZEROED) == bool(scrub):
            return "BadEntryFlags", i, None, None
        if shift not in PAGE_SHIFTS:
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


TEXT_PREFIX = (TEXT_PARAM + "=").encode()
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
