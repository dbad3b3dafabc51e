/** @file
  The qword zerostart's firmware tests write into memory that must not be
  taken as zero: tests/firmware/qemu fills guest RAM with it before boot,
  ZeroStartDump writes it over published pages for the warm-reset test and
  counts it, and ZeroStartHandover fills the pages its hint lies about.

  Copyright (c) zerostart authors.
  SPDX-License-Identifier: BSD-2-Clause-Patent
**/

#ifndef ZEROSTART_TEST_PATTERN_H_
#define ZEROSTART_TEST_PATTERN_H_

/// "TAPLLFSZ" in memory (tests/firmware/qemu/run_tests.py PATTERN).
#define FILL_PATTERN  0x5a53464c4c504154ULL

#endif
