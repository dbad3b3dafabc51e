/** @file
  ZeroStartPei: read the zerostart hint at the end of PEI and claim the
  hinted memory the firmware has provably not written yet.

  Where the hint comes from, in this order (docs/hint-abi.md "Transports"):
  the fw_cfg file opt/org.zerostart/prezeroed (transport (b), the binary
  hint; the only one that may carry a scrub request), else the text form in
  an SMBIOS type 11 OEM string "prezero.hint=" (transport (e), for VMMs that
  have SMBIOS but no fw_cfg file, e.g. a cloud-hypervisor build without its
  fw_cfg feature). SMBIOS is found in QEMU's fw_cfg file
  etc/smbios/smbios-tables (QEMU with OVMF keeps SMBIOS out of guest RAM;
  OVMF's DXE installs it later) or through the entry point in the BIOS area
  at 0xF0000, where cloud-hypervisor writes it. Whatever the source, the
  bytes then take one path: validation, confidential-guest refusal, claim,
  first-boot marker, EFI table.

  Why PEI, and why a claim: the DXE core reuses freed pages and allocates
  pages for itself (images, pool) without going through gBS, so no DXE
  driver can prove afterwards that a page was never handed out. At the end
  of PEI the whole history of memory use is still on record: PEI allocates
  only inside the PHIT range [EfiMemoryBottom, EfiMemoryTop) and describes
  everything else it placed in RAM with memory allocation or firmware volume
  HOBs; SEC's page tables, temporary RAM and the decompressed PEI/DXE FVs
  (OVMF's MEMFD) lie below ZEROSTART_FLOOR. So

    claim = (hint ∩ tested system memory) − PHIT − every allocation HOB
            − every FV HOB − [0, ZEROSTART_FLOOR) − a reserve

  is memory no firmware code has touched. Publishing each claimed range as a
  memory allocation HOB of ZEROSTART_CLAIM_MEMORY_TYPE makes the DXE core
  build its memory map with those pages already allocated, so no DXE
  component and no OS loader can be handed them (and so write them) until
  ExitBootServices. ZeroStartDxe publishes them (after scrubbing them for a
  scrub request). The reserve - the highest claimable memory below 4 GiB,
  directly below the PHIT range where the DXE core allocates top-down - is
  left to DXE and the OS loader.

  The hint is only true for the guest's first boot: after a warm reset RAM
  keeps the previous boot's data while fw_cfg or SMBIOS still offers the
  hint. A
  reserved marker page (ZEROSTART_MARKER_ADDRESS) detects that and the hint
  is rejected as "Stale".

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <PiPei.h>
#include <Guid/ZeroStartHint.h>
#include <Ppi/EndOfPeiPhase.h>
#include <Library/BaseLib.h>
#include <Library/BaseMemoryLib.h>
#include <Library/DebugLib.h>
#include <Library/HobLib.h>
#include <Library/MemoryAllocationLib.h>
#include <Library/PcdLib.h>
#include <Library/PeimEntryPoint.h>
#include <Library/PeiServicesLib.h>
#include <Library/QemuFwCfgLib.h>
#include <Library/TimerLib.h>
#include <Library/ZeroHintLib.h>
#include <Internal/ZeroStartTime.h>

/// Nothing below this address is ever claimed: legacy low memory, OVMF's
/// MEMFD (SEC page tables, temporary RAM, decompressed PEIFV/DXEFV at
/// 8 MiB..~24 MiB) and the kernel's default load address area.
#define ZEROSTART_FLOOR  SIZE_32MB

/// The reset marker: one reserved page below the floor and above OVMF's
/// MEMFD. A hint promises zero memory when the guest first runs; after a
/// warm reset the guest's RAM keeps whatever the previous boot wrote, while
/// fw_cfg or SMBIOS still offers the same hint. The first boot that uses a hint writes
/// the marker into this page and reserves it (EfiReservedMemoryType, so the
/// OS leaves it alone); a boot that finds the marker knows its RAM is not
/// fresh and rejects the hint ("Stale"). Fresh guest RAM never holds it (a
/// scrub request's garbage RAM could only by a 2^-128 chance, and then the
/// hint is merely dropped).
#define ZEROSTART_MARKER_ADDRESS  0x1F00000ULL
#define ZEROSTART_MARKER_0        0x4445544f4f42535aULL   // "ZSBOOTED"
#define ZEROSTART_MARKER_1        0x2172656b72616d21ULL   // "!marker!"

/// Memory left to DXE and the OS loader: 256 MiB plus 1/16 of RAM.
#define ZEROSTART_RESERVE_BASE   SIZE_256MB
#define ZEROSTART_RESERVE_SHIFT  4

/// Where a hint or an SMBIOS table came from, for log lines.
#define ZEROSTART_SOURCE_FW_CFG        "fw_cfg " ZSHINT_FW_CFG_FILE
#define ZEROSTART_SMBIOS_FWCFG         "fw_cfg " ZSHINT_SMBIOS_FW_CFG_FILE
#define ZEROSTART_SMBIOS_AREA          "entry point in the BIOS area at 0xF0000"
#define ZEROSTART_SOURCE_SMBIOS_FWCFG  "SMBIOS OEM string, " ZEROSTART_SMBIOS_FWCFG
#define ZEROSTART_SOURCE_SMBIOS_AREA   "SMBIOS OEM string, " ZEROSTART_SMBIOS_AREA

/**
  Find the SMBIOS structure table: QEMU's fw_cfg file first (with OVMF, QEMU
  puts no SMBIOS into guest RAM; what lies at 0xF0000 there is firmware),
  else the entry point in the BIOS area [0xF0000, 0x100000), where
  cloud-hypervisor writes the entry point and the table behind it (not in a
  confidential guest).

  @param[out] Table        The structure table (a PEI copy of the fw_cfg file,
                           or the table in guest RAM).
  @param[out] TableLength  Its length.
  @param[out] InFwCfg      TRUE when the table came from fw_cfg (for log lines).

  @retval ZeroSmbiosOk            Found.
  @retval ZeroSmbiosNoEntryPoint  The VMM gave no SMBIOS (or PEI memory ran out,
                                  with its own warning).
  @retval other                   Refused (entry point or table location).
**/
STATIC
ZERO_SMBIOS_STATUS
LocateSmbios (
  OUT CONST UINT8  **Table,
  OUT UINTN        *TableLength,
  OUT BOOLEAN      *InFwCfg
  )
{
  FIRMWARE_CONFIG_ITEM  Item;
  UINTN                 Size;
  UINT8                 *Copy;
  UINT64                Address;
  ZERO_SMBIOS_STATUS    Status;

  if (QemuFwCfgIsAvailable () && !RETURN_ERROR (QemuFwCfgFindFile (ZSHINT_SMBIOS_FW_CFG_FILE, &Item, &Size))) {
    *InFwCfg     = TRUE;
    *TableLength = Size;
    if (Size > ZSHINT_SMBIOS_MAX_TABLE) {
      return ZeroSmbiosTableLocation;
    }

    Copy = AllocatePages (EFI_SIZE_TO_PAGES (Size + 1));
    if (Copy == NULL) {
      DEBUG ((DEBUG_WARN, "ZeroStart: out of PEI memory reading %a (%u bytes); SMBIOS not read\n", ZSHINT_SMBIOS_FW_CFG_FILE, (UINT32)Size));
      return ZeroSmbiosNoEntryPoint;
    }

    QemuFwCfgSelectItem (Item);
    QemuFwCfgReadBytes (Size, Copy);
    *Table       = Copy;
    *TableLength = Size;
    return ZeroSmbiosOk;
  }

  //
  // In a confidential guest (SEV, TDX) what the VMM wrote into private
  // memory does not read back as written, and unaccepted memory must not be
  // touched at all. Nothing from SMBIOS could be used there anyway (a zero
  // hint is ConfidentialGuest, a scrub request only comes over fw_cfg).
  //
  *InFwCfg = FALSE;
  if (PcdGet64 (PcdConfidentialComputingGuestAttr) != 0) {
    return ZeroSmbiosNoEntryPoint;
  }

  Status = ZeroSmbiosFindEntryPoint ((CONST VOID *)(UINTN)ZSHINT_SMBIOS_AREA_BASE, ZSHINT_SMBIOS_AREA_SIZE, &Address, &Size);
  if (Status != ZeroSmbiosOk) {
    return Status;
  }

  *Table       = (CONST UINT8 *)(UINTN)Address;
  *TableLength = Size;
  return ZeroSmbiosOk;
}

/**
  Find the hint's text in SMBIOS: the one type 11 OEM string that starts
  with "prezero.hint=".

  @param[in]  Quiet       TRUE when fw_cfg already has the hint and SMBIOS is
                          only looked at to say that it is ignored: a
                          malformed table then needs no warning.
  @param[out] Text        The text after the prefix (ZeroHintTextOk only).
  @param[out] TextLength  Its length in characters.
  @param[out] Source      ZEROSTART_SOURCE_SMBIOS_* for log lines.

  @return ZeroHintTextOk, ZeroHintTextDuplicate, or ZeroHintTextAbsent (also
          for no SMBIOS, and for a malformed SMBIOS, after a one-line
          warning naming the problem).
**/
STATIC
ZERO_HINT_TEXT_STATUS
FindSmbiosHint (
  IN  BOOLEAN      Quiet,
  OUT CONST CHAR8  **Text,
  OUT UINTN        *TextLength,
  OUT CONST CHAR8  **Source
  )
{
  CONST UINT8            *Table;
  UINTN                  TableLength;
  BOOLEAN                InFwCfg;
  ZERO_SMBIOS_STATUS     Status;
  ZERO_HINT_TEXT_STATUS  TextStatus;

  Table       = NULL;
  TableLength = 0;
  InFwCfg     = FALSE;
  TextStatus  = ZeroHintTextAbsent;
  Status      = LocateSmbios (&Table, &TableLength, &InFwCfg);
  *Source     = InFwCfg ? ZEROSTART_SOURCE_SMBIOS_FWCFG : ZEROSTART_SOURCE_SMBIOS_AREA;
  if (Status == ZeroSmbiosOk) {
    Status = ZeroSmbiosFindHintText (Table, TableLength, &TextStatus, Text, TextLength);
  }

  if (Status == ZeroSmbiosNoEntryPoint) {
    return ZeroHintTextAbsent;
  }

  if (Status != ZeroSmbiosOk) {
    if (!Quiet) {
      DEBUG ((
        DEBUG_WARN,
        "ZeroStart: SMBIOS refused: %a (%a, %u bytes); no hint taken from SMBIOS\n",
        ZeroSmbiosStatusName (Status),
        InFwCfg ? ZEROSTART_SMBIOS_FWCFG : ZEROSTART_SMBIOS_AREA,
        (UINT32)TableLength
        ));
    }

    return ZeroHintTextAbsent;
  }

  return TextStatus;
}

STATIC
VOID
AddRange (
  IN OUT ZERO_RANGE  *Ranges,
  IN OUT UINTN       *Count,
  IN     UINTN       Capacity,
  IN     UINT64      Base,
  IN     UINT64      Length,
  IN     BOOLEAN     Dirty
  )
{
  ZERO_RANGE  Range;

  if (*Count >= Capacity) {
    // Sized from the HOB count below; cannot happen.
    ASSERT (FALSE);
    return;
  }

  if (ZeroRangeMake (Base, Length, Dirty, &Range)) {
    Ranges[*Count].Start = Range.Start;
    Ranges[*Count].Last  = Range.Last;
    (*Count)++;
  }
}

STATIC
EFI_STATUS
EFIAPI
ZeroStartEndOfPei (
  IN EFI_PEI_SERVICES           **PeiServices,
  IN EFI_PEI_NOTIFY_DESCRIPTOR  *NotifyDescriptor,
  IN VOID                       *Ppi
  );

STATIC EFI_PEI_NOTIFY_DESCRIPTOR  mEndOfPeiNotify = {
  (EFI_PEI_PPI_DESCRIPTOR_NOTIFY_CALLBACK | EFI_PEI_PPI_DESCRIPTOR_TERMINATE_LIST),
  &gEfiEndOfPeiSignalPpiGuid,
  ZeroStartEndOfPei
};

STATIC
EFI_STATUS
EFIAPI
ZeroStartEndOfPei (
  IN EFI_PEI_SERVICES           **PeiServices,
  IN EFI_PEI_NOTIFY_DESCRIPTOR  *NotifyDescriptor,
  IN VOID                       *Ppi
  )
{
  UINT64                      T0;
  FIRMWARE_CONFIG_ITEM        Item;
  UINTN                       Size;
  UINTN                       ReadSize;
  UINT8                       *Blob;
  CONST CHAR8                 *Source;
  BOOLEAN                     FromSmbios;
  CONST CHAR8                 *Text;
  UINTN                       TextLength;
  CONST CHAR8                 *SmbiosSource;
  ZERO_HINT_TEXT_STATUS       TextStatus;
  UINT32                      BadChar;
  ZERO_HINT_STATUS            Status;
  UINT32                      EntryCount;
  UINT32                      Flags;
  UINT32                      BadEntry;
  UINT32                      Index;
  ZERO_HINT_ENTRY             Entry;
  EFI_PEI_HOB_POINTERS        Hob;
  EFI_HOB_HANDOFF_INFO_TABLE  *Phit;
  UINTN                       HobCount;
  UINTN                       Capacity;
  ZERO_RANGE                  *Hint;
  ZERO_RANGE                  *Ram;
  ZERO_RANGE                  *Dirty;
  ZERO_RANGE                  *Tmp;
  ZERO_RANGE                  *Claim;
  UINTN                       HintCount;
  UINTN                       RamCount;
  UINTN                       DirtyCount;
  UINTN                       TmpCount;
  UINTN                       ClaimCount;
  BOOLEAN                     Complete;
  UINT64                      RamBytes;
  UINT64                      Reserve;
  UINT64                      Removed;
  UINT64                      Removed2;
  UINT64                      HintBytes;
  ZEROSTART_CLAIM_HOB         *Handoff;
  UINTN                       HandoffSize;
  EFI_HOB_RESOURCE_DESCRIPTOR  *Res;
  ZERO_RANGE                  Marker;
  BOOLEAN                     MarkerOk;
  BOOLEAN                     Stale;
  volatile UINT64             *MarkerPage;

  T0 = GetPerformanceCounter ();
  if (GetBootModeHob () == BOOT_ON_S3_RESUME) {
    return EFI_SUCCESS;
  }

  if (QemuFwCfgIsAvailable () && !RETURN_ERROR (QemuFwCfgFindFile (ZSHINT_FW_CFG_FILE, &Item, &Size))) {
    //
    // fw_cfg comes first: it is the binary hint, and the only transport that
    // may carry a scrub request. A file longer than the largest valid hint
    // can only be BadLength or fail an earlier header check; one byte more
    // than the maximum is enough to tell which.
    //
    Source     = ZEROSTART_SOURCE_FW_CFG;
    FromSmbios = FALSE;
    ReadSize   = (Size > ZSHINT_MAX_SIZE) ? ZSHINT_MAX_SIZE + 1 : Size;
    Blob       = AllocatePages (EFI_SIZE_TO_PAGES (ReadSize + 1));
    if (Blob == NULL) {
      DEBUG ((DEBUG_WARN, "ZeroStart: out of PEI memory reading the hint; nothing published\n"));
      return EFI_SUCCESS;
    }

    QemuFwCfgSelectItem (Item);
    QemuFwCfgReadBytes (ReadSize, Blob);

    //
    // SMBIOS is not consulted, but a VMM that also put a (perhaps different)
    // hint there should be able to see which one counted.
    //
    if (FindSmbiosHint (TRUE, &Text, &TextLength, &SmbiosSource) != ZeroHintTextAbsent) {
      DEBUG ((DEBUG_INFO, "ZeroStart: SMBIOS OEM string %a ignored: fw_cfg %a comes first\n", ZSHINT_TEXT_PREFIX, ZSHINT_FW_CFG_FILE));
    }
  } else {
    //
    // No fw_cfg file: the text form in an SMBIOS OEM string, with the ABI's
    // text errors in its order (find: Duplicate; decode: TextTooLong,
    // TextBadChar, TextBadLength, TextNonCanonical).
    //
    FromSmbios = TRUE;
    TextStatus = FindSmbiosHint (FALSE, &Text, &TextLength, &Source);
    if (TextStatus == ZeroHintTextAbsent) {
      DEBUG ((DEBUG_INFO, "ZeroStart: no fw_cfg file %a and no SMBIOS OEM string %a; no hint\n", ZSHINT_FW_CFG_FILE, ZSHINT_TEXT_PREFIX));
      return EFI_SUCCESS;
    }

    if (TextStatus == ZeroHintTextDuplicate) {
      DEBUG ((DEBUG_WARN, "ZeroStart: hint rejected: Duplicate (%a: more than one %a); nothing published\n", Source, ZSHINT_TEXT_PREFIX));
      return EFI_SUCCESS;
    }

    Blob = AllocatePages (EFI_SIZE_TO_PAGES (ZSHINT_TEXT_MAX_BYTES));
    if (Blob == NULL) {
      DEBUG ((DEBUG_WARN, "ZeroStart: out of PEI memory decoding the hint; nothing published\n"));
      return EFI_SUCCESS;
    }

    TextStatus = ZeroHintTextDecode (Text, TextLength, Blob, ZSHINT_TEXT_MAX_BYTES, &ReadSize, &BadChar);
    if (TextStatus == ZeroHintTextBadChar) {
      DEBUG ((
        DEBUG_WARN,
        "ZeroStart: hint rejected: %a (index %u, %a, %u characters); nothing published\n",
        ZeroHintTextStatusName (TextStatus),
        BadChar,
        Source,
        (UINT32)TextLength
        ));
      return EFI_SUCCESS;
    }

    if (TextStatus != ZeroHintTextOk) {
      DEBUG ((
        DEBUG_WARN,
        "ZeroStart: hint rejected: %a (%a, %u characters); nothing published\n",
        ZeroHintTextStatusName (TextStatus),
        Source,
        (UINT32)TextLength
        ));
      return EFI_SUCCESS;
    }

    // The text gives the exact length: trailing bytes are BadLength.
    Size = ReadSize;
  }

  Status = ZeroHintValidate (Blob, ReadSize, TRUE, &EntryCount, &Flags, &BadEntry);
  if (Status != ZeroHintOk) {
    if (Status >= ZeroHintBadEntryFlags) {
      DEBUG ((
        DEBUG_WARN,
        "ZeroStart: hint rejected: %a (entry %u, %a, %u bytes); nothing published\n",
        ZeroHintStatusName (Status),
        BadEntry,
        Source,
        (UINT32)Size
        ));
    } else {
      DEBUG ((
        DEBUG_WARN,
        "ZeroStart: hint rejected: %a (%a, %u bytes); nothing published\n",
        ZeroHintStatusName (Status),
        Source,
        (UINT32)Size
        ));
    }

    return EFI_SUCCESS;
  }

  //
  // A scrub request asks the firmware to write guest memory; only the fw_cfg
  // transport may ask that (docs/hint-abi.md "Meaning"), as the kernel
  // refuses one from its text transports.
  //
  if (FromSmbios && ((Flags & ZSHINT_FLAG_SCRUB_REQUEST) != 0)) {
    DEBUG ((DEBUG_WARN, "ZeroStart: hint rejected: ScrubRequest (%a: only fw_cfg may ask for a scrub); nothing published\n", Source));
    return EFI_SUCCESS;
  }

  //
  // In a confidential guest (SEV, TDX) the host cannot hand out pages that
  // read as zero: the guest sees host zeros through its encryption as
  // garbage, or the pages still need accepting. A zero hint is therefore
  // false there; a scrub request (the guest writes the zeros) stays valid.
  //
  if (((Flags & ZSHINT_FLAG_SCRUB_REQUEST) == 0) && (PcdGet64 (PcdConfidentialComputingGuestAttr) != 0)) {
    DEBUG ((
      DEBUG_WARN,
      "ZeroStart: hint rejected: ConfidentialGuest (attr 0x%Lx: host zero pages do not read as zero); nothing published\n",
      PcdGet64 (PcdConfidentialComputingGuestAttr)
      ));
    return EFI_SUCCESS;
  }

  //
  // Size the work arrays from the HOB list: every HOB adds at most one range.
  //
  HobCount = 0;
  for (Hob.Raw = GetHobList (); !END_OF_HOB_LIST (Hob); Hob.Raw = GET_NEXT_HOB (Hob)) {
    HobCount++;
  }

  Capacity = EntryCount + HobCount + 16;
  Hint     = AllocatePages (EFI_SIZE_TO_PAGES (5 * Capacity * sizeof (ZERO_RANGE)));
  if (Hint == NULL) {
    DEBUG ((DEBUG_WARN, "ZeroStart: out of PEI memory for %u ranges; nothing published\n", (UINT32)Capacity));
    return EFI_SUCCESS;
  }

  Ram   = Hint + Capacity;
  Dirty = Ram + Capacity;
  Tmp   = Dirty + Capacity;
  Claim = Tmp + Capacity;

  HintCount = 0;
  for (Index = 0; Index < EntryCount; Index++) {
    ZeroHintGetEntry (Blob, Index, &Entry);
    AddRange (Hint, &HintCount, Capacity, Entry.Start, Entry.Length, FALSE);
  }

  HintCount = ZeroRangesNormalize (Hint, HintCount);
  HintBytes = ZeroRangesTotal (Hint, HintCount);

  //
  // RAM: tested system memory. Dirty: everything any firmware stage is on
  // record as having used, plus the floor.
  //
  RamCount   = 0;
  DirtyCount = 0;
  Phit       = NULL;
  for (Hob.Raw = GetHobList (); !END_OF_HOB_LIST (Hob); Hob.Raw = GET_NEXT_HOB (Hob)) {
    switch (GET_HOB_TYPE (Hob)) {
      case EFI_HOB_TYPE_HANDOFF:
        Phit = Hob.HandoffInformationTable;
        AddRange (Dirty, &DirtyCount, Capacity, Phit->EfiMemoryBottom, Phit->EfiMemoryTop - Phit->EfiMemoryBottom, TRUE);
        break;
      case EFI_HOB_TYPE_RESOURCE_DESCRIPTOR:
        Res = Hob.ResourceDescriptor;
        if ((Res->ResourceType == EFI_RESOURCE_SYSTEM_MEMORY) &&
            ((Res->ResourceAttribute & (EFI_RESOURCE_ATTRIBUTE_PRESENT | EFI_RESOURCE_ATTRIBUTE_INITIALIZED | EFI_RESOURCE_ATTRIBUTE_TESTED)) ==
             (EFI_RESOURCE_ATTRIBUTE_PRESENT | EFI_RESOURCE_ATTRIBUTE_INITIALIZED | EFI_RESOURCE_ATTRIBUTE_TESTED)))
        {
          AddRange (Ram, &RamCount, Capacity, Res->PhysicalStart, Res->ResourceLength, FALSE);
        }

        break;
      case EFI_HOB_TYPE_MEMORY_ALLOCATION:
        AddRange (
          Dirty,
          &DirtyCount,
          Capacity,
          Hob.MemoryAllocation->AllocDescriptor.MemoryBaseAddress,
          Hob.MemoryAllocation->AllocDescriptor.MemoryLength,
          TRUE
          );
        break;
      case EFI_HOB_TYPE_FV:
        AddRange (Dirty, &DirtyCount, Capacity, Hob.FirmwareVolume->BaseAddress, Hob.FirmwareVolume->Length, TRUE);
        break;
      case EFI_HOB_TYPE_FV2:
        AddRange (Dirty, &DirtyCount, Capacity, Hob.FirmwareVolume2->BaseAddress, Hob.FirmwareVolume2->Length, TRUE);
        break;
      case EFI_HOB_TYPE_FV3:
        AddRange (Dirty, &DirtyCount, Capacity, Hob.FirmwareVolume3->BaseAddress, Hob.FirmwareVolume3->Length, TRUE);
        break;
      default:
        break;
    }
  }

  if (Phit == NULL) {
    DEBUG ((DEBUG_WARN, "ZeroStart: no PHIT HOB; nothing published\n"));
    return EFI_SUCCESS;
  }

  RamCount   = ZeroRangesAlignInward (Ram, ZeroRangesNormalize (Ram, RamCount));
  DirtyCount = ZeroRangesAlignOutward (Dirty, DirtyCount);
  RamBytes   = ZeroRangesTotal (Ram, RamCount);

  //
  // The reset marker page must be RAM nothing else uses.
  //
  Marker.Start = ZEROSTART_MARKER_ADDRESS;
  Marker.Last  = ZEROSTART_MARKER_ADDRESS + EFI_PAGE_SIZE - 1;
  ZeroRangesSubtract (&Marker, 1, Ram, RamCount, Tmp, Capacity, &TmpCount);
  MarkerOk = (BOOLEAN)(TmpCount == 0);
  ZeroRangesIntersect (&Marker, 1, Dirty, DirtyCount, Tmp, Capacity, &TmpCount);
  MarkerOk = (BOOLEAN)(MarkerOk && TmpCount == 0);
  if (!MarkerOk) {
    DEBUG ((DEBUG_WARN, "ZeroStart: hint rejected: no free RAM page for the reset marker at 0x%Lx; nothing published\n", ZEROSTART_MARKER_ADDRESS));
    return EFI_SUCCESS;
  }

  MarkerPage = (volatile UINT64 *)(UINTN)ZEROSTART_MARKER_ADDRESS;
  Stale      = (BOOLEAN)((MarkerPage[0] == ZEROSTART_MARKER_0) && (MarkerPage[1] == ZEROSTART_MARKER_1));
  BuildMemoryAllocationHob (ZEROSTART_MARKER_ADDRESS, EFI_PAGE_SIZE, EfiReservedMemoryType);
  MarkerPage[0] = ZEROSTART_MARKER_0;
  MarkerPage[1] = ZEROSTART_MARKER_1;
  if (Stale) {
    DEBUG ((
      DEBUG_WARN,
      "ZeroStart: hint rejected: Stale (guest RAM survived a reset since the hint was first used); nothing published\n"
      ));
    return EFI_SUCCESS;
  }

  AddRange (Dirty, &DirtyCount, Capacity, 0, ZEROSTART_FLOOR, TRUE);
  AddRange (Dirty, &DirtyCount, Capacity, ZEROSTART_MARKER_ADDRESS, EFI_PAGE_SIZE, TRUE);
  DirtyCount = ZeroRangesNormalize (Dirty, DirtyCount);

  Complete = ZeroRangesIntersect (Hint, HintCount, Ram, RamCount, Tmp, Capacity, &TmpCount);
  Complete = (BOOLEAN)(ZeroRangesSubtract (Tmp, TmpCount, Dirty, DirtyCount, Claim, Capacity, &ClaimCount) && Complete);
  ClaimCount = ZeroRangesAlignInward (Claim, ClaimCount);

  //
  // Leave the reserve: first from the top of memory below 4 GiB (where the
  // DXE core allocates), then, if that was not enough, from the top.
  //
  Reserve    = ZEROSTART_RESERVE_BASE + ((RamBytes >> ZEROSTART_RESERVE_SHIFT) & ~(UINT64)EFI_PAGE_MASK);
  ClaimCount = ZeroRangesTrimTop (Claim, ClaimCount, Capacity, BASE_4GB - 1, Reserve, &Removed);
  Removed2   = 0;
  if (Removed < Reserve) {
    ClaimCount = ZeroRangesTrimTop (Claim, ClaimCount, Capacity, MAX_UINT64, Reserve - Removed, &Removed2);
  }

  if (ClaimCount > ZSHINT_MAX_ENTRIES) {
    // The table holds at most 512 ranges; publishing fewer is always safe.
    ClaimCount = ZSHINT_MAX_ENTRIES;
    Complete   = FALSE;
  }

  for (Index = 0; Index < ClaimCount; Index++) {
    BuildMemoryAllocationHob (
      Claim[Index].Start,
      Claim[Index].Last - Claim[Index].Start + 1,
      ZEROSTART_CLAIM_MEMORY_TYPE
      );
  }

  HandoffSize = sizeof (ZEROSTART_CLAIM_HOB) + ClaimCount * sizeof (ZERO_RANGE) + ReadSize;
  Handoff     = BuildGuidHob (&gZeroStartClaimHobGuid, HandoffSize);
  if (Handoff == NULL) {
    // The allocation HOBs above stay: the memory is then simply not used by
    // the firmware and not published - safe, only slower.
    DEBUG ((DEBUG_WARN, "ZeroStart: cannot build the claim HOB; nothing published\n"));
    return EFI_SUCCESS;
  }

  Handoff->Version        = ZEROSTART_CLAIM_HOB_VERSION;
  Handoff->HintFlags      = Flags;
  Handoff->HintEntryCount = EntryCount;
  Handoff->ClaimCount     = (UINT32)ClaimCount;
  Handoff->HintSize       = (UINT32)ReadSize;
  Handoff->Reserved       = 0;
  Handoff->HintBytes      = HintBytes;
  Handoff->ReservedBytes  = Removed + Removed2;
  Handoff->ClaimedBytes   = ZeroRangesTotal (Claim, ClaimCount);
  CopyMem (Handoff + 1, Claim, ClaimCount * sizeof (ZERO_RANGE));
  CopyMem ((UINT8 *)(Handoff + 1) + ClaimCount * sizeof (ZERO_RANGE), Blob, ReadSize);
  Handoff->PeiNanoseconds = ZeroStartElapsedNs (T0);

  DEBUG ((
    DEBUG_INFO,
    "ZeroStart: PEI: %a hint, %u entries, %Lu bytes; RAM %Lu bytes; claimed %Lu bytes in %u ranges%a; reserve %Lu bytes; %Lu us; from %a\n",
    (Flags & ZSHINT_FLAG_SCRUB_REQUEST) != 0 ? "scrub-request" : "zero",
    EntryCount,
    HintBytes,
    RamBytes,
    Handoff->ClaimedBytes,
    (UINT32)ClaimCount,
    Complete ? "" : " (cut short: out of range slots)",
    Handoff->ReservedBytes,
    DivU64x32 (Handoff->PeiNanoseconds, 1000),
    Source
    ));
  return EFI_SUCCESS;
}

/**
  Entry point: defer the work to the end of PEI, when every PEI allocation
  and HOB that precedes the DXE hand-off is on record.
**/
EFI_STATUS
EFIAPI
ZeroStartPeiEntry (
  IN       EFI_PEI_FILE_HANDLE  FileHandle,
  IN CONST EFI_PEI_SERVICES     **PeiServices
  )
{
  return PeiServicesNotifyPpi (&mEndOfPeiNotify);
}
