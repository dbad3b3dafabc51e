#!/usr/bin/env python3
"""Unit tests of the launch harness's judging and report rows (no QEMU).

Why: `make test-launch` decides whether the launcher's hint is honest; a
judge that passed a verify failure, a missed planted byte or a trusted
corrupt hint would make the suite unable to fail. Synthetic L2 consoles.
Run: python3 tests/nested-host/test_launch.py
"""

import os
import shutil
import tempfile
import unittest
from unittest import mock
from pathlib import Path

import launch
from zstest import l2image as build
from zstest import qemu
from zstest import vmmargv
from zstest.test_vmmargv import SH, ZS, busybox_argv
from zstest.qemu import snapshot_summary
from zstest.fakes import FakeConsole

launch.print = lambda *a, **k: None
qemu.print = lambda *a, **k: None  # rerun_after_bed_faults' retry lines

V = ("ZSINIT: PASS hint=absent ranges=0 hinted_bytes=0 zero_checked_bytes=201326592 nonzero_bytes=0 "
     "hinted_checked_bytes=0 populate_ms=236 uptime_ms=8540 kernel_pages_skipped={sk} "
     "kernel_bytes_verified=325771264 kernel_verify_failures={vf} kernel=6.12.107")
# The shape `zerostart launch --timeline` writes (vmm/timeline's LaunchTimeline;
# checked by zstest.timeline against docs/schema/timeline-launch.schema.json).
TL = ('{"phases":[{"name":"process_start","t_ms":0.0},{"name":"memory_ready","t_ms":21.7},'
      '{"name":"hint_ready","t_ms":22.0},{"name":"vmm_spawned","t_ms":23.1},{"name":"exit","t_ms":9000.0}],'
      '"vmm":"qemu","boot":"uefi","hint_transport":"fw_cfg","argv":["qemu-system-x86_64","-m","1024M"],'
      '"memory_bytes":1073741824,'
      '"memory_source":"pool","memory_source_asked":"pool","lease":1,"lease_held_bytes":1073741824,'
      '"hint":{"ranges":[[1048576,1072693248]],"bytes":1072693248,"corrupt":null},"exit":{"code":0,"signal":null},'
      '"guest_phases":[]}')


def drive(sc, verdict, fw=(), rc=0, tl=TL, l3=()):
    lines = ["ZSL-POOL ready ms=1", f"ZSL-BEGIN name={sc.name} t0_ms=1000",
             *[f"L3| 4000 {x}" for x in l3],
             "L3| 5000 ZSINIT: START kernel=6.12 uptime_ms=300",
             "L3| 5100 ZSINIT: kernel-zerostart start pristine_pages_at_boot=155506",
             f"L3| 9000 {verdict}", *[f"FW| {x}" for x in fw],
             f"ZSL-TIMELINE name={sc.name} {tl}", f"ZSL-END name={sc.name} rc={rc} wall_ms=9000", "ZSE2E-DONE rc=0"]
    results, fatal = launch._drive(FakeConsole(lines), [sc])
    assert fatal is None, fatal
    return results[0]


class Retry(unittest.TestCase):
    """run_scenarios boots L2 again only after a test-bed fault, for what it had not finished."""

    LOST = "nested host silent, its QEMU running; cpu0 HLT=1 IF=1 IRR=236,251; UNDELIVERED INTERRUPT cpu0"

    def run_with(self, boots, n=3):
        calls = []

        def fake_boot_once(scs, *rest):
            calls.append([s.name for s in scs])
            return boots[len(calls) - 1](scs)
        retries: list[str] = []
        scs = [launch.LaunchScenario(f"s{i}", 1024) for i in range(n)]
        with mock.patch.object(launch, "_boot_once", fake_boot_once), \
                mock.patch.object(launch.build, "default_l3_kernels", lambda: {}), \
                mock.patch.object(launch.build, "build_l2", lambda *a, **k: {}):
            res, fatal = launch.run_scenarios(scs, Path("zs"), Path("fw"), 1024, 1024, l2_retries=retries)
        return calls, res, fatal, retries

    @staticmethod
    def done(sc):
        r = launch.LaunchResult(sc)
        r.rc = 0
        return r

    def stalled(self, scs, l3=()):
        cur = launch.LaunchResult(scs[1], l3=list(l3))
        cur.failures.append("harness timeout")
        return [self.done(scs[0]), cur], f"timeout after 356 s ({self.LOST})", self.LOST

    def test_a_lost_interrupt_boots_l2_again_for_the_rest(self):
        calls, res, fatal, retries = self.run_with([self.stalled, lambda scs: ([self.done(s) for s in scs], None, None)])
        self.assertEqual(calls, [["s0", "s1", "s2"], ["s1", "s2"]])
        self.assertEqual(([r.sc.name for r in res], fatal), (["s0", "s1", "s2"], None))
        self.assertEqual(len(retries), 1)
        self.assertIn("UNDELIVERED INTERRUPT cpu0", retries[0])
        self.assertIn("1 L2 retries", launch.retries_line("launch", retries))

    def test_retries_are_bounded(self):
        calls, res, fatal, retries = self.run_with([self.stalled] * 5)
        self.assertEqual(len(calls), 1 + launch.L2_RETRIES)
        self.assertIn("UNDELIVERED", fatal)
        self.assertEqual(res[-1].failures, ["harness timeout"])

    def test_a_silent_host_without_a_bed_fault_is_a_failure(self):
        # Negative control: the same stall with no proof it was the test bed.
        def stalled_guest(scs):
            res, fatal, _ = self.stalled(scs)
            return res, fatal, None
        calls, res, fatal, retries = self.run_with([stalled_guest])
        self.assertEqual((len(calls), retries), (1, []))
        self.assertEqual(res[1].failures, ["harness timeout"])

    def test_a_guest_kernel_bug_is_never_retried(self):
        calls, res, fatal, retries = self.run_with(
            [lambda scs: self.stalled(scs, l3=[(9000, "Kernel panic - not syncing: Fatal exception")])])
        self.assertEqual((len(calls), retries), (1, []))
        self.assertIsNotNone(fatal)


class Judge(unittest.TestCase):
    def test_a_guest_shutdown_says_what_it_was_delivering(self):
        # The record of a real one (2026-11-27, microvm-launch with a verbose
        # guest): a #PF on fetching the instruction after an `out`.
        rec = ("qemu-system-x86-243     [000] .....    40.048123: kvm_exit: vcpu 0 reason shutdown rip "
               "0xffffffff815be1a6 info1 0x0000000000000000 info2 0x0000000000000000 intr_info 0x80000b0e "
               "error_code 0x00000010")
        self.assertEqual(launch.shutdown_event(rec),
                         "delivering #PF, error 0x10: instruction fetch, kernel, page not present")
        self.assertEqual(launch.shutdown_event(rec.replace("0x80000b0e", "0x80000b0d").replace("0x00000010", "0x0")),
                         "delivering #GP, error 0x0")
        self.assertIsNone(launch.shutdown_event(rec.replace("0x80000b0e", "0x00000000")))
        r = launch.LaunchResult(launch.LaunchScenario("x", 1024), qlog="resets=2 ended=reset",
                                kvmx=[f"KVMX| {rec}"])
        self.assertTrue(r.end_story().endswith("error_code 0x00000010 (delivering #PF, error 0x10: instruction "
                                               "fetch, kernel, page not present)"), r.end_story())

    def test_a_shutdown_after_a_pass_verdict_fails_the_row(self):
        # The crash hunt of 2026-12-03 (row 2): the guest printed its PASS,
        # then triple-faulted in its power-off. Every judge must fail it;
        # the same row without the shutdown record passes (the control).
        rec = ("qemu-system-x86-722     [000] .....    41.613697: kvm_exit: vcpu 0 reason shutdown rip "
               "0xffffffffb8c66fee info1 0x0000000000000000 info2 0x0000000000000000 intr_info 0x80000b0e "
               "error_code 0x00000000")
        sc = launch.LaunchScenario("x", 1024, guest_args="prezero.verify=1")
        verdict = ("ZSINIT: PASS hint=absent nonzero_bytes=0 kernel_pages_skipped=10 kernel_verify_failures=0 "
                   "kernel_bytes_verified=4096")
        def result(kvmx):
            return launch.LaunchResult(sc, rc=0, l3=[(1, verdict)], kvmx=kvmx, timeline={},
                                       qlog="resets=2 ended=reset")
        import demo
        import microvm
        crashed, clean = result([rec]), result(["shutdown_exits=0 injected_exceptions=2"])
        self.assertIn("the guest shut down (triple fault) after its verdict", crashed.shut_down())
        self.assertIn("delivering #PF", crashed.shut_down())
        self.assertIsNone(clean.shut_down())
        micro = microvm.MicroScenario("m", 1024, kind="zerostart")
        for judge in (launch.judge, demo.judge_vmm, microvm.judge):
            a, b = result([rec]), result(["shutdown_exits=0 injected_exceptions=2"])
            if judge is microvm.judge:
                a.sc = b.sc = micro
            judge(a); judge(b)
            self.assertTrue(any("shut down (triple fault)" in x for x in a.failures), (judge, a.failures))
            self.assertFalse(any("shut down" in x for x in b.failures), (judge, b.failures))

    def test_the_bed_qemus_shutdown_line_joins_the_story(self):
        # bed-qemu patches/0004 prints it on L2's stderr, between L3 lines.
        sc = launch.LaunchScenario("x", 1024)
        line = ("QEMU-SVM cpu1 guest shutdown: exception 0xe error 0x10 rip 0xffffffff815be1a6 cpl 0 "
                "cr3 0x1000 npt 1 nested_cr3 0x2000 vmcb.cr3 0x1000 vmcb.nested_cr3 0x2000")
        lines = ["ZSL-POOL ready ms=1", f"ZSL-BEGIN name={sc.name} t0_ms=1000", "L3| 4000 booting", line,
                 f"ZSL-END name={sc.name} rc=0 wall_ms=9000", "ZSE2E-DONE rc=0"]
        results, fatal = launch._drive(FakeConsole(lines), [sc])
        self.assertIsNone(fatal)
        self.assertEqual(results[0].bed, [line])
        self.assertIn("nested host's QEMU: exception 0xe error 0x10 rip 0xffffffff815be1a6", results[0].end_story())
        self.assertNotIn("nested host's QEMU", launch.LaunchResult(sc).end_story())

    def test_the_bed_qemus_invariant_line_joins_the_story_without_its_ring(self):
        # bed-qemu patches/0005: the head of the line in the failure line,
        # the ring of world switches only in the console log.
        sc = launch.LaunchScenario("x", 1024)
        inv = ("QEMU-SVM cpu0 invariant: guest mode without the VMRUN's nested paging at tlb_fill addr 0x1 "
               "rip 0x2 hflags 0x200000 hflags2 0x10b npt_at_vmrun 1; last switches (seq kind ...): | 7 G 0x1 0x1")
        shut = "QEMU-SVM cpu0 guest shutdown: exception 0xe error 0x10 rip 0x2 npt 0"
        r = launch.LaunchResult(sc, bed=[inv, shut])
        story = r.end_story()
        self.assertIn("nested host's QEMU: exception 0xe error 0x10 rip 0x2 npt 0", story)
        self.assertIn("nested host's QEMU: cpu0 invariant: guest mode without the VMRUN's nested paging at tlb_fill", story)
        self.assertNotIn("| 7 G", story)

    def test_silent_host_snapshot_summary(self):
        # What the failure line says of a nested host that went silent:
        # each CPU's RIP, whether it is halted, its IF, and its APIC's IRR,
        # ISR and PPR, from the monitor's dump (the format of QEMU 10's
        # `info registers -a` and `info lapic N`).
        lapic = ("dumping local APIC state for CPU {n} \n\nLVT0\t 0x00010700 active-hi edge  masked"
                 "                      ExtINT (vec 0)\nSPIV\t 0x000001ff APIC enabled, focus=off, spurious vec 255\n"
                 "ESR\t 0x00000000\nISR\t {isr}\nIRR\t {irr}\n\n"
                 "APR 0x00 TPR 0x00 DFR 0x0f LDR 0x00 PPR 0x{ppr}\n")
        head = ("(qemu) info status\nVM status: running\n(qemu) info registers -a\n"
                "RIP=ffffffffa8417a0b RFL=00000212 [----A--] CPL=0 II=0 A20=1 SMM=0 HLT=1\n"
                "RIP=ffffffffa7fac8b0 RFL=00000046 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=0\n")
        idle = head + "(qemu) info lapic 0\n" + lapic.format(n=0, isr="(none)", irr="(none)", ppr="00") + \
            "(qemu) info lapic 1\n" + lapic.format(n=1, isr="(none)", irr="(none)", ppr="00")
        self.assertEqual(snapshot_summary(idle), "VM status: running; "
                         "cpu0 RIP=ffffffffa8417a0b HLT=1 IF=1 IRR=- ISR=- PPR=0x00; "
                         "cpu1 RIP=ffffffffa7fac8b0 HLT=0 IF=0 IRR=- ISR=- PPR=0x00")
        # cpu0 halted with IF=1 and the timer's vector 236 pending: not delivered.
        lost = head + "(qemu) info lapic 0\n" + lapic.format(n=0, isr="(none)", irr="236 ", ppr="00") + \
            "(qemu) info lapic 1\n" + lapic.format(n=1, isr="(none)", irr="(none)", ppr="00")
        self.assertTrue(snapshot_summary(lost).endswith("cpu0 RIP=ffffffffa8417a0b HLT=1 IF=1 IRR=236 ISR=- "
                                                         "PPR=0x00; cpu1 RIP=ffffffffa7fac8b0 HLT=0 IF=0 IRR=- "
                                                         "ISR=- PPR=0x00; UNDELIVERED INTERRUPT cpu0"),
                        snapshot_summary(lost))
        # Masked by the priority of one in service: not a lost interrupt.
        busy = head + "(qemu) info lapic 0\n" + lapic.format(n=0, isr="236 ", irr="48(level) ", ppr="e0")
        self.assertNotIn("UNDELIVERED", snapshot_summary(busy))
        self.assertIn("cpu0 RIP=ffffffffa8417a0b HLT=1 IF=1 IRR=48 ISR=236 PPR=0xe0", snapshot_summary(busy))
        # Without lapic dumps (an older harness or a failed command): registers only.
        self.assertEqual(snapshot_summary(head), "VM status: running; cpu0 RIP=ffffffffa8417a0b HLT=1 IF=1; "
                         "cpu1 RIP=ffffffffa7fac8b0 HLT=0 IF=0")
        self.assertEqual(snapshot_summary("monitor /x: [Errno 111] refused"), "monitor /x: [Errno 111] refused")
        # With the second dump 2 s later (Console.snapshot takes both): an
        # interrupt pending only in the first was just raised, not lost.
        again = head.split("(qemu) info registers -a\n", 1)[1]  # the same RIP lines
        later = lost + "(qemu) info registers -a\n" + again + "(qemu) info lapic 0\n" + \
            lapic.format(n=0, isr="(none)", irr="(none)", ppr="00")
        self.assertNotIn("UNDELIVERED", snapshot_summary(later))
        self.assertIn("cpu0 RIP=ffffffffa8417a0b HLT=1 IF=1 same RIP 2 s later IRR=236", snapshot_summary(later))
        still = lost + "(qemu) info registers -a\n" + again + "(qemu) info lapic 0\n" + \
            lapic.format(n=0, isr="(none)", irr="236 ", ppr="00")
        self.assertTrue(snapshot_summary(still).endswith("UNDELIVERED INTERRUPT cpu0"), snapshot_summary(still))

    def test_scenario_line_carries_the_built_command(self):
        sc = launch.LaunchScenario("c", 1024, vmm="cloud-hypervisor", guest_args="prezero.verify=1")
        self.assertTrue(sc.cmdline().startswith("console=ttyS0 ") and sc.cmdline().endswith("prezero.verify=1"))
        # name|timeout_s|command: the command last, the only field that may hold a '|'.
        self.assertEqual(sc.line("cmd 'a|b'"), "c|180|cmd 'a|b'")
        with self.assertRaises(vmmargv.VmmArgvError):
            launch.LaunchScenario("a|b", 1024).line("x")

    @unittest.skipUnless(ZS, "no zerostart binary (cargo build -p zerostart)")
    def test_every_row_builds_and_l2_runs_that_argv(self):
        rows = (launch.test_scenarios("patched", 3072) + launch.direct_scenarios("patched")
                + launch.chv_scenarios("patched") + launch.chv_direct_scenarios("patched")
                + launch.chv_zones_scenarios("patched") + launch.qemu_fleet_scenarios("patched")
                + launch.fc_scenarios("patched"))
        extra = build.Cpio()
        lines = launch.list_lines(rows, ZS, extra)
        for sc, ln in zip(rows, lines):
            argv = vmmargv.build(sc.spec(), ZS).argv
            self.assertEqual(argv[:4], ["/zs/zerostart", "launch", "--vmm",
                                        {"qemu-direct": "qemu", "microvm-direct": "qemu",
                                         "microvm-seabios-direct": "qemu",
                                         "chv-direct": "cloud-hypervisor"}.get(sc.vmm, sc.vmm)])
            dash = argv.index("--")
            self.assertEqual(argv[argv.index("--timeline") + 1], f"/tmp/{sc.name}.tl.json")
            # The launcher's own test switches come before the VMM's arguments.
            for x in sc.launcher_args.split():
                self.assertIn(x, argv[:dash])
            vmm = argv[dash + 1:]
            if sc.vmm in ("qemu", *launch.DIRECT_QEMU):
                self.assertEqual(("--firmware" in argv[:dash]), sc.vmm == "qemu")
                self.assertEqual(("-debugcon" in vmm), sc.debugcon)
                self.assertIn(f"/tmp/{sc.name}.qlog", vmm)
                self.assertEqual(vmm[-2:], ["-append", sc.cmdline()])
                for launcher_s in ("-m", "-object", "-mem-prealloc"):
                    self.assertNotIn(launcher_s, vmm)
                # The launcher's firmware is its own option; microvm names qboot.
                self.assertEqual(vmm.count("-bios"), int(sc.vmm in ("microvm-direct", "microvm-seabios-direct")))
                # microvm rows name their machine; the launcher would add q35.
                self.assertEqual("microvm,x-option-roms=off,rtc=on" in vmm, sc.vmm == "microvm-direct")
                # SeaBIOS needs the linuxboot_dma option ROM: microvm's ROMs stay on.
                self.assertEqual("microvm,rtc=on" in vmm, sc.vmm == "microvm-seabios-direct")
                if sc.vmm == "microvm-seabios-direct":
                    self.assertEqual(vmm[vmm.index("-bios") + 1], "bios-microvm.bin")
            if SH:
                self.assertEqual(busybox_argv(ln, 3), argv, ln)
        fc = [s for s in rows if s.vmm == "firecracker"]
        self.assertTrue(fc)
        for s in fc:
            self.assertIn(f"zs/fc/{s.name}.json", extra.entries)
            self.assertIn(b'"boot_args":"console=ttyS0', extra.entries[f"zs/fc/{s.name}.json"][1])

    def test_cloud_hypervisor_channel(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            fake = Path(d, "cloud-hypervisor")
            fake.write_text("#!/bin/sh\necho 'Usage: cloud-hypervisor [--kernel <kernel>]'\n")
            fake.chmod(0o755)
            with mock.patch.dict(os.environ, {"ZEROSTART_CLOUD_HYPERVISOR": str(fake)}):
                # A release binary: no fw_cfg, so the hint goes in SMBIOS.
                self.assertEqual(launch.cloud_hypervisor(), (fake, "smbios"))
                fake.write_text("#!/bin/sh\necho '  --fw-cfg-config <fw_cfg_config>'\n")
                self.assertEqual(launch.cloud_hypervisor(), (fake, "fw_cfg"))
                os.environ["ZEROSTART_CLOUD_HYPERVISOR"] = str(Path(d, "missing"))
                p, why = launch.cloud_hypervisor()
                self.assertIsNone(p)
                self.assertIn("--help failed", why)

    def test_a_dynamically_linked_vmm_is_refused_with_the_fix(self):
        # This host's own dynamically linked programs stand in for a
        # cloud-hypervisor built without crt-static (which exited 127 in L2,
        # libgcc_s missing, 2026-12-03); a static one is accepted.
        dyn = Path(shutil.which("python3")).resolve()
        self.assertTrue(launch.elf_interpreter(dyn))
        why = launch.nested_runnable(dyn, "cloud-hypervisor")
        self.assertIn("dynamically linked", why)
        self.assertIn("crt-static", why)
        with mock.patch.dict(os.environ, {"ZEROSTART_FIRECRACKER": str(dyn)}):
            p, fc_why = launch.firecracker()
        self.assertIsNone(p)
        self.assertIn("dynamically linked", fc_why)
        static = [Path(x) for x in ("/bin/busybox", "/usr/bin/busybox", "/sbin/ldconfig") if Path(x).is_file()]
        static = [x for x in static if launch.elf_interpreter(x) is None and x.read_bytes()[:4] == b"\x7fELF"]
        if static:
            self.assertIsNone(launch.nested_runnable(static[0], "cloud-hypervisor"))
        with tempfile.TemporaryDirectory() as d:
            script = Path(d, "vmm")
            script.write_text("#!/bin/sh\n")
            self.assertIsNone(launch.elf_interpreter(script))  # not ELF: not judged here

    def test_zones_rows_judge_how_many_zones_the_launcher_gave(self):
        # A guest larger than the pool's regions: one --memory-zone per
        # region of the lease. Fewer (a fallback to one memfd, or QEMU's
        # one backend) fails the row whatever the guest says.
        big, dirty = launch.chv_zones_scenarios("patched")
        self.assertEqual((big.zones, dirty.zones), (4, 2))
        self.assertGreater(big.mem_mib, 3072, "one zone must straddle the hole at 3 GiB")
        self.assertEqual(launch.FLEET_REGIONS, "1280M,640M,640M,640M")
        self.assertEqual(launch.FLEET_POOL_MIB, 3200)
        self.assertEqual(big.mem_mib, launch.FLEET_POOL_MIB, "the big row takes every region")
        def tl(n):
            return TL.replace('"argv":["qemu-system-x86_64","-m","1024M"]',
                              '"argv":["cloud-hypervisor"' + ',"--memory-zone","z"' * n + ']').replace(
                                  '"lease_held_bytes":1073741824', f'"lease_held_bytes":{big.mem_mib << 20}')
        ok = drive(big, V.format(sk=46766, vf=0), tl=tl(4))
        self.assertEqual(ok.failures, [])
        short = drive(big, V.format(sk=46766, vf=0), tl=tl(1))
        self.assertTrue(any("1 memory zones, not 4" in f for f in short.failures), short.failures)
        plain = drive(launch.LaunchScenario("a", 1024), V.format(sk=46766, vf=0), tl=tl(1))
        self.assertEqual(plain.failures, [], "zones are judged only on the zones rows")

    def test_fleet_rows_judge_what_the_lease_held(self):
        # A 512 MiB QEMU guest on the fleet pool holds one 640 MiB region;
        # the 1280 MiB one (a first fit) or a fallback (no lease) fails.
        (sc,) = launch.qemu_fleet_scenarios("patched")
        self.assertEqual((sc.mem_mib, sc.held_mib, sc.vmm), (512, 640, "qemu-direct"))
        self.assertLess(sc.mem_mib, min(launch.FLEET_REGIONS_MIB))
        self.assertEqual(launch.FLEET_REGIONS_MIB[0], 1280, "the first region must be the wrong fit")
        def tl(held):
            return TL.replace('"lease_held_bytes":1073741824', f'"lease_held_bytes":{held}')
        self.assertEqual(drive(sc, V.format(sk=46766, vf=0), tl=tl(640 << 20)).failures, [])
        first = drive(sc, V.format(sk=46766, vf=0), tl=tl(1280 << 20))
        self.assertIn("the lease held 1280 MiB of pool memory, not 640 (the smallest region that holds 512 MiB)",
                      first.failures)
        none = drive(sc, V.format(sk=46766, vf=0), tl=tl("null"))
        self.assertTrue(any("held 0 MiB" in f for f in none.failures), none.failures)
        plain = drive(launch.LaunchScenario("a", 1024), V.format(sk=46766, vf=0), tl=tl(4 << 30))
        self.assertEqual(plain.failures, [], "what is held is judged only on the fleet rows")

    def test_launcher_timeline_schema_is_checked(self):
        sc = launch.LaunchScenario("a", 1024)
        r = drive(sc, V.format(sk=46766, vf=0), tl=TL.replace('"memory_source"', '"source"'))
        self.assertIn("launcher timeline JSON: memory_source missing", r.failures)

    def test_pass_and_row(self):
        sc = launch.LaunchScenario("a", 1024, debugcon=True)
        r = drive(sc, V.format(sk=46766, vf=0), fw=["ZeroStart: published 1 bytes in 1 ranges"])
        self.assertEqual(r.failures, [])
        row = launch.row(r)
        for k in ("name", "vmm", "memory_bytes", "memory_source", "kernel", "hint_seen", "kernel_pages_skipped",
                  "kernel_verify_failures", "nonzero_bytes", "passed", "phases_ms"):
            self.assertIn(k, row)
        self.assertEqual(row["phases_ms"], {"memory_ready": 21.7, "init_started": 4000, "app_ready": 8000})
        self.assertTrue(row["hint_seen"])
        self.assertEqual(row["kernel"], "patched")

    def test_verify_failure_fails(self):
        r = drive(launch.LaunchScenario("a", 1024), V.format(sk=46766, vf=1))
        self.assertTrue(any("verify found 1" in f for f in r.failures), r.failures)

    def test_unused_hint_fails(self):
        r = drive(launch.LaunchScenario("a", 1024), V.format(sk=0, vf=0))
        self.assertTrue(any("skipped no clears" in f for f in r.failures), r.failures)

    def test_dirty_must_be_caught(self):
        sc = launch.LaunchScenario("d", 1024, expect="dirty")
        self.assertTrue(drive(sc, V.format(sk=5, vf=0)).failures)
        self.assertEqual(drive(sc, V.format(sk=5, vf=1)).failures, [])
        # Caught by the guest's sweep alone is not enough: verify mode is
        # what this control tests.
        swept = V.format(sk=5, vf=0).replace("ZSINIT: PASS", "ZSINIT: FAIL").replace("nonzero_bytes=0",
                                                                                      "nonzero_bytes=1")
        self.assertIn("prezero.verify=1 did not catch", " ".join(drive(sc, swept).failures))

    def test_corrupt_needs_the_reason_and_no_skips(self):
        sc = launch.LaunchScenario("c", 1024, expect="corrupt", debugcon=True)
        ok = ["ZeroStart: hint rejected: BadChecksum (fw_cfg opt/org.zerostart/prezeroed, 56 bytes); nothing published"]
        self.assertEqual(drive(sc, V.format(sk=0, vf=0), fw=ok).failures, [])
        self.assertTrue(drive(sc, V.format(sk=0, vf=0)).failures)
        self.assertTrue(drive(sc, V.format(sk=3, vf=0), fw=ok).failures)

    def test_direct_corrupt_needs_the_kernels_reason(self):
        """A direct boot has no firmware: the kernel's own line is the reason."""
        sc = launch.LaunchScenario("dc", 1024, vmm="qemu-direct", expect="corrupt")
        why = ["[    0.000000] zerostart: ignoring pre-zeroed hint from command line: BadChecksum"]
        tl = TL.replace('"boot":"uefi","hint_transport":"fw_cfg"', '"boot":"direct","hint_transport":"cmdline"')
        r = drive(sc, V.format(sk=0, vf=0), tl=tl, l3=why)
        self.assertEqual(r.failures, [])
        self.assertEqual(launch.row(r)["boot"], "direct")
        self.assertEqual(launch.row(r)["vmm"], "qemu")
        self.assertTrue(drive(sc, V.format(sk=0, vf=0), tl=tl).failures)
        self.assertTrue(drive(sc, V.format(sk=3, vf=0), tl=tl, l3=why).failures)

    def test_a_kernel_bug_line_fails_a_passing_row(self):
        sc = launch.LaunchScenario("b", 1024)
        bug = ["[    3.100000] BUG: Bad page state in process zsinit  pfn:12345"]
        r = drive(sc, V.format(sk=46766, vf=0), l3=bug)
        self.assertTrue(any("kernel bug line" in f and "Bad page state" in f for f in r.failures), r.failures)
        # verify mode's WARN on a caught page is the dirty rows' point.
        warn = ["[    3.1] WARNING: CPU: 0 PID: 1 at mm/zerostart_pristine.c:200 zerostart_verify_pages+0x9c/0x120"]
        sc = launch.LaunchScenario("d", 1024, expect="dirty")
        self.assertEqual(drive(sc, V.format(sk=5, vf=1), l3=warn).failures, [])

    def test_vmm_exit_code_fails(self):
        r = drive(launch.LaunchScenario("a", 1024), V.format(sk=46766, vf=0), rc=1)
        self.assertTrue(any("exited 1" in f for f in r.failures), r.failures)


if __name__ == "__main__":
    unittest.main()
