/** @file
  ZeroHintLib: range arithmetic on inclusive [Start, Last] ranges.

  Every operation that can run out of output space stops early; for the
  sets the firmware publishes as zero that always yields a subset, i.e. it
  errs towards "dirty", never towards a false "zero".

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#include <Library/ZeroHintLib.h>

BOOLEAN
EFIAPI
ZeroRangeMake (
  IN  UINT64      Base,
  IN  UINT64      Length,
  IN  BOOLEAN     Clamp,
  OUT ZERO_RANGE  *Range
  )
{
  if (Length == 0) {
    return FALSE;
  }

  if (Length - 1 > MAX_UINT64 - Base) {
    if (!Clamp) {
      return FALSE;
    }

    Range->Start = Base;
    Range->Last  = MAX_UINT64;
    return TRUE;
  }

  Range->Start = Base;
  Range->Last  = Base + (Length - 1);
  return TRUE;
}

UINTN
EFIAPI
ZeroRangesNormalize (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count
  )
{
  UINTN       Index;
  UINTN       Pos;
  UINTN       Out;
  ZERO_RANGE  Key;

  // Insertion sort: the inputs are memory maps and HOB lists, a few hundred
  // entries at most, and this needs no allocation.
  for (Index = 1; Index < Count; Index++) {
    Key.Start = Ranges[Index].Start;
    Key.Last  = Ranges[Index].Last;
    Pos       = Index;
    while ((Pos > 0) && (Ranges[Pos - 1].Start > Key.Start)) {
      Ranges[Pos].Start = Ranges[Pos - 1].Start;
      Ranges[Pos].Last  = Ranges[Pos - 1].Last;
      Pos--;
    }

    Ranges[Pos].Start = Key.Start;
    Ranges[Pos].Last  = Key.Last;
  }

  if (Count == 0) {
    return 0;
  }

  Out = 0;
  for (Index = 1; Index < Count; Index++) {
    // Merge when overlapping or adjacent; Last == MAX_UINT64 swallows all.
    if ((Ranges[Out].Last == MAX_UINT64) || (Ranges[Index].Start <= Ranges[Out].Last + 1)) {
      if (Ranges[Index].Last > Ranges[Out].Last) {
        Ranges[Out].Last = Ranges[Index].Last;
      }
    } else {
      Out++;
      Ranges[Out].Start = Ranges[Index].Start;
      Ranges[Out].Last  = Ranges[Index].Last;
    }
  }

  return Out + 1;
}

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
  )
{
  UINTN   Ia;
  UINTN   Ib;
  UINTN   N;
  UINT64  Start;
  UINT64  Last;

  Ia = 0;
  Ib = 0;
  N  = 0;
  while ((Ia < CountA) && (Ib < CountB)) {
    Start = (A[Ia].Start > B[Ib].Start) ? A[Ia].Start : B[Ib].Start;
    Last  = (A[Ia].Last < B[Ib].Last) ? A[Ia].Last : B[Ib].Last;
    if (Start <= Last) {
      if (N == Capacity) {
        *CountOut = N;
        return FALSE;
      }

      Out[N].Start = Start;
      Out[N].Last  = Last;
      N++;
    }

    if (A[Ia].Last < B[Ib].Last) {
      Ia++;
    } else {
      Ib++;
    }
  }

  *CountOut = N;
  return TRUE;
}

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
  )
{
  UINTN    Ia;
  UINTN    Ib;
  UINTN    N;
  UINT64   Cur;
  UINT64   Last;
  BOOLEAN  Done;

  N  = 0;
  Ib = 0;
  for (Ia = 0; Ia < CountA; Ia++) {
    Cur  = A[Ia].Start;
    Last = A[Ia].Last;
    Done = FALSE;
    // Skip B ranges wholly below this A range; B is sorted, so they are
    // below every later A range too.
    while ((Ib < CountB) && (B[Ib].Last < Cur)) {
      Ib++;
    }

    while (!Done) {
      UINTN  J;

      // Find the first B range that overlaps [Cur, Last] (starting at Ib).
      J = Ib;
      while ((J < CountB) && (B[J].Last < Cur)) {
        J++;
      }

      if ((J == CountB) || (B[J].Start > Last)) {
        // No more overlap: the rest of A survives.
        if (N == Capacity) {
          *CountOut = N;
          return FALSE;
        }

        Out[N].Start = Cur;
        Out[N].Last  = Last;
        N++;
        Done = TRUE;
      } else {
        if (B[J].Start > Cur) {
          if (N == Capacity) {
            *CountOut = N;
            return FALSE;
          }

          Out[N].Start = Cur;
          Out[N].Last  = B[J].Start - 1;
          N++;
        }

        if (B[J].Last >= Last) {
          Done = TRUE;
        } else {
          Cur = B[J].Last + 1;
        }
      }
    }
  }

  *CountOut = N;
  return TRUE;
}

UINTN
EFIAPI
ZeroRangesAlignInward (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count
  )
{
  UINTN   Index;
  UINTN   Out;
  UINT64  Start;
  UINT64  Last;

  Out = 0;
  for (Index = 0; Index < Count; Index++) {
    Start = Ranges[Index].Start;
    Last  = Ranges[Index].Last;
    if ((Start & ZSHINT_PAGE_MASK) != 0) {
      if (Start > MAX_UINT64 - ZSHINT_PAGE_MASK) {
        continue;
      }

      Start = (Start + ZSHINT_PAGE_MASK) & ~ZSHINT_PAGE_MASK;
    }

    if ((Last & ZSHINT_PAGE_MASK) != ZSHINT_PAGE_MASK) {
      if (Last < ZSHINT_PAGE_MASK) {
        continue;
      }

      // Last + 1 cannot wrap: its low bits are not all ones.
      Last = ((Last + 1) & ~ZSHINT_PAGE_MASK) - 1;
    }

    if ((Last < Start) || (Last - Start < ZSHINT_PAGE_MASK)) {
      continue;
    }

    Ranges[Out].Start = Start;
    Ranges[Out].Last  = Last;
    Out++;
  }

  return Out;
}

UINTN
EFIAPI
ZeroRangesAlignOutward (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count
  )
{
  UINTN  Index;

  for (Index = 0; Index < Count; Index++) {
    Ranges[Index].Start &= ~ZSHINT_PAGE_MASK;
    Ranges[Index].Last  |= ZSHINT_PAGE_MASK;
  }

  return ZeroRangesNormalize (Ranges, Count);
}

UINT64
EFIAPI
ZeroRangesTotal (
  IN CONST ZERO_RANGE  *Ranges,
  IN UINTN             Count
  )
{
  UINTN   Index;
  UINT64  Total;
  UINT64  Size;

  Total = 0;
  for (Index = 0; Index < Count; Index++) {
    Size = Ranges[Index].Last - Ranges[Index].Start;
    if ((Size == MAX_UINT64) || (Size + 1 > MAX_UINT64 - Total)) {
      return MAX_UINT64;
    }

    Total += Size + 1;
  }

  return Total;
}

UINTN
EFIAPI
ZeroRangesTrimTop (
  IN OUT ZERO_RANGE  *Ranges,
  IN     UINTN       Count,
  IN     UINTN       Capacity,
  IN     UINT64      Limit,
  IN     UINT64      Bytes,
  OUT    UINT64      *Removed
  )
{
  UINTN   Index;
  UINTN   Move;
  UINT64  Top;
  UINT64  Avail;
  UINT64  Take;

  *Removed = 0;
  Index    = Count;
  while ((Index > 0) && (*Removed < Bytes)) {
    Index--;
    if (Ranges[Index].Start > Limit) {
      continue;
    }

    Top   = (Ranges[Index].Last > Limit) ? Limit : Ranges[Index].Last;
    Avail = Top - Ranges[Index].Start + 1;   // Top < MAX_UINT64 unless Limit is
    if (Avail == 0) {
      Avail = MAX_UINT64;                    // the whole space: saturate
    }

    Take = Bytes - *Removed;
    if (Take > Avail) {
      Take = Avail;
    }

    *Removed += Take;
    if (Ranges[Index].Last > Limit) {
      // Straddles Limit: keep the part above it in a new slot if there is
      // one; otherwise drop that part as well.
      if (Count < Capacity) {
        for (Move = Count; Move > Index + 1; Move--) {
          Ranges[Move].Start = Ranges[Move - 1].Start;
          Ranges[Move].Last  = Ranges[Move - 1].Last;
        }

        Ranges[Index + 1].Start = Limit + 1;
        Ranges[Index + 1].Last  = Ranges[Index].Last;
        Count++;
      }

      Ranges[Index].Last = Limit;
    }

    if (Take == Avail) {
      // The whole lower part goes.
      for (Move = Index; Move + 1 < Count; Move++) {
        Ranges[Move].Start = Ranges[Move + 1].Start;
        Ranges[Move].Last  = Ranges[Move + 1].Last;
      }

      Count--;
    } else {
      Ranges[Index].Last -= Take;
    }
  }

  return Count;
}

ZERO_HINT_STATUS
EFIAPI
ZeroHintCheckRam (
  IN  CONST VOID        *Blob,
  IN  UINT32            EntryCount,
  IN  CONST ZERO_RANGE  *Ram,
  IN  UINTN             RamCount,
  OUT UINT32            *BadEntry OPTIONAL
  )
{
  UINT32           Index;
  ZERO_HINT_ENTRY  Entry;
  ZERO_RANGE       Range;
  ZERO_RANGE       Left;
  UINTN            LeftCount;

  for (Index = 0; Index < EntryCount; Index++) {
    ZeroHintGetEntry (Blob, Index, &Entry);
    if (!ZeroRangeMake (Entry.Start, Entry.Length, FALSE, &Range) ||
        !ZeroRangesSubtract (&Range, 1, Ram, RamCount, &Left, 1, &LeftCount) ||
        (LeftCount != 0))
    {
      if (BadEntry != NULL) {
        *BadEntry = Index;
      }

      return ZeroHintOutOfRam;
    }
  }

  return ZeroHintOk;
}
