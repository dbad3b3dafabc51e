/** @file
  GUIDs and the PEI-to-DXE handoff of ZeroStartPkg.

  ZEROSTART_HINT_TABLE_GUID is the ABI's EFI configuration table GUID
  (docs/hint-abi.md, transport (c)). The claim HOB is internal to this
  package: ZeroStartPei builds it, ZeroStartDxe consumes it.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#ifndef ZEROSTART_HINT_GUID_H_
#define ZEROSTART_HINT_GUID_H_

#include <Library/ZeroHintLib.h>

#define ZEROSTART_HINT_TABLE_GUID \
  { 0x225103f7, 0xa0ec, 0x4bf9, { 0x84, 0x2b, 0x06, 0x04, 0x63, 0xcf, 0x66, 0x4e } }

#define ZEROSTART_CLAIM_HOB_GUID \
  { 0x7b52a27d, 0x87a5, 0x43b4, { 0xb6, 0x28, 0x49, 0xb5, 0x7c, 0x52, 0x12, 0xfe } }

extern EFI_GUID  gZeroStartHintTableGuid;
extern EFI_GUID  gZeroStartClaimHobGuid;

#define ZEROSTART_CLAIM_HOB_VERSION  1

///
/// The memory type of the claimed ranges. The claim keeps every other
/// firmware component and the OS loader off these pages until
/// ExitBootServices; after it the OS treats EfiLoaderData as ordinary RAM
/// (unlike EfiBootServicesData, which Linux x86 keeps reserved until late
/// boot).
///
#define ZEROSTART_CLAIM_MEMORY_TYPE  EfiLoaderData

///
/// GUID HOB data: this header, then ZERO_RANGE Claims[ClaimCount] (normalized,
/// page aligned, also described by memory allocation HOBs of
/// ZEROSTART_CLAIM_MEMORY_TYPE), then the validated hint blob (HintSize
/// bytes, from fw_cfg or decoded from the SMBIOS OEM string; kept for the
/// entries' page_shift).
///
typedef struct {
  UINT32    Version;
  UINT32    HintFlags;
  UINT32    HintEntryCount;
  UINT32    ClaimCount;
  UINT32    HintSize;
  UINT32    Reserved;
  UINT64    PeiNanoseconds;
  UINT64    HintBytes;
  UINT64    ReservedBytes;
  UINT64    ClaimedBytes;
} ZEROSTART_CLAIM_HOB;

#endif
