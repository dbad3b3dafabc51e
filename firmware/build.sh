#!/usr/bin/env bash
# Build zerostart's firmware: OVMF.fd (OvmfPkg/OvmfPkgX64) and CLOUDHV.fd
# (OvmfPkg/CloudHv/CloudHvX64) with ZeroStartPkg's DXE driver added, plus the
# test applications ZeroStartDump.efi and ZeroStartHandover.efi, from Debian's
# pinned EDK2 source.
#
# Everything big lives under $ZEROSTART_CACHE/firmware, never in the work tree:
#   dl/<tarball>                  the verified orig tarball (edk2.lock)
#   edk2-<sha12>/                 the unpacked tree, BaseTools built, our
#                                 patches applied (builds there are incremental)
#   <hash>/{OVMF.fd,CLOUDHV.fd,ZeroStart{Dump,Handover}.efi,build.env,build.log}
#                                 outputs, keyed by sha256 of (tarball sha256,
#                                 our package files, patches, this script,
#                                 target and build flags); the platforms are
#                                 not in the key: a run builds those of
#                                 FW_PLATFORMS the directory lacks, so `make
#                                 demo` (OVMF only) and `make firmware` (both)
#                                 share one directory and no build is repeated
#
# Usage: firmware/build.sh [--print-dir] [--no-deps]
#   --print-dir  print the output directory for the current inputs and exit
#   --no-deps    do not try to apt-get install missing build packages
# Environment:
#   FW_TARGET    DEBUG (default) or RELEASE. DEBUG builds write the debug log,
#                including ZeroStartDxe's timing and scrub lines, to the QEMU
#                debugcon port 0x402 (-debugcon file:LOG -global
#                isa-debugcon.iobase=0x402). RELEASE builds are silent.
#   FW_PLATFORMS "ovmf cloudhv" (default) or a subset: the images this run
#                must leave in the output directory (make demo: ovmf)
#   FW_JOBS      parallel build jobs (default: nproc)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
. "$HERE/edk2.lock"

CACHE=${ZEROSTART_CACHE:-$HOME/.cache/zerostart}/firmware
TARGET=${FW_TARGET:-DEBUG}
PLATFORMS=${FW_PLATFORMS:-ovmf cloudhv}
JOBS=${FW_JOBS:-$(nproc)}
TOOLCHAIN=GCC5
# The UEFI shell is not needed to boot a cloud VM's OS
# loader (and costs build and boot time); switchable here.
BUILD_FLAGS=(-D BUILD_SHELL=FALSE)

PRINT_DIR=0
DEPS=1
for arg in "$@"; do
  case "$arg" in
    --print-dir) PRINT_DIR=1 ;;
    --no-deps) DEPS=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
case "$TARGET" in DEBUG | RELEASE) ;; *)
  echo "build.sh: FW_TARGET must be DEBUG or RELEASE, not '$TARGET'" >&2; exit 2 ;;
esac

log() { echo "firmware: $*" >&2; }

# Hash of every input that changes the outputs.
input_hash() {
  (
    cd "$HERE"
    echo "tarball $EDK2_TARBALL_SHA256 target $TARGET toolchain $TOOLCHAIN flags ${BUILD_FLAGS[*]}"
    find ZeroStartPkg patches build.sh edk2.lock -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  ) | sha256sum | cut -c1-16
}

OUT="$CACHE/$(input_hash)"
if [ "$PRINT_DIR" = 1 ]; then
  echo "$OUT"
  exit 0
fi

install_deps() {
  local missing=()
  command -v nasm >/dev/null || missing+=(nasm)
  command -v iasl >/dev/null || missing+=(acpica-tools)
  [ -e /usr/include/uuid/uuid.h ] || missing+=(uuid-dev)
  command -v python3 >/dev/null || missing+=(python3)
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  command -v xz >/dev/null || missing+=(xz-utils)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$DEPS" = 0 ]; then
      log "missing build packages: ${missing[*]} (install them or drop --no-deps)"
      exit 1
    fi
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
}

# Fetch the orig tarball through apt (deb-src of $EDK2_SUITE) with a private
# lists dir and sources file, so the machine's own apt state is untouched.
fetch() {
  local dl="$CACHE/dl" tarball="$CACHE/dl/$EDK2_TARBALL"
  mkdir -p "$dl"
  if [ -f "$tarball" ] && echo "$EDK2_TARBALL_SHA256  $tarball" | sha256sum -c --quiet - 2>/dev/null; then
    return
  fi
  log "fetching $EDK2_TARBALL ($EDK2_SUITE deb-src)"
  local apt="$CACHE/apt"
  rm -rf "$apt" && mkdir -p "$apt/lists/partial" "$apt/get"
  cat >"$apt/sources.list" <<EOF
deb-src http://deb.debian.org/debian $EDK2_SUITE main
deb-src http://deb.debian.org/debian-security $EDK2_SUITE-security main
deb-src http://deb.debian.org/debian $EDK2_SUITE-updates main
EOF
  local opts=(-o "Dir::State::Lists=$apt/lists" -o "Dir::Etc::SourceList=$apt/sources.list"
    -o Dir::Etc::SourceParts=/dev/null)
  apt-get "${opts[@]}" update >&2
  # The upload's .dsc 404s on the mirror while its tarballs download, so apt
  # exits non-zero; the checksum below is what decides.
  (cd "$apt/get" && apt-get "${opts[@]}" source --download-only "edk2=$EDK2_DEBIAN_VERSION" >&2) || true
  if [ ! -f "$apt/get/$EDK2_TARBALL" ]; then
    (cd "$apt/get" && apt-get "${opts[@]}" source --download-only edk2 >&2) || true
  fi
  if [ ! -f "$apt/get/$EDK2_TARBALL" ]; then
    log "could not download $EDK2_TARBALL from $EDK2_SUITE deb-src; check network access to deb.debian.org"
    exit 1
  fi
  if ! echo "$EDK2_TARBALL_SHA256  $apt/get/$EDK2_TARBALL" | sha256sum -c --quiet -; then
    log "$EDK2_TARBALL does not match the sha256 pinned in firmware/edk2.lock; refusing to build"
    exit 1
  fi
  mv "$apt/get/$EDK2_TARBALL" "$tarball"
  rm -rf "$apt"
}

TREE="$CACHE/edk2-${EDK2_TARBALL_SHA256:0:12}"

unpack_and_tools() {
  if [ ! -f "$TREE/.zerostart-unpacked" ]; then
    log "unpacking into $TREE"
    rm -rf "$TREE" "$TREE.tmp" && mkdir -p "$TREE.tmp"
    tar -xJf "$CACHE/dl/$EDK2_TARBALL" -C "$TREE.tmp" --strip-components=1
    mv "$TREE.tmp" "$TREE"
    touch "$TREE/.zerostart-unpacked"
  fi
  if [ ! -f "$TREE/.zerostart-basetools" ]; then
    log "building BaseTools"
    # Brotli's and mipisyst's submodules are not in the orig tarball, so some
    # tools fail; -k builds the rest and the check below names what we need.
    make -k -j"$JOBS" -C "$TREE/BaseTools/Source/C" >"$TREE/basetools.log" 2>&1 || true
    local t
    for t in GenFw GenFv GenFfs GenSec LzmaCompress VfrCompile GenCrc32 EfiRom VolInfo; do
      if [ ! -x "$TREE/BaseTools/Source/C/bin/$t" ]; then
        log "BaseTools: $t did not build; see $TREE/basetools.log"
        exit 1
      fi
    done
    touch "$TREE/.zerostart-basetools"
  fi
}

# Apply firmware/patches/*.patch to pristine copies of the files they touch
# (re-extracted from the tarball), so changing a patch needs no fresh tree.
apply_patches() {
  local stamp
  stamp=$(cat "$HERE"/patches/*.patch | sha256sum | cut -c1-16)
  if [ "$(cat "$TREE/.zerostart-patches" 2>/dev/null)" = "$stamp" ]; then
    return
  fi
  local files
  files=$(sed -n 's#^+++ b/\([^[:space:]]*\).*#\1#p' "$HERE"/patches/*.patch | sort -u)
  # shellcheck disable=SC2086
  tar -xJf "$CACHE/dl/$EDK2_TARBALL" -C "$TREE" --strip-components=1 \
    $(for f in $files; do echo "$EDK2_TOPDIR/$f"; done)
  local p
  for p in "$HERE"/patches/*.patch; do
    log "applying $(basename "$p")"
    patch -d "$TREE" -p1 --forward --quiet <"$p"
  done
  echo "$stamp" >"$TREE/.zerostart-patches"
}

edk2_build() {
  # edksetup.sh reads unset variables; run it and the build outside `set -u`.
  (
    set +u
    export WORKSPACE="$TREE"
    export PACKAGES_PATH="$TREE:$HERE"
    export EDK_TOOLS_PATH="$TREE/BaseTools"
    export PYTHON_COMMAND=python3
    cd "$TREE"
    local args=("$@")
    set --   # edksetup.sh parses the positional parameters of its caller
    # shellcheck source=/dev/null
    . ./edksetup.sh >/dev/null
    build -a X64 -t "$TOOLCHAIN" -b "$TARGET" -n "$JOBS" "${args[@]}"
  )
}

# The image file of a platform name (FW_PLATFORMS).
image_of() {
  case "$1" in
    ovmf) echo OVMF.fd ;;
    cloudhv) echo CLOUDHV.fd ;;
    *) log "unknown platform '$1' in FW_PLATFORMS (ovmf, cloudhv)"; exit 2 ;;
  esac
}

# The platforms of FW_PLATFORMS whose image $OUT does not hold yet.
missing_platforms() {
  local p
  for p in $PLATFORMS; do
    [ -f "$OUT/$(image_of "$p")" ] || printf '%s ' "$p"
  done
}

main() {
  local todo
  todo=$(missing_platforms)
  install_deps
  fetch
  unpack_and_tools
  apply_patches
  # A directory that holds some platforms keeps them: the missing ones are
  # added to a copy, which replaces it whole when they are built.
  rm -rf "$OUT.tmp"
  if [ -f "$OUT/build.env" ]; then cp -a "$OUT" "$OUT.tmp"; else mkdir -p "$OUT.tmp"; fi
  local blog="$OUT.tmp/build.log"
  [ -f "$blog" ] || : >"$blog"
  log "building ZeroStartPkg ($TARGET) - log in $blog"
  edk2_build -p ZeroStartPkg/ZeroStartPkg.dsc >>"$blog" 2>&1 || { tail -40 "$blog" >&2; log "ZeroStartPkg build failed"; exit 1; }
  local zbuild="$TREE/Build/ZeroStartPkg/${TARGET}_$TOOLCHAIN/X64"
  cp "$zbuild/ZeroStartDump.efi" "$zbuild/ZeroStartHandover.efi" "$OUT.tmp/"
  local p
  for p in $todo; do
    case "$p" in
      ovmf)
        log "building OvmfPkgX64 ($TARGET)"
        edk2_build -p OvmfPkg/OvmfPkgX64.dsc "${BUILD_FLAGS[@]}" >>"$blog" 2>&1 || { tail -40 "$blog" >&2; log "OvmfPkgX64 build failed"; exit 1; }
        cp "$TREE/Build/OvmfX64/${TARGET}_$TOOLCHAIN/FV/OVMF.fd" "$OUT.tmp/OVMF.fd"
        ;;
      cloudhv)
        log "building CloudHvX64 ($TARGET)"
        edk2_build -p OvmfPkg/CloudHv/CloudHvX64.dsc "${BUILD_FLAGS[@]}" >>"$blog" 2>&1 || { tail -40 "$blog" >&2; log "CloudHvX64 build failed"; exit 1; }
        cp "$TREE/Build/CloudHvX64/${TARGET}_$TOOLCHAIN/FV/CLOUDHV.fd" "$OUT.tmp/CLOUDHV.fd"
        ;;
    esac
  done
  local built=""
  for p in ovmf cloudhv; do [ -f "$OUT.tmp/$(image_of "$p")" ] && built="$built${built:+ }$p"; done
  printf 'FW_TARGET=%s\nEDK2_TARBALL_SHA256=%s\nPLATFORMS="%s"\n' "$TARGET" "$EDK2_TARBALL_SHA256" "$built" >"$OUT.tmp/build.env"
  rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
  log "done: $OUT"
  echo "$OUT"
}

# One build at a time per cache: the EDK2 tree and its Build/ are shared.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
for p in $PLATFORMS; do image_of "$p" >/dev/null; done
if [ -f "$OUT/build.env" ] && [ -z "$(missing_platforms)" ]; then
  log "up to date: $OUT"
  echo "$OUT"
  exit 0
fi
main
