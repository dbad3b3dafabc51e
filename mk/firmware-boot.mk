# Firmware boot: `zerostart run --firmware CLOUDHV.fd` in the nested test host.
# Owner: vmm/zerostart/src/firmware.rs, tests/firmware-boot. See docs/firmware-boot.md.
#   make test-firmware-boot   the judge's unit tests, static zerostart, CLOUDHV.fd
#                      (make firmware), then five runs in L2, each booting
#                      Linux through the firmware to the test init (zero
#                      hint, scrub request, corrupted hint, zero hint with the
#                      patched guest kernel, and the dirty-hint negative
#                      control that must be caught)
# The fw_cfg device and --firmware themselves are tested by `cargo test -p
# devices -p zerostart` (test-vmm / test-guestmem), with a PVH test firmware
# that reads the hint over fw_cfg on /dev/kvm.

TEST_TARGETS += test-firmware-boot

.PHONY: test-firmware-boot

test-firmware-boot: deps e2e-zerostart bed-qemu e2e-kernel firmware
	python3 tests/firmware-boot/test_run.py
	python3 tests/firmware-boot/run.py --zerostart $(ZEROSTART_STATIC) --firmware "$(FW_DIR)/CLOUDHV.fd" $(FWBOOT_ARGS)
