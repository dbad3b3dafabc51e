#!/usr/bin/env bash
# Builds the QEMU that runs the nested test host (L2): the source of the
# QEMU 10.0.2 that versions.lock pins (source.lock) + patches/, one target
# (x86_64-softmmu, TCG), nothing else. See README.md for why.
#
# This QEMU is the test bed only. The QEMU that zerostart's tests and demo
# run *inside* L2, as the VMM operators already run, stays Debian's
# unpatched binary from versions.lock.
#
# Output: $ZEROSTART_CACHE/bed-qemu/<hash>/qemu-system-x86_64, where <hash>
# covers source.lock, patches/ and this script. The last line printed is
# that directory. A second run with the same inputs does nothing but print it.
#
# Usage: build.sh           fetch, unpack, patch, build (first time ~4 min
#                           on 2 cores)
#        build.sh --print   print the output dir (exit 1 if not built yet)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ZEROSTART_CACHE:-$HOME/.cache/zerostart}/bed-qemu"

die() { echo "bed-qemu build: $*" >&2; exit 1; }
log() { echo "bed-qemu build: $*" >&2; }

MODE=build
case "${1:-}" in
'') ;;
--print) MODE=print ;;
*) die "unknown argument '$1'; use no argument (build) or --print" ;;
esac

# shellcheck source=/dev/null
. "$HERE/source.lock"
KEY=$(cat "$HERE/source.lock" "$HERE"/patches/*.patch "$HERE/build.sh" | sha256sum | cut -c1-16)
OUT="$ROOT/$KEY"
BIN="$OUT/qemu-system-x86_64"

built() { [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; }
if [ "$MODE" = print ]; then
	built || die "not built for the current inputs ($OUT); run $0"
	echo "$OUT"
	exit 0
fi

mkdir -p "$ROOT"
exec 9>"$ROOT/lock"
flock 9 # make -j, or two harnesses started at once: one builds, the other waits
if built; then
	echo "$OUT"
	exit 0
fi

# ---------------------------------------------------------------- host tools
need=()
for p in build-essential pkg-config ninja-build python3-venv flex bison xz-utils \
	patch libglib2.0-dev zlib1g-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
		die "could not install ${need[*]}; install them with apt-get and re-run"
fi

# ---------------------------------------------------------------- fetch
DL="$ROOT/dl"
TARBALL="$DL/$(basename "$ORIG")"
mkdir -p "$DL"
if ! { [ -f "$TARBALL" ] && echo "$ORIG_SHA256  $TARBALL" | sha256sum -c --status; }; then
	rm -f "$TARBALL"
	log "fetching $MIRROR/$ORIG"
	/usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$MIRROR/$ORIG" "$TARBALL" "SHA256:$ORIG_SHA256" >/dev/null ||
		die "could not fetch $MIRROR/$ORIG with sha256 $ORIG_SHA256; if it left the mirror, bump source.lock (and check patches/ still apply)"
fi

# ---------------------------------------------------------------- meson
VENV="$ROOT/venv-${MESON#*==}"
if ! "$VENV/bin/python3" -c 'import mesonbuild, pycotap' 2>/dev/null; then
	log "installing $MESON $PYCOTAP from PyPI into $VENV (bookworm's meson 1.0 is too old for QEMU 10)"
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	"$VENV/bin/pip" install -q "$MESON" "$PYCOTAP" || die "pip install $MESON $PYCOTAP failed (PyPI reachable?)"
fi

# ---------------------------------------------------------------- unpack + patch
WORK="$ROOT/work-$KEY"
rm -rf "$WORK" && mkdir -p "$WORK"
log "unpacking $(basename "$ORIG") into $WORK/src"
mkdir -p "$WORK/src"
tar -xJf "$TARBALL" -C "$WORK/src" --strip-components=1 || die "could not unpack $TARBALL"
for p in "$HERE"/patches/*.patch; do
	log "applying $(basename "$p")"
	patch -d "$WORK/src" -p1 -s --no-backup-if-mismatch <"$p" || die "$(basename "$p") does not apply to QEMU $VERSION"
done
# Debian's +ds tarball drops QEMU's prebuilt EDK2 images (Debian's own
# skip-unpack-edk2-blobs.patch does the same), which meson.build
# unpacks whenever bzip2 is found, even with install_blobs off. L2 boots with
# SeaBIOS (from qemu-system-data and the host), so leave them out.
sed -i 's/^\(    unpack_edk2_blobs = \)bzip2.found()$/\1false/' "$WORK/src/meson.build"
grep -q '^    unpack_edk2_blobs = false$' "$WORK/src/meson.build" ||
	die "meson.build changed: the EDK2 blob switch was not found; update build.sh for $VERSION"

# ---------------------------------------------------------------- build
mkdir -p "$WORK/build"
log "configuring (x86_64-softmmu, TCG only, no optional features)"
(cd "$WORK/build" && ../src/configure --python="$VENV/bin/python3" --target-list=x86_64-softmmu \
	--without-default-features --enable-tcg --disable-docs --disable-tools --disable-user \
	--disable-werror --disable-download --disable-install-blobs >"$WORK/configure.log" 2>&1) ||
	die "configure failed; see $WORK/configure.log"
log "building qemu-system-x86_64 (~1500 steps; first build ~4 min on 2 cores)"
(cd "$WORK/build" && ninja qemu-system-x86_64 >"$WORK/build.log" 2>&1) ||
	die "build failed; see $WORK/build.log"
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"
cp "$WORK/build/qemu-system-x86_64" "$OUT.tmp/"
"$OUT.tmp/qemu-system-x86_64" --version >/dev/null || die "the built QEMU does not run"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
rm -rf "$WORK"
log "built $BIN"
echo "$OUT"
