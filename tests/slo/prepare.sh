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
# Firecracker boots only an ELF vmlinux: the one inside the bzImage (what
# the kernel's scripts/extract-vmlinux does), for tests/slo/vmms.toml. The
# boot protocol header says where the compressed payload is; its magic
# says how it is compressed (Debian's cloud kernels: LZ4).
extract_vmlinux() {
  local dec
  dec=$(python3 - "$1" "$tmp/payload" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
start = ((d[0x1f1] or 4) + 1) * 512 + struct.unpack_from("<I", d, 0x248)[0]
p = d[start:start + struct.unpack_from("<I", d, 0x24c)[0]]
open(sys.argv[2], "wb").write(p)
for magic, dec in ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
                   (b"\x02\x21\x4c\x18", "lz4"), (b"BZh", "bzip2"), (b"\x5d\x00", "lzma")):
    if p.startswith(magic):
        print(dec)
PY
)
  if [ -n "$dec" ] && command -v "$dec" >/dev/null; then
    "$dec" -dc <"$tmp/payload" >"$2" 2>/dev/null || true
  fi
  rm -f "$tmp/payload"
  [ "$(head -c4 "$2" 2>/dev/null | od -An -tx1 | tr -d ' ')" = 7f454c46 ] && return 0
  echo "slo prepare: no ELF kernel inside $1 (payload compression: ${dec:-unknown}; install its tool)" >&2
  return 1
}
extract_vmlinux "$tmp/out/vmlinuz" "$tmp/out/vmlinux"
{
  echo "kernel: $pkg $ver ($(basename "$deb"))"
  echo "busybox: $(sha256sum "$busybox" | cut -c1-64)"
  echo "init: $(sha256sum "$root/tests/slo/init.sh" | cut -c1-64)"
  echo "esp.img: UKI of vmlinuz + initramfs.cpio.gz, cmdline '$ESP_CMDLINE'"
  echo "vmlinux: the ELF kernel inside vmlinuz (Firecracker)"
} >"$tmp/out/manifest.txt"
rm -rf "$out"
mv "$tmp/out" "$out"
ln -sfn "linux-$key" "$cache/linux"
echo "slo prepare: built $out"
