# The test guest's root filesystem (issue 15's real cloud VM): a Debian
# image built with mmdebstrap from the Debian registry, with systemd,
# networking, Debian's stock cloud kernel and the zsapp workload.
# `make rootfs` builds $ZEROSTART_CACHE/rootfs/<hash>/{rootfs.ext4,vmlinuz,
# initrd.img,manifest.txt} (cached by the hash of suite, packages, zsapp.c
# and the script; see guest-rootfs/build.sh).
.PHONY: rootfs

rootfs:
	@bash guest-rootfs/build.sh
