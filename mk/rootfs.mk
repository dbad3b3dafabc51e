# The test guest's root filesystem (issue 15's real cloud VM): a Debian
# image built with mmdebstrap from the Debian registry, with systemd,
# networking, Debian's stock cloud kernel and the zsapp workload.
# `make rootfs` builds $ZEROSTART_CACHE/rootfs/<hash>/{rootfs.ext4,vmlinuz,
# initrd.img,manifest.txt} (cached by the hash of suite, packages, zsapp.c
# and the script; see guest-rootfs/build.sh); `make test-rootfs` boots it.
.PHONY: rootfs

rootfs:
	@$(PROGRESS) "guest rootfs (Debian image)" 120 bash guest-rootfs/build.sh

# The image boots with Debian's stock cloud kernel under stock QEMU (TCG)
# to its app: every boot phase, zsapp's memory check and its negative
# control, a clean power-off (tests/rootfs/run.py; ~65 s here).
.PHONY: test-rootfs
test-rootfs: rootfs vmm-argv
	@ZEROSTART_BIN=$(VMM_ARGV_BIN) python3 tests/rootfs/run.py "$$(bash guest-rootfs/build.sh --print)"

TEST_TARGETS += test-rootfs
