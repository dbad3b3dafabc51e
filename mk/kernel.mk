# Guest kernel (Linux 6.12.y + the zerostart series): build and test.
# `make kernel` builds $ZEROSTART_CACHE/kernel/<hash>/bzImage{,-noprezero}
# (cached by the hash of source version, series, config fragment, script);
# `make test-kernel` boots them in QEMU TCG (KUnit + hint boot tests, one of
# them through zerostart's OVMF: it builds firmware/ if not cached; then the
# struct-page boot tests of memmap-test.sh);
# `make bench-kernel` runs the measurements in guest-kernel-patches/README.md.
.PHONY: kernel test-kernel bench-kernel

kernel:
	@bash guest-kernel-patches/build.sh

test-kernel:
	@bash tests/kernel/test_lib.sh
	@bash tests/kernel/run.sh
	@bash tests/kernel/memmap-test.sh

bench-kernel:
	@bash tests/kernel/measure.sh

TEST_TARGETS += test-kernel
