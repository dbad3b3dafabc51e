#!/usr/bin/env python3
"""Leaves host memory dirty for the leak hunt (tests/redteam/cases.py).

  dirty.py anon MIB          fill MIB of anonymous memory with a secret, exit
                             (the pages go back to the host allocator dirty)
  dirty.py hugetlb MIB       same with 2M hugetlb pool pages (memfd)
  dirty.py hugetlb1g MIB     same with 1G hugetlb pool pages
           (MIB "all": every free page of the pool, so that any page a VM
           takes from the pool next held the secret; prints the count)
  dirty.py file MIB PATH     leave PATH (on hugetlbfs) holding the secret and
                             check it reads back from a second mapping
  dirty.py random MIB PATH   write MIB of random bytes to PATH

Every fill is read back before exit, so a case that then sees only zeros
in the VM proves the VMM or the host cleared real data.
"""

import mmap
import os
import sys

SECRET = b"ZSSECRET" * 512  # 4 KiB, no zero byte
CHUNK = 2 << 20


def fill(m, size):
    block = SECRET * (CHUNK // len(SECRET))
    for off in range(0, size, CHUNK):
        m[off : off + CHUNK] = block


def check(m, size):
    block = SECRET * (CHUNK // len(SECRET))
    for off in range(0, size, CHUNK):
        if m[off : off + CHUNK] != block:
            sys.exit(f"dirty.py: secret did not read back at offset {off:#x}")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    mode = sys.argv[1]
    if sys.argv[2] == "all" and mode in ("hugetlb", "hugetlb1g"):
        kb = 1048576 if mode == "hugetlb1g" else 2048
        d = f"/sys/kernel/mm/hugepages/hugepages-{kb}kB"
        free = int(open(f"{d}/free_hugepages").read()) - int(open(f"{d}/resv_hugepages").read())
        if free <= 0:
            sys.exit(f"dirty.py: no free {kb}kB hugepages to dirty")
        size = free * kb << 10
        print(f"dirty.py: {free} free {kb}kB pages: every one filled with the secret and read back")
    else:
        size = int(sys.argv[2]) << 20
    if mode == "anon":
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        fill(m, size)
        check(m, size)
        m.close()
    elif mode in ("hugetlb", "hugetlb1g"):
        flags = os.MFD_HUGETLB | os.MFD_CLOEXEC
        if mode == "hugetlb1g":
            flags |= os.MFD_HUGE_1GB
        fd = os.memfd_create("redteam-dirty", flags)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        fill(m, size)
        check(m, size)
        m.close()
        os.close(fd)
    elif mode == "file":
        path = sys.argv[3]
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        fill(m, size)
        m.close()
        os.close(fd)
        # The secret outlives the writer: a fresh mapping still reads it.
        fd = os.open(path, os.O_RDWR)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        check(m, size)
        m.close()
        os.close(fd)
    elif mode == "random":
        with open(sys.argv[3], "wb") as f:
            for _ in range(0, size, CHUNK):
                f.write(os.urandom(CHUNK))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
