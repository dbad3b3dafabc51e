# Fleets: `zerostart-qemu` (zerostart qemu-dropin) as a real libvirtd's QEMU.
# Owner: vmm/zerostart/src/launch/dropin.rs, tests/libvirt. See docs/fleet.md.
#   make test-libvirt   a private libvirtd (Debian's, session mode, as nobody)
#                       and pool (4K pages) boot TCG domains through the
#                       drop-in: capabilities, a direct-kernel and a UEFI
#                       domain on pool memory with the hint and verify on,
#                       the dirty-hint control, one- and two-node guest
#                       NUMA domains (a lease per node), and what passes
#                       through (a stopped pool) (about 3 min)
#   LIBVIRT_CASES="direct dirty" runs only those (after setup).

TEST_TARGETS += test-libvirt

.PHONY: test-libvirt

test-libvirt: deps zerostart-release e2e-kernel firmware
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) ZEROSTART_FIRMWARE_DIR="$(FW_DIR)" \
	  python3 tests/libvirt/cases.py $(if $(LIBVIRT_CASES),setup $(LIBVIRT_CASES))
