#!/usr/bin/env bash
# Fetch a stock Linux kernel (Debian's cloud kernel, the machine's own apt
# sources) and build a busybox initramfs for the firmware's OS-boot test.
# Prints the directory holding vmlinuz and initrd.cpio.gz.
#
# The test boots this kernel through OVMF's EFI stub path with the hint
# claimed, to show the claim leaves enough memory for an OS loader and that
# the claimed memory is ordinary RAM for the OS afterwards.
set -euo pipefail

CACHE=${ZEROSTART_CACHE:-$HOME/.cache/zerostart}/firmware/linux
PKG=${FW_TEST_KERNEL_PKG:-linux-image-cloud-amd64}
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

if [ ! -x /bin/busybox ] && [ ! -x /usr/bin/busybox ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends busybox-static >&2
fi
command -v cpio >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cpio >&2

if [ ! -f "$CACHE/vmlinuz" ]; then
  # The metapackage names the versioned image package; download that one.
  img=$(apt-cache depends "$PKG" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -1)
  if [ -z "$img" ]; then
    echo "prepare_linux.sh: cannot resolve $PKG through apt; run apt-get update" >&2
    exit 1
  fi
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download "$img" >&2)
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  cp "$tmp"/x/boot/vmlinuz-* "$CACHE/vmlinuz.tmp"
  mv "$CACHE/vmlinuz.tmp" "$CACHE/vmlinuz"
  rm -rf "$tmp"
fi

if [ ! -f "$CACHE/initrd.cpio.gz" ]; then
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev"
  cp "$(command -v busybox)" "$root/bin/busybox"
  cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
echo "ZSLINUX: init reached"
/bin/busybox grep MemTotal /proc/meminfo | /bin/busybox sed 's/^/ZSLINUX: /'
/bin/busybox grep -c . /proc/iomem >/dev/null
echo "ZSLINUX: done"
/bin/busybox poweroff -f
EOF
  chmod +x "$root/init"
  (cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$CACHE/initrd.cpio.gz.tmp")
  mv "$CACHE/initrd.cpio.gz.tmp" "$CACHE/initrd.cpio.gz"
  rm -rf "$root"
fi
echo "$CACHE"
