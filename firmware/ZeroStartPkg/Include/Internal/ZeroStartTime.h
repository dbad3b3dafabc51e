/** @file
  Wrap-safe elapsed time from TimerLib's performance counter, shared by
  ZeroStartPei and ZeroStartDxe.

  OVMF's TimerLib is the ACPI PM timer: 24 bits at 3.58 MHz, so it wraps
  every 4.7 s and a plain subtraction across a wrap is garbage. The
  difference below is right for any interval shorter than one wrap; longer
  intervals (a large scrub) are measured by ticking a stopwatch often.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#ifndef ZEROSTART_TIME_H_
#define ZEROSTART_TIME_H_

#include <Library/TimerLib.h>

/// Counter ticks from From to To, assuming less than one wrap in between.
STATIC
UINT64
ZeroStartCounterTicks (
  IN UINT64  From,
  IN UINT64  To
  )
{
  UINT64  Start;
  UINT64  End;
  UINT64  Lo;
  UINT64  Hi;

  Start = 0;
  End   = 0;
  GetPerformanceCounterProperties (&Start, &End);
  Lo = (Start < End) ? Start : End;
  Hi = (Start < End) ? End : Start;
  if (End >= Start) {
    return (To >= From) ? To - From : (Hi - From) + (To - Lo) + 1;
  }

  return (To <= From) ? From - To : (From - Lo) + (Hi - To) + 1;
}

/// Nanoseconds since From (a GetPerformanceCounter value), less than a wrap ago.
STATIC
UINT64
ZeroStartElapsedNs (
  IN UINT64  From
  )
{
  return GetTimeInNanoSecond (ZeroStartCounterTicks (From, GetPerformanceCounter ()));
}

#endif
