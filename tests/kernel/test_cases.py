"""Judges of tests/kernel/cases.py on lines captured from real boots."""
import sys
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cases  # noqa: E402
import run  # noqa: E402
import tcgprof  # noqa: E402


class Report:
    def __init__(self):
        self.oks, self.fails = [], []

    def ok(self, msg):
        self.oks.append(msg)

    def fail(self, msg):
        self.fails.append(msg)

    def note(self, msg):
        self.oks.append(msg)


# From boot-good.log of tests/kernel/run.py --line 6.12 --suite kasan
# (bzImage-kasan) and of the plain image, 2026-12-04; the command line as
# the kasan suite boots since b2a9ced (cases.KASAN_APPEND).
KASAN_LINES = ["[    0.000000] Linux version 6.12.107-gef4492174f81 (zerostart@zerostart)",
               "[    0.000000] Command line: console=ttyS0 panic=-1 hugepages=128 prezero.verify=2 no5lvl",
               "[    0.898859] kasan: KernelAddressSanitizer initialized", "ZSDONE"]
PLAIN_LINES = ["[    0.000000] Linux version 6.12.107-gef4492174f81 (zerostart@zerostart)", "ZSDONE"]


class Kasan(unittest.TestCase):
    def test_a_kasan_boot_passes(self):
        r = Report()
        self.assertTrue(cases.kasan_on(r, KASAN_LINES))
        self.assertEqual(r.fails, [])
        self.assertIn("kasan: KernelAddressSanitizer initialized", r.oks[0])

    def test_an_image_without_kasan_fails(self):
        r = Report()
        self.assertFalse(cases.kasan_on(r, PLAIN_LINES))
        self.assertIn("this image has no KASAN", r.fails[0])

    def test_a_boot_with_5_level_paging_fails(self):
        r = Report()
        lines = [ln.replace(" no5lvl", "") for ln in KASAN_LINES]
        self.assertFalse(cases.kasan_on(r, lines))
        self.assertIn("has no no5lvl", r.fails[0])

    def test_every_kasan_suite_boot_ends_with_no5lvl(self):
        with mock.patch.object(cases.gk, "boot", return_value=mock.Mock(lines=[])) as boot:
            cases.Kernel(Path("."), Path("."), None, Path("/nonexistent"), append=cases.KASAN_APPEND).boot(
                "boot-x", "prezero.verify=2", Path("bzImage"))
            cases.Kernel(Path("."), Path("."), None, Path("/nonexistent")).boot(
                "boot-y", "prezero.verify=2", Path("bzImage"))
        # gk.boot(logf, timeout, mem, image, append, ...): the append argument.
        self.assertEqual([c.args[4] for c in boot.call_args_list], ["prezero.verify=2 no5lvl", "prezero.verify=2"])


# From boot-pagealloc.log (6.12, 2 GiB, debug_pagealloc=on) and boot-good.log
# (the same boot without it) of make test-kernel, 2026-12-04.
ON = "ZSDIRECTMAP 4k=2097024 2M=0 "
OFF = "ZSDIRECTMAP 4k=18304 2M=2078720 1G=0 "


class DirectMap(unittest.TestCase):
    def test_debug_pagealloc_on_leaves_4k_pages_only(self):
        r = Report()
        self.assertTrue(cases.directmap_4k(r, ["ZSDONE", ON]))
        self.assertEqual(r.fails, [])

    def test_a_kernel_that_ignored_it_fails(self):
        r = Report()
        self.assertFalse(cases.directmap_4k(r, [OFF]))
        self.assertIn("debug_pagealloc=on did not take effect (DirectMap2M=2078720", r.fails[0])

    def test_a_boot_that_never_got_there_adds_nothing(self):
        r = Report()
        self.assertFalse(cases.directmap_4k(r, ["Kernel panic - not syncing: Attempted to kill init!"]))
        self.assertEqual((r.oks, r.fails), ([], []))


# From boot-usedup.log of tests/kernel/run.py --line 6.12 usedup, 2026-12-04:
# the series with its used-up switch (0020), and the series before it.
USEDUP_ON = [
    "[    9.022814] zerostart: pristine memory used up: dropped all 4170 pristine marks",
    "[    9.024534] zerostart: pristine memory used up: no clear skipped, no fault batched from here on",
    "ZSPROBE usedup_held_mib=1682 usedup_active=0 usedup_pristine_pages=0 usedup_below=4402 "
    "usedup_mem_available_kib=9204 usedup_ms=6189",
    "ZSPROBE usedup_batches_after=0 usedup_pages_skipped=484275",
    "ZSDEBUGFS active=0",
    "ZSDEBUGFS pages_skipped=484275",
]
USEDUP_BEFORE = [
    "ZSPROBE usedup_held_mib=1680 usedup_active=-1 usedup_pristine_pages=2716 usedup_mem_available_kib=7980 "
    "usedup_ms=6206",
    "ZSPROBE usedup_batches_after=13 usedup_pages_skipped=485944",
    "ZSDEBUGFS pages_skipped=485944",
]


class UsedUp(unittest.TestCase):
    def test_switched_off(self):
        r = Report()
        cases.judge_usedup(r, USEDUP_ON)
        self.assertEqual(r.fails, [])
        self.assertIn("switched off after 1682 MiB held", r.oks[0])

    def test_a_kernel_without_the_switch_fails(self):
        r = Report()
        cases.judge_usedup(r, USEDUP_BEFORE)
        self.assertIn("active=-1 pristine_pages=2716 batches_after=13", r.fails[0])

    def test_a_clear_skipped_after_the_switch_fails(self):
        r = Report()
        cases.judge_usedup(r, USEDUP_ON[:-1] + ["ZSDEBUGFS pages_skipped=484276"])
        self.assertEqual(len(r.fails), 1)

    def test_a_batch_after_the_switch_fails(self):
        r = Report()
        cases.judge_usedup(r, [x.replace("usedup_batches_after=0", "usedup_batches_after=1") for x in USEDUP_ON])
        self.assertEqual(len(r.fails), 1)


class BatchNever(unittest.TestCase):
    def test_nothing_batched(self):
        r = Report()
        cases.judge_batchnever(r, ["ZSPROBE refuse_plain_batches=0 refuse_madv_batches=0 refuse_prctl_batches=0",
                                   "ZSDEBUGFS fault_batches=0"])
        self.assertEqual(r.fails, [])

    def test_the_series_before_fails(self):
        # 6.12 before 0021, the same probe under transparent_hugepage=never.
        r = Report()
        cases.judge_batchnever(r, ["ZSPROBE refuse_plain_batches=1018 refuse_madv_batches=0 refuse_prctl_batches=0",
                                   "ZSDEBUGFS fault_batches=5115"])
        self.assertIn("fault_batches=5115 refuse_plain_batches=1018", r.fails[0])


class BootBugLines(unittest.TestCase):
    # Lines the boot tests failed on before they used the shared judge:
    # lockdep's report and verify's own WARNING must still fail a boot.
    def test_lockdep_report_counts(self):
        self.assertEqual(cases.boot_bug_lines(["[    1.0] WARNING: possible circular locking dependency detected"]),
                         ["[    1.0] WARNING: possible circular locking dependency detected"])

    def test_verify_warning_counts(self):
        ln = "[    2.0] WARNING: CPU: 0 PID: 1 at mm/zerostart_pristine.c:200 zerostart_verify_pages+0x9c/0x110"
        self.assertEqual(cases.boot_bug_lines([ln]), [ln])

    def test_a_panic_counts_once(self):
        self.assertEqual(len(cases.boot_bug_lines(["[    3.0] BUG: unable to handle page fault for address: 0"])), 1)

    def test_clean_lines(self):
        self.assertEqual(cases.boot_bug_lines(["ZSDONE", "[    1.0] zerostart: tracking 5 pristine pages"]), [])


class BatchMadvise(unittest.TestCase):
    # batchmadvise's and batch's probe lines (6.12, 2026-12-04): under
    # "madvise" only the MADV_HUGEPAGE area batches; under "always" (case
    # batch) the plain one does, which must fail this judge.
    def test_only_madv_hugepage_batches(self):
        r = Report()
        cases.judge_batchmadvise(r, ["ZSPROBE refuse_plain_batches=0 refuse_madv_batches=0 "
                                     "refuse_hugepage_batches=1024 refuse_prctl_batches=0"])
        self.assertEqual(r.fails, [])

    def test_a_plain_batch_fails(self):
        r = Report()
        cases.judge_batchmadvise(r, ["ZSPROBE refuse_plain_batches=1024 refuse_madv_batches=0 "
                                     "refuse_hugepage_batches=4 refuse_prctl_batches=0"])
        self.assertEqual(len(r.fails), 1)


# From boot-kexecjump*.log of tests/kernel/run.py --line 6.12 kexecjump
# kexecjumpctl, 2026-12-04 (6.12 with 0022).
KJUMP = ["[    2.835544] zerostart: kexec jump image loaded: dropped all 428906 pristine marks",
         "ZSPROBE kjump_rc=0 kjump_errno=0 kjump_pristine_before=428906 kjump_pristine_after=0 "
         "kjump_skipped_after=0 kjump_batches_after=0"]
KJUMP_KEPT = ["[    2.856119] zerostart: test: keeping the pristine marks for a kexec jump",
              "ZSPROBE kjump_rc=0 kjump_errno=0 kjump_pristine_before=428795 kjump_pristine_after=428795 "
              "kjump_skipped_after=16368 kjump_batches_after=1023"]


class KexecJump(unittest.TestCase):
    def test_marks_forgotten_at_the_load(self):
        r = Report()
        cases.judge_kexec_jump(r, KJUMP, control=False)
        self.assertEqual(r.fails, [])

    def test_marks_kept_fail_the_case(self):
        r = Report()
        cases.judge_kexec_jump(r, KJUMP_KEPT, control=False)
        self.assertIn("after=428795", r.fails[0])

    def test_the_control_sees_kept_marks(self):
        r = Report()
        cases.judge_kexec_jump(r, KJUMP_KEPT, control=True)
        self.assertEqual(r.fails, [])

    def test_the_control_fails_where_marks_were_forgotten(self):
        r = Report()
        cases.judge_kexec_jump(r, KJUMP, control=True)
        self.assertEqual(len(r.fails), 1)

    def test_a_kernel_without_kexec_fails(self):
        r = Report()
        cases.judge_kexec_jump(r, [x.replace("kjump_rc=0 kjump_errno=0", "kjump_rc=-1 kjump_errno=38")
                                   for x in KJUMP], control=False)
        self.assertIn("not loaded", r.fails[0])



# boot-hibernatectl-resume.log of the CI of 1de5675 (6.12, 2026-12-06),
# kept as it was: the resumed image's CPU 1 oopsed and the guest hung until
# the timeout (guest-kernel-patches/6.12/README.md, "An Oops on CPU 1 in the
# hibernatectl resume": x86's restore window, closed by the series' 0025).
HUNG_OOPS = (Path(__file__).resolve().parents[1] / "zstest" / "captured" /
             "hibernatectl-resume-oops-cpu1.log").read_text(errors="replace").splitlines()


class TimedOut:
    ended, log = "timeout", "/w/boot-x.log"

    def problem(self):
        return "QEMU timed out after 600s: /w/boot-x.log"


class Unfinished(unittest.TestCase):
    def test_a_hung_oops_is_named_in_the_failure_line(self):
        r = Report()
        cases.judge_boot(r, TimedOut(), HUNG_OOPS, "skip", "console=ttyS0")
        self.assertEqual(len(r.fails), 1)
        self.assertIn("QEMU timed out after 600s", r.fails[0])
        self.assertIn("BUG: kernel NULL pointer dereference", r.fails[0])
        self.assertIn("Oops: Oops: 0010", r.fails[0])

    def test_a_silent_timeout_says_only_the_timeout(self):
        why = cases.unfinished(TimedOut(), ["[    1.0] Run /init as init process"])
        self.assertEqual(why, "QEMU timed out after 600s: /w/boot-x.log")


class Booted:
    def __init__(self, lines):
        self.lines = lines

    def problem(self):
        return None


# The two boots of a hibernation case, as the 6.12 series with 0026 prints
# them (boot-hibernatectl{,-resume}.log, 2026-12-06), trimmed.
HIB_BOOT1 = ["ZSHIB pristine_pages=494318", "[    9.1] PM: hibernation: hibernation exit"]
HIB_BOOT2 = ["[    0.000000] zerostart: test: CPUs parked for an image restore wait 300 ms before they halt",
             "ZSHIB resumed pages_skipped=0 pristine_pages=0", "ZSDEBUGFS verify_failures=5302",
             "ZSDEBUGFS pages_skipped=0", "ZSPROBE anon_dirty_pages=0", "ZSDONE"]


class HibernatePark(unittest.TestCase):
    """Every hibernation resume holds the parked CPUs' window open where the
    series has the knob, and a loading kernel that did not take it fails
    the case (it would have tested nothing of the window)."""

    def run_case(self, has_knob, boot2):
        k = mock.Mock(work=Path("/nonexistent"))
        k.good.return_value = (Path("good.bzImage"), Path("good.blob"))
        k.series_has.side_effect = lambda text: has_knob and text == cases.HIB_PARK_KNOB
        k.boot.side_effect = [(Booted(HIB_BOOT1), HIB_BOOT1), (Booted(boot2), boot2)]
        r = Report()
        r.name = "hibernatectl"
        with mock.patch("builtins.open", mock.mock_open()), \
                mock.patch.object(cases.gk, "hint_spec", return_value={}), \
                mock.patch.object(cases.gk, "test_disk", return_value={}), \
                mock.patch.object(Path, "unlink"):
            cases.hibernate_case("prezero.test_hibernate_keep=1", "caught")(k, r)
        return r, [c.args[1] for c in k.boot.call_args_list]

    def test_both_boots_hold_the_window_and_the_loading_kernel_took_it(self):
        r, cmdlines = self.run_case(True, HIB_BOOT2)
        self.assertEqual(r.fails, [])
        self.assertIn("verify caught 5302 pages", r.oks[0])
        for c in cmdlines:
            self.assertIn(f"{cases.HIB_PARK_KNOB}={cases.HIB_PARK_MS}", c)

    def test_a_loading_kernel_without_the_knob_fails(self):
        r, _ = self.run_case(True, HIB_BOOT2[1:])
        self.assertEqual(len(r.fails), 1)
        self.assertIn(f"did not take {cases.HIB_PARK_KNOB}=", r.fails[0])

    def test_a_series_without_the_knob_boots_without_it(self):
        r, cmdlines = self.run_case(False, HIB_BOOT2[1:])
        self.assertEqual(r.fails, [])
        for c in cmdlines:
            self.assertNotIn(cases.HIB_PARK_KNOB, c)


class TcgProf(unittest.TestCase):
    # Lines of the 6.12 dev build's System.map (2026-12-05).
    MAP = ("ffffffff81000000 T _stext\n"
           "ffffffff818b5ba0 t memset_orig\n"
           "ffffffff818b5c50 T __cpuidle_text_start\n"
           "ffffffff8213b000 d rcu_state\n"
           "ffffffff83a1b2c0 t deferred_init_maxorder\n"
           "ffffffff83a1b6f0 t deferred_init_memmap_chunk\n")

    def test_a_rip_is_named_by_the_text_symbol_below_it(self):
        m = tcgprof.SymbolMap(self.MAP)
        self.assertEqual(m.name(0xffffffff818b5ba0), "memset_orig")
        self.assertEqual(m.name(0xffffffff818b5c4f), "memset_orig")
        self.assertEqual(m.name(0xffffffff83a1b300), "deferred_init_maxorder")
        self.assertEqual(m.name(0x7f6075ce9b57), "user/other")  # user space
        self.assertNotIn("rcu_state", m.names)  # data is no function

    def test_the_window_is_the_span_of_one_symbol_and_what_ran_beside_it(self):
        s = ["a", "x", "b", "x", "c", "x", "d"]
        self.assertEqual(tcgprof.window(s, "x"), ["x", "b", "x", "c", "x"])
        self.assertEqual(tcgprof.window(s, "nowhere"), [])
        self.assertEqual(tcgprof.top(["x", "x", "y", "z"], 2), [("x", 2, 50.0), ("y", 1, 25.0)])


class KasanImage(unittest.TestCase):
    """Which KASAN image the kasan suite boots, and the one line a full
    run skips with (--suite kasan fails with it) when there is none."""

    def test_beside_the_cached_image(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            img = Path(d) / "bzImage"
            img.write_bytes(b"x")
            kimage, why = run.kasan_image("7.3", img, None, False)
            self.assertIsNone(kimage)
            self.assertIn("make kernel-7.3-kasan", why)
            self.assertIn("never built one", why)
            (Path(d) / "bzImage-kasan").write_bytes(b"k")
            kimage, why = run.kasan_image("7.3", img, None, False)
            self.assertEqual(kimage, (Path(d) / "bzImage-kasan").resolve())
            self.assertIsNone(why)
            self.assertIn("make kernel-kasan", run.kasan_image("6.12", Path(d) / "none" / "bzImage", None, False)[1])

    def test_by_hand_needs_its_own(self):
        kimage, why = run.kasan_image("6.12", Path("/nonexistent/bzImage"), None, True)
        self.assertIsNone(kimage)
        self.assertIn("--kasan-kernel", why)
        kimage, why = run.kasan_image("6.12", Path("/nonexistent/bzImage"), "/nonexistent/k", True)
        self.assertIsNone(kimage)
        self.assertIn("/nonexistent/k", why)


SERIES_73 = Path(__file__).resolve().parents[2] / "guest-kernel-patches" / "7.3"


class CoverLetter(unittest.TestCase):
    """cases.cover_letter_problems on the 7.3 line's real letter and series."""

    def setUp(self):
        self.patches = cases.Kernel(Path("."), SERIES_73, None, Path("/nonexistent")).series_patches()
        self.text = (SERIES_73 / "patches" / cases.COVER_LETTER).read_text()
        files, self.total = cases.cover_diffstat(self.text)
        # The series' numstat as git prints it: full paths (the letter's one
        # shortened path is Documentation/admin-guide/...).
        self.stat = {("Documentation" + p[3:] if p.startswith(".../") else p): v for p, v in files.items()}

    def test_the_committed_letter_is_in_step(self):
        self.assertEqual(cases.cover_letter_problems(self.text, self.patches, None, ""), [])
        self.assertEqual(cases.cover_letter_problems(self.text, self.patches, self.stat, self.total), [])

    def test_a_patch_more_or_less_fails(self):
        out = cases.cover_letter_problems(self.text, self.patches[:-1], None, "")
        self.assertTrue(any("the series has" in p for p in out), out)
        self.assertTrue(any("shortlog" in p for p in out), out)

    def test_a_stale_shortlog_entry_fails(self):
        bad = self.text.replace("  mm: skip clearing pristine pages\n", "  mm: skip clearing pristine page\n")
        self.assertNotEqual(bad, self.text)
        out = cases.cover_letter_problems(bad, self.patches, None, "")
        self.assertEqual(len(out), 1)
        self.assertIn("entry 2", out[0])

    def test_a_stale_diffstat_fails(self):
        stat = dict(self.stat)
        stat["mm/mm_init.c"] += 7
        out = cases.cover_letter_problems(self.text, self.patches, stat, self.total)
        self.assertEqual(len(out), 1)
        self.assertIn("mm/mm_init.c", out[0])
        out = cases.cover_letter_problems(self.text, self.patches, self.stat, self.total.replace("8890", "8897"))
        self.assertEqual(len(out), 1)
        self.assertIn("diffstat says", out[0])
        stat = {**self.stat, "mm/new.c": 3}
        self.assertEqual(len(cases.cover_letter_problems(self.text, self.patches, stat, self.total)), 1)


if __name__ == "__main__":
    unittest.main()
