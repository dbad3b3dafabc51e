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


def load(rel: str, name: str):
    """A harness script under tests/ as a module (they are scripts, not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / rel)
    mod = importlib.util.module_from_spec(spec)
    import sys
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def flag(argv: list[str], name: str) -> str:
    """The value after the one NAME in ARGV."""
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


@unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
class HarnessCommands(unittest.TestCase):
    """Each QEMU command the harness used to spell by hand, now from the
    builder, against what it spelled (the flags that matter, and no other).
    Where the spelling changed harmlessly, the test says how."""

    def setUp(self):
        from unittest import mock
        p = mock.patch.dict("os.environ", {"ZEROSTART_BIN": str(ZS), "ZSE2E_L2_QEMU": "/x/qemu",
                                           "ZSE2E_L2_QEMU_DATA": "/d1:/d2"})
        p.start()
        self.addCleanup(p.stop)
        os.environ.pop("ZSE2E_L2_APPEND", None)

    def test_l2_command(self):
        from zstest import qemu
        a = qemu.l2_command({"vmlinuz": "/v"}, Path("/i"), 2048, 528, 2, "zse2e.script=x.sh")
        # Was: qemu -L /d1 -L /d2 -accel tcg,thread=multi -cpu EPYC,+svm -m 2048M -smp 2 -nodefaults
        # -no-user-config -display none -serial stdio -monitor none -no-reboot -mem-prealloc
        # -kernel /v -initrd /i -append ...; now also -machine pc, QEMU's default.
        self.assertEqual(a[:5], ["/x/qemu", "-L", "/d1", "-L", "/d2"])
        for f, v in (("-machine", "pc"), ("-accel", "tcg,thread=multi"), ("-cpu", qemu.L2_CPU), ("-m", "2048M"),
                     ("-smp", "2"), ("-display", "none"), ("-serial", "stdio"), ("-monitor", "none"),
                     ("-kernel", "/v"), ("-initrd", "/i")):
            self.assertEqual(flag(a, f), v, f)
        self.assertEqual(qemu.L2_CPU, "EPYC,+svm")
        for f in ("-nodefaults", "-no-user-config", "-no-reboot", "-mem-prealloc"):
            self.assertEqual(a.count(f), 1, f)
        self.assertEqual(flag(a, "-append"), "console=ttyS0 panic=-1 quiet loglevel=5 init_on_alloc=0 hugepages=528 "
                                             "zse2e.script=x.sh ")
        self.assertEqual(len(a), 5 + 2 * 11 + 4, a)
        # boot_l2's: the monitor socket, the end log, the microvm disks, no prealloc, another accel.
        disk = {"path": "/r/rootfs.ext4", "snapshot": True, "cache": "writeback"}
        b = qemu.l2_command({"vmlinuz": "/v"}, Path("/i"), 2048, 528, 2, accel="tcg,thread=single", prealloc=False,
                            disks=[disk, disk], monitor=Path("/t/m.sock"), end_log=Path("/t/e.log"))
        self.assertEqual(flag(b, "-monitor"), "unix:/t/m.sock,server=on,wait=off")
        self.assertEqual(flag(b, "-accel"), "tcg,thread=single")
        self.assertEqual(flag(b, "-D"), "/t/e.log")
        self.assertEqual(b[b.index("-d"):b.index("-d") + 6],
                         ["-d", "cpu_reset", "-trace", "qemu_system_shutdown_request", "-D", "/t/e.log"])
        self.assertNotIn("-mem-prealloc", b)
        # Was -drive file=/r/rootfs.ext4,if=virtio,format=raw,snapshot=on twice: the same two
        # virtio-blk-pci devices in the same order, QEMU's default cache said.
        drives = [b[i + 1] for i, x in enumerate(b) if x == "-drive"]
        self.assertEqual(drives, [f"file=/r/rootfs.ext4,format=raw,if=none,id=zs-disk{i},cache=writeback,snapshot=on"
                                  for i in (0, 1)])
        self.assertEqual([b[i + 1] for i, x in enumerate(b) if x == "-device"],
                         ["virtio-blk-pci,drive=zs-disk0", "virtio-blk-pci,drive=zs-disk1"])
        with self.assertRaises(vmmargv.VmmArgvError):
            qemu.l2_command({"vmlinuz": "/v"}, Path("/i"), 2048, 528, 2, accel="hvf")

    def test_accel_options(self):
        self.assertEqual(vmmargv.accel_options("tcg,thread=multi"), {"accel": "tcg", "tcg_thread": "multi"})
        self.assertEqual(vmmargv.accel_options("tcg,thread=single"), {"accel": "tcg", "tcg_thread": "single"})
        self.assertEqual(vmmargv.accel_options("tcg"), {"accel": "tcg"})
        self.assertEqual(vmmargv.accel_options("kvm"), {"accel": "kvm"})
        for bad in ("kvm,thread=single", "tcg,thread=many", "whpx", ""):
            with self.assertRaises(vmmargv.VmmArgvError):
                vmmargv.accel_options(bad)

    def test_kernel_command(self):
        from zstest import qemu
        a = qemu.kernel_command("/k/bzImage", "quiet", 2048, ["-netdev", "user,id=n0"],
                                thread="single", end_log=Path("/w/b.log.qemu.log"), spec={"initrd": "/i"})
        # Was: qemu-system-x86_64 -accel tcg,thread=single -cpu max -m 2048 -smp 2 -nographic -no-reboot
        # -nodefaults -serial stdio -kernel K -append A EXTRA (-initrd in EXTRA), end log appended
        # by boot(); now also -machine pc (QEMU's default), -no-user-config (no /etc/qemu here), -m in M.
        self.assertEqual(a[0], qemu.KERNEL_QEMU)
        for f, v in (("-machine", "pc"), ("-accel", "tcg,thread=single"), ("-cpu", "max"), ("-m", "2048M"),
                     ("-smp", "2"), ("-serial", "stdio"), ("-kernel", "/k/bzImage"), ("-initrd", "/i"),
                     ("-append", "console=ttyS0 panic=-1 oops=panic quiet"), ("-D", "/w/b.log.qemu.log")):
            self.assertEqual(flag(a, f), v, f)
        for f in ("-nographic", "-no-reboot", "-nodefaults", "-no-user-config"):
            self.assertEqual(a.count(f), 1, f)
        self.assertNotIn("-display", a)
        self.assertEqual(a[-2:], ["-netdev", "user,id=n0"])
        r = qemu.kernel_command("/k", "", 128, reboot=True, cpu="qemu64", smp=1)
        self.assertNotIn("-no-reboot", r)
        self.assertEqual((flag(r, "-cpu"), flag(r, "-smp"), flag(r, "-m")), ("qemu64", "1", "128M"))
        self.assertNotIn("-D", r)
        with mock_env(ZS_TCG_THREAD="multi"):
            self.assertEqual(flag(qemu.kernel_command("/k", "", 128), "-accel"), "tcg,thread=multi")

    def test_kernel_tests_efi_and_text_and_disks(self):
        import sys
        from unittest import mock
        from zstest import qemu, guestkernel as gk
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))
        try:
            cases = load("kernel/cases.py", "zs_kernel_cases")
        finally:
            sys.path.pop(0)
        got = {}

        def boot_case(k, r, expect, extra, image, *, mem=None, common="", spec=None):
            got.update(spec=spec)
            return []
        import tempfile
        with tempfile.TemporaryDirectory() as d, mock.patch.object(cases, "boot_case", boot_case), \
                mock.patch.object(cases, "expect_line", lambda *a: None), \
                mock.patch.object(cases.subprocess, "run", lambda *a, **k: mock.Mock(returncode=0)):
            fw = Path(d) / "OVMF.fd"
            fw.write_bytes(b"")
            k = mock.Mock(firmware=fw, work=Path(d), mem_mib=1024, image=Path("/k"))
            cases.efi(k, mock.Mock())
        a = qemu.kernel_command("/k", "x", 1024, spec=got["spec"])
        # Was: -machine q35 -bios FW -fw_cfg name=opt/org.zerostart/prezeroed,file=HINT
        # -debugcon file:LOG -global isa-debugcon.iobase=0x402 after the default command.
        self.assertEqual(flag(a, "-machine"), "q35")
        self.assertEqual(flag(a, "-bios"), str(fw))
        self.assertEqual(flag(a, "-fw_cfg"), f"name=opt/org.zerostart/prezeroed,file={Path(d) / 'efi.hint'}")
        self.assertEqual(flag(a, "-debugcon"), f"file:{Path(d) / 'boot-efi.fw.log'}")
        self.assertEqual(flag(a, "-global"), "isa-debugcon.iobase=0x402")
        # Was: -smbios type=11,value=prezero.hint=TEXT.
        part, spec = cases.text_transport_args("smbios", "AbC-_9")
        self.assertEqual(part, "nokaslr")
        self.assertEqual(flag(qemu.kernel_command("/k", "x", 64, spec=spec), "-smbios"),
                         "type=11,value=prezero.hint=AbC-_9")
        self.assertEqual(cases.text_transport_args("cmdline", "AbC"), ("prezero.hint=AbC", {}))
        # Was: -device loader,file=B,addr=HINT_ADDR,force-raw=on (gk.loader_args, which the shell
        # measurement scripts still take), the plants after it, and -drive file=F,if=virtio,format=raw:
        # the same virtio-blk-pci, QEMU's default cache said.
        spec = {**gk.hint_spec("/b", gk.loader("/p", 1 << 30)), "disks": [gk.test_disk("/w/f")]}
        a = qemu.kernel_command("/k", "x", 64, spec=spec)
        self.assertEqual(flag(a, "-drive"), "file=/w/f,format=raw,if=none,id=zs-disk0,cache=writeback")
        self.assertEqual([a[i + 1] for i, x in enumerate(a) if x == "-device"],
                         ["virtio-blk-pci,drive=zs-disk0", gk.loader_args("/b")[1],
                          "loader,file=/p,addr=1073741824,force-raw=on"])
        self.assertEqual(gk.loader_args("/b"), ["-device", f"loader,file=/b,addr={gk.HINT_ADDR},force-raw=on"])

    def test_firmware_test_boots(self):
        import tempfile
        from types import SimpleNamespace
        from unittest import mock
        from zstest import qemu
        rt = load("firmware/qemu/run_tests.py", "zs_fw_run_tests")
        cmds = []

        def boot(cmd, log, timeout):
            cmds.append(cmd)
            return qemu.Boot(0, 1.0, [], log, timeout)
        with tempfile.TemporaryDirectory() as d, mock.patch.object(rt.qemu, "boot", boot), \
                mock.patch.object(rt.shutil, "copy", lambda *a: None):
            args = SimpleNamespace(fw_dir="/fw", qemu="/q/qemu")
            mib = rt.MiB
            rt.run_qemu(args, d, "a", 1024 * mib, 2, hint=b"h", smbios=["prezero.hint=T"])
            rt.run_qemu(args, d, "b", 8 * mib, 1, hint=b"h", pattern=True, reboot_test=True, prealloc=True)
            rt.run_qemu(args, d, "c", 1024 * mib, 2, linux=("/k", "/i", "console=ttyS0"))
            a, b, c = cmds
            # Was: Q -machine q35 -accel tcg,thread=multi -cpu max -m 1024M -smp 2 -nodefaults
            # -display none -bios FW -serial file:S -debugcon file:D -global isa-debugcon.iobase=0x402
            # -drive if=none,id=esp,format=raw,readonly=on,file=fat:ESP -device virtio-blk-pci,drive=esp
            # -no-reboot -fw_cfg name=opt/org.zerostart/prezeroed,file=H -smbios type=11,value=...;
            # now also -no-user-config, the end log in the command, the ESP's id zs-disk0 and its cache said.
            self.assertEqual(a[0], "/q/qemu")
            for f, v in (("-machine", "q35"), ("-accel", "tcg,thread=multi"), ("-cpu", "max"), ("-m", "1024M"),
                         ("-smp", "2"), ("-display", "none"), ("-bios", "/fw/OVMF.fd"),
                         ("-serial", f"file:{d}/a/serial.log"), ("-debugcon", f"file:{d}/a/debug.log"),
                         ("-global", "isa-debugcon.iobase=0x402"),
                         ("-drive", f"file=fat:{d}/a/esp,format=raw,if=none,id=zs-disk0,cache=writeback,readonly=on"),
                         ("-device", "virtio-blk-pci,drive=zs-disk0"),
                         ("-fw_cfg", f"name=opt/org.zerostart/prezeroed,file={d}/a/hint.bin"),
                         ("-smbios", "type=11,value=prezero.hint=T"), ("-D", f"{d}/a/qemu.log.qemu.log")):
                self.assertEqual(flag(a, f), v, f)
            for f in ("-no-reboot", "-nodefaults"):
                self.assertEqual(a.count(f), 1, f)
            for f in ("-mem-prealloc", "-kernel", "-object"):
                self.assertNotIn(f, a)
            # Was: ... -mem-prealloc -fw_cfg name=opt/org.zerostart/test/reboot,file=F (no -no-reboot)
            # -fw_cfg ...prezeroed... -object memory-backend-file,id=ram0,size=8M,mem-path=R,share=off
            # -machine memory-backend=ram0 (-mem-prealloc made that backend prealloc=on).
            self.assertEqual(flag(b, "-machine"), "q35,memory-backend=ram")
            self.assertEqual(flag(b, "-object"),
                             f"memory-backend-file,id=ram,size=8M,mem-path={d}/b/ram.img,share=off,prealloc=on")
            self.assertNotIn("-no-reboot", b)
            self.assertEqual([b[i + 1] for i, x in enumerate(b) if x == "-fw_cfg"],
                             [f"name=opt/org.zerostart/test/reboot,file={d}/b/reboot.flag",
                              f"name=opt/org.zerostart/prezeroed,file={d}/b/hint.bin"])
            self.assertNotIn("-smbios", b)
            # Was: -kernel K -initrd I -append A and no ESP disk.
            self.assertEqual((flag(c, "-kernel"), flag(c, "-initrd"), flag(c, "-append")),
                             ("/k", "/i", "console=ttyS0"))
            for f in ("-drive", "-device", "-fw_cfg"):
                self.assertNotIn(f, c)

    def test_rootfs_boot(self):
        rf = load("rootfs/run.py", "zs_rootfs_run")
        with mock_env(ZS_TCG_THREAD=None):
            a = rf.command(Path("/img"), Path("/out/serial.log"))
        # Was: -accel tcg,thread=single -cpu max -m 2048 -smp 2 -nographic -no-reboot -nodefaults
        # -serial stdio -kernel /img/vmlinuz -append ... -initrd /img/initrd.img
        # -drive file=/img/rootfs.ext4,if=virtio,format=raw,snapshot=on -netdev user,id=n0
        # -device virtio-net-pci,netdev=n0. The disk is now an explicit virtio-blk-pci before the NIC
        # (if=virtio created it last): another PCI slot for each, which the image does not
        # mind (root=LABEL=, systemd-networkd matches en*).
        for f, v in (("-accel", "tcg,thread=single"), ("-cpu", "max"), ("-m", "2048M"), ("-smp", "2"),
                     ("-kernel", "/img/vmlinuz"), ("-initrd", "/img/initrd.img"),
                     ("-append", "console=ttyS0 panic=-1 oops=panic root=LABEL=zsroot quiet zsapp.poweroff=1"),
                     ("-drive", "file=/img/rootfs.ext4,format=raw,if=none,id=zs-disk0,cache=writeback,snapshot=on"),
                     ("-netdev", "user,id=n0"), ("-D", "/out/serial.log.qemu.log")):
            self.assertEqual(flag(a, f), v, f)
        self.assertEqual([a[i + 1] for i, x in enumerate(a) if x == "-device"],
                         ["virtio-blk-pci,drive=zs-disk0", "virtio-net-pci,netdev=n0"])
        self.assertIn("-no-reboot", a)

    def test_l2_kallsyms_boot(self):
        import subprocess as sp
        import tempfile
        from unittest import mock
        from zstest import l2image
        got = []
        real = sp.run

        def run(cmd, **kw):
            if cmd[0] == str(ZS):  # the builder itself
                return real(cmd, **kw)
            got.append(cmd)
            raise sp.TimeoutExpired(cmd, 300)
        with tempfile.TemporaryDirectory() as d, mock.patch.object(l2image, "cache_root", lambda: Path(d)), \
                mock.patch.object(l2image.shutil, "which", lambda q: "/usr/bin/" + q), \
                mock.patch.object(l2image.subprocess, "run", run), mock.patch.object(l2image, "log", lambda m: None):
            bb = Path(d) / "busybox"
            bb.write_bytes(b"bb")
            self.assertIsNone(l2image.l2_kallsyms(Path("/v"), "h" * 20, bb, ZS))
        (a,) = got
        # Was: qemu -m 512 -display none -no-reboot -nodefaults -serial file:S -kernel V -initrd I
        # -append ...; now also -machine pc -accel tcg,thread=multi (QEMU's defaults, one vCPU)
        # and -no-user-config.
        self.assertEqual(a[0], os.environ.get("ZS_KERNEL_QEMU", "qemu-system-x86_64"))
        for f, v in (("-machine", "pc"), ("-accel", "tcg,thread=multi"), ("-m", "512M"), ("-display", "none"),
                     ("-kernel", "/v"), ("-append", "console=ttyS0 quiet panic=-1")):
            self.assertEqual(flag(a, f), v, f)
        self.assertTrue(flag(a, "-serial").startswith("file:") and flag(a, "-serial").endswith("/serial.txt"))
        self.assertTrue(flag(a, "-initrd").endswith("/init.cpio"))
        for f in ("-no-reboot", "-nodefaults"):
            self.assertIn(f, a)
        for f in ("-smp", "-cpu", "-monitor", "-D"):
            self.assertNotIn(f, a)


class mock_env:
    """os.environ with NAME=VALUE (None: unset) for a with block."""

    def __init__(self, **kv):
        self.kv = kv

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.kv}
        for k, v in self.kv.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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

    def test_an_older_binary_says_to_rebuild(self):
        # A zerostart that refuses a field the harness writes (a static
        # build from an earlier tree, found first): the error says so and
        # names the fix; any other refusal is passed on as it is.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            old = Path(d, "zerostart")
            old.write_text("#!/bin/sh\necho 'zerostart vmm-argv: vmm spec: unknown field `tcg_thread`' >&2\nexit 2\n")
            old.chmod(0o755)
            with self.assertRaises(vmmargv.VmmArgvError) as cm:
                vmmargv.build({"vmm": "qemu"}, old)
            self.assertIn("older than the harness", str(cm.exception))
            self.assertIn("ZEROSTART_BIN", str(cm.exception))
            old.write_text("#!/bin/sh\necho 'zerostart vmm-argv: no kernel' >&2\nexit 2\n")
            with self.assertRaises(vmmargv.VmmArgvError) as cm:
                vmmargv.build({"vmm": "qemu"}, old)
            self.assertNotIn("older than the harness", str(cm.exception))

if __name__ == "__main__":
    unittest.main()
