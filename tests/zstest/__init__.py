"""zerostart's host-side test harness: one package for every Python driver.

Why one package: the nested-host e2e, launch and demo harnesses, the
firmware-boot runs and the pool's nested bench each had their own QEMU
start, serial reader, L2 image import (by sys.path edits) and parsers.
They now share:

  zstest.l2image   the nested test host's image (Debian packages, cached)
  zstest.qemu      the one QEMU boot-and-read-serial driver (boot_l2, Console;
                   boot for the one-shot TCG boots of the kernel and firmware tests;
                   tests/rootfs/run.py starts its own QEMU and reads it with Console)
  zstest.probe     the one probe-boot-and-judge helper (zerostart run on /dev/kvm)
  zstest.suite     the one case-table runner (tests/vmm/cases.py, tests/redteam/cases.py,
                   tests/pool/cases.py, tests/kernel/cases.py,
                   tests/firmware/qemu/run_tests.py)
  zstest.hugepages hugepage pools grown for a run and given back (suites in-process,
                   scripts through its CLI: python3 -m zstest.hugepages KB:PAGES -- CMD)
  zstest.timeline  the checked schema of zerostart's --timeline JSON
  zstest.sizes     the one size parser ("4G", "512M", "0x1000")
  zstest.hint      the one Python hint encoder (docs/hint-abi.md), held to tests/vectors
  zstest.fakes     test doubles for the drivers' unit tests

make puts tests/ on PYTHONPATH once (the Makefile); outside make run
`PYTHONPATH=tests python3 ...`. Python 3 standard library only.
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
