#!/usr/bin/env bash
# Installs every host package the build and tests need, idempotently.
# Why a script: CI and fresh machines start with none of these, and the
# project may not rely on anything installed by hand.
set -euo pipefail
# Every package any build script would otherwise apt-get itself: make demo
# runs those scripts side by side once this has run, and two apt-get
# installs at once fail on dpkg's lock.
PKGS=(
  # nested test host and TCG boots
  qemu-system-x86 qemu-utils busybox-static cpio xz-utils zstd
  # the ELF vmlinux inside Debian's (LZ4) cloud kernel, for Firecracker
  lz4
  # the nested host's QEMU (tests/nested-host/bed-qemu/build.sh)
  ninja-build python3-venv libglib2.0-dev zlib1g-dev patch
  # kernel builds (ccache: a second variant or line rebuilds in seconds)
  flex bison libelf-dev bc libssl-dev dwarves rsync kmod ccache git perl
  # the bed QEMU's configure
  pkg-config
  # the test guest's Debian rootfs (guest-rootfs/build.sh)
  mmdebstrap e2fsprogs debian-archive-keyring
  # checkpatch's SPDX check (scripts/spdxcheck.py imports ply and git)
  python3-ply python3-git
  # EDK2 builds
  nasm acpica-tools uuid-dev python3 python-is-python3
  # static linking, misc
  libc6-dev build-essential jq file
  # tests/zstest/timeline.py validates --timeline JSON against docs/schema/
  python3-jsonschema
  # charts (plotters needs a TrueType font): make demo, zerostart slo
  fonts-dejavu-core
  # cloud-hypervisor's boot disk (tests/lib/mkesp.sh): a UKI on an EFI
  # system partition, since its firmware cannot get a kernel over fw_cfg
  systemd-boot-efi dosfstools mtools
  # tests that would otherwise skip on a minimal image (testsupport::skip):
  # the tap tests' network namespace (ip netns), the pool unit's
  # systemd-analyze verify, setpriv/unshare (privilege drop, PID namespace)
  iproute2 systemd util-linux
  # make test-libvirt: a real libvirtd drives QEMU through zerostart-qemu
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
