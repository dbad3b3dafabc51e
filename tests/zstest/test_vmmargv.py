"""Unit tests of zstest.vmmargv against the real `zerostart vmm-argv` (the
binary built in this tree: make test-fast runs them after cargo builds it),
and of the way L2's busybox sh turns a list line back into that argv.

Why: the nested harnesses now hand L2 whole VMM commands; a quoting slip
(a command line split at a blank, a '|' in a field, a `$` expanded) would
start a different VMM than the one built, in L2 where nobody sees it.
Run: PYTHONPATH=tests python3 -m unittest zstest.test_vmmargv
"""

import shutil
import subprocess
import unittest
from pathlib import Path

from zstest import vmmargv

import os

# Under make (ZEROSTART_BIN named) a missing binary is an error, not a skip.
if os.environ.get("ZEROSTART_BIN") and not Path(os.environ["ZEROSTART_BIN"]).is_file():
    raise SystemExit(f"zstest.test_vmmargv: ZEROSTART_BIN={os.environ['ZEROSTART_BIN']} does not exist; "
                     "build it (cargo build -p zerostart)")
try:
    ZS = vmmargv.zerostart_binary()
except vmmargv.VmmArgvError as e:
    ZS = None
    print(f"SKIP zstest.test_vmmargv: {e}")
SH = shutil.which("busybox")


def busybox_argv(line: str, fields: int) -> list[str]:
    """What an L2 script runs for LINE: split at '|' by `read` into FIELDS
    fields, the last one eval'd into "$@" (as l2-launch.sh does)."""
    names = " ".join(f"f{i}" for i in range(fields - 1))
    script = (f"IFS='|' read -r {names} cmd\n"
              'eval "set -- $cmd"\n'
              "for a in \"$@\"; do printf '%s\\0' \"$a\"; done\n")
    r = subprocess.run([SH, "sh", "-c", script], input=line + "\n", capture_output=True, text=True, check=True)
    return r.stdout.split("\0")[:-1]


@unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
class Build(unittest.TestCase):
    def test_qemu_argv_and_shell_line_match_the_binary(self):
        spec = {**vmmargv.l2_qemu(1), "memory": vmmargv.stock_memory(512), "kernel": "/k",
                "cmdline": "console=ttyS0 it's $HOME", "serial": "stdio"}
        b = vmmargv.build(spec, ZS)
        self.assertEqual(b.argv[:5], [vmmargv.L2_QEMU, "-L", vmmargv.L2_QEMU_DATA, "-machine",
                                      "q35,memory-backend=ram"])
        self.assertEqual(b.argv[-2:], ["-append", "console=ttyS0 it's $HOME"])
        self.assertEqual(b.files, {})
        # The Python quoting is the binary's --shell quoting, word for word.
        import json
        r = subprocess.run([str(ZS), "vmm-argv", "--shell", "-"], input=json.dumps(spec), capture_output=True,
                           text=True, check=True)
        self.assertEqual(b.shell(), r.stdout.rstrip("\n"))

    def test_firecracker_config_comes_as_a_file(self):
        inner = {"vmm": "firecracker", "binary": vmmargv.L2_FIRECRACKER, "cpus": 1,
                 "memory": {"backing": "anonymous", "size_mib": 64}, "kernel": "/k.vmlinux",
                 "cmdline": "console=ttyS0", "firecracker": {"config_path": "/zs/fc/x.json"}}
        b = vmmargv.build(vmmargv.launch(inner, "size=64M,source=none", "/tmp/x.tl.json"), ZS)
        self.assertEqual(b.argv[-3:], ["--", "--config-file", "/zs/fc/x.json"])
        self.assertIn('"mem_size_mib":64', b.files["/zs/fc/x.json"])

    def test_a_bad_spec_is_one_line_naming_the_fix(self):
        with self.assertRaises(vmmargv.VmmArgvError) as cm:
            vmmargv.build({"vmm": "qemu", "binary": "q", "serial": "tty",
                           "memory": {"backing": "anonymous", "size_mib": 1}}, ZS)
        msg = str(cm.exception)
        self.assertIn("vmm qemu: `serial` tty is not a QEMU serial backend; use", msg)
        self.assertNotIn("\n", msg)
        with self.assertRaises(vmmargv.VmmArgvError):
            vmmargv.build({"vmm": "qemu", "binary": "q", "colour": 1}, ZS)

    def test_memory_ready_probe_has_no_guest(self):
        a = vmmargv.build(vmmargv.memory_ready_probe(1024), ZS).argv
        self.assertEqual(a[-1], "-S")
        self.assertEqual(a[a.index("-monitor") + 1], "stdio")
        for guest in ("-kernel", "-append", "-serial", "-bios"):
            self.assertNotIn(guest, a)
        self.assertIn("memory-backend-file,id=ram,size=1024M,mem-path=/dev/hugepages,share=on,prealloc=on,"
                      "prealloc-threads=2", a)

    @unittest.skipUnless(SH, "no busybox")
    def test_busybox_sh_runs_exactly_the_built_argv(self):
        spec = vmmargv.zerostart_run("/zs/kernels/k", "console=ttyS0 a='b c' $x \\n | y", "size=64M", "tty",
                                     "/tmp/t.json", extra=["--acpi", "off"])
        b = vmmargv.build(spec, ZS)
        line = "|".join(["name", "30", b.shell()])
        self.assertEqual(busybox_argv(line, 3), b.argv)
        # Negative control: the same line unquoted is another command.
        self.assertNotEqual(busybox_argv("|".join(["name", "30", " ".join(b.argv)]), 3), b.argv)


class Pieces(unittest.TestCase):
    def test_list_field_refuses_a_separator(self):
        self.assertEqual(vmmargv.list_field("a b"), "a b")
        for bad in ("a|b", "a\nb"):
            with self.assertRaises(vmmargv.VmmArgvError):
                vmmargv.list_field(bad)

    def test_pool_socket_is_l2_pool_sh_s(self):
        text = (Path(__file__).resolve().parents[1] / "nested-host" / "l2-pool.sh").read_text()
        self.assertIn(f"\nsock={vmmargv.L2_POOL_SOCKET}\n", text)

    def test_no_binary_says_how_to_get_one(self):
        from unittest import mock
        # CARGO_TARGET_DIR relative, as cargo reads it: under the patched REPO.
        with mock.patch.dict("os.environ", {"ZEROSTART_BIN": "", "CARGO_TARGET_DIR": "target"}), \
                mock.patch.object(vmmargv, "REPO", Path("/nonexistent")):
            with self.assertRaises(vmmargv.VmmArgvError) as cm:
                vmmargv.build({"vmm": "qemu"}, "/no/such/zerostart")
        self.assertIn("no zerostart binary", str(cm.exception))
        self.assertIn("cargo build -p zerostart", str(cm.exception))

if __name__ == "__main__":
    unittest.main()
