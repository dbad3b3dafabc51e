/** @file
  ZeroHintLib: the text form of the zerostart hint (docs/hint-abi.md "Text
  form") as the firmware reads it from an SMBIOS type 11 OEM string
  "prezero.hint=<base64url>": the SMBIOS entry point scan, the structure
  table walk that finds the string (Absent, Duplicate), and the base64url
  decoder with the ABI's error order. No EDK2 library calls, so the same
  file builds on the host for unit tests.

  Every read is bounded by the length the caller gives: a table from the VMM
  may be malformed, and a malformed one must be refused with a warning,
  never walked past its end.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <Library/ZeroHintLib.h>

STATIC CONST CHAR8  *CONST  mTextStatusNames[ZeroHintTextStatusCount] = {
  "ok",
  "Absent",
  "Duplicate",
  "TextTooLong",
  "TextBadChar",
  "TextBadLength",
  "TextNonCanonical",
};

STATIC CONST CHAR8  *CONST  mSmbiosStatusNames[ZeroSmbiosStatusCount] = {
  "Ok",
  "NoEntryPoint",
  "EntryPointLength",
  "EntryPointChecksum",
  "TableLocation",
  "StructureTruncated",
  "StructureLength",
  "StringsUnterminated",
};

STATIC CONST UINT8  mTextPrefix[ZSHINT_TEXT_PREFIX_LENGTH] = {
  'p', 'r', 'e', 'z', 'e', 'r', 'o', '.', 'h', 'i', 'n', 't', '='
};

STATIC CONST UINT8  mSm3Anchor[5] = { '_', 'S', 'M', '3', '_' };
STATIC CONST UINT8  mSmAnchor[4]  = { '_', 'S', 'M', '_' };
STATIC CONST UINT8  mDmiAnchor[5] = { '_', 'D', 'M', 'I', '_' };

/// 3.0 entry point: 24 bytes. 2.1 entry point: 0x1F bytes (the "_DMI_"
/// intermediate part is 0x10..0x1E); its length byte may say 0x1E (an old
/// producer bug Linux accepts too), but 0x1F bytes are read.
#define SMBIOS3_ENTRY_POINT_MIN   0x18
#define SMBIOS2_ENTRY_POINT_SIZE  0x1F
#define SMBIOS2_ENTRY_POINT_MIN   0x1E
#define SMBIOS_STRUCTURE_HEADER  4
#define SMBIOS_OEM_STRINGS_MIN   5
#define SMBIOS_TABLE_LIMIT       0x100000000ULL

CONST CHAR8 *
EFIAPI
ZeroHintTextStatusName (
  IN ZERO_HINT_TEXT_STATUS  Status
  )
{
  if ((UINT32)Status >= (UINT32)ZeroHintTextStatusCount) {
    return "Unknown";
  }

  return mTextStatusNames[Status];
}

CONST CHAR8 *
EFIAPI
ZeroSmbiosStatusName (
  IN ZERO_SMBIOS_STATUS  Status
  )
{
  if ((UINT32)Status >= (UINT32)ZeroSmbiosStatusCount) {
    return "Unknown";
  }

  return mSmbiosStatusNames[Status];
}

/// Sextet's answer for a character outside the alphabet.
#define NOT_BASE64URL  64

/// The 6-bit value of a base64url character (RFC 4648 section 5), or
/// NOT_BASE64URL.
STATIC
UINT32
Sextet (
  IN UINT8  C
  )
{
  if ((C >= 'A') && (C <= 'Z')) {
    return C - 'A';
  }

  if ((C >= 'a') && (C <= 'z')) {
    return C - 'a' + 26;
  }

  if ((C >= '0') && (C <= '9')) {
    return C - '0' + 52;
  }

  if (C == '-') {
    return 62;
  }

  if (C == '_') {
    return 63;
  }

  return NOT_BASE64URL;
}

ZERO_HINT_TEXT_STATUS
EFIAPI
ZeroHintTextDecode (
  IN  CONST CHAR8  *Text OPTIONAL,
  IN  UINTN        TextLength,
  OUT UINT8        *Out,
  IN  UINTN        OutSize,
  OUT UINTN        *OutLength,
  OUT UINT32       *BadIndex OPTIONAL
  )
{
  CONST UINT8  *T;
  UINTN        Index;
  UINTN        Length;
  UINT32       Acc;
  UINT32       Bits;

  T = (CONST UINT8 *)Text;
  if (BadIndex != NULL) {
    *BadIndex = 0;
  }

  *OutLength = 0;

  // 3. TextTooLong, before looking at a single character.
  if (TextLength > ZSHINT_TEXT_MAX_CHARS) {
    return ZeroHintTextTooLong;
  }

  // 4. TextBadChar: the first one, '=' padding included.
  for (Index = 0; Index < TextLength; Index++) {
    if (Sextet (T[Index]) == NOT_BASE64URL) {
      if (BadIndex != NULL) {
        *BadIndex = (UINT32)Index;
      }

      return ZeroHintTextBadChar;
    }
  }

  // 5. TextBadLength: no byte count gives L mod 4 == 1.
  if (TextLength % 4 == 1) {
    return ZeroHintTextBadLength;
  }

  // floor(L*3/4) bytes. Never more than ZSHINT_TEXT_MAX_BYTES; a caller's
  // shorter buffer is refused rather than overrun.
  if (TextLength * 3 / 4 > OutSize) {
    return ZeroHintTextTooLong;
  }

  // 6. TextNonCanonical: decode, then the bits left over must be zero.
  Acc    = 0;
  Bits   = 0;
  Length = 0;
  for (Index = 0; Index < TextLength; Index++) {
    Acc   = (Acc << 6) | Sextet (T[Index]);
    Bits += 6;
    if (Bits >= 8) {
      Bits       -= 8;
      Out[Length] = (UINT8)(Acc >> Bits);
      Length++;
      Acc &= (1u << Bits) - 1;
    }
  }

  if (Acc != 0) {
    return ZeroHintTextNonCanonical;
  }

  *OutLength = Length;
  return ZeroHintTextOk;
}

STATIC
UINT8
Sum8 (
  IN CONST UINT8  *P,
  IN UINTN        Length
  )
{
  UINT8  Sum;
  UINTN  Index;

  Sum = 0;
  for (Index = 0; Index < Length; Index++) {
    Sum = (UINT8)(Sum + P[Index]);
  }

  return Sum;
}

STATIC
BOOLEAN
SameBytes (
  IN CONST UINT8  *A,
  IN CONST UINT8  *B,
  IN UINTN        Length
  )
{
  UINTN  Index;

  for (Index = 0; Index < Length; Index++) {
    if (A[Index] != B[Index]) {
      return FALSE;
    }
  }

  return TRUE;
}

STATIC
UINT64
Le (
  IN CONST UINT8  *P,
  IN UINTN        Bytes
  )
{
  UINT64  V;

  V = 0;
  while (Bytes > 0) {
    Bytes--;
    V = (V << 8) | P[Bytes];
  }

  return V;
}

/// The table must be something the firmware can read: not empty, bounded,
/// and below 4 GiB (PEI's identity map).
STATIC
ZERO_SMBIOS_STATUS
CheckTableLocation (
  IN  UINT64  Address,
  IN  UINT64  Length,
  OUT UINT64  *TableAddress,
  OUT UINTN   *TableLength
  )
{
  if ((Length == 0) || (Length > ZSHINT_SMBIOS_MAX_TABLE) ||
      (Address >= SMBIOS_TABLE_LIMIT) || (Length > SMBIOS_TABLE_LIMIT - Address))
  {
    return ZeroSmbiosTableLocation;
  }

  *TableAddress = Address;
  *TableLength  = (UINTN)Length;
  return ZeroSmbiosOk;
}

/// A "_SM3_" entry point at P with Available bytes left in the area.
STATIC
ZERO_SMBIOS_STATUS
CheckEntryPoint3 (
  IN  CONST UINT8  *P,
  IN  UINTN        Available,
  OUT UINT64       *TableAddress,
  OUT UINTN        *TableLength
  )
{
  UINTN  Length;

  if (Available < SMBIOS3_ENTRY_POINT_MIN) {
    return ZeroSmbiosEntryPointLength;
  }

  Length = P[6];
  if ((Length < SMBIOS3_ENTRY_POINT_MIN) || (Length > Available)) {
    return ZeroSmbiosEntryPointLength;
  }

  if (Sum8 (P, Length) != 0) {
    return ZeroSmbiosEntryPointChecksum;
  }

  // Structure table maximum size at 0x0C (UINT32), address at 0x10 (UINT64).
  return CheckTableLocation (Le (P + 0x10, 8), Le (P + 0x0C, 4), TableAddress, TableLength);
}

/// A "_SM_" (2.x) entry point at P, with its "_DMI_" intermediate anchor.
STATIC
ZERO_SMBIOS_STATUS
CheckEntryPoint2 (
  IN  CONST UINT8  *P,
  IN  UINTN        Available,
  OUT UINT64       *TableAddress,
  OUT UINTN        *TableLength
  )
{
  UINTN  Length;

  if (Available < SMBIOS2_ENTRY_POINT_SIZE) {
    return ZeroSmbiosEntryPointLength;
  }

  Length = P[5];
  if ((Length < SMBIOS2_ENTRY_POINT_MIN) || (Length > Available)) {
    return ZeroSmbiosEntryPointLength;
  }

  // Both checksums: the whole entry point, and the 15 bytes from "_DMI_".
  if ((Sum8 (P, Length) != 0) || !SameBytes (P + 0x10, mDmiAnchor, sizeof (mDmiAnchor)) ||
      (Sum8 (P + 0x10, 15) != 0))
  {
    return ZeroSmbiosEntryPointChecksum;
  }

  // Structure table length at 0x16 (UINT16), address at 0x18 (UINT32).
  return CheckTableLocation (Le (P + 0x18, 4), Le (P + 0x16, 2), TableAddress, TableLength);
}

ZERO_SMBIOS_STATUS
EFIAPI
ZeroSmbiosFindEntryPoint (
  IN  CONST VOID  *Area,
  IN  UINTN       AreaLength,
  OUT UINT64      *TableAddress,
  OUT UINTN       *TableLength
  )
{
  CONST UINT8         *P;
  UINTN               Offset;
  UINTN               Pass;
  CONST UINT8         *Anchor;
  UINTN               AnchorLength;
  ZERO_SMBIOS_STATUS  Status;
  ZERO_SMBIOS_STATUS  First;

  P     = (CONST UINT8 *)Area;
  First = ZeroSmbiosNoEntryPoint;
  if (P == NULL) {
    return First;
  }

  // Pass 0: "_SM3_" (64-bit, preferred); pass 1: "_SM_" (2.x).
  for (Pass = 0; Pass < 2; Pass++) {
    Anchor       = (Pass == 0) ? mSm3Anchor : mSmAnchor;
    AnchorLength = (Pass == 0) ? sizeof (mSm3Anchor) : sizeof (mSmAnchor);
    for (Offset = 0; Offset < AreaLength && AreaLength - Offset >= AnchorLength; Offset += 16) {
      if (!SameBytes (P + Offset, Anchor, AnchorLength)) {
        continue;
      }

      if (Pass == 0) {
        Status = CheckEntryPoint3 (P + Offset, AreaLength - Offset, TableAddress, TableLength);
      } else {
        Status = CheckEntryPoint2 (P + Offset, AreaLength - Offset, TableAddress, TableLength);
      }

      if (Status == ZeroSmbiosOk) {
        return Status;
      }

      if (First == ZeroSmbiosNoEntryPoint) {
        First = Status;
      }
    }
  }

  return First;
}

ZERO_SMBIOS_STATUS
EFIAPI
ZeroSmbiosFindHintText (
  IN  CONST VOID             *Table,
  IN  UINTN                  TableLength,
  OUT ZERO_HINT_TEXT_STATUS  *TextStatus,
  OUT CONST CHAR8            **Text,
  OUT UINTN                  *TextLength
  )
{
  CONST UINT8  *T;
  UINTN        Pos;
  UINTN        Strings;
  UINTN        End;
  UINTN        S;
  UINTN        E;
  UINTN        Index;
  UINT8        Type;
  UINT8        Length;
  UINT8        Count;
  UINTN        Found;
  UINTN        FirstText;
  UINTN        FirstLength;

  T           = (CONST UINT8 *)Table;
  *TextStatus = ZeroHintTextAbsent;
  *Text       = NULL;
  *TextLength = 0;
  Found       = 0;
  FirstText   = 0;
  FirstLength = 0;
  if (T == NULL) {
    TableLength = 0;
  }

  Pos = 0;
  while (Pos < TableLength) {
    if (TableLength - Pos < SMBIOS_STRUCTURE_HEADER) {
      return ZeroSmbiosStructureTruncated;
    }

    Type   = T[Pos];
    Length = T[Pos + 1];
    if (Length < SMBIOS_STRUCTURE_HEADER) {
      return ZeroSmbiosStructureLength;
    }

    if (Length > TableLength - Pos) {
      return ZeroSmbiosStructureTruncated;
    }

    //
    // The string set: NUL-terminated, non-empty strings, ended by one more
    // NUL ("\0\0" when there are none). Its end is the first double NUL.
    //
    Strings = Pos + Length;
    End     = Strings;
    for ( ; ;) {
      if (TableLength - End < 2) {
        return ZeroSmbiosStringsUnterminated;
      }

      if ((T[End] == 0) && (T[End + 1] == 0)) {
        break;
      }

      End++;
    }

    if (Type == ZSHINT_SMBIOS_TYPE_OEM_STRINGS) {
      if (Length < SMBIOS_OEM_STRINGS_MIN) {
        return ZeroSmbiosStructureLength;
      }

      //
      // Strings 1..Count (fewer when the set is shorter); T[End] is a NUL,
      // so every string scan below stops at End at the latest.
      //
      Count = T[Pos + 4];
      S     = Strings;
      for (Index = 0; Index < Count && T[S] != 0; Index++) {
        for (E = S; T[E] != 0; E++) {
        }

        if ((E - S >= ZSHINT_TEXT_PREFIX_LENGTH) && SameBytes (T + S, mTextPrefix, ZSHINT_TEXT_PREFIX_LENGTH)) {
          if (Found == 0) {
            FirstText   = S + ZSHINT_TEXT_PREFIX_LENGTH;
            FirstLength = E - FirstText;
          }

          Found++;
        }

        S = E + 1;
      }
    }

    if (Type == ZSHINT_SMBIOS_TYPE_END) {
      break;
    }

    Pos = End + 2;
  }

  // Only a table walked to its end gives a result.
  if (Found == 1) {
    *TextStatus = ZeroHintTextOk;
    *Text       = (CONST CHAR8 *)(T + FirstText);
    *TextLength = FirstLength;
  } else if (Found > 1) {
    *TextStatus = ZeroHintTextDuplicate;
  }

  return ZeroSmbiosOk;
}
