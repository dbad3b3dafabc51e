/** @file
  ZeroStartDxe: scrub the memory ZeroStartPei claimed when the VMM asked for
  it (all processors, non-temporal stores), and publish the claimed memory
  as the zerostart EFI configuration table at ReadyToBoot.

  The claimed pages are allocated (ZEROSTART_CLAIM_MEMORY_TYPE) from the
  first instant of DXE, by memory allocation HOBs; no other DXE component
  and no OS loader can be handed them before ExitBootServices. So the set is
  the same at ReadyToBoot and at ExitBootServices, and the table can be
  built at ReadyToBoot, when memory can still be allocated for it. The
  memory map is read again there and only claimed pages still of the claim
  type are published (a defence against a component freeing pages it does
  not own).

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <PiDxe.h>
#include <Guid/ZeroStartHint.h>
#include <Protocol/MpService.h>
#include <Library/BaseLib.h>
#include <Library/BaseMemoryLib.h>
#include <Library/DebugLib.h>
#include <Library/HobLib.h>
#include <Library/MemoryAllocationLib.h>
#include <Library/SynchronizationLib.h>
#include <Library/TimerLib.h>
#include <Library/UefiBootServicesTableLib.h>
#include <Library/UefiDriverEntryPoint.h>
#include <Library/UefiLib.h>
#include <Library/ZeroHintLib.h>
#include <Internal/ZeroStartTime.h>

/// Work unit handed to one processor at a time.
#define SCRUB_CHUNK_SIZE  SIZE_32MB

VOID
EFIAPI
ZeroStartNtZero (
  IN VOID   *Base,
  IN UINTN  Length
  );

///
/// Elapsed time over intervals longer than the performance counter's wrap
/// (OVMF's ACPI PM timer is 24 bits at 3.58 MHz: it wraps every 4.7 s, less
/// than a large scrub takes): the BSP ticks the stopwatch often enough that
/// every single step is shorter than a wrap.
///
typedef struct {
  UINT64    Last;
  UINT64    Ticks;
} STOPWATCH;

typedef struct {
  EFI_MP_SERVICES_PROTOCOL    *Mp;
  CONST ZERO_RANGE            *Ranges;
  UINTN                       Count;
  UINT32                      *FirstChunk;  // [Count + 1], prefix sums
  volatile UINT32             NextChunk;
  UINTN                       CpuCount;
  volatile UINT64             *CpuBytes;    // [CpuCount]
  STOPWATCH                   *Clock;       // ticked by the BSP only
} SCRUB_JOB;

STATIC ZEROSTART_CLAIM_HOB  *mClaim;
STATIC ZERO_RANGE           *mClaims;
STATIC CONST UINT8          *mHintBlob;
STATIC UINT64               mDxeNanoseconds;
STATIC UINT64               mDxeScrubNanoseconds;
STATIC UINT64               mScrubbedBytes;
STATIC BOOLEAN              mScrubOk;
STATIC EFI_EVENT            mReadyToBootEvent;


STATIC
VOID
StopwatchStart (
  OUT STOPWATCH  *Sw
  )
{
  Sw->Ticks = 0;
  Sw->Last  = GetPerformanceCounter ();
}

STATIC
VOID
StopwatchTick (
  IN OUT STOPWATCH  *Sw
  )
{
  UINT64  Now;

  Now        = GetPerformanceCounter ();
  Sw->Ticks += ZeroStartCounterTicks (Sw->Last, Now);
  Sw->Last   = Now;
}

STATIC
UINT64
StopwatchNs (
  IN OUT STOPWATCH  *Sw
  )
{
  StopwatchTick (Sw);
  return GetTimeInNanoSecond (Sw->Ticks);
}

STATIC
UINT64
ToMicroseconds (
  IN UINT64  Ns
  )
{
  return DivU64x32 (Ns, 1000);
}

STATIC
VOID
ScrubChunks (
  IN OUT SCRUB_JOB  *Job,
  IN     BOOLEAN    Bsp
  )
{
  UINTN   Me;
  UINT64  Done;
  UINT32  Chunk;
  UINTN   Range;
  UINT64  Offset;
  UINT64  Length;
  UINT64  Size;

  Me   = 0;
  Done = 0;
  if (Job->Mp != NULL) {
    // WhoAmI may be called on APs.
    Job->Mp->WhoAmI (Job->Mp, &Me);
  }

  for ( ; ;) {
    Chunk = InterlockedIncrement (&Job->NextChunk) - 1;
    if (Chunk >= Job->FirstChunk[Job->Count]) {
      break;
    }

    for (Range = 0; Job->FirstChunk[Range + 1] <= Chunk; Range++) {
    }

    Size   = Job->Ranges[Range].Last - Job->Ranges[Range].Start + 1;
    Offset = MultU64x32 (SCRUB_CHUNK_SIZE, Chunk - Job->FirstChunk[Range]);
    Length = Size - Offset;
    if (Length > SCRUB_CHUNK_SIZE) {
      Length = SCRUB_CHUNK_SIZE;
    }

    ZeroStartNtZero ((VOID *)(UINTN)(Job->Ranges[Range].Start + Offset), (UINTN)Length);
    Done += Length;
    if (Bsp) {
      StopwatchTick (Job->Clock);
    }
  }

  if (Me < Job->CpuCount) {
    Job->CpuBytes[Me] = Done;
  }
}

/// The AP procedure: no timer access, no boot services.
STATIC
VOID
EFIAPI
ScrubWorker (
  IN OUT VOID  *Arg
  )
{
  ScrubChunks ((SCRUB_JOB *)Arg, FALSE);
}

/**
  Zero every claimed range on all processors (BSP included); one processor
  when there are no APs or no MP services.
**/
STATIC
VOID
Scrub (
  VOID
  )
{
  EFI_STATUS  Status;
  SCRUB_JOB   Job;
  UINTN       Index;
  UINTN       Enabled;
  UINT64      Chunks;
  EFI_EVENT   Done;
  STOPWATCH   Clock;
  UINT64      Ns;
  UINT64      Total;
  BOOLEAN     Parallel;
  UINTN       Workers;

  ZeroMem (&Job, sizeof (Job));
  Job.Ranges     = mClaims;
  Job.Count      = mClaim->ClaimCount;
  Job.FirstChunk = AllocateZeroPool ((Job.Count + 1) * sizeof (UINT32));
  if (Job.FirstChunk == NULL) {
    return;
  }

  Chunks = 0;
  for (Index = 0; Index < Job.Count; Index++) {
    Job.FirstChunk[Index] = (UINT32)Chunks;
    Chunks               += DivU64x32 (mClaims[Index].Last - mClaims[Index].Start + SCRUB_CHUNK_SIZE, SCRUB_CHUNK_SIZE);
  }

  Job.FirstChunk[Job.Count] = (UINT32)Chunks;
  Job.CpuCount              = 1;
  Status                    = gBS->LocateProtocol (&gEfiMpServiceProtocolGuid, NULL, (VOID **)&Job.Mp);
  if (EFI_ERROR (Status)) {
    Job.Mp = NULL;
  } else if (EFI_ERROR (Job.Mp->GetNumberOfProcessors (Job.Mp, &Job.CpuCount, &Enabled))) {
    Job.CpuCount = 1;
  }

  Job.CpuBytes = AllocateZeroPool (Job.CpuCount * sizeof (UINT64));
  if (Job.CpuBytes == NULL) {
    FreePool (Job.FirstChunk);
    return;
  }

  Done      = NULL;
  Parallel  = FALSE;
  Job.Clock = &Clock;
  StopwatchStart (&Clock);
  if ((Job.Mp != NULL) && (Job.CpuCount > 1) &&
      !EFI_ERROR (gBS->CreateEvent (0, TPL_CALLBACK, NULL, NULL, &Done)))
  {
    // Non-blocking, so that the BSP takes chunks too.
    Status   = Job.Mp->StartupAllAPs (Job.Mp, ScrubWorker, FALSE, Done, 0, &Job, NULL);
    Parallel = (BOOLEAN) !EFI_ERROR (Status);
    if (!Parallel) {
      DEBUG ((DEBUG_INFO, "ZeroStart: StartupAllAPs: %r; scrubbing on the BSP only\n", Status));
    }
  }

  ScrubChunks (&Job, TRUE);
  if (Parallel) {
    while (gBS->CheckEvent (Done) == EFI_NOT_READY) {
      StopwatchTick (&Clock);
      CpuPause ();
    }
  }

  Ns = StopwatchNs (&Clock);
  mDxeScrubNanoseconds = Ns;
  if (Done != NULL) {
    gBS->CloseEvent (Done);
  }

  Total   = 0;
  Workers = 0;
  for (Index = 0; Index < Job.CpuCount; Index++) {
    Total += Job.CpuBytes[Index];
    if (Job.CpuBytes[Index] != 0) {
      Workers++;
    }

    DEBUG ((DEBUG_INFO, "ZeroStart: scrub cpu %u: %Lu bytes\n", (UINT32)Index, Job.CpuBytes[Index]));
  }

  mScrubbedBytes = Total;
  mScrubOk       = (BOOLEAN)(Total == ZeroRangesTotal (mClaims, Job.Count));
  DEBUG ((
    DEBUG_INFO,
    "ZeroStart: scrubbed %Lu bytes in %u ranges on %u of %u processors (%a) in %Lu us, %Lu MiB/s\n",
    Total,
    (UINT32)Job.Count,
    (UINT32)Workers,
    (UINT32)Job.CpuCount,
    Parallel ? "parallel" : "single",
    ToMicroseconds (Ns),
    (Ns < 1000) ? 0 : DivU64x64Remainder (MultU64x32 (Total >> 10, 1000000), ToMicroseconds (Ns), NULL) >> 10
    ));
  FreePool ((VOID *)Job.CpuBytes);
  FreePool (Job.FirstChunk);
}

/**
  The ranges of the current memory map whose type is the claim type.
**/
STATIC
ZERO_RANGE *
ClaimTypeRanges (
  OUT UINTN  *Count
  )
{
  EFI_STATUS             Status;
  UINTN                  MapSize;
  EFI_MEMORY_DESCRIPTOR  *Map;
  EFI_MEMORY_DESCRIPTOR  *Desc;
  UINTN                  MapKey;
  UINTN                  DescSize;
  UINT32                 DescVersion;
  ZERO_RANGE             *Ranges;
  UINTN                  N;
  UINTN                  Offset;
  UINTN                  Capacity;

  *Count  = 0;
  MapSize = 0;
  Map     = NULL;
  Status  = gBS->GetMemoryMap (&MapSize, Map, &MapKey, &DescSize, &DescVersion);
  if (Status != EFI_BUFFER_TOO_SMALL) {
    return NULL;
  }

  do {
    MapSize += 16 * sizeof (EFI_MEMORY_DESCRIPTOR);
    Map      = AllocatePool (MapSize);
    if (Map == NULL) {
      return NULL;
    }

    Status = gBS->GetMemoryMap (&MapSize, Map, &MapKey, &DescSize, &DescVersion);
    if (Status == EFI_BUFFER_TOO_SMALL) {
      FreePool (Map);
      Map = NULL;
    }
  } while (Status == EFI_BUFFER_TOO_SMALL);

  if (EFI_ERROR (Status)) {
    if (Map != NULL) {
      FreePool (Map);
    }

    return NULL;
  }

  Capacity = MapSize / DescSize + 1;
  Ranges   = AllocatePool (Capacity * sizeof (ZERO_RANGE));
  if (Ranges == NULL) {
    FreePool (Map);
    return NULL;
  }

  N = 0;
  for (Offset = 0; Offset + DescSize <= MapSize; Offset += DescSize) {
    Desc = (EFI_MEMORY_DESCRIPTOR *)((UINT8 *)Map + Offset);
    if ((Desc->Type == ZEROSTART_CLAIM_MEMORY_TYPE) &&
        ZeroRangeMake (Desc->PhysicalStart, EFI_PAGES_TO_SIZE (Desc->NumberOfPages), FALSE, &Ranges[N]))
    {
      N++;
    }
  }

  FreePool (Map);
  *Count = ZeroRangesNormalize (Ranges, N);
  return Ranges;
}

STATIC
VOID
EFIAPI
OnReadyToBoot (
  IN EFI_EVENT  Event,
  IN VOID       *Context
  )
{
  UINT64      T0;
  ZERO_RANGE  *Typed;
  UINTN       TypedCount;
  ZERO_RANGE  *Publish;
  UINTN       PublishCount;
  UINTN       Size;
  UINT8       *Table;
  ZERO_RANGE  TableRange;
  ZERO_RANGE  *Final;
  UINTN       FinalCount;
  EFI_STATUS  Status;
  UINT64      Published;

  // One table per boot; a second ReadyToBoot (a boot option failed) keeps it.
  gBS->CloseEvent (Event);
  T0 = GetPerformanceCounter ();
  if (((mClaim->HintFlags & ZSHINT_FLAG_SCRUB_REQUEST) != 0) && !mScrubOk) {
    // Claimed memory that was not scrubbed holds whatever the VMM left there.
    DEBUG ((DEBUG_WARN, "ZeroStart: scrub incomplete (%Lu of %Lu bytes); nothing published\n", mScrubbedBytes, mClaim->ClaimedBytes));
    return;
  }

  Typed = ClaimTypeRanges (&TypedCount);
  if (Typed == NULL) {
    DEBUG ((DEBUG_WARN, "ZeroStart: cannot read the memory map; nothing published\n"));
    return;
  }

  Publish = AllocatePool ((mClaim->ClaimCount + TypedCount + 1) * sizeof (ZERO_RANGE));
  Final   = AllocatePool ((mClaim->ClaimCount + TypedCount + 2) * sizeof (ZERO_RANGE));
  if ((Publish == NULL) || (Final == NULL)) {
    DEBUG ((DEBUG_WARN, "ZeroStart: out of memory; nothing published\n"));
    return;
  }

  ZeroRangesIntersect (mClaims, mClaim->ClaimCount, Typed, TypedCount, Publish, mClaim->ClaimCount + TypedCount + 1, &PublishCount);
  PublishCount = ZeroRangesAlignInward (Publish, PublishCount);
  if (PublishCount > ZSHINT_MAX_ENTRIES) {
    PublishCount = ZSHINT_MAX_ENTRIES;
  }

  Size  = ZSHINT_HEADER_SIZE + PublishCount * ZSHINT_ENTRY_SIZE;
  Table = AllocateRuntimePool (Size);
  if (Table == NULL) {
    DEBUG ((DEBUG_WARN, "ZeroStart: cannot allocate the %u-byte table; nothing published\n", (UINT32)Size));
    return;
  }

  // The blob never lies inside its own ranges (the pool comes from memory
  // the claim does not cover; this makes it hold by construction).
  ZeroRangeMake ((UINTN)Table, Size, TRUE, &TableRange);
  TableRange.Start &= ~(UINT64)EFI_PAGE_MASK;
  TableRange.Last  |= EFI_PAGE_MASK;
  ZeroRangesSubtract (Publish, PublishCount, &TableRange, 1, Final, mClaim->ClaimCount + TypedCount + 2, &FinalCount);
  if (FinalCount > ZSHINT_MAX_ENTRIES) {
    FinalCount = ZSHINT_MAX_ENTRIES;
  }

  Size = ZeroHintEncode (Final, FinalCount, mHintBlob, mClaim->HintEntryCount, Table, Size);
  if (Size == 0) {
    DEBUG ((DEBUG_WARN, "ZeroStart: cannot encode %u ranges; nothing published\n", (UINT32)FinalCount));
    FreePool (Table);
    return;
  }

  Status = gBS->InstallConfigurationTable (&gZeroStartHintTableGuid, Table);
  if (EFI_ERROR (Status)) {
    DEBUG ((DEBUG_WARN, "ZeroStart: InstallConfigurationTable: %r; nothing published\n", Status));
    FreePool (Table);
    return;
  }

  Published        = ZeroRangesTotal (Final, FinalCount);
  mDxeNanoseconds += ZeroStartElapsedNs (T0);
  DEBUG ((
    DEBUG_INFO,
    "ZeroStart: published %Lu bytes in %u ranges, table at 0x%Lx (%u bytes)\n",
    Published,
    (UINT32)FinalCount,
    (UINT64)(UINTN)Table,
    (UINT32)Size
    ));
  DEBUG ((
    DEBUG_INFO,
    "ZeroStart: total %Lu us (PEI %Lu us, DXE %Lu us); hint %Lu bytes, claimed %Lu, scrubbed %Lu, published %Lu\n",
    ToMicroseconds (mClaim->PeiNanoseconds + mDxeNanoseconds),
    ToMicroseconds (mClaim->PeiNanoseconds),
    ToMicroseconds (mDxeNanoseconds),
    mClaim->HintBytes,
    mClaim->ClaimedBytes,
    mScrubbedBytes,
    Published
    ));
  FreePool (Typed);
  FreePool (Publish);
  FreePool (Final);
}

EFI_STATUS
EFIAPI
ZeroStartDxeEntry (
  IN EFI_HANDLE        ImageHandle,
  IN EFI_SYSTEM_TABLE  *SystemTable
  )
{
  EFI_HOB_GUID_TYPE  *GuidHob;
  UINT64             T0;
  EFI_STATUS         Status;

  T0      = GetPerformanceCounter ();
  GuidHob = GetFirstGuidHob (&gZeroStartClaimHobGuid);
  if (GuidHob == NULL) {
    // No hint, or a rejected one: ZeroStartPei said why.
    return EFI_NOT_FOUND;
  }

  mClaim = (ZEROSTART_CLAIM_HOB *)GET_GUID_HOB_DATA (GuidHob);
  if ((mClaim->Version != ZEROSTART_CLAIM_HOB_VERSION) ||
      (GET_GUID_HOB_DATA_SIZE (GuidHob) < sizeof (*mClaim) + mClaim->ClaimCount * sizeof (ZERO_RANGE) + mClaim->HintSize))
  {
    DEBUG ((DEBUG_WARN, "ZeroStart: malformed claim HOB; nothing published\n"));
    return EFI_NOT_FOUND;
  }

  mClaims   = (ZERO_RANGE *)(mClaim + 1);
  mHintBlob = (CONST UINT8 *)(mClaims + mClaim->ClaimCount);

  if ((mClaim->HintFlags & ZSHINT_FLAG_SCRUB_REQUEST) != 0) {
    mDxeNanoseconds = ZeroStartElapsedNs (T0);
    Scrub ();
    T0 = GetPerformanceCounter ();
  }

  Status = EfiCreateEventReadyToBootEx (TPL_CALLBACK, OnReadyToBoot, NULL, &mReadyToBootEvent);
  if (EFI_ERROR (Status)) {
    DEBUG ((DEBUG_WARN, "ZeroStart: ReadyToBoot event: %r; nothing published\n", Status));
    return Status;
  }

  // Each piece is measured over less than a counter wrap; the scrub has
  // its own stopwatch.
  mDxeNanoseconds += ZeroStartElapsedNs (T0) + mDxeScrubNanoseconds;
  return EFI_SUCCESS;
}
