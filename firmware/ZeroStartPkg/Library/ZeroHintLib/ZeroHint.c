/** @file
  ZeroHintLib: validation, CRC-32 and encoding of the zerostart hint
  (docs/hint-abi.md). No EDK2 library calls, so the same file builds on the
  host for unit tests.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <Library/ZeroHintLib.h>

STATIC CONST CHAR8  *CONST  mStatusNames[ZeroHintStatusCount] = {
  "Ok",
  "Truncated",
  "BadMagic",
  "BadVersion",
  "BadHeaderSize",
  "TooManyEntries",
  "ReservedNonZero",
  "BadLength",
  "BadChecksum",
  "BadEntryFlags",
  "BadPageShift",
  "Misaligned",
  "EmptyRange",
  "Overflow",
  "Unsorted",
  "Overlapping",
  "OutOfRam",
};

STATIC CONST UINT8  mMagic[8] = { 'Z', 'S', 'H', 'I', 'N', 'T', '0', '1' };

CONST CHAR8 *
EFIAPI
ZeroHintStatusName (
  IN ZERO_HINT_STATUS  Status
  )
{
  if ((UINT32)Status >= (UINT32)ZeroHintStatusCount) {
    return "Unknown";
  }

  return mStatusNames[Status];
}

STATIC
UINT16
Le16 (
  IN CONST UINT8  *P
  )
{
  return (UINT16)(P[0] | (P[1] << 8));
}

STATIC
UINT32
Le32 (
  IN CONST UINT8  *P
  )
{
  return (UINT32)P[0] | ((UINT32)P[1] << 8) | ((UINT32)P[2] << 16) | ((UINT32)P[3] << 24);
}

STATIC
UINT64
Le64 (
  IN CONST UINT8  *P
  )
{
  return (UINT64)Le32 (P) | ((UINT64)Le32 (P + 4) << 32);
}

STATIC
VOID
Put16 (
  OUT UINT8  *P,
  IN  UINT16  V
  )
{
  P[0] = (UINT8)V;
  P[1] = (UINT8)(V >> 8);
}

STATIC
VOID
Put32 (
  OUT UINT8  *P,
  IN  UINT32  V
  )
{
  Put16 (P, (UINT16)V);
  Put16 (P + 2, (UINT16)(V >> 16));
}

STATIC
VOID
Put64 (
  OUT UINT8  *P,
  IN  UINT64  V
  )
{
  Put32 (P, (UINT32)V);
  Put32 (P + 4, (UINT32)(V >> 32));
}

// Nibble-wise table for the reflected polynomial 0xEDB88320: small enough
// for a firmware image, fast enough for a 12 KiB hint.
STATIC CONST UINT32  mCrcNibble[16] = {
  0x00000000, 0x1DB71064, 0x3B6E20C8, 0x26D930AC,
  0x76DC4190, 0x6B6B51F4, 0x4DB26158, 0x5005713C,
  0xEDB88320, 0xF00F9344, 0xD6D6A3E8, 0xCB61B38C,
  0x9B64C2B0, 0x86D3D2D4, 0xA00AE278, 0xBDBDF21C,
};

UINT32
EFIAPI
ZeroHintCrc32Update (
  IN UINT32      Crc,
  IN CONST VOID  *Data,
  IN UINTN       Length
  )
{
  CONST UINT8  *P;
  UINTN        Index;

  P   = (CONST UINT8 *)Data;
  Crc = ~Crc;
  for (Index = 0; Index < Length; Index++) {
    Crc ^= P[Index];
    Crc  = (Crc >> 4) ^ mCrcNibble[Crc & 0xF];
    Crc  = (Crc >> 4) ^ mCrcNibble[Crc & 0xF];
  }

  return ~Crc;
}

// CRC of the blob with the checksum field read as zero.
STATIC
UINT32
BlobCrc (
  IN CONST UINT8  *P,
  IN UINTN        Size
  )
{
  STATIC CONST UINT8  Zero4[4] = { 0, 0, 0, 0 };
  UINT32              Crc;

  Crc = ZeroHintCrc32Update (0, P, ZSHINT_CHECKSUM_OFFSET);
  Crc = ZeroHintCrc32Update (Crc, Zero4, 4);
  return ZeroHintCrc32Update (Crc, P + ZSHINT_CHECKSUM_OFFSET + 4, Size - ZSHINT_CHECKSUM_OFFSET - 4);
}

ZERO_HINT_STATUS
EFIAPI
ZeroHintValidate (
  IN  CONST VOID  *Blob,
  IN  UINTN       Available,
  IN  BOOLEAN     TransportLength,
  OUT UINT32      *EntryCount OPTIONAL,
  OUT UINT32      *Flags OPTIONAL,
  OUT UINT32      *BadEntry OPTIONAL
  )
{
  CONST UINT8  *P;
  UINT32       Count;
  UINT32       HeaderFlags;
  UINTN        Need;
  UINT32       Index;
  UINT64       PrevStart;
  UINT64       PrevEnd;
  BOOLEAN      Scrub;
  UINTN        Byte;

  P = (CONST UINT8 *)Blob;
  if (BadEntry != NULL) {
    *BadEntry = 0;
  }

  // 1. Truncated
  if ((P == NULL) || (Available < ZSHINT_HEADER_SIZE)) {
    return ZeroHintTruncated;
  }

  // 2. BadMagic
  for (Byte = 0; Byte < sizeof (mMagic); Byte++) {
    if (P[Byte] != mMagic[Byte]) {
      return ZeroHintBadMagic;
    }
  }

  // 3. BadVersion
  if (Le16 (P + 0x08) != ZSHINT_VERSION) {
    return ZeroHintBadVersion;
  }

  // 4. BadHeaderSize
  if ((Le16 (P + 0x0a) != ZSHINT_HEADER_SIZE) || (Le16 (P + 0x0c) != ZSHINT_ENTRY_SIZE)) {
    return ZeroHintBadHeaderSize;
  }

  // 5. TooManyEntries
  Count = Le32 (P + 0x10);
  if (Count > ZSHINT_MAX_ENTRIES) {
    return ZeroHintTooManyEntries;
  }

  // 6. ReservedNonZero
  HeaderFlags = Le32 (P + 0x14);
  if ((Le16 (P + 0x0e) != 0) || (Le32 (P + 0x1c) != 0) ||
      ((HeaderFlags & ~ZSHINT_FLAG_SCRUB_REQUEST) != 0))
  {
    return ZeroHintReservedNonZero;
  }

  // 7. Truncated / BadLength
  Need = ZSHINT_HEADER_SIZE + (UINTN)Count * ZSHINT_ENTRY_SIZE;
  if (Available < Need) {
    return ZeroHintTruncated;
  }

  if (TransportLength && (Available > Need)) {
    return ZeroHintBadLength;
  }

  // 8. BadChecksum
  if (BlobCrc (P, Need) != Le32 (P + ZSHINT_CHECKSUM_OFFSET)) {
    return ZeroHintBadChecksum;
  }

  // 9. Per entry, in order.
  Scrub     = (BOOLEAN)((HeaderFlags & ZSHINT_FLAG_SCRUB_REQUEST) != 0);
  PrevStart = 0;
  PrevEnd   = 0;
  for (Index = 0; Index < Count; Index++) {
    CONST UINT8  *E;
    UINT64       Start;
    UINT64       Length;
    UINT32       EFlags;
    UINT8        Shift;

    E      = P + ZSHINT_HEADER_SIZE + (UINTN)Index * ZSHINT_ENTRY_SIZE;
    Start  = Le64 (E);
    Length = Le64 (E + 8);
    EFlags = Le32 (E + 16);
    Shift  = E[20];
    if (BadEntry != NULL) {
      *BadEntry = Index;
    }

    if (((EFlags & ~ZSHINT_ENTRY_FLAG_ZEROED) != 0) || (E[21] != 0) || (E[22] != 0) || (E[23] != 0) ||
        (!Scrub && ((EFlags & ZSHINT_ENTRY_FLAG_ZEROED) == 0)) ||
        (Scrub && ((EFlags & ZSHINT_ENTRY_FLAG_ZEROED) != 0)))
    {
      return ZeroHintBadEntryFlags;
    }

    if ((Shift != 12) && (Shift != 21) && (Shift != 30)) {
      return ZeroHintBadPageShift;
    }

    if (((Start & ZSHINT_PAGE_MASK) != 0) || ((Length & ZSHINT_PAGE_MASK) != 0)) {
      return ZeroHintMisaligned;
    }

    if (Length == 0) {
      return ZeroHintEmptyRange;
    }

    // The exclusive end must be representable: an end of exactly 2^64 is
    // Overflow too.
    if (Length > MAX_UINT64 - Start) {
      return ZeroHintOverflow;
    }

    if ((Index > 0) && (Start < PrevStart)) {
      return ZeroHintUnsorted;
    }

    if ((Index > 0) && (Start < PrevEnd)) {
      return ZeroHintOverlapping;
    }

    PrevStart = Start;
    PrevEnd   = Start + Length;
  }

  if (BadEntry != NULL) {
    *BadEntry = 0;
  }

  if (EntryCount != NULL) {
    *EntryCount = Count;
  }

  if (Flags != NULL) {
    *Flags = HeaderFlags;
  }

  return ZeroHintOk;
}

VOID
EFIAPI
ZeroHintGetEntry (
  IN  CONST VOID       *Blob,
  IN  UINT32           Index,
  OUT ZERO_HINT_ENTRY  *Entry
  )
{
  CONST UINT8  *E;

  E                = (CONST UINT8 *)Blob + ZSHINT_HEADER_SIZE + (UINTN)Index * ZSHINT_ENTRY_SIZE;
  Entry->Start     = Le64 (E);
  Entry->Length    = Le64 (E + 8);
  Entry->Flags     = Le32 (E + 16);
  Entry->PageShift = E[20];
}

UINT8
EFIAPI
ZeroHintPageShiftFor (
  IN CONST VOID        *Blob,
  IN UINT32            EntryCount,
  IN CONST ZERO_RANGE  *Range
  )
{
  UINT32           Index;
  UINT8            Shift;
  ZERO_HINT_ENTRY  Entry;

  Shift = 0;
  for (Index = 0; Index < EntryCount; Index++) {
    ZeroHintGetEntry (Blob, Index, &Entry);
    // Validated entries end at or below 2^64 - 4096, so Start + Length - 1
    // cannot wrap.
    if ((Entry.Start <= Range->Last) && (Entry.Start + Entry.Length - 1 >= Range->Start)) {
      if ((Shift == 0) || (Entry.PageShift < Shift)) {
        Shift = Entry.PageShift;
      }
    }
  }

  return (Shift == 0) ? 12 : Shift;
}

UINTN
EFIAPI
ZeroHintEncode (
  IN  CONST ZERO_RANGE  *Ranges,
  IN  UINTN             Count,
  IN  CONST VOID        *PageShiftBlob OPTIONAL,
  IN  UINT32            PageShiftBlobCount,
  OUT VOID              *Out,
  IN  UINTN             OutSize
  )
{
  UINT8  *P;
  UINTN  Size;
  UINTN  Index;
  UINTN  Byte;

  if ((Count > ZSHINT_MAX_ENTRIES) || (Out == NULL)) {
    return 0;
  }

  Size = ZSHINT_HEADER_SIZE + Count * ZSHINT_ENTRY_SIZE;
  if (OutSize < Size) {
    return 0;
  }

  P = (UINT8 *)Out;
  for (Byte = 0; Byte < Size; Byte++) {
    P[Byte] = 0;
  }

  for (Byte = 0; Byte < sizeof (mMagic); Byte++) {
    P[Byte] = mMagic[Byte];
  }

  Put16 (P + 0x08, ZSHINT_VERSION);
  Put16 (P + 0x0a, ZSHINT_HEADER_SIZE);
  Put16 (P + 0x0c, ZSHINT_ENTRY_SIZE);
  Put32 (P + 0x10, (UINT32)Count);
  for (Index = 0; Index < Count; Index++) {
    UINT8   *E;
    UINT64  Start;
    UINT64  Last;

    Start = Ranges[Index].Start;
    Last  = Ranges[Index].Last;
    // A hint range must be whole pages with a representable exclusive end.
    if (((Start & ZSHINT_PAGE_MASK) != 0) || ((Last & ZSHINT_PAGE_MASK) != ZSHINT_PAGE_MASK) ||
        (Last < Start) || (Last == MAX_UINT64))
    {
      return 0;
    }

    E = P + ZSHINT_HEADER_SIZE + Index * ZSHINT_ENTRY_SIZE;
    Put64 (E, Start);
    Put64 (E + 8, Last - Start + 1);
    Put32 (E + 16, ZSHINT_ENTRY_FLAG_ZEROED);
    E[20] = (PageShiftBlob != NULL) ? ZeroHintPageShiftFor (PageShiftBlob, PageShiftBlobCount, &Ranges[Index]) : 12;
  }

  Put32 (P + ZSHINT_CHECKSUM_OFFSET, BlobCrc (P, Size));
  return Size;
}
