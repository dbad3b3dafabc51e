#!/usr/bin/env bash
# Builds the probe guest bzImage; `build.sh test` also runs every probe test.
#
#   tests/probe/build.sh          -> target/probe/probe.bzImage
#   tests/probe/build.sh test     -> build, fmt/clippy, unit tests, and the
#                                    KVM boot tests (needs /dev/kvm)
#   PROBE_BZIMAGE=/path/x.bzImage tests/probe/build.sh   (other output path)
#
# Idempotent and fast when nothing changed: cargo no-ops, and the packer
# rewrites the bzImage only when its bytes change. Not --locked: zerohint is
# a path dependency owned elsewhere, and a dependency it adds must not break
# this build (Cargo.lock is still used and committed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${PROBE_BZIMAGE:-$root/target/probe/probe.bzImage}"
host=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR="$root/target/probe-cargo"
# Our flags must be the only ones: CARGO_ENCODED_RUSTFLAGS would win.
unset CARGO_ENCODED_RUSTFLAGS
cd "$here"

if [ "$(uname -m)" != x86_64 ]; then
  echo "build.sh: the probe is an x86-64 guest built with the host toolchain; run on an x86-64 host" >&2
  exit 1
fi

build() {
  # The guest: --target makes RUSTFLAGS apply to it only (not to build
  # scripts or proc macros), and the static relocation model links it at
  # its fixed load address without a GOT or dynamic relocations.
  RUSTFLAGS="-C relocation-model=static" \
    cargo build --release -p probe-guest --target "$host"
  cargo build --release -p probe-pack
  "$CARGO_TARGET_DIR/release/probe-pack" \
    --elf "$CARGO_TARGET_DIR/$host/release/probe" --out "$out"
}

case "${1:-build}" in
  build)
    build
    ;;
  test)
    build
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    PROBE_BZIMAGE="$out" PROBE_ELF="$CARGO_TARGET_DIR/$host/release/probe" \
      cargo test --workspace
    ;;
  *)
    echo "usage: $0 [build|test]" >&2
    exit 2
    ;;
esac
