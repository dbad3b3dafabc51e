#!/usr/bin/env bash
# Builds the Linux guest of the QEMU SLO scenario into the cache:
#   $ZEROSTART_CACHE/slo/linux-<hash>/{vmlinuz,initramfs.cpio.gz,esp.img,manifest.txt}
# and points $ZEROSTART_CACHE/slo/linux at it. esp.img is the same kernel,
# initramfs and ESP_CMDLINE as a UKI on an EFI system partition: the boot
# disk of the cloud-hypervisor launch scenario (tests/lib/mkesp.sh; its
# firmware cannot get a kernel over fw_cfg).
#
# Kernel: Debian bookworm's cloud kernel (whatever linux-image-cloud-amd64
# depends on), fetched with `apt-get download` and unpacked with
# `dpkg-deb -x`, never installed. initramfs: the host's static busybox and
# tests/slo/init.sh as /init (prints the phase markers, powers off).
# The hash covers the kernel package version and every file that goes in,
# so a changed input builds a new directory and nothing stale is reused.
set -euo pipefail
ESP_CMDLINE="console=ttyS0 panic=-1 quiet"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${ZEROSTART_CACHE:-$HOME/.cache/zerostart}/slo"
mkdir -p "$cache/debs"

for tool in apt-get apt-cache dpkg-deb cpio gzip; do
  command -v "$tool" >/dev/null || { echo "slo prepare: $tool is missing; run make deps" >&2; exit 1; }
done
busybox=/bin/busybox
if ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked'; then
  echo "slo prepare: $busybox is not a static busybox; apt-get install busybox-static" >&2
  exit 1
fi

pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$pkg" ]; then
  echo "slo prepare: cannot resolve linux-image-cloud-amd64 (apt-get update? non-Debian host?)" >&2
  exit 1
fi
ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
key=$( { echo "$pkg=$ver"; sha256sum "$busybox" "$root/tests/slo/init.sh" "$root/tests/lib/mkesp.sh" "$0"; } | sha256sum | cut -c1-16)
out="$cache/linux-$key"
if [ -f "$out/manifest.txt" ]; then
  ln -sfn "linux-$key" "$cache/linux"
  echo "slo prepare: cached $out"
  exit 0
fi

deb=$(ls "$cache/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
  (cd "$cache/debs" && apt-get download "$pkg=$ver" >/dev/null)
  deb=$(ls "$cache/debs/${pkg}_"*.deb | head -1)
fi
tmp=$(mktemp -d "$cache/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dpkg-deb -x "$deb" "$tmp/pkg"
mkdir -p "$tmp/out" "$tmp/rootfs/bin" "$tmp/rootfs/proc" "$tmp/rootfs/sys" "$tmp/rootfs/dev"
cp "$tmp"/pkg/boot/vmlinuz-* "$tmp/out/vmlinuz"
cp "$busybox" "$tmp/rootfs/bin/busybox"
cp "$root/tests/slo/init.sh" "$tmp/rootfs/init"
chmod 755 "$tmp/rootfs/init" "$tmp/rootfs/bin/busybox"
(cd "$tmp/rootfs" && find . | LC_ALL=C sort | cpio --quiet -o -H newc --reproducible | gzip -9n) >"$tmp/out/initramfs.cpio.gz"
bash "$root/tests/lib/mkesp.sh" "$tmp/out/vmlinuz" "$tmp/out/initramfs.cpio.gz" "$ESP_CMDLINE" "$tmp/out/esp.img" >/dev/null
{
  echo "kernel: $pkg $ver ($(basename "$deb"))"
  echo "busybox: $(sha256sum "$busybox" | cut -c1-64)"
  echo "init: $(sha256sum "$root/tests/slo/init.sh" | cut -c1-64)"
  echo "esp.img: UKI of vmlinuz + initramfs.cpio.gz, cmdline '$ESP_CMDLINE'"
} >"$tmp/out/manifest.txt"
rm -rf "$out"
mv "$tmp/out" "$out"
ln -sfn "linux-$key" "$cache/linux"
echo "slo prepare: built $out"
