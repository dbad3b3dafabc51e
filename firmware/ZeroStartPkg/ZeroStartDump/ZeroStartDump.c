/** @file
  ZeroStartDump: the test application for ZeroStartPkg. Booted as the
  default boot loader (\EFI\BOOT\BOOTX64.EFI), it finds the zerostart EFI
  configuration table, re-validates it, dumps it to the console and checks
  what a consumer relies on:

    - the blob validates (docs/hint-abi.md) and is a zero hint;
    - every range is still claimed memory (EfiLoaderData) in the memory map;
    - no range covers the table itself or this application's image;
    - every byte of every range reads zero (the verify mode: a firmware
      write that escaped the claim shows up here);

  and, for the scrub test, counts pages outside the table that still hold
  the test's fill pattern (proving the fill happened). Every line starts
  with "ZSDUMP:"; the last is "ZSDUMP: RESULT PASS|FAIL|ABSENT". Then the
  machine powers off - unless the fw_cfg file opt/org.zerostart/test/reboot
  exists and the checks passed: then it plays a guest OS, writes the fill
  pattern into every published page and warm-resets, so the next boot shows
  whether the firmware (wrongly) publishes the same, now dirty, memory.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <Uefi.h>
#include <Guid/ZeroStartHint.h>
#include <Internal/ZeroStartTestPattern.h>
#include <Protocol/LoadedImage.h>
#include <Library/BaseLib.h>
#include <Library/BaseMemoryLib.h>
#include <Library/IoLib.h>
#include <Library/MemoryAllocationLib.h>
#include <Library/UefiApplicationEntryPoint.h>
#include <Library/UefiBootServicesTableLib.h>
#include <Library/UefiLib.h>
#include <Library/UefiRuntimeServicesTableLib.h>
#include <Library/ZeroHintLib.h>

#define FW_CFG_PORT_SELECTOR  0x510
#define FW_CFG_PORT_DATA      0x511
#define FW_CFG_SIGNATURE      0x0000
#define FW_CFG_FILE_DIR       0x0019

STATIC
UINT32
FwCfgReadBe32 (
  VOID
  )
{
  UINT32  Value;
  UINTN   Index;

  Value = 0;
  for (Index = 0; Index < 4; Index++) {
    Value = (Value << 8) | IoRead8 (FW_CFG_PORT_DATA);
  }

  return Value;
}

/**
  Whether QEMU's fw_cfg has a file of this name (port I/O, no library: the
  test must not depend on the firmware's own fw_cfg code).
**/
STATIC
BOOLEAN
FwCfgHasFile (
  IN CONST CHAR8  *Name
  )
{
  UINT32  Count;
  UINT32  Index;
  UINTN   Byte;
  CHAR8   FileName[56];

  IoWrite16 (FW_CFG_PORT_SELECTOR, FW_CFG_SIGNATURE);
  if (FwCfgReadBe32 () != 0x51454d55) {
    // "QEMU"
    return FALSE;
  }

  IoWrite16 (FW_CFG_PORT_SELECTOR, FW_CFG_FILE_DIR);
  Count = FwCfgReadBe32 ();
  for (Index = 0; Index < Count && Index < 4096; Index++) {
    FwCfgReadBe32 ();      // size
    FwCfgReadBe32 ();      // select, reserved
    for (Byte = 0; Byte < sizeof (FileName); Byte++) {
      FileName[Byte] = (CHAR8)IoRead8 (FW_CFG_PORT_DATA);
    }

    FileName[sizeof (FileName) - 1] = 0;
    if (AsciiStrCmp (FileName, Name) == 0) {
      return TRUE;
    }
  }

  return FALSE;
}

STATIC
BOOLEAN
Overlaps (
  IN UINT64             Start,
  IN UINT64             Last,
  IN CONST ZERO_RANGE   *Ranges,
  IN UINTN              Count
  )
{
  UINTN  Index;

  for (Index = 0; Index < Count; Index++) {
    if ((Ranges[Index].Start <= Last) && (Start <= Ranges[Index].Last)) {
      return TRUE;
    }
  }

  return FALSE;
}

STATIC
EFI_MEMORY_DESCRIPTOR *
GetMap (
  OUT UINTN  *MapSize,
  OUT UINTN  *DescSize
  )
{
  EFI_STATUS             Status;
  EFI_MEMORY_DESCRIPTOR  *Map;
  UINTN                  Key;
  UINT32                 Version;

  *MapSize = 0;
  Status   = gBS->GetMemoryMap (MapSize, NULL, &Key, DescSize, &Version);
  while (Status == EFI_BUFFER_TOO_SMALL) {
    *MapSize += 16 * sizeof (EFI_MEMORY_DESCRIPTOR);
    Map       = AllocatePool (*MapSize);
    if (Map == NULL) {
      return NULL;
    }

    Status = gBS->GetMemoryMap (MapSize, Map, &Key, DescSize, &Version);
    if (!EFI_ERROR (Status)) {
      return Map;
    }

    FreePool (Map);
  }

  return NULL;
}

EFI_STATUS
EFIAPI
ZeroStartDumpMain (
  IN EFI_HANDLE        ImageHandle,
  IN EFI_SYSTEM_TABLE  *SystemTable
  )
{
  UINT8                      *Table;
  UINT32                     Count;
  UINT32                     Flags;
  UINT32                     Bad;
  UINTN                      Size;
  ZERO_HINT_STATUS           Status;
  ZERO_HINT_ENTRY            Entry;
  ZERO_RANGE                 *Ranges;
  UINT32                     Index;
  UINTN                      Failures;
  EFI_LOADED_IMAGE_PROTOCOL  *Loaded;
  EFI_MEMORY_DESCRIPTOR      *Map;
  EFI_MEMORY_DESCRIPTOR      *Desc;
  UINTN                      MapSize;
  UINTN                      DescSize;
  UINTN                      Offset;
  UINT64                     Covered;
  UINT64                     Total;
  UINT64                     Page;
  UINT64                     DirtyPages;
  UINT64                     PatternPages;
  UINT64                     ConvPages;
  UINT64                     Or;
  UINTN                      Word;
  CONST volatile UINT64      *P;

  Failures = 0;
  Table    = NULL;
  if (EFI_ERROR (EfiGetSystemConfigurationTable (&gZeroStartHintTableGuid, (VOID **)&Table)) || (Table == NULL)) {
    Print (L"ZSDUMP: table absent\n");
    Print (L"ZSDUMP: RESULT ABSENT\n");
    goto Off;
  }

  Count = *(UINT32 *)(Table + 0x10);
  Size  = (Count <= ZSHINT_MAX_ENTRIES) ? ZSHINT_HEADER_SIZE + Count * ZSHINT_ENTRY_SIZE : ZSHINT_HEADER_SIZE;
  Status = ZeroHintValidate (Table, Size, FALSE, &Count, &Flags, &Bad);
  Print (L"ZSDUMP: table at 0x%lx size %u status %a\n", (UINT64)(UINTN)Table, (UINT32)Size, ZeroHintStatusName (Status));
  if (Status != ZeroHintOk) {
    Print (L"ZSDUMP: FAIL invalid table (entry %u)\n", Bad);
    Print (L"ZSDUMP: RESULT FAIL\n");
    goto Off;
  }

  if ((Flags & ZSHINT_FLAG_SCRUB_REQUEST) != 0) {
    Print (L"ZSDUMP: FAIL table is a scrub request\n");
    Failures++;
  }

  Ranges = AllocatePool ((Count + 1) * sizeof (ZERO_RANGE));
  if (Ranges == NULL) {
    Print (L"ZSDUMP: RESULT FAIL out of memory\n");
    goto Off;
  }

  Total = 0;
  for (Index = 0; Index < Count; Index++) {
    ZeroHintGetEntry (Table, Index, &Entry);
    ZeroRangeMake (Entry.Start, Entry.Length, FALSE, &Ranges[Index]);
    Total += Entry.Length;
    Print (L"ZSDUMP: range %u 0x%lx +0x%lx shift %u\n", Index, Entry.Start, Entry.Length, Entry.PageShift);
  }

  Print (L"ZSDUMP: ranges %u bytes %lu\n", Count, Total);

  // The blob and this image must not be inside the table's ranges.
  if (Overlaps ((UINTN)Table, (UINTN)Table + Size - 1, Ranges, Count)) {
    Print (L"ZSDUMP: FAIL table blob inside its ranges\n");
    Failures++;
  }

  if (!EFI_ERROR (gBS->HandleProtocol (ImageHandle, &gEfiLoadedImageProtocolGuid, (VOID **)&Loaded))) {
    Print (L"ZSDUMP: image 0x%lx +0x%lx\n", (UINT64)(UINTN)Loaded->ImageBase, Loaded->ImageSize);
    if (Overlaps ((UINTN)Loaded->ImageBase, (UINTN)Loaded->ImageBase + Loaded->ImageSize - 1, Ranges, Count)) {
      Print (L"ZSDUMP: FAIL application image inside the ranges\n");
      Failures++;
    }
  }

  if (Overlaps ((UINTN)Ranges, (UINTN)Ranges + (Count + 1) * sizeof (ZERO_RANGE) - 1, Ranges, Count)) {
    Print (L"ZSDUMP: FAIL application pool inside the ranges\n");
    Failures++;
  }

  // Every byte of every range must still be claimed memory, i.e. not
  // allocatable by anyone else since the firmware published it.
  Map = GetMap (&MapSize, &DescSize);
  if (Map == NULL) {
    Print (L"ZSDUMP: RESULT FAIL no memory map\n");
    goto Off;
  }

  for (Index = 0; Index < Count; Index++) {
    Covered = 0;
    for (Offset = 0; Offset + DescSize <= MapSize; Offset += DescSize) {
      UINT64  S;
      UINT64  L;

      Desc = (EFI_MEMORY_DESCRIPTOR *)((UINT8 *)Map + Offset);
      if (Desc->Type != ZEROSTART_CLAIM_MEMORY_TYPE) {
        continue;
      }

      S = MAX (Desc->PhysicalStart, Ranges[Index].Start);
      L = MIN (Desc->PhysicalStart + EFI_PAGES_TO_SIZE (Desc->NumberOfPages) - 1, Ranges[Index].Last);
      if (S <= L) {
        Covered += L - S + 1;
      }
    }

    if (Covered != Ranges[Index].Last - Ranges[Index].Start + 1) {
      Print (L"ZSDUMP: FAIL range %u only 0x%lx bytes are claimed memory\n", Index, Covered);
      Failures++;
    }
  }

  // The verify mode: every byte reads zero.
  DirtyPages = 0;
  for (Index = 0; Index < Count; Index++) {
    for (Page = Ranges[Index].Start; Page <= Ranges[Index].Last && Page >= Ranges[Index].Start; Page += EFI_PAGE_SIZE) {
      P  = (CONST volatile UINT64 *)(UINTN)Page;
      Or = 0;
      for (Word = 0; Word < EFI_PAGE_SIZE / sizeof (UINT64); Word += 4) {
        Or |= P[Word] | P[Word + 1] | P[Word + 2] | P[Word + 3];
      }

      if (Or != 0) {
        if (DirtyPages < 8) {
          Print (L"ZSDUMP: FAIL non-zero page 0x%lx (first qword 0x%lx)\n", Page, P[0]);
        }

        DirtyPages++;
      }

      if (Page + EFI_PAGE_SIZE == 0) {
        break;
      }
    }
  }

  Print (L"ZSDUMP: non-zero pages in ranges %lu\n", DirtyPages);
  if (DirtyPages != 0) {
    Failures++;
  }

  // Pages of free memory outside the table that still carry the fill
  // pattern: shows that the scrub test's fill reached guest RAM.
  PatternPages = 0;
  ConvPages    = 0;
  for (Offset = 0; Offset + DescSize <= MapSize; Offset += DescSize) {
    Desc = (EFI_MEMORY_DESCRIPTOR *)((UINT8 *)Map + Offset);
    if (Desc->Type != EfiConventionalMemory) {
      continue;
    }

    for (Page = 0; Page < Desc->NumberOfPages; Page++) {
      P = (CONST volatile UINT64 *)(UINTN)(Desc->PhysicalStart + EFI_PAGES_TO_SIZE (Page));
      ConvPages++;
      if ((P[0] == FILL_PATTERN) && (P[EFI_PAGE_SIZE / sizeof (UINT64) - 1] == FILL_PATTERN)) {
        PatternPages++;
      }
    }
  }

  Print (L"ZSDUMP: free pages %lu with fill pattern %lu\n", ConvPages, PatternPages);
  Print (L"ZSDUMP: RESULT %a failures %u\n", Failures == 0 ? "PASS" : "FAIL", (UINT32)Failures);
  if ((Failures == 0) && FwCfgHasFile ("opt/org.zerostart/test/reboot")) {
    for (Index = 0; Index < Count; Index++) {
      for (Page = Ranges[Index].Start; Page <= Ranges[Index].Last && Page >= Ranges[Index].Start; Page += EFI_PAGE_SIZE) {
        *(volatile UINT64 *)(UINTN)Page = FILL_PATTERN;
        if (Page + EFI_PAGE_SIZE == 0) {
          break;
        }
      }
    }

    Print (L"ZSDUMP: dirtied every published page; warm reset\n");
    gRT->ResetSystem (EfiResetWarm, EFI_SUCCESS, 0, NULL);
  }

Off:
  gRT->ResetSystem (EfiResetShutdown, EFI_SUCCESS, 0, NULL);
  return EFI_SUCCESS;
}
