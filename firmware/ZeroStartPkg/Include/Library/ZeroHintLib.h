/** @file
  ZeroHintLib: the zerostart pre-zeroed hint ABI (docs/hint-abi.md) for the
  firmware - validation in the spec's exact order with its error names, the
  CRC-32, encoding, the text form (base64url decoding and the SMBIOS OEM
  string, with the SMBIOS entry point and structure table walk it needs),
  and the range arithmetic the firmware needs to compute "hint intersected
  with memory the firmware provably never wrote".

  The library is plain C without EDK2 dependencies so that the very same
  source is unit-tested on the host (build with -DZSHINT_HOST, see
  tests/firmware/unit). All ranges are inclusive [Start, Last] so that a range
  touching the top of the 64-bit address space is representable.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#ifndef ZERO_HINT_LIB_H_
#define ZERO_HINT_LIB_H_

#ifdef ZSHINT_HOST
  #include <stddef.h>
  #include <stdint.h>
typedef uint8_t   UINT8;
typedef uint16_t  UINT16;
typedef uint32_t  UINT32;
typedef uint64_t  UINT64;
typedef size_t    UINTN;
typedef uint8_t   BOOLEAN;
typedef void      VOID;
typedef char      CHAR8;
  #define TRUE        ((BOOLEAN)1)
  #define FALSE       ((BOOLEAN)0)
  #define CONST       const
  #define STATIC      static
  #define IN
  #define OUT
  #define OPTIONAL
  #define EFIAPI
  #define MAX_UINT64  UINT64_MAX
  #ifndef NULL
    #define NULL  ((void *)0)
  #endif
#else
  #include <Base.h>
#endif

#define ZSHINT_HEADER_SIZE          32
#define ZSHINT_ENTRY_SIZE           24
#define ZSHINT_VERSION              1
#define ZSHINT_MAX_ENTRIES          512
#define ZSHINT_MAX_SIZE             (ZSHINT_HEADER_SIZE + ZSHINT_ENTRY_SIZE * ZSHINT_MAX_ENTRIES)
#define ZSHINT_FLAG_SCRUB_REQUEST   0x1u
#define ZSHINT_ENTRY_FLAG_ZEROED    0x1u
#define ZSHINT_PAGE_SIZE            4096u
#define ZSHINT_PAGE_MASK            ((UINT64)ZSHINT_PAGE_SIZE - 1)
#define ZSHINT_CHECKSUM_OFFSET      0x18
#define ZSHINT_FW_CFG_FILE          "opt/org.zerostart/prezeroed"

//
// The text form (docs/hint-abi.md "Text form"): transports (d) kernel
// command line and (e) SMBIOS type 11 OEM string. The firmware reads (e).
//
#define ZSHINT_TEXT_PREFIX          "prezero.hint="
#define ZSHINT_TEXT_PREFIX_LENGTH   13
#define ZSHINT_TEXT_MAX_CHARS       1024
#define ZSHINT_TEXT_MAX_BYTES       768

//
// SMBIOS (DSP0134) as far as the hint needs it. QEMU serves the structure
// table as this fw_cfg file; cloud-hypervisor writes an entry point and the
// table into guest RAM in the BIOS area [0xF0000, 0x100000).
//
#define ZSHINT_SMBIOS_FW_CFG_FILE       "etc/smbios/smbios-tables"
#define ZSHINT_SMBIOS_AREA_BASE         0xF0000
#define ZSHINT_SMBIOS_AREA_SIZE         0x10000
#define ZSHINT_SMBIOS_TYPE_OEM_STRINGS  11
#define ZSHINT_SMBIOS_TYPE_END          127
/// Largest structure table the firmware walks (QEMU's and cloud-hypervisor's
/// are a few KiB even with a 1024-character OEM string).
#define ZSHINT_SMBIOS_MAX_TABLE         0x100000

///
/// Validation result. The order is the spec's check order; names are the
/// spec's error names (ZeroHintStatusName).
///
typedef enum {
  ZeroHintOk = 0,
  ZeroHintTruncated,
  ZeroHintBadMagic,
  ZeroHintBadVersion,
  ZeroHintBadHeaderSize,
  ZeroHintTooManyEntries,
  ZeroHintReservedNonZero,
  ZeroHintBadLength,
  ZeroHintBadChecksum,
  ZeroHintBadEntryFlags,
  ZeroHintBadPageShift,
  ZeroHintMisaligned,
  ZeroHintEmptyRange,
  ZeroHintOverflow,
  ZeroHintUnsorted,
  ZeroHintOverlapping,
  ZeroHintOutOfRam,
  ZeroHintStatusCount
} ZERO_HINT_STATUS;

///
/// Result of finding and decoding the text form. The order and the names
/// are the ABI's ("Text form", table "Decoding"; C ZSHINT_TEXT_E_*): the
/// first failure wins, and only ZeroHintTextOk goes on to ZeroHintValidate
/// (with an exact length).
///
typedef enum {
  ZeroHintTextOk = 0,
  ZeroHintTextAbsent,          ///< no hint on this transport: not an error
  ZeroHintTextDuplicate,       ///< more than one OEM string with the prefix
  ZeroHintTextTooLong,         ///< more than ZSHINT_TEXT_MAX_CHARS characters
  ZeroHintTextBadChar,         ///< outside base64url, '=' included; has an index
  ZeroHintTextBadLength,       ///< length mod 4 == 1
  ZeroHintTextNonCanonical,    ///< the last character's unused bits are set
  ZeroHintTextStatusCount
} ZERO_HINT_TEXT_STATUS;

///
/// Why an SMBIOS entry point or structure table was refused. Not part of
/// the hint ABI: a table the firmware cannot walk safely carries no hint it
/// could trust, so it is refused as a whole (one warning, no hint).
///
typedef enum {
  ZeroSmbiosOk = 0,
  ZeroSmbiosNoEntryPoint,        ///< no "_SM3_" / "_SM_" anchor: no SMBIOS (not an error)
  ZeroSmbiosEntryPointLength,    ///< the entry point's length is too small or runs past the area
  ZeroSmbiosEntryPointChecksum,  ///< entry point (or "_DMI_" intermediate) checksum wrong
  ZeroSmbiosTableLocation,       ///< table empty, larger than ZSHINT_SMBIOS_MAX_TABLE or not below 4 GiB
  ZeroSmbiosStructureTruncated,  ///< a structure's header or formatted area runs past the table
  ZeroSmbiosStructureLength,     ///< formatted length < 4 (type 11: < 5)
  ZeroSmbiosStringsUnterminated, ///< a string set without its double NUL before the table's end
  ZeroSmbiosStatusCount
} ZERO_SMBIOS_STATUS;

/// One guest-physical range, both ends inclusive.
typedef struct {
  UINT64    Start;
  UINT64    Last;
} ZERO_RANGE;

/// A decoded entry.
typedef struct {
  UINT64    Start;
  UINT64    Length;
  UINT32    Flags;
  UINT8     PageShift;
} ZERO_HINT_ENTRY;

/**
  The spec's name of a status ("Truncated", "BadMagic", ...; "Ok" for success).
**/
CONST CHAR8 *
EFIAPI
ZeroHintStatusName (
  IN ZERO_HINT_STATUS  Status
  );

/**
  CRC-32 (IEEE, reflected, zlib's crc32) of Length bytes, continuing Crc
  (start with 0).
**/
UINT32
EFIAPI
ZeroHintCrc32Update (
  IN UINT32      Crc,
  IN CONST VOID  *Data,
  IN UINTN       Length
  );

/**
  Validate a hint blob exactly as docs/hint-abi.md says (steps 1-9; OutOfRam
  is not checked: the firmware clips to RAM instead).

  @param[in]  Blob         The bytes.
  @param[in]  Available    Number of bytes available at Blob.
  @param[in]  TransportLength  TRUE when Available is also a transport length
                           that must be exact (fw_cfg file size, setup_data
                           len): extra bytes are then BadLength. FALSE when the
                           size comes from the header (EFI table).
  @param[out] EntryCount   entry_count on success (optional).
  @param[out] Flags        header flags on success (optional).
  @param[out] BadEntry     index of the failing entry for per-entry errors
                           (optional).
**/
ZERO_HINT_STATUS
EFIAPI
ZeroHintValidate (
  IN  CONST VOID  *Blob,
  IN  UINTN       Available,
  IN  BOOLEAN     TransportLength,
  OUT UINT32      *EntryCount OPTIONAL,
  OUT UINT32      *Flags OPTIONAL,
  OUT UINT32      *BadEntry OPTIONAL
  );

/**
  Decode entry Index of a validated blob.
**/
VOID
EFIAPI
ZeroHintGetEntry (
  IN  CONST VOID       *Blob,
  IN  UINT32           Index,
  OUT ZERO_HINT_ENTRY  *Entry
  );

/**
  The smallest page_shift of the entries of a validated blob that overlap
  Range (12 if none does; page_shift is informational).
**/
UINT8
EFIAPI
ZeroHintPageShiftFor (
  IN CONST VOID        *Blob,
  IN UINT32            EntryCount,
  IN CONST ZERO_RANGE  *Range
  );

/**
  Encode a zero hint (SCRUB_REQUEST clear, every entry ZEROED) of Count
  normalized, page-aligned ranges, page_shift taken from PageShiftBlob (a
  validated hint, may be NULL → 12). Returns the blob size, or 0 when Out is
  too small, Count exceeds ZSHINT_MAX_ENTRIES or a range is not page aligned.
**/
UINTN
EFIAPI
ZeroHintEncode (
  IN  CONST ZERO_RANGE  *Ranges,
  IN  UINTN             Count,
  IN  CONST VOID        *PageShiftBlob OPTIONAL,
  IN  UINT32            PageShiftBlobCount,
  OUT VOID              *Out,
  IN  UINTN             OutSize
  );

/**
  Step 10 of the validation for a consumer that knows the RAM map: every
  entry of a validated blob must lie wholly inside Ram (normalized).
  Returns ZeroHintOk or ZeroHintOutOfRam with *BadEntry set. (The firmware
  itself clips to RAM instead; the test application and the unit tests use
  this.)
**/
ZERO_HINT_STATUS
EFIAPI
ZeroHintCheckRam (
  IN  CONST VOID        *Blob,
  IN  UINT32            EntryCount,
  IN  CONST ZERO_RANGE  *Ram,
  IN  UINTN             RamCount,
  OUT UINT32            *BadEntry OPTIONAL
  );

/**
  The ABI's name of a text result: "ok", "Absent", "Duplicate", "TextTooLong",
  "TextBadChar", "TextBadLength", "TextNonCanonical" (as in text.json).
**/
CONST CHAR8 *
EFIAPI
ZeroHintTextStatusName (
  IN ZERO_HINT_TEXT_STATUS  Status
  );

/**
  Decode the text form of a hint (the characters after "prezero.hint="):
  unpadded, canonical base64url, checked in the ABI's order - TextTooLong,
  then TextBadChar (the first bad character's index), then TextBadLength,
  then TextNonCanonical - so that every consumer names the same error for
  the same text. Characters are bytes: a non-ASCII byte is a bad character.
  The bytes are not validated here; the caller validates them with
  ZeroHintValidate (..., TransportLength = TRUE), because the text gives the
  exact length (an empty text is 0 bytes: Truncated).

  @param[in]  Text        The characters (need not be NUL-terminated; may
                          be NULL when TextLength is 0).
  @param[in]  TextLength  Number of characters.
  @param[out] Out         Decoded bytes; ZSHINT_TEXT_MAX_BYTES are always enough.
  @param[in]  OutSize     Size of Out. A text that decodes to more than
                          OutSize bytes is reported as ZeroHintTextTooLong.
  @param[out] OutLength   Decoded length on ZeroHintTextOk (floor(L*3/4)).
  @param[out] BadIndex    For ZeroHintTextBadChar the zero-based index of the
                          first bad character, else 0 (optional).

  @return ZeroHintTextOk or the first text error.
**/
ZERO_HINT_TEXT_STATUS
EFIAPI
ZeroHintTextDecode (
  IN  CONST CHAR8  *Text OPTIONAL,
  IN  UINTN        TextLength,
  OUT UINT8        *Out,
  IN  UINTN        OutSize,
  OUT UINTN        *OutLength,
  OUT UINT32       *BadIndex OPTIONAL
  );

/**
  The name of an SMBIOS refusal ("Ok", "NoEntryPoint", "EntryPointLength",
  "EntryPointChecksum", "TableLocation", "StructureTruncated",
  "StructureLength", "StringsUnterminated"), for the firmware's log line.
**/
CONST CHAR8 *
EFIAPI
ZeroSmbiosStatusName (
  IN ZERO_SMBIOS_STATUS  Status
  );

/**
  Find the SMBIOS entry point in the BIOS area (cloud-hypervisor writes it
  at 0xF0000) and return where its structure table is. The area is scanned
  on 16-byte boundaries, first for a 64-bit "_SM3_" entry point (preferred,
  as DSP0134 says when both exist), then for a 2.x "_SM_" one with its
  "_DMI_" intermediate anchor. An anchor counts only with a correct length
  and checksum, so stray bytes in a ROM image are not mistaken for one; the
  table must be non-empty, at most ZSHINT_SMBIOS_MAX_TABLE bytes and end at
  or below 4 GiB (the firmware reads it through PEI's identity map, which
  covers the first 4 GiB).

  For a 3.0 entry point TableLength is the table's maximum size: the walk
  stops earlier at the end-of-table structure (type 127).

  @param[in]  Area          A copy of (or pointer to) the area.
  @param[in]  AreaLength    Its size (ZSHINT_SMBIOS_AREA_SIZE in firmware).
  @param[out] TableAddress  Guest-physical address of the structure table.
  @param[out] TableLength   Its length in bytes.

  @retval ZeroSmbiosOk            Found; the outputs are set.
  @retval ZeroSmbiosNoEntryPoint  No anchor at all: the VMM gave no SMBIOS.
  @retval other                   Anchors were found but none was usable; the
                                  first anchor's problem is returned.
**/
ZERO_SMBIOS_STATUS
EFIAPI
ZeroSmbiosFindEntryPoint (
  IN  CONST VOID  *Area,
  IN  UINTN       AreaLength,
  OUT UINT64      *TableAddress,
  OUT UINTN       *TableLength
  );

/**
  Walk a packed SMBIOS structure table (every structure: its formatted area
  of Length bytes, then a string set ending in a double NUL) and find the
  hint's OEM string: a string of a type 11 structure that starts with
  "prezero.hint=" (exact, case-sensitive, nothing stripped). A type 11
  structure's strings are 1..Count (its byte at offset 4), as Linux's DMI
  code reads them. The walk stops at the end-of-table structure (type 127)
  or at the end of the table and never reads past TableLength. The whole
  table is checked before any result is given, and a malformed one is
  refused as a whole: a hint found in a table that cannot be walked safely
  is not trusted.

  @param[in]  Table        The structure table.
  @param[in]  TableLength  Its length in bytes.
  @param[out] TextStatus   ZeroHintTextOk (exactly one such string),
                           ZeroHintTextAbsent (none) or ZeroHintTextDuplicate
                           (two or more, across all type 11 structures, even
                           when equal); set only when the table is well formed.
  @param[out] Text         On ZeroHintTextOk the text after the prefix (inside
                           Table, not NUL-terminated).
  @param[out] TextLength   Its length in characters.

  @retval ZeroSmbiosOk     The table is well formed; see TextStatus.
  @retval other            The table is malformed; TextStatus is Absent.
**/
ZERO_SMBIOS_STATUS
EFIAPI
ZeroSmbiosFindHintText (
  IN  CONST VOID             *Table,
  IN  UINTN                  TableLength,
  OUT ZERO_HINT_TEXT_STATUS  *TextStatus,
  OUT CONST CHAR8            **Text,
  OUT UINTN                  *TextLength
  );

/**
  Make a range from base and length. Returns FALSE for Length 0. If the end
  passes 2^64: Clamp TRUE ends the range at MAX_UINT64 (right for "dirty"
  sets, where bigger is safer), Clamp FALSE returns FALSE.
**/
BOOLEAN
EFIAPI
ZeroRangeMake (
  IN  UINT64      Base,
  IN  UINT64      Length,
  IN  BOOLEAN     Clamp,
  OUT ZERO_RANGE  *Range
  );

/**
  Sort by Start and merge overlapping and adjacent ranges, in place.
  Returns the new count.
**/
UINTN
EFIAPI
ZeroRangesNormalize (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count
  );

/**
  Out = A intersect B (both normalized). Writes at most Capacity ranges; the
  result is then a subset of the true intersection. Returns FALSE if it was
  cut short (so a caller publishing "zero" stays safe either way).
**/
BOOLEAN
EFIAPI
ZeroRangesIntersect (
  IN  CONST ZERO_RANGE  *A,
  IN  UINTN             CountA,
  IN  CONST ZERO_RANGE  *B,
  IN  UINTN             CountB,
  OUT ZERO_RANGE        *Out,
  IN  UINTN             Capacity,
  OUT UINTN             *CountOut
  );

/**
  Out = A minus B (both normalized). Same truncation rule as Intersect.
**/
BOOLEAN
EFIAPI
ZeroRangesSubtract (
  IN  CONST ZERO_RANGE  *A,
  IN  UINTN             CountA,
  IN  CONST ZERO_RANGE  *B,
  IN  UINTN             CountB,
  OUT ZERO_RANGE        *Out,
  IN  UINTN             Capacity,
  OUT UINTN             *CountOut
  );

/**
  Shrink every range to whole 4 KiB pages (start rounded up, end rounded
  down), dropping ranges left empty. Keeps a normalized array normalized.
  Returns the new count.
**/
UINTN
EFIAPI
ZeroRangesAlignInward (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count
  );

/**
  Grow every range to whole 4 KiB pages (for dirty sets), then normalize.
  Returns the new count.
**/
UINTN
EFIAPI
ZeroRangesAlignOutward (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count
  );

/**
  Total bytes in the ranges, saturating at MAX_UINT64.
**/
UINT64
EFIAPI
ZeroRangesTotal (
  IN CONST ZERO_RANGE  *Ranges,
  IN UINTN             Count
  );

/**
  Remove Bytes (a multiple of 4 KiB) from the highest addresses at or below
  Limit of a normalized, page-aligned array, walking downward. Used to leave
  memory for the firmware and OS loader. A range straddling Limit may need
  one more slot; without it (Count == Capacity) the part above Limit is
  dropped too (removing more is always safe). Returns the new count; *Removed
  gets the bytes removed at or below Limit.
**/
UINTN
EFIAPI
ZeroRangesTrimTop (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count,
  IN     UINTN       Capacity,
  IN     UINT64      Limit,
  IN     UINT64      Bytes,
  OUT    UINT64      *Removed
  );

#endif
