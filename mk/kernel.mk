# Guest kernel (Linux 6.12.y + the zerostart series): build and test.
# `make kernel` builds $ZEROSTART_CACHE/kernel/<hash>/bzImage{,-noprezero}
# (cached by the hash of source version, series, config fragment, script);
# `make test-kernel` boots it in QEMU TCG: the case tables of
# tests/kernel/cases.py (KUnit, the hint boot tests, one of them through
# zerostart's OVMF, then the struct-page boot tests), run by
# tests/kernel/run.py on zstest.suite + zstest.qemu;
# `make bench-kernel` runs the measurements in guest-kernel-patches/README.md.
# make builds the kernel and the firmware and hands the scripts their paths.
# ZEROSTART_KERNEL_IMAGE=path tests an image built elsewhere (e.g. by
# build.sh --dev while working on the series, or another kernel line, with
# ZEROSTART_KERNEL_SERIES_DIR=dir naming the series it was built from);
# ZS_TEST_ONLY="kunit good" runs a subset.
.PHONY: kernel test-kernel bench-kernel

ZEROSTART_KERNEL_SERIES_DIR ?= guest-kernel-patches

kernel:
	@bash guest-kernel-patches/build.sh

test-kernel: $(if $(ZEROSTART_KERNEL_IMAGE),,kernel) firmware
	@python3 tests/kernel/run.py --series-dir "$(ZEROSTART_KERNEL_SERIES_DIR)" --firmware "$(FW_DIR)/OVMF.fd" \
	  --kernel "$${ZEROSTART_KERNEL_IMAGE:-$$(bash guest-kernel-patches/build.sh --print)/bzImage}"

# ZS_MEASURE_LINE=7.3 measures that line's build (built by its build.sh
# --line 7.3, not by this target); docs/kernel-measurements.md has the rows.
ZS_MEASURE_LINE ?= 6.12
bench-kernel: $(if $(or $(ZS_MEASURE_OUT),$(filter-out 6.12,$(ZS_MEASURE_LINE))),,kernel)
	@ZS_MEASURE_LINE="$(ZS_MEASURE_LINE)" ZS_MEASURE_OUT="$${ZS_MEASURE_OUT:-$$(bash guest-kernel-patches/build.sh $(if $(filter-out 6.12,$(ZS_MEASURE_LINE)),--line $(ZS_MEASURE_LINE)) --print)}" bash tests/kernel/measure.sh

TEST_TARGETS += test-kernel
