"""The guest kernel suite as case tables (zstest.suite), run by run.py.

`table(k)` is `make test-kernel`'s main suite, `memmap_table(k)` the
struct-page boots of series file 0006 (guest-kernel-patches/6.12/memmap.md); K is
the kernel under test (Kernel: its bzImage, the series directory it was
built from, the firmware for the "efi" case, the work directory). Each case
boots in QEMU TCG through zstest.guestkernel (zstest.qemu) and judges the
log; every check prints one `ok   CASE: ...` or `FAIL CASE: ...` line (what
tests/lib/make_test.py counts), a negative control that held prints a
note line (it is part of the check it controls).

Main suite, in order:
  qemu-exit   the boot driver itself: a QEMU that exits non-zero (a kernel
              image that does not exist) fails the boot, with its status;
  qemu-ends   ...and tells a guest's power-off from a reset: a kernel with
              no init panics (panic=-1) and must read as "reset" (every
              other boot must end by a power-off after ZSDONE);
  vectors     the kernel's copy of the golden vectors (mm/zshint_*.h in the
              series) equals tests/vectors/ (no drift);
  checkpatch  scripts/checkpatch.pl --strict of the line's own tree on every
              patch of the series: no ERROR, no WARNING, and no CHECK but
              the ones ALLOWED_CHECKS names with the reason;
  kunit       boot with kunit.filter_glob=zerostart*, parse KTAP: every suite
              the series brings present and ok, no zs_test_ case skipped;
  good cover corrupt scrub off nohint
              the hint delivered as real setup_data (mkhint.py): honest hint,
              hint covering kernel+initrd+setup_data, corrupted hint, scrub
              request, prezero=off, no hint; all with prezero.verify=2 (every
              skipped clear checked, and every page still marked pristine
              scanned after memblock_discard() and at late_initcall). Pass: no
              WARNING, no verify or scan failure, no non-zero byte in memory
              handed to user space, skipped clears > 0 exactly when a good
              hint is in effect (and then both scans ran), and one line naming
              the error for a bad hint;
  cmdline cmdlinedirty cmdlinecorrupt smbios smbiosdirty smbioscorrupt
              the hint's text form (docs/hint-abi.md "Text form") on the
              plain image: as prezero.hint= on the command line / as an
              SMBIOS type 11 string: honest hint (clears skipped, all
              verified), the dirty-page control (256 KiB of 0xa5 planted in
              a hinted range by QEMU's loader must be caught by verify or
              the scans) and a corrupt hint refused with its reason;
  textrules   two prezero.hint= refused as Duplicate; a command-line hint
              that differs from the setup_data one refused (transports
              disagree);
  ipxe        a real boot loader: iPXE (QEMU's NIC option ROM) loads the
              kernel over TFTP with the cmdline case's hint: refused by
              rule ("boot loader"), nothing skipped;
  kaslrslot   a command-line hint whose marker pages leave KASLR a single
              slot: the decompressor must put the kernel there (every
              marker written, the hint taken);
  loadhook    code32_start points at a boot loader's hook (planted at 15
              MiB) that moves the kernel to 256 MiB before entering it: the
              kernel must leave out the buffer the decompressor really ran
              in (it logs the recorded range), so every marked page scans
              zero;
  hiddenmarker   an SMBIOS hint under nokaslr with a marker page under the
              kernel: refused, since another boot's kernel may sit elsewhere;
  reboot rebootctl rebootcmdline   no hint honoured twice: boot 1 consumes
              the hint, fills memory with a secret and reboots in place (no
              -no-reboot); boot 2 gets the same hint and must refuse it as
              Stale, skip nothing and find nothing dirty / with the rule off
              (the control) verify must catch boot 1's data / the same with
              the hint on the command line;
  memblock    memblock.reserved one entry short of full when memory is
              released (prezero.test_fill_reserved), so that its array is
              doubled into hinted memory: no page may be left marked pristine;
  hibernate hibernatectl   marks dropped before a hibernation image / kept
              (the control: verify must catch the loading kernel's writes);
  hugedirty scanctl batch leak compact pool nt   (see each case below);
  efi         firmware boot: zerostart's OVMF reads the hint from fw_cfg,
              publishes it in the EFI configuration table, and the kernel
              takes it from there through its EFI stub; a hint on the
              command line of the same boot is refused by rule (EFI boot);
  efiloader efiloaderctl   a test boot loader (ZeroStartHandover.efi) fills
              and frees 1 GiB, then hands over through the EFI handover
              protocol with a setup_data hint naming it zero: refused by rule
              (EFI boot), nothing skipped, the probe finds no fill / the
              control publishes the filled pages as the EFI table instead:
              taken, and verify must catch them.
qemu-exit, vectors and checkpatch run in every selection (they cost no
boot).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from zstest import guestkernel as gk
from zstest import hint as zshint
from zstest.guestkernel import grep, int_or, kv
from zstest.qemu import KERNEL_TEST_ARGS, REBOOT_ANNOUNCED, kernel_bug_lines
from zstest.suite import Case, Do, Report

MIB = gk.MIB
ALWAYS = ("qemu-exit", "vectors", "checkpatch", "coverletter")
# checkpatch --strict CHECKs a series may keep, each with why (the text
# after "CHECK: ").
ALLOWED_CHECKS = {
    "Avoid CamelCase: <Zeroed>": "HPAGEFLAG(Zeroed, zeroed) and (7.3's buddy flag) __PAGEFLAG(Zeroed, "
                                 "zeroed, ...) follow the CamelCase page-flag names of include/linux/hugetlb.h "
                                 "and page-flags.h (HPAGEFLAG(Freed, freed), __PAGEFLAG(Reported, reported, ...))",
}
# KUnit suites every series has; patches that bring their own suite add it
# once `series` lists them (Kernel.suites).
BASE_SUITES = ("zerostart_hint", "zerostart_pristine")
SUITE_FILES = (("arch/x86/mm/clear_huge_nt_test.c", "clear_huge_nt"),
               ("mm/zerostart_memmap_test.c", "zerostart_memmap"),
               ("mm/zerostart_memblock_test.c", "zerostart_memblock"),
               ("mm/zerostart_freepaths_test.c", "zerostart_freepaths"))
PRINTK_TS = re.compile(r"^\[[^]]*\] ")


@dataclass
class Kernel:
    """The kernel under test and the run's settings."""
    image: Path
    series_dir: Path
    firmware: Path | None
    work: Path
    timeout: float = 600
    memmap_timeout: float = 900
    mem_mib: int = 2048
    initrd: Path | None = None
    memmap_range: list[int] | None = None
    # Kernel arguments every boot of this kernel ends with (the kasan
    # suite's KASAN_APPEND).
    append: str = ""
    _hinted: dict = field(default_factory=dict)

    # ------------------------------------------------------------ helpers
    def hinted(self, name: str, ranges: str, *flags: str, image: Path | None = None) -> tuple[Path, Path]:
        """NAME.bzImage + NAME.blob (built once per run)."""
        if name not in self._hinted:
            self._hinted[name] = gk.make_hinted_image(self.work, name, image or self.image, ranges, *flags)
        return self._hinted[name]

    def good(self) -> tuple[Path, Path]:
        return self.hinted("good", gk.honest_hint_ranges(self.mem_mib))

    def boot(self, logname: str, append: str, image: Path, extra: list[str] = (), mem: int | None = None,
             timeout: float | None = None, initrd: bool = True, reboots: int = 0, spec: dict | None = None):
        """One boot; the log is WORK/LOGNAME.log. Returns (qemu.Boot, its
        console lines with interleaved kernel messages untangled). REBOOTS:
        resets in place the guest may announce (zstest.qemu.boot). SPEC: more
        of the QEMU spec (zstest.qemu.kernel_command: firmware, disks, QEMU
        options), EXTRA: QEMU arguments as given."""
        logf = self.work / f"{logname}.log"
        spec = {**({"initrd": str(self.initrd)} if initrd else {}), **(spec or {})}
        append = f"{append} {self.append}" if self.append else append
        b = gk.boot(logf, timeout or self.timeout, mem or self.mem_mib, image, append, list(extra), reboots=reboots,
                    spec=spec)
        return b, gk.untangle(b.lines)

    def series_patches(self) -> list[Path]:
        """The patches `series` lists, in order."""
        out = []
        for ln in (self.series_dir / "series").read_text().splitlines():
            if ln.startswith("patches/"):
                out.append(self.series_dir / ln.strip())
        return out

    def suites(self) -> list[str]:
        """The KUnit suites this series must show: the base ones, and each
        one a patch in `series` brings (its test file added)."""
        texts = [p.read_text(errors="replace").splitlines() for p in self.series_patches() if p.is_file()]
        return list(BASE_SUITES) + [suite for path, suite in SUITE_FILES
                                    if any(f"+++ b/{path}" in t for t in texts)]

    def series_has(self, text: str) -> bool:
        """Some patch of the series contains TEXT."""
        return any(text in p.read_text(errors="replace") for p in self.series_patches() if p.is_file())

    def has_nt(self) -> bool:
        """The series has the NT huge clear patch (6.12; 7.3 dropped it:
        its range clear_pages() measured faster, 7.3/README.md)."""
        return self.series_has("+++ b/arch/x86/mm/clear_huge_nt.c")


# Common boot arguments of the setup_data cases: the probe's sizes
# (zsprobe=HUGE_MIB,ANON_MIB,...) and the verify mode.
PROBE = "zsprobe=256,64"
COMMON = f"hugepages=128 prezero.verify=2 init_on_alloc=1 {PROBE}"


def last_arg(cmdline: str, key: str) -> str | None:
    vals = [w[len(key) + 1:] for w in cmdline.split() if w.startswith(key + "=")]
    return vals[-1] if vals else None


def planted_check(r: Report, lines: list[str], prefix: str, key: str) -> None:
    """On the last PREFIX line, KEY_planted_found equals KEY_planted (> 0):
    the counter behind KEY's zero claim sees planted bytes."""
    p, f = kv(lines, prefix, f"{key}_planted"), kv(lines, prefix, f"{key}_planted_found")
    if int_or(p, 0) > 0 and f == p:
        r.note(f"negative control: {f} of {p} bytes planted after the {key} check were found")
    else:
        r.fail(f"negative control of the {key} check: planted={p or 'missing'} found={f or 'missing'} "
               "(the check cannot see a non-zero byte)")


def boot_bug_lines(lines: list[str]) -> list[str]:
    """The bug lines a boot test fails on: the harness's one judge
    (kernel_bug_lines: panics, GP faults, RIP lines, lockups, KFENCE, KASAN,
    WARNINGs but verify's own), and, as these tests always did, any line
    with WARNING:, BUG: or Oops (lockdep's and RCU's "WARNING: <text>"
    reports, which the shared judge does not name, and verify's WARNING)."""
    shared = kernel_bug_lines(lines)
    return shared + [ln for ln in grep(lines, r"WARNING:|BUG:|Oops") if ln not in shared]


def planted_pages(lines: list[str]) -> int:
    """How many times the kernel said prezero.test_dirty_pristine=16 wrote
    its 16 bytes (1 in a boot that planted them)."""
    return len(grep(lines, "zerostart: test: wrote into 16 pages marked pristine"))


def scan_check(r: Report, lines: list[str], expect: str, cmdline: str) -> None:
    """In any boot, no line reports a marked page that is not zero; with the
    scans on (the last prezero.verify= is 2 or scan) and a hint in effect
    (EXPECT skip or any), both scans of the pages still marked pristine ran
    and found every one zero."""
    bad = grep(lines, "marked pristine but is not zero")
    if bad:
        r.fail(f"{len(bad)} page(s) marked pristine but not zero: {';'.join(bad[:2])};")
    if expect == "noskip":
        return
    if last_arg(cmdline, "prezero.verify") not in ("2", "scan"):
        return
    for at in ("memblock_discard", "late_initcall"):
        n = [int(m[1]) for ln in lines
             if (m := re.search(rf"zerostart: scan at {at}: ([0-9]+) pages marked pristine, 0 of them not zero", ln))]
        if n and n[-1] > 0:
            r.note(f"scan at {at}: {n[-1]} marked pages read zero")
        else:
            first = next((ln for ln in lines if f"scan at {at}" in ln), "")
            r.fail(f"no clean scan at {at} (prezero.verify=2): {first}")


def expect_line(r: Report, lines: list[str], regex: str) -> None:
    """The boot log has exactly one line matching REGEX."""
    m = grep(lines, regex)
    if len(m) == 1:
        r.ok(f"'{PRINTK_TS.sub('', m[0])}'")
    else:
        r.fail(f"expected one line matching /{regex}/, found {len(m)}")


def ended_by(b, lines: list[str]) -> str:
    """'ended by HOW: the kernel's last words (LOG)' for a boot that failed:
    why the kernel stopped, in its own words, in the failure line itself.
    CI shows failure lines, not the log (stop 29: "init did not finish",
    ended by a reset, and nothing else to go on)."""
    words = gk.last_words(lines)
    return f"ended by {b.ended}{': ' + words if words else ''} ({b.log})"


def unfinished(b, lines: list[str]) -> str:
    """B.problem() (a timeout, QEMU's exit status, a reset nobody asked
    for) and the kernel's last words, for a boot that did not complete: a
    guest that oopsed and then hung until the timeout names the oops in the
    failure line, not only the timeout (CI, 2026-12-06: the 6.12
    hibernatectl resume printed an Oops on CPU 1 and hung; the line said
    only "the resuming boot timed out")."""
    words = gk.last_words(lines)
    return f"{b.problem()}{'; the kernel said: ' + words if words else ''}"


def boot_case(k: Kernel, r: Report, expect: str, extra: str, image: Path, *,
              mem: int | None = None, common: str = COMMON, spec: dict | None = None) -> list[str]:
    """Boots case R.name with COMMON + EXTRA and judges the common part.
    EXPECT: skip (a good hint in effect: clears skipped, all verified),
    noskip (no clear skipped), any (verify mode off: skips cannot be checked
    here). Returns the log's lines (also of a failed boot: the case's own
    checks then fail on them, as they did in run.sh)."""
    name, cmdline = r.name, f"{common} {extra}"
    b, lines = k.boot(f"boot-{name}", cmdline, image, mem=mem, spec=spec)
    return judge_boot(r, b, lines, expect, cmdline)


def judge_boot(r: Report, b, lines: list[str], expect: str, cmdline: str) -> list[str]:
    """boot_case's judgement of one boot B (its LINES, booted with CMDLINE):
    see boot_case. Returns LINES."""
    if b.problem():
        r.fail(f"QEMU did not complete the boot: {unfinished(b, lines)}")
        return lines
    if not grep(lines, "^ZSDONE"):
        r.fail(f"init did not finish: the guest {ended_by(b, lines)}")
        return lines
    if b.ended != "power-off":
        # ZSDONE and then a panic, a reset or a triple fault is no clean run.
        r.fail(f"the guest did not power off after ZSDONE: it {ended_by(b, lines)}")
        return lines
    if bugs := boot_bug_lines(lines):
        r.fail(f"kernel bug lines: {' '.join(bugs[:2])} ")
    skipped = kv(lines, "ZSDEBUGFS", "pages_skipped")
    elided = kv(lines, "ZSDEBUGFS", "pages_elided")
    failed = kv(lines, "ZSDEBUGFS", "verify_failures")
    verified = int_or(kv(lines, "ZSDEBUGFS", "bytes_verified"), 0) // 4096
    if expect != "any" and failed != "0":
        r.fail(f"verify_failures={failed or 'missing'}")
    scan_check(r, lines, expect, cmdline)
    # The probe's sizes (the last zsprobe=HUGE_MIB,ANON_MIB,...): a part it
    # was asked to run must have reported, one it was not has no keys.
    probe = (last_arg(cmdline, "zsprobe") or "").split(",")
    huge_mib, anon_mib = int_or(probe[0], 0), int_or(probe[1] if len(probe) > 1 else None, 0)
    for key, size in (("hugetlb_dirty_pages", huge_mib), ("anon_dirty_pages", anon_mib)):
        if size <= 0:
            continue
        v = kv(lines, "ZSPROBE", key)
        if v != "0":
            r.fail(f"{key}={v or 'missing'} (memory handed to user space was not zero)")
        # The count's negative control (zsprobe.c): bytes planted into the
        # memory just counted must all be counted.
        planted_check(r, lines, "ZSPROBE", key.removesuffix("_dirty_pages"))
    if expect == "skip":
        # A skip in flight while debugfs is read may not be verified yet:
        # allow one 2 MiB folio of difference.
        s = int_or(skipped, 0)
        if s > 0 and verified + 512 >= s + int_or(elided, 0):
            # (verify failures, if any, failed the case above: the count here is the real one)
            r.ok(f"{s} pristine clears skipped, {elided or 0} hugetlb re-clears elided, {verified} pages verified "
                 f"zero, {failed or 'missing'} failures")
        else:
            r.fail(f"expected skipped clears, got skipped={skipped or 'missing'} verified={verified}")
    elif expect == "any":
        r.ok(f"{skipped or ''} pristine clears skipped, no page handed to user space was dirty")
    elif skipped == "0":
        r.ok(f"no pristine clear skipped ({elided or 0} hugetlb re-clears elided, all verified)")
    else:
        r.fail(f"skipped={skipped} but no good hint was in effect")
    return lines


# ---------------------------------------------------------------- cases
def qemu_exit(k: Kernel, r: Report) -> None:
    b, _ = k.boot("qemu-exit", "", k.work / "no-such-bzImage", [], mem=128, timeout=60, initrd=False)
    if b.problem() is None:
        r.fail(f"the driver returned success for a QEMU that exited with {b.lines[:1]}")
    elif not (b.problem() or "").startswith("QEMU exited with status 1"):
        r.fail(f"the driver did not name QEMU's exit status: {b.problem()}")
    else:
        r.ok(f"the boot driver fails a boot whose QEMU exits non-zero ({b.problem()})")


def qemu_ends(k: Kernel, r: Report) -> None:
    """The driver tells a guest's power-off from a kernel that reset the
    machine (zstest.qemu.how_it_ended): QEMU exits 0 for both under
    -no-reboot. A kernel with no init panics, panic=-1 resets: it must read
    as "reset", never as a power-off; every other boot must read as one."""
    b, lines = k.boot("qemu-ends", "rdinit=/zs-no-such-init init=/zs-no-such-init", k.image, timeout=120)
    if b.rc != 0 or not grep(lines, "Kernel panic"):
        r.fail(f"the no-init boot did not panic and exit 0 (status {b.rc}; {b.log})")
    elif b.ended != "reset":
        r.fail(f"a panicked kernel's reset read as {b.ended!r} ({b.end_log})")
    else:
        r.ok("a kernel that panicked under panic=-1 reads as a reset, not a power-off")


def vectors(k: Kernel, r: Report) -> None:
    """The patch carries the golden vectors in kernel style (mm/zshint_*.h),
    generated from tests/vectors/ by gen-kernel-vectors.py: regenerate and
    compare with the copy inside the patch."""
    gen = k.work / "gen"
    p = subprocess.run([sys.executable, str(gk.KTEST / "gen-kernel-vectors.py"), str(gk.ROOT / "tests" / "vectors"),
                        str(gen)])
    if p.returncode != 0:
        r.fail("cannot generate the kernel's vectors from tests/vectors/")
        return
    for name in ("zshint_vectors.h", "zshint_errors.h", "zshint_text_vectors.h"):
        head = f"+++ b/mm/{name}"
        patch = next((q for q in sorted((k.series_dir / "patches").glob("*.patch"))
                      if head in q.read_text(errors="replace").splitlines()), None)
        if patch is None:
            r.fail(f"no patch adds mm/{name}")
            continue
        # The added file's lines, from the patch text.
        out, on = [], False
        for ln in patch.read_text(errors="replace").splitlines():
            if ln == head:
                on = True
            elif on and ln.startswith("diff --git "):
                break
            elif on and ln.startswith("@@"):
                continue
            elif on and ln.startswith("+"):
                out.append(ln[1:])
        copy = k.work / name
        copy.write_text("".join(ln + "\n" for ln in out))
        d = subprocess.run(["diff", "-u", str(gen / name), str(copy)], capture_output=True, text=True)
        (k.work / f"{name}.diff").write_text(d.stdout)
        if d.returncode == 0:
            r.ok(f"mm/{name} in {patch.name} matches tests/vectors/")
        else:
            r.fail(f"mm/{name} in {patch.name} differs from tests/vectors/ (regenerate with "
                   f"tests/kernel/gen-kernel-vectors.py and update the patch): {k.work / name}.diff")


def line_tree(series_dir: Path) -> Path | None:
    """The kernel tree build.sh unpacked for the line of SERIES_DIR (its
    source.lock's VERSION; the default line in kernel/src, another in
    kernel/<line>/src), None if there is none."""
    lock = series_dir / "source.lock"
    if not lock.is_file():
        return None
    m = re.search(r"^VERSION=(\S+)", lock.read_text(), re.M)
    if not m:
        return None
    root = gk.CACHE / "kernel"
    if series_dir.resolve() != (gk.ROOT / "guest-kernel-patches" / "6.12").resolve():
        root = root / series_dir.name
    tree = root / "src" / f"linux-{m[1]}"
    return tree if (tree / "scripts" / "checkpatch.pl").is_file() else None


def checkpatch(k: Kernel, r: Report) -> None:
    """checkpatch.pl --strict of the line's tree (build.sh unpacked it; the
    patch files are read, the tree only supplies the script, its word lists
    and MAINTAINERS) on every patch in `series`."""
    tree = line_tree(k.series_dir)
    if tree is None:
        r.skip(f"no kernel tree for {k.series_dir} in {gk.CACHE / 'kernel'} (build.sh unpacks it; this kernel was "
               "built elsewhere)")
        return
    # scripts/spdxcheck.py runs as `python3` and needs ply: the system's.
    env = {**os.environ, "PATH": "/usr/bin:" + os.environ.get("PATH", "")}
    total = {"errors": 0, "warnings": 0, "checks": 0}
    failed = r.runner.failed
    for patch in k.series_patches():
        p = subprocess.run(["nice", "-n", "19", "perl", "scripts/checkpatch.pl", "--strict", "--color=never",
                            str(patch.resolve())], cwd=tree, capture_output=True, text=True, env=env)
        out = p.stdout.splitlines()
        m = next((re.search(r"total: (\d+) errors, (\d+) warnings, (\d+) checks", ln) for ln in out
                  if ln.startswith("total: ")), None)
        if m is None:
            r.fail(f"{patch.name}: checkpatch printed no total (exit {p.returncode}): {p.stderr.strip()[:200]}")
            continue
        for key, v in zip(total, m.groups()):
            total[key] += int(v)
        for ln in out:
            if ln.startswith(("ERROR: ", "WARNING: ")):
                r.fail(f"{patch.name}: {ln}")
            elif ln.startswith("CHECK: "):
                why = ALLOWED_CHECKS.get(ln.removeprefix("CHECK: "))
                if why:
                    r.note(f"{patch.name}: {ln} (kept: {why})")
                else:
                    r.fail(f"{patch.name}: {ln}")
        if "ModuleNotFoundError" in p.stderr:
            r.note(f"{patch.name}: scripts/spdxcheck.py could not run (make deps installs python3-ply "
                   "and python3-git): SPDX lines not checked")
    if r.runner.failed == failed:
        r.ok(f"checkpatch --strict ({tree.name}): {len(k.series_patches())} patches, {total['errors']} errors, "
             f"{total['warnings']} warnings, {total['checks']} checks")


COVER_LETTER = "0000-cover-letter.patch"


def patch_subject(text: str) -> tuple[str, str]:
    """The "[PATCH nn/NN]" tag and the subject of a git format-patch file
    (its folded Subject: header unfolded), ("", "") if it has none."""
    m = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", text, re.M)
    if not m:
        return "", ""
    subj = " ".join(m[1].split())
    t = re.match(r"(\[PATCH [^]]*\]) (.*)", subj)
    return (t[1], t[2]) if t else ("", subj)


def cover_shortlog(text: str) -> tuple[int | None, list[str]]:
    """The count N of the cover letter's "<author> (N):" line and its
    shortlog entries, each wrapped entry joined into one line."""
    m = re.search(r"^\S.* \((\d+)\):\n((?:  .*\n)+)", text, re.M)
    if not m:
        return None, []
    out: list[str] = []
    for ln in m[2].splitlines():
        if ln.startswith("    ") and out:
            out[-1] += " " + ln.strip()
        else:
            out.append(ln.strip())
    return int(m[1]), out


def cover_diffstat(text: str) -> tuple[dict[str, int], str]:
    """The cover letter's diffstat: {path as printed: changed lines} and
    its "N files changed, ..." line."""
    files = {m[1]: int(m[2]) for m in re.finditer(r"^ (\S+)\s+\|\s+(\d+) ", text, re.M)}
    total = next((ln.strip() for ln in text.splitlines() if re.match(r" \d+ files? changed", ln)), "")
    return files, total


def series_numstat(tree: Path, patches: list[Path], work: Path) -> tuple[dict[str, int], str, str]:
    """The series' net diffstat against the tree's `pristine` tag without
    touching its checkout: the patches applied one after another to a
    scratch index read from pristine (git apply --cached). Returns
    ({path: added + deleted lines}, git's --shortstat line, and an error
    ("" when it worked))."""
    env = {**os.environ, "GIT_INDEX_FILE": str(work / "cover-index")}
    git = ["git", "-C", str(tree)]

    def run(*args):
        return subprocess.run([*git, *args], capture_output=True, text=True, env=env)
    p = run("read-tree", "pristine")
    if p.returncode:
        return {}, "", f"git read-tree pristine: {p.stderr.strip()[:200]}"
    for patch in patches:
        p = run("apply", "--cached", str(patch.resolve()))
        if p.returncode:
            return {}, "", f"{patch.name} does not apply to the pristine tree: {p.stderr.strip()[:200]}"
    t = run("write-tree")
    if t.returncode:
        return {}, "", f"git write-tree: {t.stderr.strip()[:200]}"
    # One diff of the two trees: its numstat lines, then its shortstat line.
    d = run("diff", "--numstat", "--shortstat", "pristine", t.stdout.strip())
    stat, short = {}, ""
    for ln in d.stdout.splitlines():
        if "\t" not in ln:
            short = ln.strip()
            continue
        a, dl, path = ln.split("\t", 2)
        # (a binary file's counts are "-": no lines, as format-patch's "Bin")
        stat[path] = sum(int(x) for x in (a, dl) if x.isdigit())
    return stat, short, ""


def cover_letter_problems(text: str, patches: list[Path], stat: dict[str, int] | None,
                          short: str) -> list[str]:
    """What is out of step between a cover letter's TEXT and its series
    (PATCHES in order; STAT and SHORT: series_numstat's, None when not
    computed): see cover_letter."""
    out = []
    n = len(patches)

    def tag(i: int) -> str:
        return f"[PATCH {i:0{len(str(n))}d}/{n}]"
    cover_tag, _ = patch_subject(text)
    if cover_tag != tag(0):
        out.append(f"{COVER_LETTER} is {cover_tag or 'untagged'}; the series has {n} patches")
    subjects, mistagged = [], []
    for i, patch in enumerate(patches, 1):
        ptag, subj = patch_subject(patch.read_text(errors="replace"))
        subjects.append(subj)
        if ptag != tag(i):
            mistagged.append(f"{patch.name} is {ptag or 'untagged'}, patch {i} of {n} in series")
    if mistagged:
        out.append(f"{len(mistagged)} patch(es) not numbered as series lists them, the first: {mistagged[0]}")
    count, shortlog = cover_shortlog(text)
    if count != n or shortlog != subjects:
        diff = next((f"entry {i + 1} reads {a!r}, the patch {b!r}" for i, (a, b) in enumerate(zip(shortlog, subjects))
                     if a != b), f"{len(shortlog)} entries")
        out.append(f"{COVER_LETTER}'s shortlog ({count} patches) is not the series' {n} subjects: {diff}")
    if stat is None:
        return out
    files, total = cover_diffstat(text)
    if total != short:
        out.append(f"{COVER_LETTER}'s diffstat says '{total}', the series '{short}'")
    for path, lines in files.items():
        real = [v for q, v in stat.items() if q == path or (path.startswith(".../") and q.endswith(path[3:]))]
        if real != [lines]:
            out.append(f"{COVER_LETTER}'s diffstat has {path} | {lines}, the series {real or 'no such file'}")
    if len(files) != len(stat):
        out.append(f"{COVER_LETTER}'s diffstat names {len(files)} files, the series changes {len(stat)}")
    return out


def cover_letter(k: Kernel, r: Report) -> None:
    """The line's cover letter is in step with its series: "[PATCH 00/N]"
    and "(N):" count the patches `series` lists, each patch is "[PATCH
    n/N]" in its place, the shortlog is their subjects in order, and the
    diffstat is the series' own, computed against the line's pristine tree
    (line_tree). A series change that did not regenerate the letter fails
    here (7.3's had drifted before 2026-12-06: mm_init.c 82 -> 89 lines)."""
    text = (k.series_dir / "patches" / COVER_LETTER).read_text(errors="replace")
    patches = k.series_patches()
    tree = line_tree(k.series_dir)
    stat, short = None, ""
    if tree is not None:
        stat, short, err = series_numstat(tree, patches, k.work)
        if err:
            r.fail(f"the series' diffstat could not be computed: {err}")
            return
    problems = cover_letter_problems(text, patches, stat, short)
    for p in problems:
        r.fail(f"{p} (regenerate the letter: guest-kernel-patches/7.3/README.md)")
    if tree is None:
        r.skip(f"{COVER_LETTER}'s diffstat not checked: no kernel tree for {k.series_dir} in "
               f"{gk.CACHE / 'kernel'} (build.sh unpacks it; this kernel was built elsewhere)")
    elif not problems:
        r.ok(f"{COVER_LETTER}: {len(patches)} patches in order, shortlog and diffstat ({short}) match the series")


def kunit(k: Kernel, r: Report) -> None:
    suites = k.suites()
    # (hugepages and movablecore: the pool folio and the ZONE_MOVABLE block
    # that zerostart_freepaths frees and offlines. 1G, not 256M: boot
    # allocations such as the initrd, not yet freed when KUnit runs, can pin
    # the two top blocks, and the case needs one that offlines.)
    b, lines = k.boot("kunit", "kunit.enable=1 init_on_alloc=1 hugepages=2 movablecore=1G", k.image, initrd=False)
    if b.problem():
        r.fail(f"KUnit boot did not finish: {unfinished(b, lines)}")
        return
    # KTAP without the printk timestamps.
    ktap = [re.sub(r"^\[ *[0-9]+\.[0-9]+\] ", "", ln) for ln in lines]
    (k.work / "kunit.ktap").write_text("".join(ln + "\n" for ln in ktap))
    # Any suite that ran and failed fails the test, listed or not.
    for ln in ktap:
        m = re.match(r"^not ok [0-9]+ (zerostart[a-z_]*|clear_huge_nt)$", ln)
        if m and m[1] not in suites:
            r.fail(f"KUnit suite {m[1]}: not ok")
    for s in suites:
        if grep(ktap, rf"^ok [0-9]+ {s}$"):
            r.ok(f"KUnit suite {s}: ok")
        elif grep(ktap, rf"^not ok [0-9]+ {s}$"):
            r.fail(f"KUnit suite {s}: not ok")
        else:
            r.fail(f"KUnit suite {s} missing from {b.log}")
    # A case of ours that skipped tested nothing: its reason is a boot
    # option or a config this run should have given it.
    skips = grep(ktap, r"^ +ok [0-9]+ zs_test_[a-z_]+ # SKIP")
    if skips:
        r.fail(f"KUnit: skipped: {';'.join(skips[:5])};")
    bad = grep(ktap, r"^ *not ok ")
    if bad:
        r.fail(f"KUnit: {';'.join(bad[:5])};")
    r.ok(f"KUnit: {len(grep(ktap, r'^    ok [0-9]+ '))} test cases ok")


def good(k: Kernel, r: Report) -> None:
    img, blob = k.good()
    lines = boot_case(k, r, "skip", "", img, spec=gk.hint_spec(blob))
    expect_line(r, lines, r"zerostart: tracking [0-9]+ pristine pages")
    # A series whose free blocks carry the zeroed state (7.3) frees the
    # boot bitmap once deferred init is done; the rest of this boot (the
    # late scan, the probe's allocations, verify) runs after that.
    # A KMSAN build (by hand: guest-kernel-patches/7.3/README.md) keeps it:
    # KMSAN gave the bitmap no metadata.
    if k.series_has("pristine bitmap retired"):
        what = "kept" if grep(lines, KMSAN_BANNER) else "freed"
        expect_line(r, lines, rf"zerostart: pristine bitmap retired, [1-9][0-9]* KiB {what}")


def pagealloc(k: Kernel, r: Report) -> None:
    """Case good under debug_pagealloc=on, which unmaps every free page from
    the direct map. The verify scans (prezero.verify=2) read pages that are
    still free, so they must read them some other way: the series before
    it did so oopsed in pid 1 at the first scan (RIP memchr_inv, called
    from zerostart_pristine_scan). directmap_4k() shows the option took
    effect; pageallocctl is the negative control."""
    img, blob = k.good()
    lines = boot_case(k, r, "skip", "debug_pagealloc=on", img, spec=gk.hint_spec(blob))
    directmap_4k(r, lines)


def directmap_4k(r: Report, lines: list[str]) -> bool:
    """debug_pagealloc took effect: x86 maps the direct map with 4 KiB pages
    alone under it, so DirectMap2M=0 (and no DirectMap1G). A kernel built
    without CONFIG_DEBUG_PAGEALLOC ignores debug_pagealloc=on, and a case
    about it fails rather than passing without the aid it is about."""
    d2m, d1g = kv(lines, "ZSDIRECTMAP", "2M"), kv(lines, "ZSDIRECTMAP", "1G")
    if d2m is None:
        return False  # the guest never reached the line: the boot's judge has said how it ended
    if d2m == "0" and d1g in (None, "0"):
        r.ok(f"debug_pagealloc in effect: the direct map has 4 KiB pages only "
             f"(DirectMap4k={kv(lines, 'ZSDIRECTMAP', '4k')} kB)")
        return True
    r.fail(f"debug_pagealloc=on did not take effect (DirectMap2M={d2m}, DirectMap1G={d1g or 'absent'}): "
           "build the kernel with CONFIG_DEBUG_PAGEALLOC=y (config/zerostart.config has it)")
    return False


def pageallocctl(k: Kernel, r: Report) -> None:
    """Negative control of case pagealloc: the same boot with a byte written
    into 16 pages right after they were marked pristine
    (prezero.test_dirty_pristine=16) and the scans alone checking
    (prezero.verify=scan): reading free pages while debug_pagealloc keeps
    them out of the direct map, the scans must still find at least one."""
    img, blob = k.good()
    b, lines = k.boot("boot-pageallocctl", f"{COMMON} debug_pagealloc=on prezero.verify=scan "
                      "prezero.test_dirty_pristine=16", img, spec=gk.hint_spec(blob))
    if b.problem() or not grep(lines, "^ZSDONE"):
        r.fail(f"the guest did not finish: it {ended_by(b, lines)}")
        return
    # The scans report with pr_err, never a WARNING, so any kernel bug
    # line (the harness's one judge) is a fault of its own.
    bugs = kernel_bug_lines(lines)
    if bugs:
        r.fail(f"kernel bug line: {' '.join(bugs[:2])}")
    directmap_4k(r, lines)
    s = kv(lines, "ZSDEBUGFS", "scan_failures")
    w = planted_pages(lines)
    if w == 1 and int_or(s, 0) >= 1:
        r.ok(f"16 planted pages, {s} found by the scans under debug_pagealloc")
    else:
        r.fail(f"planted={w} scan_failures={s or 'missing'}: the scans do not see planted bytes under "
               "debug_pagealloc")


def cover_ranges(mem_mib: int) -> str:
    """Lying about what the boot path wrote: from 1 MiB to the end of RAM,
    i.e. over the compressed and decompressed kernel, the initrd (QEMU puts
    it at the top of RAM) and the hint itself. The kernel must remove all of
    that on its own. Left out: [RAM_END - 64 MiB, RAM_END - 4 MiB), where
    SeaBIOS and QEMU write data before the kernel starts (~108 KiB 16 MiB
    below the top here, see guest-kernel-patches/6.12/memmap.md "Finding"); the
    kernel cannot know of firmware writes, the ABI makes leaving them out the
    producer's job, and the boot data this case is about lies outside that
    window."""
    end = mem_mib * MIB
    lo, hi = end - 64 * MIB, end - 4 * MIB
    return f"{MIB}:{lo - MIB},{hi}:{end - hi}"


def cover(k: Kernel, r: Report) -> None:
    # The case's point needs the initrd inside the hint's top range.
    if k.initrd.stat().st_size >= 3 * MIB:
        r.fail("the initrd is over 3 MiB, so it may not lie in the hint's top 4 MiB")
    img, blob = k.hinted("cover", cover_ranges(k.mem_mib))
    lines = boot_case(k, r, "skip", "", img, spec=gk.hint_spec(blob))
    expect_line(r, lines, r"zerostart: hint from setup_data: 2 ranges")


# The reboot cases: boot 1 takes the honest hint, fills REBOOT_FILL_MIB of
# anonymous memory with zsprobe's SECRET, frees it and reboots in place (QEMU
# without -no-reboot: RAM keeps what boot 1 left, and the same setup_data
# hint is offered again, as a VMM that re-delivers it on reset would); boot 2
# first-touches REBOOT_PROBE_MIB. The control's boot 2 touches less: verify
# mode logs a line for each page it catches.
REBOOT_FILL_MIB = 1200
REBOOT_PROBE_MIB = 1200
REBOOTCTL_PROBE_MIB = 64
# Boot 1 writes a marker into every marker page (the decompressor keeps the
# kernel off them, also for a command-line hint) and keeps them reserved, so
# boot 2 must find a marker. CI once saw boot 2 find a marker page "not zero"
# instead: boot 1's kernel had sat on it (the decompressor did not read
# command-line hints then), so boot 1 wrote only the other marker, and a
# boot 2 that sat on that one would have taken the hint again.
STALE = (r"zerostart: ignoring pre-zeroed hint from {transport}: "
         r"Stale \(consumed by an earlier boot in this VM\)")


def kernel_said(lines: list[str], regex: str) -> list[str]:
    """The lines where the kernel said REGEX: on its console ("[ts] ...")
    or as init's ZSKMSG copy of dmesg (which also works under loglevel=1).
    A printk reaches the UART directly and may cut a line init is writing in
    two, so a refusal or a consumed hint counts wherever it was said."""
    return grep(lines, rf"^(ZSKMSG |\[[^]]*\] ){regex}")


def hint_lines(lines: list[str]) -> list[str]:
    """What the kernel said about the hint, without timestamps and each once:
    the evidence a failure line carries (CI shows those, not the log)."""
    said = dict.fromkeys(PRINTK_TS.sub("", ln.removeprefix("ZSKMSG "))
                         for ln in kernel_said(lines, r"zerostart: (hint|ignoring)"))
    return list(said)


def reboot_case(control: bool, transport: str = "setup_data"):
    """No hint honoured twice (docs/hint-abi.md "Lifetime"): boot 1 consumes
    the hint, i.e. writes a marker into the last page of its ranges, and
    reboots in place after filling memory with a secret; boot 2 gets the
    same hint and must refuse it as Stale: no clear skipped, nothing dirty in
    the memory the probe first-touches, 0 verify failures. rebootctl turns
    the rule off (prezero.test_reuse_hint, test builds only): boot 2 then
    honours the stale hint, and verify mode must catch pages that boot 1
    wrote and the hint called zero, or the case could not fail. A reset the
    guest did not announce stops QEMU (zstest.qemu.boot): a crashed kernel
    is never booted again. TRANSPORT cmdline: the same hint as prezero.hint=
    on the command line, which QEMU passes again on the reset."""
    def case(k: Kernel, r: Report) -> None:
        img, blob = k.good()
        probe = REBOOTCTL_PROBE_MIB if control else REBOOT_PROBE_MIB
        cmdline = (f"{COMMON} zsreboot={REBOOT_FILL_MIB} zsprobe=0,{probe}"
                   + (" prezero.test_reuse_hint=1" if control else ""))
        # A blank disk tells init which boot it is (init.sh, zsreboot=).
        flag = k.work / f"{r.name}.flag"
        flag.write_bytes(bytes(4096))
        spec = {**gk.hint_spec(blob), "disks": [gk.test_disk(flag)]}
        stale = STALE.format(transport="setup_data")
        if transport == "cmdline":
            img = k.image
            cmdline += f" prezero.hint={text_hint(k, gk.honest_hint_ranges(k.mem_mib))}"
            spec = {"disks": [gk.test_disk(flag)]}
            stale = STALE.format(transport="command line")
        b, lines = k.boot(f"boot-{r.name}", cmdline, img, reboots=1, spec=spec)
        cut = next((i for i, ln in enumerate(lines) if ln.startswith(REBOOT_ANNOUNCED)), None)
        if b.problem() or cut is None:
            r.fail(f"boot 1 did not reboot as asked: {b.problem() or f'no {REBOOT_ANNOUNCED} line'}")
            return
        first, second = lines[:cut], lines[cut + 1:]
        if not kernel_said(first, r"zerostart: hint consumed: marker written to [1-9]"):
            r.fail("boot 1 did not consume the hint (no 'hint consumed' line)")
        if kernel_said(second, r"zerostart: hint consumed"):
            r.fail("boot 2 consumed the hint again: it did not see boot 1's marker")
        if not control:
            if not kernel_said(second, stale):
                r.fail("boot 2 did not refuse the stale hint; it said: "
                       + ("; ".join(hint_lines(second)) or "nothing about the hint"))
            judge_boot(r, b, second, "noskip", cmdline)
            return
        failed = kv(second, "ZSDEBUGFS", "verify_failures")
        skipped = kv(second, "ZSDEBUGFS", "pages_skipped")
        if b.ended != "power-off" or not grep(second, "^ZSDONE"):
            r.fail(f"boot 2 did not finish: the guest {ended_by(b, second)}")
        elif not kernel_said(second, r"zerostart: prezero.test_reuse_hint: honouring it anyway"):
            r.fail("boot 2 did not honour the consumed hint under prezero.test_reuse_hint=1")
        elif int_or(skipped, 0) <= 0:
            r.fail(f"boot 2 skipped no clear (pages_skipped={skipped or 'missing'}) under prezero.test_reuse_hint=1")
        elif int_or(failed, 0) > 0:
            r.ok(f"rule off: boot 2 honoured the stale hint ({skipped} clears skipped) and verify caught {failed} "
                 "pages boot 1 had written")
        else:
            r.fail(f"rule off but verify_failures={failed or 'missing'}: the reboot case could not fail")
    return case


def bad_hint(flag: str, error: str):
    def case(k: Kernel, r: Report) -> None:
        img, blob = k.hinted(r.name, gk.honest_hint_ranges(k.mem_mib), flag)
        lines = boot_case(k, r, "noskip", "", img, spec=gk.hint_spec(blob))
        expect_line(r, lines, f"zerostart: ignoring pre-zeroed hint from setup_data: {error}")
    return case


# The text transports (docs/hint-abi.md "Text form"): the honest hint as
# prezero.hint= on the kernel command line or as an SMBIOS type 11 string,
# on the plain image (no setup_data). Each transport has a good case, a
# dirty-page control (the hint lies about 256 KiB that QEMU's loader fills
# with 0xa5 inside a hinted range: verify mode or the scans must catch it)
# and a corrupt hint that is refused with its reason.
# Three plants 256 MiB apart: KASLR may put the kernel (init_size ~28 MiB)
# over one of them, which then is boot data, not hinted memory, and unseen
# by design (CI 2026-12-02, 7.3: the one plant at 1 GiB went unseen that
# way); it cannot cover two.
TEXT_PLANT_ADDRS = (1024 * MIB, 1280 * MIB, 1536 * MIB)
TEXT_PLANT_KIB = 256


def text_hint(k: Kernel, ranges: str, corrupt: bool = False) -> str:
    """The text form of a hint of RANGES (START:LEN,...); CORRUPT flips one
    bit of the first entry, as mkhint.py --corrupt does (BadChecksum)."""
    pairs = [tuple(int(x) for x in item.split(":")) for item in ranges.split(",")]
    return zshint.text(zshint.encode_ranges(pairs, corrupt=corrupt))


def text_transport_args(transport: str, text: str) -> tuple[str, dict]:
    """(kernel command line part, QEMU spec part) that carry TEXT. An SMBIOS
    hint boots with nokaslr: the decompressor does not read SMBIOS, so KASLR
    may put the kernel on one of its marker pages, and the kernel refuses
    such a hint (case hiddenmarker) in a few percent of boots."""
    if transport == "cmdline":
        return f"{zshint.TEXT_PARAM}={text}", {}
    return "nokaslr", {"qemu": {"oem_strings": [f"{zshint.TEXT_PARAM}={text}"]}}


TEXT_SRC = {"cmdline": "command line", "smbios": "SMBIOS"}


def text_case(transport: str, kind: str):
    """kind: good (clears skipped, every one verified zero), dirty (the
    negative control: planted bytes inside a hinted range must be caught),
    corrupt (BadChecksum: refused, nothing skipped)."""
    def case(k: Kernel, r: Report) -> None:
        ranges = gk.honest_hint_ranges(k.mem_mib)
        part, spec = text_transport_args(transport, text_hint(k, ranges, corrupt=kind == "corrupt"))
        src = TEXT_SRC[transport]
        if kind == "good":
            lines = boot_case(k, r, "skip", part, k.image, spec=spec)
            expect_line(r, lines, rf"zerostart: hint from {src}: 2 ranges")
        elif kind == "corrupt":
            lines = boot_case(k, r, "noskip", part, k.image, spec=spec)
            expect_line(r, lines, f"zerostart: ignoring pre-zeroed hint from {src}: BadChecksum")
        else:
            plant = k.work / "text-plant.bin"
            plant.write_bytes(b"\xa5" * (TEXT_PLANT_KIB * 1024))
            spec = {**spec, "qemu": {**spec.get("qemu", {}),
                                     "loaders": [gk.loader(plant, at) for at in TEXT_PLANT_ADDRS]}}
            b, lines = k.boot(f"boot-{r.name}", f"{COMMON} {part}", k.image, spec=spec)
            if b.problem() or not grep(lines, "^ZSDONE"):
                r.fail(f"the guest did not finish: it {ended_by(b, lines)}")
                return
            f, sc = kv(lines, "ZSDEBUGFS", "verify_failures"), kv(lines, "ZSDEBUGFS", "scan_failures")
            caught = int_or(f, 0) + int_or(sc, 0) + len(grep(lines, "marked pristine but is not zero"))
            if not grep(lines, rf"zerostart: hint from {src}: 2 ranges"):
                r.fail(f"the lying hint was not taken from {src}, so the control shows nothing")
            elif caught > 0:
                r.ok(f"the hint lied about {TEXT_PLANT_KIB} KiB at each of "
                     f"{', '.join(f'{a:#x}' for a in TEXT_PLANT_ADDRS)}: verify_failures={f} "
                     f"scan_failures={sc}")
            else:
                r.fail(f"{len(TEXT_PLANT_ADDRS)} x {TEXT_PLANT_KIB} KiB of 0xa5 inside the hint went unseen (verify_failures={f or 'missing'} "
                       f"scan_failures={sc or 'missing'}): the text transport's skips cannot fail")
    return case


def init_size(image: Path) -> int:
    """The bzImage's init_size (boot protocol 2.10, offset 0x260): the
    buffer the decompressed kernel occupies wherever KASLR puts it."""
    with open(image, "rb") as f:
        f.seek(0x260)
        return int.from_bytes(f.read(4), "little")


# loadhook: a loader whose code32_start is not where the decompressor runs.
HOOK_ADDR = 15 * MIB                # the hook code32_start names (below the hint)
HOOK_DEST = 256 * MIB               # where the hook moves the kernel to run
QEMU_PROT_ADDR = 1 * MIB            # where QEMU loads the protected-mode kernel


def load_hook_code(length: int) -> bytes:
    """32-bit code for code32_start's hook (Documentation/arch/x86/boot.rst:
    a boot loader may point code32_start at its own routine, which must then
    enter the kernel): move the protected-mode kernel (LENGTH bytes) from
    QEMU_PROT_ADDR to HOOK_DEST and enter startup_32 there, with %esi the
    boot_params the setup code passed and %ebx, %ebp, %edi zero, as the 32-bit
    boot protocol asks."""
    def imm(v: int) -> bytes:
        return v.to_bytes(4, "little")
    return b"".join([
        b"\x56",                                    # push %esi
        b"\xbe" + imm(QEMU_PROT_ADDR),              # mov $QEMU_PROT_ADDR, %esi
        b"\xbf" + imm(HOOK_DEST),                   # mov $HOOK_DEST, %edi
        b"\xb9" + imm(-(-length // 4)),             # mov $dwords, %ecx
        b"\xfc\xf3\xa5",                            # cld; rep movsl
        b"\x5e",                                    # pop %esi
        b"\x31\xff\x31\xed\x31\xdb",                # xor %edi,%edi; xor %ebp,%ebp; xor %ebx,%ebx
        b"\xb8" + imm(HOOK_DEST),                   # mov $HOOK_DEST, %eax
        b"\xff\xe0",                                # jmp *%eax
    ])


def load_hook(k: Kernel, r: Report) -> None:
    """The decompressor's footprint comes from where it really ran, not
    from code32_start. A boot loader may point code32_start at a hook of its
    own (the boot protocol allows it); this one, planted at HOOK_ADDR, moves
    the kernel QEMU loaded at 1 MiB to HOOK_DEST and enters it there. The
    command-line hint leaves out what the loader wrote (the kernel file at
    HOOK_DEST) and names the rest of RAM from 16 MiB: the decompressor then
    runs in [HOOK_DEST, HOOK_DEST + init_size), copies itself to the top of
    that buffer and keeps its heap, stack and page tables there, and KASLR
    puts the kernel elsewhere (it avoids that buffer). The kernel must leave
    the buffer out of the pristine set (it logs the range the decompressor
    recorded), so the scans find every marked page zero. A kernel that
    computes the footprint from code32_start leaves out [HOOK_ADDR, 16 MiB +
    init_size) instead and marks the decompressor's own pages pristine: the
    scans catch them and the case fails (the series before the fix)."""
    data = bytearray(k.image.read_bytes())
    setup_sects = data[0x1f1] or 4
    pm_len = len(data) - (setup_sects + 1) * 512
    if QEMU_PROT_ADDR + pm_len > HOOK_ADDR:
        r.fail(f"the protected-mode kernel ({pm_len} bytes from {QEMU_PROT_ADDR:#x}) would cover the hook at "
               f"{HOOK_ADDR:#x}: move HOOK_ADDR up")
        return
    img = k.work / "loadhook.bzImage"
    data[0x214:0x218] = HOOK_ADDR.to_bytes(4, "little")        # code32_start: the hook
    img.write_bytes(bytes(data))
    hook = k.work / "loadhook.bin"
    hook.write_bytes(load_hook_code(pm_len))
    file_end = -(-(HOOK_DEST + pm_len) // (2 * MIB)) * 2 * MIB
    low = k.mem_mib * MIB - 64 * MIB
    text = text_hint(k, f"{16 * MIB}:{HOOK_DEST - 16 * MIB},{file_end}:{low - file_end}")
    lines = boot_case(k, r, "skip", f"prezero.hint={text}", img,
                      spec={"qemu": {"loaders": [gk.loader(hook, HOOK_ADDR)]}})
    expect_line(r, lines, r"zerostart: hint from command line: 2 ranges")
    end = HOOK_DEST + init_size(k.image)
    expect_line(r, lines, rf"zerostart: decompressor ran in \[mem {HOOK_DEST:#018x}-{end - 1:#018x}\]")


# kaslrslot: a command-line hint whose marker pages leave KASLR one slot.
KASLR_MEM_MIB = 512
KASLR_LIMIT = 448 * MIB             # mem=448M: KASLR's slots end here
KASLR_SLOT = 256 * MIB              # the one slot no marker page blocks
KASLR_STEP = 20 * MIB               # < every init_size seen (26-28 MiB)


def kaslr_slot_ranges(image_size: int) -> list[tuple[int, int]]:
    """Ranges tiling [BASE, KASLR_LIMIT) whose last pages (the marker
    pages) lie at most KASLR_STEP apart, except around KASLR_SLOT: no marker
    in [KASLR_SLOT, KASLR_SLOT + IMAGE_SIZE), one right below it and one
    right after it, so that of all 2 MiB-aligned slots from BASE only
    KASLR_SLOT holds a kernel of IMAGE_SIZE clear of every marker page.
    BASE: above the decompressor's own buffer at 16 MiB (boot data, which
    KASLR avoids by itself), so every marker page can be written."""
    def up(n: int) -> int:
        return -(-n // (2 * MIB)) * 2 * MIB
    base, after = 16 * MIB + up(image_size), KASLR_SLOT + up(image_size)
    marks = [*range(base + KASLR_STEP - 4096, KASLR_SLOT - 4096, KASLR_STEP), KASLR_SLOT - 4096,
             *range(after, KASLR_LIMIT - 4096, KASLR_STEP), KASLR_LIMIT - 4096]
    starts = [base] + [m + 4096 for m in marks[:-1]]
    ranges = [(a, m + 4096 - a) for a, m in zip(starts, marks)]
    # The tiling's own proof: every other slot below the limit meets a marker.
    for slot in range(base, KASLR_LIMIT - image_size + 1, 2 * MIB):
        hit = any(slot <= m < slot + image_size for m in marks)
        if hit == (slot == KASLR_SLOT):
            raise ValueError(f"the marker pages {'block' if hit else 'leave free'} slot {slot:#x} for a "
                             f"{image_size:#x}-byte kernel (KASLR_STEP must stay below init_size)")
    return ranges


def kaslr_slot(k: Kernel, r: Report) -> None:
    """The decompressor keeps the kernel off the marker pages of a
    command-line hint. Its marker pages (kaslr_slot_ranges) leave KASLR one
    2 MiB slot in a 512 MiB guest booted with mem=448M, so the boot must
    write the marker into every one of them and take the hint. Without the
    avoidance KASLR picks among some 200 slots, lands on a marker page and
    the kernel refuses the hint (case hiddenmarker's rule): the case fails
    then, but for the 1 in 200 boots that pick the slot by chance."""
    try:
        ranges = kaslr_slot_ranges(init_size(k.image))
    except ValueError as e:
        r.fail(str(e))
        return
    text = text_hint(k, ",".join(f"{a}:{n}" for a, n in ranges))
    lines = boot_case(k, r, "skip", f"mem={KASLR_LIMIT // MIB}M prezero.hint={text}", k.image, mem=KASLR_MEM_MIB,
                      common="hugepages=32 prezero.verify=2 init_on_alloc=1 zsprobe=64,64")
    n = len(ranges)
    expect_line(r, lines, rf"zerostart: hint consumed: marker written to {n} of {n} range-end pages")
    expect_line(r, lines, rf"zerostart: hint from command line: {n} ranges")


def hidden_marker(k: Kernel, r: Report) -> None:
    """A raw-transport hint one of whose marker pages lies under the kernel
    is refused: KASLR may put the kernel elsewhere in another boot, so the
    only marker an earlier boot could write may be under it now. An SMBIOS
    hint (the decompressor does not read SMBIOS) and nokaslr: the kernel
    sits at 16 MiB, on the marker page of the hint's first range; the
    second range's marker page is free, so without the rule the hint would
    be consumed through it and taken, and the case fails."""
    ranges = f"{16 * MIB}:{8 * MIB},{HIDDEN_FROM}:{HIDDEN_LEN}"
    part, spec = text_transport_args("smbios", text_hint(k, ranges))
    lines = boot_case(k, r, "noskip", part, k.image, spec=spec)
    expect_line(r, lines, rf"zerostart: hint's marker page {24 * MIB - 4096:#x} is under the kernel \(1 of 2\)")
    expect_line(r, lines, r"zerostart: ignoring pre-zeroed hint from SMBIOS: a marker page is under the kernel")


HIDDEN_FROM, HIDDEN_LEN = 256 * MIB, 512 * MIB


def text_rules(k: Kernel, r: Report) -> None:
    """The raw transports' rules on a direct boot: two prezero.hint=
    parameters are refused as Duplicate, and a command-line hint that
    differs from the setup_data one is refused as a disagreement (the
    setup_data hint alone would be taken: case good)."""
    ranges = gk.honest_hint_ranges(k.mem_mib)
    good = text_hint(k, ranges)
    lines = boot_case(k, r, "noskip", f"prezero.hint={good} prezero.hint={good}", k.image)
    expect_line(r, lines, r"zerostart: ignoring pre-zeroed hint from command line: Duplicate \(2 of them\)")
    img, blob = k.good()
    other = text_hint(k, f"{16 * MIB}:{64 * MIB}")
    lines = boot_case(k, r, "noskip", f"prezero.hint={other}", img, spec=gk.hint_spec(blob))
    expect_line(r, lines, r"zerostart: ignoring pre-zeroed hint: transports disagree \(setup_data, command line\)")


def off(k: Kernel, r: Report) -> None:
    img, blob = k.good()
    lines = boot_case(k, r, "noskip", "prezero=off", img, spec=gk.hint_spec(blob))
    expect_line(r, lines, "zerostart: prezero=off: ignoring the pre-zeroed hint")


def nohint(k: Kernel, r: Report) -> None:
    boot_case(k, r, "noskip", "", k.image)


def memblock(k: Kernel, r: Report) -> None:
    """Allocations from memblock after the pristine snapshot (the memblock
    false zero): memblock.reserved one entry short of full when
    memblock_free_all() starts, and memblock's allocation limit lowered into
    hinted memory, so that memmap_init_reserved_pages() doubles the array
    into memory the hint covers (memblock=debug prints the doubling). The
    array is freed with memblock_free_late() at memblock_discard(); the scan
    right after, and the one at late_initcall, must find no page marked
    pristine that is not zero. Before the fix (snapshot at the start of
    memblock_free_all(), KEEP on every early free) the first scan reported
    the array's pages."""
    img, blob = k.good()
    lines = boot_case(k, r, "skip", "prezero.test_fill_reserved=1 memblock=debug", img, spec=gk.hint_spec(blob))
    expect_line(r, lines, r"zerostart: test: memblock.reserved filled to [0-9]+ of [0-9]+ entries")
    d = grep(lines, r"memblock: reserved is doubled to [0-9]+ at")
    if d:
        r.ok(PRINTK_TS.sub("", d[0]))
    else:
        r.fail("memblock.reserved was not doubled: the case did not exercise the path")
    limit_restored(r, lines)


def limit_restored(r: Report, lines: list[str]) -> None:
    """The fill lowers memblock's allocation limit into hinted memory; once
    memblock_free_all() is done the test must leave it as it found it (the
    review's Low: it was left lowered)."""
    filled = grep(lines, r"zerostart: test: memblock\.reserved filled to .* allocation limit (0x[0-9a-f]+) "
                         r"\(was (0x[0-9a-f]+)\)")
    back = grep(lines, r"zerostart: test: memblock allocation limit restored to (0x[0-9a-f]+)")
    m = re.search(r"allocation limit (0x[0-9a-f]+) \(was (0x[0-9a-f]+)\)", filled[0]) if filled else None
    b = re.search(r"restored to (0x[0-9a-f]+)", back[0]) if back else None
    if not m or not b:
        r.fail(f"the allocation limit lines are missing (lowered: {bool(m)}, restored: {bool(b)})")
    elif int(m.group(1), 16) >= int(m.group(2), 16) and int(m.group(2), 16) != 0:
        r.fail(f"the fill did not lower the allocation limit ({m.group(1)}, was {m.group(2)})")
    elif int(b.group(1), 16) != int(m.group(2), 16):
        r.fail(f"allocation limit left at {b.group(1)}, not restored to {m.group(2)}")
    else:
        r.ok(f"allocation limit lowered to {m.group(1)} for the fill and restored to {b.group(1)}")


def initfree(k: Kernel, r: Report) -> None:
    """init_on_free=1 with init_on_alloc=0 (the review's Low): the page
    allocator then clears nothing it hands out, even for __GFP_ZERO, so
    a hugetlb or THP caller may not take its folio as cleared by the
    allocator (zerostart_gfp_zeroed() is exactly post_alloc_hook()'s
    condition). The boot-time hugetlb pool must therefore carry no
    allocator-zeroed mark: its first faults clear as upstream does, so no
    hugetlb clear is elided (pages_elided 0), while the same pool with
    init_on_alloc=1 (every other case here, e.g. good) elides them. Before
    the fix the pool was marked zeroed and the first faults skipped their
    clear. Verify mode stays on (prezero.verify=1: the 7.3 line keeps no
    pristine mark through init_on_free's clear at release, so the
    verify=2 scans would have nothing to read): nothing handed out may be
    dirty."""
    img, blob = k.good()
    lines = boot_case(k, r, "any", "init_on_free=1 init_on_alloc=0 prezero.verify=1", img, spec=gk.hint_spec(blob))
    expect_line(r, lines, r"mem auto-init: .*heap alloc:off, heap free:on")
    elided = kv(lines, "ZSDEBUGFS", "pages_elided")
    failed = kv(lines, "ZSDEBUGFS", "verify_failures")
    if elided == "0":
        r.ok("no hugetlb clear elided: the allocator cleared nothing under init_on_free")
    else:
        r.fail(f"pages_elided={elided or 'missing'}: a hugetlb folio was taken as cleared by the allocator, "
               "which clears nothing with init_on_free=1 init_on_alloc=0")
    if failed == "0":
        r.ok("verify mode: 0 failures")
    else:
        r.fail(f"verify_failures={failed or 'missing'}")


HIB_ARGS = "hugepages=0 prezero.verify=1 init_on_alloc=1 nokaslr zsprobe=0,1200"
# The loading kernel's CPUs, parked for the restore, wait this long between
# telling the boot CPU they are dead and halting (the series' test knob
# prezero.test_resume_park_ms): the window in which a vCPU that TCG
# switched away from once returned through a stack the image had
# overwritten (tests/zstest/captured/hibernatectl-resume-oops-cpu1.log).
# Held open, every resume crashes on CPU 1 unless the boot CPU waits for
# the halt (the series' "wait for the parked CPUs to halt"; with this knob
# and without that patch 3 of 3 such resumes hung, 6.12 README).
HIB_PARK_MS = 300
HIB_PARK_KNOB = "prezero.test_resume_park_ms"
HIB_SAVED = re.compile(r"PM: hibernation: hibernation exit|PM: Image saving done|PM: hibernation: Image saving done|"
                       r"Image saving done")


def hibernate_case(extra: str, expect: str):
    """Hibernation (series file "forget every pristine mark before
    hibernation"): a hibernation image restores the pristine bitmap but not
    the free pages, which the kernel that loaded the image has written
    meanwhile. Boot 1 (the honest hint, verify mode) puts swap on a virtio
    disk and hibernates to it; boot 2, with resume=, loads the image, and
    boot 1's /init continues: it first-touches 1200 MiB of anonymous memory.
    With the fix every mark was dropped before the image was made: no clear
    is skipped after the resume, and nothing is found dirty (EXPECT clean).
    hibernatectl keeps the marks (prezero.test_hibernate_keep, test builds
    only): verify mode must then catch pages the loading kernel wrote, or the
    case cannot fail (EXPECT caught). Both boots hold the parked CPUs'
    window open (HIB_PARK_MS) where the series has the knob, and boot 2
    must say it took it."""
    def case(k: Kernel, r: Report) -> None:
        name = r.name
        swap = k.work / f"{name}.swap"
        swap.unlink(missing_ok=True)
        with open(swap, "wb") as f:
            f.truncate(1 << 30)
        img, blob = k.good()
        disk = {**gk.hint_spec(blob), "disks": [gk.test_disk(swap)]}
        args = f"{HIB_ARGS} {extra}".strip()
        park = k.series_has(HIB_PARK_KNOB)
        if park:
            args += f" {HIB_PARK_KNOB}={HIB_PARK_MS}"
        b1, l1 = k.boot(f"boot-{name}", f"{args} zshib=1", img, spec=disk)
        if b1.problem():
            r.fail(f"the hibernating boot did not finish: {unfinished(b1, l1)}")
            return
        before = kv(l1, "ZSHIB", "pristine_pages")
        if not any(HIB_SAVED.search(ln) for ln in l1):
            r.fail(f"no hibernation image was written: {';'.join(grep(l1, 'ZSHIB FAIL|PM: ')[-3:])};")
            return
        b2, l2 = k.boot(f"boot-{name}-resume", f"{args} zshib=2 resume=/dev/vda", img, spec=disk)
        if b2.problem():
            r.fail(f"the resuming boot did not finish: {unfinished(b2, l2)}")
            return
        if not grep(l2, "^ZSHIB resumed") or not grep(l2, "^ZSDONE"):
            r.fail(f"the image was not resumed to the end: {';'.join(grep(l2, 'ZSHIB|PM: ')[-3:])};")
            return
        if park and not grep(l2, f"CPUs parked for an image restore wait {HIB_PARK_MS} ms before they halt"):
            r.fail(f"the loading kernel did not take {HIB_PARK_KNOB}={HIB_PARK_MS}: the parked CPUs' window was not "
                   "held open, so this resume tested nothing of it")
            return
        rs, f = kv(l2, "ZSHIB", "pages_skipped"), kv(l2, "ZSDEBUGFS", "verify_failures")
        d, n = kv(l2, "ZSPROBE", "anon_dirty_pages"), kv(l2, "ZSDEBUGFS", "pages_skipped")
        after = kv(l2, "ZSHIB", "pristine_pages")
        w = len(boot_bug_lines(l2))
        if expect == "clean":
            if (grep(l1, r"zerostart: hibernation: dropped all [0-9]+ pristine marks") and int_or(before, 0) > 0
                    and after == "0" and (n or "x") == (rs or "y") and f == "0" and d == "0" and w == 0):
                r.ok(f"{before} pristine marks dropped before the image was made; after the resume 0 marks, no clear "
                     "skipped, 1200 MiB touched, 0 verify failures")
            else:
                r.fail(f"marks before={before or 'missing'} after={after or ''} skipped resumed={rs or '?'} "
                       f"final={n or '?'} verify_failures={f or '?'} anon_dirty_pages={d or '?'} warnings={w}")
        elif int_or(f, 0) > 0:
            r.ok(f"marks kept across the hibernation: verify caught {f} pages the loading kernel had written")
        else:
            r.fail(f"marks kept across the hibernation but verify_failures={f or 'missing'}: the hibernate case "
                   "could not fail")
    return case


def hugedirty(k: Kernel, r: Report) -> None:
    """A hugetlb pool folio that was used and freed must be cleared when it
    is faulted again, hint or not: the probe populates the whole 256 MiB pool
    (fresh folios the allocator cleared or found pristine: their clear is
    elided, 65536 pages), fills it with a pattern, unmaps it, and populates
    it again, which must clear every folio (free_huge_folio() drops
    HPG_zeroed) and read back zero. Verify mode off (scan only), so only the
    kernel's own logic stands between the pattern and user space."""
    img, blob = k.good()
    lines = boot_case(k, r, "any", "prezero.verify=scan zsprobe=256,0,dirty", img, spec=gk.hint_spec(blob))
    e = kv(lines, "ZSDEBUGFS", "pages_elided")
    if e == "65536":
        r.ok("only the first populate of the pool was elided (65536 pages); the dirtied folios were cleared on "
             "the second")
    else:
        r.fail(f"pages_elided={e or 'missing'}, want 65536: a freed, dirtied pool folio was faulted without its "
               "clear")


def scanctl(k: Kernel, r: Report) -> None:
    """Negative control of the checks above: the kernel writes one byte into
    16 pages right after marking them pristine
    (prezero.test_dirty_pristine); verify mode and the scans must report all
    16 (verify_failures=16, each with its pfn), the scans at least one."""
    img, blob = k.good()
    b, lines = k.boot("boot-scanctl", f"{COMMON} prezero.test_dirty_pristine=16", img, spec=gk.hint_spec(blob))
    if b.problem():
        r.fail(f"QEMU did not complete the boot: {unfinished(b, lines)}")
        return
    f, s = kv(lines, "ZSDEBUGFS", "verify_failures"), kv(lines, "ZSDEBUGFS", "scan_failures")
    w = planted_pages(lines)
    # A series whose plant walks struct pages before deferred init (7.3)
    # must stop where they are not initialised yet, and say where.
    if k.series_has("wait for deferred init: not walked"):
        expect_line(r, lines, r"zerostart: test: struct pages of node 0 past pfn 0x[0-9a-f]+ wait for deferred "
                    "init: not walked")
    if w == 1 and f == "16" and int_or(s, 0) >= 1:
        r.ok(f"16 planted pages, verify_failures=16 ({s} found by the scans)")
    else:
        r.fail(f"planted={w} verify_failures={f or 'missing'} scan_failures={s or 'missing'}: the checks do not "
               "see planted bytes")


def batch_counters(r: Report, lines: list[str]) -> None:
    """fault_batches > 0 and the batch size in effect."""
    b, m = kv(lines, "ZSDEBUGFS", "fault_batches"), kv(lines, "ZSDEBUGFS", "fault_batch_misses")
    kib = kv(lines, "ZSDEBUGFS", "fault_batch_kib")
    if int_or(b, 0) > 0:
        r.ok(f"{b} pristine {kib or '?'} KiB folios mapped by one fault each, {m or '?'} batches not pristine, "
             f"{kv(lines, 'ZSDEBUGFS', 'fault_batch_pauses') or ''} pauses")
    else:
        r.fail(f"expected fault_batches > 0, got {b or 'missing'} (fault_batch_kib={kib or 'missing'})")


# Fault batching follows the top-level THP policy (the batch size acts as
# an mTHP size set to "inherit"): the batch cases turn THP on and its PMD
# size off, so that every anonymous fault is a 4 KiB fault without the
# series and a batch with it.
BATCH_THP = "transparent_hugepage=always thp_anon=2M:never"


def batch(k: Kernel, r: Report) -> None:
    """Fault batching (patch "map pristine memory in batches"): with THP on
    but its PMD size and every mTHP size off, first-touch 256 MiB of
    anonymous memory without MADV_NOHUGEPAGE: faults must map pristine 64
    KiB folios (fault_batches > 0), every byte verified zero by the kernel
    and read back zero by the probe; then touch 1 byte per 64 KiB of another
    256 MiB and report the RSS it costs."""
    img, blob = k.good()
    lines = boot_case(k, r, "skip", f"{BATCH_THP} zsprobe=0,256,thp,sparse,refuse", img,
                      spec=gk.hint_spec(blob))
    batch_counters(r, lines)
    # VMAs that forbid large folios must not be batched: 64 MiB touched with
    # MADV_NOHUGEPAGE, and after prctl(PR_SET_THP_DISABLE), against 64 MiB
    # touched plainly (1024 batches); a few batches from other processes at
    # the same time are tolerated.
    pl, ma, pr = (kv(lines, "ZSPROBE", f"refuse_{x}_batches") for x in ("plain", "madv", "prctl"))
    if int_or(pl, 0) >= 512 and 0 <= int_or(ma, 999) < 16 and 0 <= int_or(pr, 999) < 16:
        r.ok(f"64 MiB touched: {pl} batches plain, {ma} with MADV_NOHUGEPAGE, {pr} after PR_SET_THP_DISABLE")
    else:
        r.fail(f"refusal: plain={pl or 'missing'} (want >= 512) madvise={ma or 'missing'} prctl={pr or 'missing'} "
               "(want < 16)")
    r.note(f"sparse touch (1 byte per 64 KiB): {kv(lines, 'ZSPROBE', 'sparse_touched_kib') or '?'} KiB touched, "
           f"RSS grew {kv(lines, 'ZSPROBE', 'sparse_rss_kib') or '?'} KiB")


def batchnever(k: Kernel, r: Report) -> None:
    """THP "never" is honoured: the batch case's probe under
    transparent_hugepage=never must not batch a single fault (the admin
    asked for no fault larger than a page), while clears are still skipped.
    Its control is case batch: the same probe and hint, THP on."""
    img, blob = k.good()
    lines = boot_case(k, r, "skip", "transparent_hugepage=never zsprobe=0,256,thp,refuse", img,
                      spec=gk.hint_spec(blob))
    judge_batchnever(r, lines)


def judge_batchnever(r: Report, lines: list[str]) -> None:
    """batchnever's verdict on the boot's LINES."""
    b, pl = kv(lines, "ZSDEBUGFS", "fault_batches"), kv(lines, "ZSPROBE", "refuse_plain_batches")
    if b == "0" and pl == "0":
        r.ok("THP never: 0 faults batched over 512 MiB first-touched (MADV_HUGEPAGE areas included)")
    else:
        r.fail(f"THP never: fault_batches={b or 'missing'} refuse_plain_batches={pl or 'missing'} (want 0)")


def batchmadvise(k: Kernel, r: Report) -> None:
    """THP "madvise" is honoured: with the PMD size off
    (transparent_hugepage=madvise thp_anon=2M:never), only MADV_HUGEPAGE
    areas may be batched: 64 MiB touched plainly must batch nothing, 64 MiB
    after MADV_HUGEPAGE must batch (>= 512 of its 1024 64 KiB folios)."""
    img, blob = k.good()
    lines = boot_case(k, r, "skip", "transparent_hugepage=madvise thp_anon=2M:never zsprobe=0,256,thp,refuse", img,
                      spec=gk.hint_spec(blob))
    judge_batchmadvise(r, lines)


def judge_batchmadvise(r: Report, lines: list[str]) -> None:
    """batchmadvise's verdict on the boot's LINES."""
    pl, hp = kv(lines, "ZSPROBE", "refuse_plain_batches"), kv(lines, "ZSPROBE", "refuse_hugepage_batches")
    if pl == "0" and int_or(hp, 0) >= 512:
        r.ok(f"THP madvise: 64 MiB touched: 0 batches plainly, {hp} after MADV_HUGEPAGE")
    else:
        r.fail(f"THP madvise: plain={pl or 'missing'} (want 0) MADV_HUGEPAGE={hp or 'missing'} (want >= 512)")


def usedup(k: Kernel, r: Report) -> None:
    """Pristine memory used up switches the skip path off: the probe holds
    anonymous memory until the kernel says so (debugfs zerostart/active
    reads 0, the kernel logs it once and has dropped its last marks), gives
    it back and first-touches 64 MiB with THP on: not one fault may be
    batched and no clear skipped any more. Every skipped clear before is
    verified. The case fails if the switch never comes (the probe stops at
    8 MiB MemAvailable)."""
    img, blob = k.good()
    lines = boot_case(k, r, "skip", f"{BATCH_THP} zsprobe=0,0,thp,usedup", img, spec=gk.hint_spec(blob))
    judge_usedup(r, lines)


def judge_usedup(r: Report, lines: list[str]) -> None:
    """usedup's verdict on the boot's LINES."""
    held, act = kv(lines, "ZSPROBE", "usedup_held_mib"), kv(lines, "ZSPROBE", "usedup_active")
    left, after = kv(lines, "ZSPROBE", "usedup_pristine_pages"), kv(lines, "ZSPROBE", "usedup_batches_after")
    s1, s2 = kv(lines, "ZSPROBE", "usedup_pages_skipped"), kv(lines, "ZSDEBUGFS", "pages_skipped")
    said = kernel_said(lines, r"zerostart: pristine memory used up: dropped all [0-9]+ pristine marks")
    once = {re.sub(r"^(ZSKMSG |\[[^]]*\] )", "", x) for x in said}
    if act == "0" and left == "0" and after == "0" and len(once) == 1 and s1 is not None and s1 == s2 \
            and kv(lines, "ZSDEBUGFS", "active") == "0":
        r.ok(f"switched off after {held} MiB held ({PRINTK_TS.sub('', said[0])}); then 0 faults batched over "
             f"64 MiB, no clear skipped after")
    else:
        r.fail(f"held={held or 'missing'} MiB active={act or 'missing'} pristine_pages={left or 'missing'} "
               f"batches_after={after or 'missing'} skipped at the switch={s1 or 'missing'} at the end="
               f"{s2 or 'missing'} used-up lines={len(once)}")


def kexec_jump_case(control: bool):
    """kexec jump (KEXEC_PRESERVE_CONTEXT: a jump to the image and back, with
    memory as the peer left it): loading such an image must make the kernel
    forget every pristine mark, before any jump can happen. The probe loads
    one (a page holding a ret, never jumped to) and first-touches 64 MiB
    with THP on: no mark may be left, no clear skipped, no fault batched
    after. CONTROL (prezero.test_kexec_jump_keep=1) keeps the marks: clears
    must still be skipped after the load, or the case could not fail."""
    def run(k: Kernel, r: Report) -> None:
        img, blob = k.good()
        extra = "prezero.test_kexec_jump_keep=1 " if control else ""
        lines = boot_case(k, r, "skip", f"{extra}{BATCH_THP} zsprobe=0,0,thp,kjump", img, spec=gk.hint_spec(blob))
        judge_kexec_jump(r, lines, control)
    return run


def judge_kexec_jump(r: Report, lines: list[str], control: bool) -> None:
    """kexecjump's (CONTROL: kexecjumpctl's) verdict on the boot's LINES."""
    rc, err = kv(lines, "ZSPROBE", "kjump_rc"), kv(lines, "ZSPROBE", "kjump_errno")
    before, after = kv(lines, "ZSPROBE", "kjump_pristine_before"), kv(lines, "ZSPROBE", "kjump_pristine_after")
    skipped, batches = kv(lines, "ZSPROBE", "kjump_skipped_after"), kv(lines, "ZSPROBE", "kjump_batches_after")
    said = {re.sub(r"^(ZSKMSG |\[[^]]*\] )", "", x)
            for x in kernel_said(lines, r"zerostart: kexec jump image loaded: dropped all [0-9]+ pristine marks")}
    got = (f"kexec_load={rc or 'missing'} (errno {err or '?'}), marks before={before or 'missing'} "
           f"after={after or 'missing'}, clears skipped after={skipped or 'missing'}, batches after="
           f"{batches or 'missing'}, forget lines={len(said)}")
    if rc != "0" or int_or(before, 0) <= 0:
        r.fail(f"the image was not loaded over marked memory: {got}")
    elif not control and after == "0" and skipped == "0" and batches == "0" and len(said) == 1:
        r.ok(f"{said.pop()}; then 0 marks, 0 clears skipped and 0 faults batched over 64 MiB")
    elif control and int_or(after, 0) > 0 and int_or(skipped, 0) > 0 and not said:
        r.ok(f"marks kept (test switch): {after} left after the load and {skipped} clears still skipped: "
             "the case sees marks that survive")
    else:
        r.fail(got)


def secret_check(r: Report, lines: list[str]) -> None:
    """The probe's leak mode saw no page of the secret in freshly touched
    memory, and, as its negative control, the secret planted into 16 of
    those pages afterwards is seen by the same scan."""
    v = kv(lines, "ZSPROBE", "leak_secret_pages")
    if v == "0":
        r.ok("no page of the secret was seen in freshly touched memory")
    else:
        r.fail(f"leak_secret_pages={v or 'missing'}")
    planted_check(r, lines, "ZSPROBE", "leak")


def leak(k: Kernel, r: Report) -> None:
    """Try to make batching leak: a child writes a secret into 256 MiB of
    anonymous memory and exits, the probe writes it into 256 MiB more and
    unmaps it, then first-touches 256 MiB in a batch-eligible area: the
    freed pages come back, are not pristine, and must be cleared. Verify
    mode is off (prezero.verify=scan: only the boot-time scans of the marks,
    which run before the probe) so that only the kernel's own logic stands
    between the secret and user space."""
    img, blob = k.good()
    lines = boot_case(k, r, "any", f"{BATCH_THP} prezero.verify=scan zsprobe=0,256,thp,leak", img,
                      spec=gk.hint_spec(blob))
    batch_counters(r, lines)
    # The freed pages must really have come back through the batch path.
    m = kv(lines, "ZSDEBUGFS", "fault_batch_misses")
    if int_or(m, 0) > 0:
        r.ok(f"{m} batch folios were recycled memory (not pristine) and were cleared")
    else:
        r.fail(f"fault_batch_misses={m or 'missing'}: the test did not exercise a non-pristine batch")
    secret_check(r, lines)


def compact(k: Kernel, r: Report) -> None:
    """The same with compaction between the free and the first touch: it
    migrates pages into pristine free memory and releases the free pages it
    isolated (mark_allocated() then __free_pages()); the secret must not
    come back either way."""
    img, blob = k.good()
    lines = boot_case(k, r, "any", f"{BATCH_THP} prezero.verify=scan zsprobe=0,256,thp,leak,compact",
                      img, spec=gk.hint_spec(blob))
    c = kv(lines, "ZSPROBE", "compact_isolated")
    if int_or(c, 0) > 0:
        r.ok(f"compaction isolated {c} pages ({kv(lines, 'ZSPROBE', 'compact_migrated') or ''} migrated) between "
             "the free and the first touch")
    else:
        r.fail(f"compact_isolated={c or 'missing'} ({kv(lines, 'ZSPROBE', 'compact_error') or ''}): compaction did "
               "nothing, the case cannot fail")
    secret_check(r, lines)


def pool(k: Kernel, r: Report) -> None:
    """The boot-time hugetlb pool must come from pristine memory (patch "mm:
    release pristine memory to the page allocator first"): 4 GiB, the honest
    hint, a pool of 1024 2 MiB pages (half of RAM) and init_on_alloc=0, so
    that the pool's allocations (__GFP_ZERO while pristine memory exists)
    are about the only clears that can be skipped at boot. Counted when
    /init starts, before the probe skips more: without the patch the pool
    took 13 blocks of memory the boot had written (the decompressor's
    footprint) and the count was ~6 300 short of the pool's 524 288 pages.
    With it, other skips at boot add ~500 pages, and a page freed during
    boot can merge into a free block that is handed out early (frees go to
    the head of the free lists, as they should): allow 4 such blocks (2048
    pages)."""
    img, blob = k.hinted("pool", gk.honest_hint_ranges(4096))
    lines = boot_case(k, r, "skip", "", img, spec=gk.hint_spec(blob), mem=4096,
                      common=f"hugepages=1024 prezero.verify=2 init_on_alloc=0 {PROBE}")
    s = kv(lines, "ZSBOOT", "pages_skipped")
    least = 1024 * 512 - 4 * 512
    if int_or(s, 0) >= least:
        r.ok(f"the boot-time pool of 1024 2 MiB pages came from pristine memory ({s} clears skipped at boot, "
             f">= {least})")
    else:
        r.fail(f"{s or 'no'} clears skipped at boot, < {least}: the boot-time pool took memory the boot had written")


def nt(k: Kernel, r: Report) -> None:
    """NT clearing of huge pages (patch "x86/mm: clear huge and gigantic
    pages with non-temporal stores"): prezero=off and init_on_alloc=0, so
    faults really clear; NT stores forced for 2 MiB pages too (the threshold
    is the LLC size). The probe fills the hugetlb pool with a pattern, unmaps
    it, populates it again and checks every byte is zero: 256 MiB of 2 MiB
    pages with 64 KiB chunks and whole-folio chunks, and one 1 GiB page."""
    # 4 GiB: a 1 GiB-aligned free gigantic page (RAM above 4 GiB).
    lines = boot_case(k, r, "noskip", "prezero=off init_on_alloc=0 hugepagesz=1G hugepages=1 zsntdirty=1 "
                      "zsnt=256,2m,1,64,0 zsnt=1024,1g,1,2048", k.image, mem=4096)
    zsnt = grep(lines, "^ZSNT ")
    n = len(grep(zsnt, r"^ZSNT .*hugetlb_dirty_pages=0 "))
    # Negative control: each populate's count then saw the 16 bytes planted
    # into the pages it had just read back zero.
    c = len(grep(zsnt, r"^ZSNT .*hugetlb_planted_found=16([^0-9]|$)"))
    pages = kv(lines, "ZSNTSTAT", "pages")
    want_pages = (256 * 2 + 1024) * 256
    if c != 3:
        r.fail(f"negative control: {c} of 3 populates counted all 16 planted bytes: {';'.join(zsnt)};")
    if not k.has_nt():
        # A line without the patch: the same dirtied pool pages, cleared by
        # the kernel's own clear (7.3: range clear_pages()).
        if pages is not None:
            r.fail(f"the series has no NT patch but the kernel counts NT-cleared pages ({pages})")
        elif n == 3:
            r.ok("3 populates of dirtied pool pages (2 MiB x2, 1 GiB) read back zero, and each count saw 16 "
                 "planted bytes; cleared by the kernel's own clear (this line has no NT patch)")
        else:
            r.fail(f"{n} of 3 populates clean: {';'.join(zsnt)};")
        return
    if n == 3 and int_or(pages, 0) >= want_pages:
        r.ok(f"3 populates of dirtied pool pages (2 MiB x2 chunk sizes, 1 GiB) read back zero, and each count saw 16 "
             f"planted bytes; {pages} pages cleared with NT stores")
    else:
        r.fail(f"{n} of 3 populates clean, NT pages {pages or 'missing'} (want >= {want_pages}): {';'.join(zsnt)};")


def efi(k: Kernel, r: Report) -> None:
    """Firmware boot: zerostart's OVMF reads the hint from fw_cfg, claims its
    ranges as EfiLoaderData and publishes them in the EFI configuration
    table; the kernel boots through its EFI stub and must take the hint from
    that table (same pass criteria as "good", with prezero.verify=2)."""
    if k.firmware is None or not k.firmware.is_file():
        r.fail(f"no OVMF.fd at {k.firmware}: build it with `make firmware` (make test-kernel does) or pass "
               "--firmware PATH")
        return
    # All RAM from 1 MiB: QEMU writes nothing to guest RAM on a firmware boot
    # (the kernel and initrd come through fw_cfg), and the firmware publishes
    # only what it claimed, free, at the end of PEI.
    hint = k.work / "efi.hint"
    p = subprocess.run([sys.executable, str(gk.KTEST / "mkhint.py"), "--ranges",
                        f"{MIB}:{k.mem_mib * MIB - MIB}", "--out-hint", str(hint)])
    if p.returncode != 0:
        r.fail("cannot build the fw_cfg hint")
        return
    # A raw transport counts only on a direct boot: the same hint on the
    # command line is refused by rule and the EFI table is judged alone.
    raw = text_hint(k, f"{MIB}:{k.mem_mib * MIB - MIB}")
    lines = boot_case(k, r, "skip", f"prezero.hint={raw}", k.image, spec={
        "firmware": str(k.firmware),
        "qemu": {"machine": "q35", "fw_cfg": [{"name": "opt/org.zerostart/prezeroed", "file": str(hint)}],
                 "debugcon": str(k.work / "boot-efi.fw.log")}})
    expect_line(r, lines, "zerostart: hint from EFI table: 1 ranges")
    expect_line(r, lines, r"zerostart: ignoring pre-zeroed hint from command line: EFI boot \(only the firmware's EFI "
                r"table can vouch for memory\)")


# The EFI boot-loader cases: zerostart's OVMF boots ZeroStartHandover.efi
# (firmware/ZeroStartPkg) from a FAT disk; it loads the kernel, fills
# EFILOADER_FILL_MIB with a pattern, frees it and hands the kernel a
# setup_data hint naming it as zero through the EFI handover protocol, with
# the loader ID of a VMM's direct boot. The control keeps the pages and
# publishes them as the EFI table instead, which the kernel trusts.
EFILOADER_FILL_MIB = 1024
EFILOADER_PROBE_MIB = 1200
EFILOADERCTL_FILL_MIB = 256
EFILOADERCTL_PROBE_MIB = 64
HANDOVER_APP = "ZeroStartHandover.efi"


def efi_loader_case(control: bool):
    """Item 2 of the kernel trust rules: a setup_data hint on an EFI boot is
    refused, because what a boot loader wrote and freed is
    EfiConventionalMemory again at ExitBootServices. efiloader: the kernel
    must log the EFI refusal, skip no clear, and the probe, first-touching
    more than half of RAM, must find no byte of the fill (verify mode on).
    efiloaderctl, the negative control: the same loader publishes its
    filled pages as the EFI table; the kernel takes that hint, and verify
    must catch the filled pages, so the fill demonstrably reaches memory the
    kernel hands out and efiloader could fail."""
    def case(k: Kernel, r: Report) -> None:
        app = k.firmware.parent / HANDOVER_APP if k.firmware else None
        if app is None or not app.is_file():
            r.fail(f"no {HANDOVER_APP} beside {k.firmware}: build the firmware with `make firmware` "
                   "(make test-kernel does) or pass --firmware PATH")
            return
        esp = k.work / r.name
        shutil.rmtree(esp, ignore_errors=True)
        (esp / "EFI" / "BOOT").mkdir(parents=True)
        shutil.copyfile(app, esp / "EFI" / "BOOT" / "BOOTX64.EFI")
        shutil.copyfile(k.image, esp / "bzImage")
        shutil.copyfile(k.initrd, esp / "initrd")
        fill, probe = (EFILOADERCTL_FILL_MIB, EFILOADERCTL_PROBE_MIB) if control else \
            (EFILOADER_FILL_MIB, EFILOADER_PROBE_MIB)
        (esp / "mode.txt").write_text(f"{'table' if control else 'setup_data'} {fill}\n")
        cmdline = f"{KERNEL_TEST_ARGS} {COMMON} zsprobe=0,{probe}"
        (esp / "cmdline.txt").write_text(cmdline + "\n")
        b, lines = k.boot(f"boot-{r.name}", "", k.image, initrd=False, spec={
            "kernel": None, "cmdline": None, "initrd": None, "firmware": str(k.firmware),
            "disks": [gk.fat_dir_disk(esp)],
            "qemu": {"machine": "q35", "debugcon": str(k.work / f"boot-{r.name}.fw.log")}})
        said = grep(lines, r"ZSHANDOVER: (fill |freed|kept|RESULT)")
        if not grep(lines, r"ZSHANDOVER: filled 0x[0-9a-fA-F]+-0x[0-9a-fA-F]+ \([1-9][0-9]* pages\)"):
            r.fail("the loader did not fill memory: " + ("; ".join(said) or "no ZSHANDOVER line (see the log)"))
            return
        r.note("; ".join(s[s.index("ZSHANDOVER"):] for s in said))
        if not control:
            judge_boot(r, b, lines, "noskip", cmdline)
            expect_line(r, lines, r"zerostart: ignoring pre-zeroed hint from setup_data: EFI boot \(only the "
                        r"firmware's EFI table can vouch for memory\)")
            return
        failed = kv(lines, "ZSDEBUGFS", "verify_failures")
        if b.problem() or b.ended != "power-off" or not grep(lines, "^ZSDONE"):
            r.fail(f"the control boot did not finish: the guest {ended_by(b, lines)}")
        elif not kernel_said(lines, r"zerostart: hint from EFI table: [1-9][0-9]* ranges"):
            r.fail("the kernel did not take the loader's EFI table: " + ("; ".join(hint_lines(lines)) or "no hint line"))
        elif int_or(failed, 0) > 0:
            r.ok(f"the loader's filled pages, published as the EFI table, were taken as zero and verify caught "
                 f"{failed} of them")
        else:
            r.fail(f"verify_failures={failed or 'missing'}: verify did not see the loader's fill, so efiloader "
                   "could not fail")
    return case


def ipxe(k: Kernel, r: Report) -> None:
    """A real boot loader between the VMM and the kernel: SeaBIOS runs iPXE
    from the virtio-net NIC's option ROM, iPXE fetches kernel and initrd
    over QEMU's user-mode TFTP (its own buffers and heap in guest RAM) and
    boots them with the honest command-line hint that case cmdline takes on
    a direct boot. iPXE writes its own loader ID, so the kernel must refuse
    the hint by rule ("boot loader"), skip nothing and finish clean. The
    control, by hand: the series without that rule takes this hint."""
    d = k.work / "ipxe"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(k.image, d / "bzImage")
    shutil.copyfile(k.initrd, d / "initrd.cpio.gz")
    cmdline = (f"{KERNEL_TEST_ARGS} {COMMON} "
               f"{zshint.TEXT_PARAM}={text_hint(k, gk.honest_hint_ranges(k.mem_mib))}")
    (d / "boot.ipxe").write_text(f"#!ipxe\nkernel bzImage {cmdline}\ninitrd initrd.cpio.gz\nboot\n")
    b, lines = k.boot("boot-ipxe", "", k.image, initrd=False, spec={
        "kernel": None, "cmdline": None, "initrd": None,
        "qemu": {"net_boot": {"tftp_dir": str(d), "bootfile": "boot.ipxe"}}})
    judge_boot(r, b, lines, "noskip", cmdline)
    expect_line(r, lines, r"zerostart: ignoring pre-zeroed hint from command line: boot loader \(only a VMM's "
                r"direct boot can vouch for memory\)")


def table(k: Kernel) -> list[Case]:
    def c(name, fn):
        return Case(name, Do(name, lambda r: fn(k, r)))
    return [
        c("qemu-exit", qemu_exit),
        c("qemu-ends", qemu_ends),
        c("vectors", vectors),
        c("checkpatch", checkpatch),
        *([c("coverletter", cover_letter)] if (k.series_dir / "patches" / COVER_LETTER).is_file() else []),
        c("kunit", kunit),
        c("good", good),
        c("pagealloc", pagealloc),
        c("pageallocctl", pageallocctl),
        c("cover", cover),
        c("corrupt", bad_hint("--corrupt", "BadChecksum")),
        c("scrub", bad_hint("--scrub", "ScrubRequest")),
        c("cmdline", text_case("cmdline", "good")),
        c("cmdlinedirty", text_case("cmdline", "dirty")),
        c("cmdlinecorrupt", text_case("cmdline", "corrupt")),
        c("smbios", text_case("smbios", "good")),
        c("smbiosdirty", text_case("smbios", "dirty")),
        c("smbioscorrupt", text_case("smbios", "corrupt")),
        c("textrules", text_rules),
        c("ipxe", ipxe),
        c("kaslrslot", kaslr_slot),
        c("loadhook", load_hook),
        c("hiddenmarker", hidden_marker),
        c("off", off),
        c("nohint", nohint),
        c("reboot", reboot_case(False)),
        c("rebootctl", reboot_case(True)),
        c("rebootcmdline", reboot_case(False, "cmdline")),
        c("memblock", memblock),
        c("initfree", initfree),
        c("hibernate", hibernate_case("", "clean")),
        c("hibernatectl", hibernate_case("prezero.test_hibernate_keep=1", "caught")),
        c("hugedirty", hugedirty),
        c("scanctl", scanctl),
        c("batch", batch),
        c("batchnever", batchnever),
        c("batchmadvise", batchmadvise),
        c("usedup", usedup),
        c("kexecjump", kexec_jump_case(False)),
        c("kexecjumpctl", kexec_jump_case(True)),
        c("leak", leak),
        c("compact", compact),
        c("pool", pool),
        c("nt", nt),
        c("efi", efi),
        c("efiloader", efi_loader_case(False)),
        c("efiloaderctl", efi_loader_case(True)),
    ]


# ---------------------------------------------------------------- kasan
# The series under generic KASAN (guest-kernel-patches/build.sh variant
# kasan: bzImage-kasan, inline instrumentation). prezero.verify=2 scans
# pages that are still free, which KASAN keeps poisoned: the scans must
# tell KASAN the read is meant (series file "scan free pages as
# debug_pagealloc and sanitizers allow"), else the first scan reports
# "BUG: KASAN: use-after-free" in pid 1. Each case is its namesake of the
# main table run on the KASAN image (any BUG line fails it: boot_bug_lines)
# and must show KASAN initialised, so an image without KASAN cannot pass.
KASAN_BANNER = r"KernelAddressSanitizer initialized"
KMSAN_BANNER = r"ATTENTION: KMSAN is a debugging tool"
# The kasan suite boots with 4-level paging. Under 5-level paging (-cpu max
# has LA57) stock x86 KASAN reports a false "wild-memory-access" for an
# interrupt that lands while identify_cpu() refills the boot CPU's
# capability words: they are all zero from its memset() until
# get_cpu_cap(), interrupts are on, alternatives are not applied yet, so
# pgtable_l5_enabled() (cpu_feature_enabled(X86_FEATURE_LA57)) reads false
# and kasan_check_range() takes every 5-level direct-map address for one
# without shadow. Seen once in CI (6.12 pagealloc: "BUG: KASAN:
# wild-memory-access in _raw_spin_lock", the interrupt's frame "RIP:
# cpu_detect+0xc1"); made certain with prezero=off and a 50 ms delay put
# into that window by hand (docs/testing.md has the run): with 5-level
# paging common_interrupt's lock of an irq_desc at ff11... is reported,
# with no5lvl nothing is. Both lines have the window.
KASAN_APPEND = "no5lvl"


def kasan_on(r: Report, lines: list[str]) -> bool:
    """The boot of LINES ran with KASAN (its banner), else a failure: an
    image without KASAN must not pass the kasan suite; and with
    KASAN_APPEND on the command line the kernel printed, else a failure:
    its false reports would fail a good series at random."""
    m = grep(lines, KASAN_BANNER)
    if not m:
        r.fail(f"no '{KASAN_BANNER}' line: this image has no KASAN (guest-kernel-patches/build.sh variant kasan)")
        return False
    r.note(f"KASAN on: '{PRINTK_TS.sub('', m[0])}'")
    cmd = grep(lines, r"Command line: ")
    if not cmd or not set(KASAN_APPEND.split()) <= set(cmd[0].split()):
        r.fail(f"the kernel command line has no {KASAN_APPEND}: under 5-level paging stock KASAN reports false "
               "wild-memory-access in early interrupts (cases.KASAN_APPEND); boot the kasan suite through "
               "Kernel(append=KASAN_APPEND)")
        return False
    return True


def kasan_table(k: Kernel) -> list[Case]:
    def c(name, fn):
        def run(r: Report) -> None:
            fn(k, r)
            log = k.work / f"boot-{name}.log"
            kasan_on(r, log.read_text(errors="replace").splitlines() if log.is_file() else [])
        return Case(name, Do(name, run))
    return [c("good", good), c("pagealloc", pagealloc), c("scanctl", scanctl)]


# ---------------------------------------------------------------- memmap
# Boot tests for series file 0006, "mm: skip clearing pristine struct pages
# in deferred init" (guest-kernel-patches/6.12/memmap.md):
#   honest   4 GiB guest, the hint a VMM sends (measure.sh's): memblock puts
#            the memmap above 4 GiB, in hinted memory; struct pages must skip
#            their clear, every one verified zero (prezero.verify=1), no
#            WARNING, and the probe must find user memory zero;
#   planted  same hint, but 256 KiB of 0xa5 planted (QEMU -device loader)
#            inside the memmap's backing that the honest boot reported, 8 MiB
#            in from each end: the hint lies there. One of the two holds
#            struct pages of ZONE_NORMAL, initialised by deferred init, in
#            either memmap layout (6.12 carves one buffer in pfn order, the
#            highest pfns at the top; 7.3 allocates each section's memmap
#            top-down, the highest pfns at the bottom); the other holds
#            struct pages of low zones, which the early init clears anyway.
#            Verify must catch the first (WARNING naming a pfn, "N not zero"
#            with 0 < N <= 4096), clear those struct pages, and boot on;
#   off      prezero.memmap=off: nothing skipped;
#   nohint   no hint: nothing marked.
# nokaslr keeps the memmap at the same place in every boot.
MEMMAP_MIB = 4096
MEMMAP_APPEND = "nokaslr prezero.verify=2 init_on_alloc=1 hugepages=256 zsprobe=256,64"


def memmap_boot(k: Kernel, r: Report, image: Path, extra: str, spec: dict | None = None) -> list[str] | None:
    """Boots, checks the common part; None when the boot did not finish."""
    b, lines = k.boot(f"memmap-{r.name}", f"{MEMMAP_APPEND} {extra}", image, mem=MEMMAP_MIB,
                      timeout=k.memmap_timeout, spec=spec)
    if b.problem():
        r.fail(f"QEMU did not complete the boot: {unfinished(b, lines)}")
        return None
    if not grep(lines, "^ZSDONE"):
        r.fail(f"init did not finish: the guest {ended_by(b, lines)}")
        return None
    for key in ("hugetlb_dirty_pages", "anon_dirty_pages"):
        v = kv(lines, "ZSPROBE", key)
        if v != "0":
            r.fail(f"{key}={v or 'missing'} (memory handed to user space was not zero)")
    v = kv(lines, "ZSDEBUGFS", "verify_failures")
    if v != "0":
        r.fail(f"page verify_failures={v or 'missing'}")
    # prezero.verify=2: pages still marked pristine were scanned too.
    n = len(grep(lines, "marked pristine but is not zero"))
    if n:
        r.fail(f"{n} page(s) marked pristine but not zero (scan)")
    return lines


def no_warning(r: Report, lines: list[str]) -> None:
    if w := boot_bug_lines(lines):
        r.fail(f"kernel bug lines: {' '.join(w[:2])} ")


def first_int(lines: list[str], pattern: str) -> int | None:
    """The number that starts the first match of PATTERN."""
    for ln in lines:
        if m := re.search(pattern, ln):
            return int(re.match(r"\D*(\d+)", m[0])[1])
    return None


def memmap_hinted(k: Kernel) -> tuple[Path, Path]:
    return k.hinted("memmap-hinted", gk.honest_hint_ranges(MEMMAP_MIB))


def honest(k: Kernel, r: Report) -> None:
    if k.memmap_range is not None:
        return  # ran already (planted needs it first)
    k.memmap_range = []
    img, blob = memmap_hinted(k)
    lines = memmap_boot(k, r, img, "", spec=gk.hint_spec(blob))
    if lines is None:
        return
    no_warning(r, lines)
    within = re.compile(r"on pristine memory within \[mem (0x[0-9a-f]+)-(0x[0-9a-f]+)\]")
    rng = [int(x, 16) for ln in lines for m in within.finditer(ln) for x in m.groups()]
    k.memmap_range = rng
    s = first_int(lines, r"memmap: [0-9]+ struct pages initialised without clearing")
    z = first_int(lines, r"[0-9]+ not zero")
    shown = " ".join(f"{x:#x}" for x in rng)
    if rng and (s or 0) > 0 and z == 0:
        r.ok(f"{s} struct pages initialised without clearing, all verified zero (memmap on pristine [{shown} ])")
    else:
        r.fail(f"expected skipped struct-page clears, 0 not zero; got range='{shown}' skipped="
               f"{'missing' if s is None else s} notzero={'missing' if z is None else z}")


def planted(k: Kernel, r: Report) -> None:
    honest(k, r.under("honest"))
    if not k.memmap_range:
        r.fail("needs the memmap range from the honest boot")
        return
    lo, hi = k.memmap_range[:2]
    # 256 KiB of 0xa5 (4096 struct pages) 8 MiB in from each end of the
    # memmap's backing: the highest pfns of ZONE_NORMAL, which deferred
    # struct-page init initialises, are 8 MiB below the top (6.12: one
    # buffer carved in pfn order) or 8 MiB above the bottom (7.3: each
    # section's memmap allocated top-down, so in reverse pfn order); the
    # other plant lands in struct pages of DMA32, which memmap_init()
    # clears as always (no skip there, nothing for verify to catch).
    ats = [(hi - 8 * MIB) & ~0xFFF, (lo + 8 * MIB) & ~0xFFF]
    pattern = k.work / "pattern.bin"
    pattern.write_bytes(b"\xa5" * (256 << 10))
    img, blob = memmap_hinted(k)
    lines = memmap_boot(k, r, img, "", spec=gk.hint_spec(blob, *(gk.loader(pattern, at) for at in ats)))
    if lines is None:
        return
    z = first_int(lines, r"[0-9]+ not zero")
    shown = " and ".join(f"{at:#x}" for at in ats)
    if 0 < (z or 0) <= 4096 and grep(
            lines, r"zerostart: struct page of pfn 0x[0-9a-f]+ was treated as pristine but is not zero"):
        r.ok(f"verify caught {z} struct pages on planted non-zero memory at {shown}, warned, cleared them, "
             "booted on")
    else:
        r.fail(f"expected verify to catch 1..4096 struct pages at {shown}, got notzero="
               f"{'missing' if z is None else z}")


def memmap_off(k: Kernel, r: Report) -> None:
    img, blob = memmap_hinted(k)
    lines = memmap_boot(k, r, img, "prezero.memmap=off", spec=gk.hint_spec(blob))
    if lines is None:
        return
    no_warning(r, lines)
    if (grep(lines, "zerostart: memmap: prezero.memmap=off: clearing every struct page")
            and not grep(lines, "struct pages initialised without clearing")):
        r.ok("prezero.memmap=off clears every struct page")
    else:
        r.fail("expected the prezero.memmap=off line and no skipped struct page")


def memmap_nohint(k: Kernel, r: Report) -> None:
    lines = memmap_boot(k, r, k.image, "")
    if lines is None:
        return
    no_warning(r, lines)
    if grep(lines, "on pristine memory"):
        r.fail("struct pages marked pristine without a hint")
    else:
        r.ok("no struct page marked pristine")


def memmap_table(k: Kernel) -> list[Case]:
    def c(name, fn):
        return Case(name, Do(name, lambda r: fn(k, r)))
    return [c("honest", honest), c("planted", planted), c("off", memmap_off), c("nohint", memmap_nohint)]
