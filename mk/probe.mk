# The bare-metal probe guest (tests/probe): a bzImage booted like Linux that
# checks boot_params, e820, setup_data and the pre-zeroed hint, and that every
# hinted byte reads as zero. See tests/probe/README.md.
#
#   make probe        build target/probe/probe.bzImage (fast when up to date)
#   make test-probe   probe fmt, clippy, unit tests + KVM boot tests of every
#                     verdict (needs /dev/kvm; about a minute)
#
# The probe is a cargo workspace of its own (excluded from the root one): the
# guest is a no_std binary built with flags that must not reach the VMM's
# crates. Not --locked: zerohint is a path dependency owned elsewhere, and a
# dependency it adds must not break this build (Cargo.lock is still used and
# committed).
TEST_TARGETS += test-probe

PROBE_BZIMAGE ?= target/probe/probe.bzImage
PROBE_DIR := tests/probe
# Its own target dir (tests/probe/.cargo/config.toml names the same one), set
# here so that a CARGO_TARGET_DIR in the environment does not move it: the
# packer's unit tests fall back to the ELF there.
PROBE_TARGET_DIR := $(CURDIR)/target/probe-cargo
PROBE_HOST := x86_64-unknown-linux-gnu
PROBE_ELF := $(PROBE_TARGET_DIR)/$(PROBE_HOST)/release/probe
# Our RUSTFLAGS must be the only flags: CARGO_ENCODED_RUSTFLAGS would win.
PROBE_CARGO := cd $(PROBE_DIR) && env -u CARGO_ENCODED_RUSTFLAGS CARGO_TARGET_DIR=$(PROBE_TARGET_DIR)

.PHONY: probe test-probe

# The guest: --target makes RUSTFLAGS apply to it only (not to build scripts
# or proc macros), and the static relocation model links it at its fixed
# load address without a GOT or dynamic relocations. probe-pack then writes
# the bzImage from the linked ELF, only when its bytes change.
probe: deps
	@test "$$(uname -m)" = x86_64 || { echo "make probe: the probe is an x86-64 guest built with the host toolchain; run on an x86-64 host" >&2; exit 1; }
	$(PROBE_CARGO) RUSTFLAGS="-C relocation-model=static" $(CARGO) build --release -p probe-guest --target $(PROBE_HOST)
	$(PROBE_CARGO) $(CARGO) build --release -p probe-pack
	$(PROBE_TARGET_DIR)/release/probe-pack --elf $(PROBE_ELF) --out $(abspath $(PROBE_BZIMAGE))

test-probe: probe
	$(PROBE_CARGO) $(CARGO) fmt --all -- --check
	$(PROBE_CARGO) $(CARGO) clippy --workspace --all-targets -- -D warnings
	$(PROBE_CARGO) PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) PROBE_ELF=$(PROBE_ELF) $(CARGO) test --workspace
