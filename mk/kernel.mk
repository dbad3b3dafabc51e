# Guest kernel (Linux 6.12.y and 7.3 + the zerostart series): build and test.
# `make kernel` builds the 6.12 line, $ZEROSTART_CACHE/kernel/<hash>/bzImage
# (bench-kernel adds bzImage-noprezero, the series-off baseline)
# (cached by the hash of source version, series, config fragment, script);
# (guest-kernel-patches/6.12); `make kernel-7.3` the 7.3 line
# (guest-kernel-patches/7.3, build.sh --line 7.3),
# cached the same way;
# `make test-kernel` boots each line of ZEROSTART_KERNEL_LINES (default both)
# in QEMU TCG, the lines side by side (each boot is single-threaded TCG, so
# two lines fill the two cores: 697 s one after the other in a rehearsal;
# each line's output is printed whole, in order, when both have ended):
# the case tables of tests/kernel/cases.py (KUnit,
# the hint boot tests, one of them through zerostart's OVMF, then the
# struct-page boot tests, then the kasan suite where this machine keeps a
# KASAN build, below), run by tests/kernel/run.py --line L on
# zstest.suite + zstest.qemu; every line runs, also after a failure of
# another, and the target fails if any did;
# `make bench-kernel` runs the measurements in guest-kernel-patches/6.12/README.md.
# make builds the kernels and the firmware and hands the scripts their paths.
# ZEROSTART_KERNEL_IMAGE=path tests one image built elsewhere (e.g. by
# build.sh --dev while working on the series, with
# ZEROSTART_KERNEL_SERIES_DIR=dir naming the series it was built from,
# default the 6.12 line's; without ZEROSTART_KERNEL_IMAGE each line takes
# its own series dir, whatever the environment says);
# ZS_TEST_ONLY="kunit good" runs a subset.
.PHONY: kernel kernel-7.3 kernel-kasan kernel-7.3-kasan kernel-kasan-kept kernel-7.3-kasan-kept test-kernel test-kernel-kasan bench-kernel

ZEROSTART_KERNEL_SERIES_DIR ?= guest-kernel-patches/6.12
ZEROSTART_KERNEL_LINES ?= 6.12 7.3

kernel:
	@$(PROGRESS) "guest kernel 6.12" 540 bash guest-kernel-patches/build.sh

kernel-7.3:
	@$(PROGRESS) "guest kernel 7.3" 600 bash guest-kernel-patches/build.sh --line 7.3

# The same series with generic KASAN (bzImage-kasan beside bzImage), for
# the kasan suite: the verify scans read free pages KASAN poisons. A KASAN
# image is a second cold build per line (689 s for 6.12, 860 s for 7.3
# here), which a fresh machine's make demo + make test cannot fit in their
# 90 minutes; once built, a series change rebuilds only what it touches
# (ccache). So make test-kernel builds it only where its build dir is kept
# (the -kept targets, build.sh --kept: make test-kernel-kasan or make
# kernel[-7.3]-kasan built it once), and the kasan suite says SKIP, with
# that reason, where it is not.
kernel-kasan: kernel
	@ZEROSTART_KERNEL_VARIANTS=kasan $(PROGRESS) "guest kernel 6.12 KASAN" 600 bash guest-kernel-patches/build.sh

kernel-7.3-kasan: kernel-7.3
	@ZEROSTART_KERNEL_VARIANTS=kasan $(PROGRESS) "guest kernel 7.3 KASAN" 600 bash guest-kernel-patches/build.sh --line 7.3

kernel-kasan-kept: kernel
	@ZEROSTART_KERNEL_VARIANTS=kasan $(PROGRESS) "guest kernel 6.12 KASAN (kept)" 120 bash guest-kernel-patches/build.sh --kept

kernel-7.3-kasan-kept: kernel-7.3
	@ZEROSTART_KERNEL_VARIANTS=kasan $(PROGRESS) "guest kernel 7.3 KASAN (kept)" 120 bash guest-kernel-patches/build.sh --line 7.3 --kept

# The build targets of the lines to test (6.12's is `kernel`).
KERNEL_LINE_TARGETS = $(foreach l,$(ZEROSTART_KERNEL_LINES),$(if $(filter 6.12,$(l)),kernel,kernel-$(l)))
KERNEL_KASAN_TARGETS = $(foreach l,$(ZEROSTART_KERNEL_LINES),$(if $(filter 6.12,$(l)),kernel-kasan,kernel-$(l)-kasan))
KERNEL_KASAN_KEPT_TARGETS = $(addsuffix -kept,$(KERNEL_KASAN_TARGETS))

# $(call kernel_lines,NAME,ARGS): tests/kernel/run.py --line L ARGS for
# every line of ZEROSTART_KERNEL_LINES side by side (each its line's own
# images and series: the environment's are unset), logs in
# target/NAME-L.log, each printed whole when all have ended; fails if any
# line did.
define kernel_lines
@mkdir -p target; rc=0; for l in $(ZEROSTART_KERNEL_LINES); do \
	  rm -f target/$(1)-$$l.rc; \
	  ( env -u ZEROSTART_KERNEL_SERIES_DIR -u ZEROSTART_KERNEL_IMAGE ZEROSTART_BIN=$(VMM_ARGV_BIN) \
	      python3 tests/kernel/run.py --line "$$l" $(2) > target/$(1)-$$l.log 2>&1; \
	    echo $$? > target/$(1)-$$l.rc ) & \
	done; echo "$(1): lines $(ZEROSTART_KERNEL_LINES) side by side; their output follows when all end"; \
	wait; for l in $(ZEROSTART_KERNEL_LINES); do \
	  echo "$(1): === line $$l"; cat target/$(1)-$$l.log; \
	  [ "$$(cat target/$(1)-$$l.rc 2>/dev/null)" = 0 ] || rc=1; \
	done; exit $$rc
endef

test-kernel: $(if $(ZEROSTART_KERNEL_IMAGE),,$(KERNEL_LINE_TARGETS) $(KERNEL_KASAN_KEPT_TARGETS)) firmware vmm-argv
ifdef ZEROSTART_KERNEL_IMAGE
	@ZEROSTART_BIN=$(VMM_ARGV_BIN) python3 tests/kernel/run.py --series-dir "$(ZEROSTART_KERNEL_SERIES_DIR)" --firmware "$(FW_DIR)/OVMF.fd" \
	  --kernel "$(ZEROSTART_KERNEL_IMAGE)"
else
	$(call kernel_lines,test-kernel,--firmware "$(FW_DIR)/OVMF.fd")
endif

# The kasan suite of each line (cases good, pagealloc and scanctl on the
# KASAN image; tests/kernel/cases.py kasan_table), the lines side by side,
# building the KASAN images first, cold if need be: the way to keep one.
test-kernel-kasan: $(KERNEL_KASAN_TARGETS) vmm-argv
	$(call kernel_lines,test-kernel-kasan,--suite kasan)

# ZS_MEASURE_LINE="6.12 7.3" measures both lines in one run (each line's
# build target first); docs/kernel-measurements.md has the rows.
ZS_MEASURE_LINE ?= 6.12
# The measurements boot the series-off image beside the series: only they
# ask build.sh for it (the tests boot bzImage alone).
bench-kernel: export ZEROSTART_KERNEL_VARIANTS = y n
bench-kernel: $(if $(ZS_MEASURE_OUT),,$(foreach l,$(ZS_MEASURE_LINE),$(if $(filter 6.12,$(l)),kernel,kernel-$(l)))) vmm-argv
	@ZEROSTART_BIN=$(VMM_ARGV_BIN) ZS_MEASURE_LINE="$(ZS_MEASURE_LINE)" bash tests/kernel/measure.sh

TEST_TARGETS += test-kernel
