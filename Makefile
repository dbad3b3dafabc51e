# zerostart entry points. `make demo` and `make test` do all set-up on a
# fresh machine. Each area adds its targets in mk/<area>.mk and appends its
# test target to TEST_TARGETS.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export ZEROSTART_CACHE ?= $(HOME)/.cache/zerostart
# Long cached builds (kernel, firmware, rootfs, the nested host's QEMU) run
# under ci/progress.sh: on a cache miss it says what builds, how long that
# takes here, and a line a minute until it ends.
PROGRESS := bash $(CURDIR)/ci/progress.sh
export CARGO_TERM_COLOR ?= never
CARGO ?= cargo
# Under make, tests that need /dev/kvm or hugepages fail when they cannot
# have them instead of returning early as a "pass" (a plain `cargo test` on a
# laptop leaves these unset and the tests say SKIP). Set to 0 to allow skips.
export ZEROSTART_REQUIRE_KVM ?= 1
export ZEROSTART_REQUIRE_HUGEPAGES ?= 1

TEST_TARGETS := test-fast

# make owns every build step: it builds with cargo into TARGET_DIR and hands
# the scripts under tests/ the paths (ZEROSTART_BIN=..., --zerostart ...);
# the scripts build nothing themselves.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
ZEROSTART_RELEASE := $(TARGET_DIR)/release/zerostart
SLO_RELEASE := $(TARGET_DIR)/release/zerostart-slo
# Static: the nested host's L2 has no libc to load a dynamic binary with.
ZEROSTART_STATIC := $(TARGET_DIR)/x86_64-unknown-linux-gnu/static/zerostart
# The host-side Python harness is one package, tests/zstest: every python3
# that make runs imports it from here.
export PYTHONPATH := $(CURDIR)/tests$(if $(PYTHONPATH),:$(PYTHONPATH))
export PYTHONDONTWRITEBYTECODE := 1

# Every crate's tests run once in `make test`: test-fast runs them all
# (cargo test --workspace) and `test` calls the area targets with
# CRATE_TESTS=0; an area target called alone (make test-vmm) runs its own
# crates' tests too. $(call crate_tests,-p CRATE ...) is that step.
CRATE_TESTS ?= 1
crate_tests = $(if $(filter 1,$(CRATE_TESTS)),$(CARGO) test --locked $(1),@echo "crate tests $(1): run once, by test-fast")

.PHONY: help deps rust-deps test test-fast bench demo zerostart-release slo-release vmm-argv
help:
	@echo "make demo   - the same VM at 1, 4, 8 GiB: stock QEMU, QEMU through zerostart launch, zerostart's VMM"
	@echo "make test   - everything: $(TEST_TARGETS)"
	@echo "make test-fast | bench | $(filter-out test-fast,$(TEST_TARGETS))"
	@echo "make test-kernel-kasan - the kernel series under KASAN, built cold once (make test-kernel runs it where kept)"
	@echo "other targets (see the comment at the top of each mk/*.mk):"
	@sed -n 's/^\.PHONY: *//p' mk/*.mk | tr ' ' '\n' | grep -v '^test-' | sort -u | tr '\n' ' ' | fold -s -w 78 | sed 's/^/  /'; echo

deps:
	@bash ci/install-deps.sh

zerostart-release: deps
	$(CARGO) build --release --locked -p zerostart

# The zerostart whose `vmm-argv` builds the QEMU command lines of the
# harnesses that need no zerostart otherwise (zstest.vmmargv: the kernel,
# firmware and rootfs boots, issue 30), named to them as ZEROSTART_BIN so
# that a stale static or release build under the target dir never answers
# for this tree.
VMM_ARGV_BIN := $(abspath $(TARGET_DIR))/debug/zerostart
vmm-argv: deps
	$(CARGO) build --locked -p zerostart

slo-release: deps
	$(CARGO) build --release --locked -p slo

# The workspace's hugetlb tests get their 2M pages (and a 1G page when the
# host can find one) reserved for the run and given back after.
test-fast: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 tests/lib/test_make_test.py
	python3 tests/lib/test_progress.py
	python3 tests/lib/test_build_scripts.py
	python3 tests/kernel/test_cases.py
	python3 -m unittest zstest.test_zstest
	bash vmm/guestmem/scripts/with-hugepages.sh 2048 64 -- \
	  bash vmm/guestmem/scripts/with-hugepages.sh 1048576 1 -- \
	  $(CARGO) test --workspace --no-fail-fast
	# After cargo built target/debug/zerostart: its vmm-argv, as the nested harnesses ask it
	# (named: a stale static build under target/ must not answer for this tree).
	ZEROSTART_BIN=$(abspath $(TARGET_DIR))/debug/zerostart python3 -m unittest zstest.test_vmmargv

include $(sort $(wildcard mk/*.mk))

# `test` runs the targets of TEST_TARGETS in its order: test-fast first (set
# above), then what each mk/*.mk file appends, the files in alphabetical
# order of their names (the `include` above sorts them), so by area file,
# not by target name: test-devices-fuzz (fuzz.mk) comes after test-firmware
# (firmware.mk); `make help` prints the list. Each runs to its end even
# after another failed; tests/lib/make_test.py counts the checks inside them
# and ends with every skip and retry by name and
# `make-test: N passed, N failed, N skipped, N retried`.
test:
	@MAKE="$(MAKE) CRATE_TESTS=0" python3 tests/lib/make_test.py $(TEST_TARGETS)
