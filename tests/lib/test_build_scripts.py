"""The cached builds build only what they are asked for: firmware/build.sh
keys its output directory without the platform list (make demo asks for
OVMF alone, make firmware for both, into one directory) and finds a
directory holding the asked-for images up to date; both build scripts
refuse an unknown platform or kernel variant with one line."""
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIRMWARE = REPO / "firmware" / "build.sh"
KERNEL = REPO / "guest-kernel-patches" / "build.sh"


def run(script: Path, cache: str, *args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, ZEROSTART_CACHE=cache, **env))


class Firmware(unittest.TestCase):
    def test_the_platforms_are_not_in_the_key(self):
        with tempfile.TemporaryDirectory() as d:
            dirs = {run(FIRMWARE, d, "--print-dir", FW_PLATFORMS=p).stdout for p in ("ovmf", "cloudhv", "ovmf cloudhv")}
            self.assertEqual(len(dirs), 1, dirs)

    def test_a_directory_with_the_asked_images_is_up_to_date(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(run(FIRMWARE, d, "--print-dir").stdout.strip())
            out.mkdir(parents=True)
            (out / "build.env").write_text("FW_TARGET=DEBUG\n")
            (out / "OVMF.fd").write_bytes(b"x")
            r = run(FIRMWARE, d, "--no-deps", FW_PLATFORMS="ovmf")
            self.assertEqual((r.returncode, r.stdout.strip()), (0, str(out)), r.stderr)
            self.assertIn("up to date", r.stderr)

    def test_an_unknown_platform_is_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(FIRMWARE, d, FW_PLATFORMS="ovmf bogus")
            self.assertEqual(r.returncode, 2)
            self.assertEqual(r.stderr, "firmware: unknown platform 'bogus' in FW_PLATFORMS (ovmf, cloudhv)\n")


class Kernel(unittest.TestCase):
    def test_an_unknown_variant_is_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(KERNEL, d, ZEROSTART_KERNEL_VARIANTS="y q")
            self.assertEqual(r.returncode, 1)
            self.assertEqual(r.stderr, "guest-kernel build: ZEROSTART_KERNEL_VARIANTS: unknown variant 'q' "
                                       "(use y, n, kasan or a list: \"y n\")\n")

    def test_print_names_nothing_before_a_build(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(run(KERNEL, d, "--print").returncode, 1)


if __name__ == "__main__":
    unittest.main()
