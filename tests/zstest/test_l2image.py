"""Unit tests of zstest.l2image's pieces that need no network: the cpio writer
(device nodes without mknod, reproducible bytes, readable by GNU cpio and
by the kernel's concatenated-archive rule) and the lock-file parser.
Run: python3 -m unittest zstest.test_l2image (PYTHONPATH=tests; make does)
"""

import gzip
import io
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from zstest import l2image as build


def sample() -> build.Cpio:
    c = build.Cpio()
    c.dir("proc")
    c.chardev("dev/console", 5, 1)
    c.file("zs/bin/tool", b"\x7fELF-not-really" * 3, 0o755)
    c.symlink("bin/sh", "busybox")
    return c


class CpioTests(unittest.TestCase):
    def test_reproducible(self):
        a, b = io.BytesIO(), io.BytesIO()
        sample().write(a)
        sample().write(b)
        self.assertEqual(a.getvalue(), b.getvalue())
        self.assertEqual(sample().digest(), sample().digest())
        c = sample()
        c.file("zs/bin/tool", b"other", 0o755)
        self.assertNotEqual(c.digest(), sample().digest())

    def test_newc_layout(self):
        out = io.BytesIO()
        sample().write(out)
        data = out.getvalue()
        self.assertTrue(data.startswith(b"070701"))
        self.assertEqual(len(data) % 4, 0)
        self.assertIn(b"TRAILER!!!\0", data)

    @unittest.skipUnless(shutil.which("cpio"), "GNU cpio not installed (make deps)")
    def test_gnu_cpio_reads_it_and_concatenation(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "a.cpio"
            build.write_cpio(sample(), p, compress=False)
            extra = build.Cpio()
            extra.file("zs/scenarios.txt", b"x|y\n")
            with open(p, "ab") as f:  # how run.py appends the scenario list
                extra.write(f)
            listing = subprocess.run(["cpio", "-itv"], input=p.read_bytes(), capture_output=True,
                                     check=True).stdout.decode()
            first = listing.splitlines()
            names = [ln.split()[-1] if " -> " not in ln else ln.split()[-3] for ln in first]
            self.assertIn("dev/console", names)
            self.assertIn("zs/bin/tool", names)
            self.assertIn("bin/sh", names)
            dev = next(ln for ln in first if ln.endswith("dev/console"))
            self.assertTrue(dev.startswith("crw"), dev)
            self.assertIn("5,", dev)
            self.assertTrue(any(ln.startswith("-rwxr-xr-x") and ln.endswith("zs/bin/tool") for ln in first))
            # GNU cpio stops at the first trailer; the second archive starts right after it.
            raw = p.read_bytes()
            second = raw.index(b"070701", raw.index(b"TRAILER!!!"))
            rest = subprocess.run(["cpio", "-it"], input=raw[second:], capture_output=True, check=True).stdout
            self.assertIn(b"zs/scenarios.txt", rest)

    def test_gzip_has_no_timestamp(self):
        with tempfile.TemporaryDirectory() as d:
            p1, p2 = Path(d) / "1.gz", Path(d) / "2.gz"
            build.write_cpio(sample(), p1, compress=True)
            build.write_cpio(sample(), p2, compress=True)
            self.assertEqual(p1.read_bytes(), p2.read_bytes())
            self.assertTrue(gzip.decompress(p1.read_bytes()).startswith(b"070701"))


class LockTests(unittest.TestCase):
    def test_parse(self):
        e = build.LockEntry("linux-image-x=6.1-2 sha256=ab suite=bookworm meta=linux-image-cloud-amd64 role=l2-kernel")
        self.assertEqual((e.package, e.version, e.sha256, e.suite, e.meta, e.role),
                         ("linux-image-x", "6.1-2", "ab", "bookworm", "linux-image-cloud-amd64", "l2-kernel"))
        e = build.LockEntry("busybox-static=1:1.35.0-4 sha256=cd suite=bookworm")
        self.assertEqual((e.version, e.meta, e.role), ("1:1.35.0-4", None, "busybox-static"))

    def test_bad_line(self):
        with self.assertRaises(build.BuildError):
            build.LockEntry("busybox-static sha256=cd suite=bookworm")
        with self.assertRaises(build.BuildError):
            build.LockEntry("busybox-static=1 suite=bookworm")

    def test_repo_lock_is_complete(self):
        roles = {e.role for e in build.read_lock()}
        for r in ("l2-kernel", "busybox", "l3-kernel-debian-6.12", "qemu", "qemu-data"):
            self.assertIn(r, roles)
        for e in build.read_lock():
            self.assertRegex(e.sha256, r"^[0-9a-f]{64}$")


if __name__ == "__main__":
    unittest.main(verbosity=1)
