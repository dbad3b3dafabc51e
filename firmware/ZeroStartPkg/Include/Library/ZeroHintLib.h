/** @file
  ZeroHintLib: the zerostart pre-zeroed hint ABI (docs/hint-abi.md) for the
  firmware - validation in the spec's exact order with its error names, the
  CRC-32, encoding, and the range arithmetic the firmware needs to compute
  "hint intersected with memory the firmware provably never wrote".

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
