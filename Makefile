# zerostart entry points. `make demo` and `make test` do all set-up on a
# fresh machine. Each area adds its targets in mk/<area>.mk and appends its
# test target to TEST_TARGETS.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export ZEROSTART_CACHE ?= $(HOME)/.cache/zerostart
export CARGO_TERM_COLOR ?= never
CARGO ?= cargo
# Under make, tests that need /dev/kvm or hugepages fail when they cannot
# have them instead of returning early as a "pass" (a plain `cargo test` on a
# laptop leaves these unset and the tests say SKIP). Set to 0 to allow skips.
export ZEROSTART_REQUIRE_KVM ?= 1
export ZEROSTART_REQUIRE_HUGEPAGES ?= 1

TEST_TARGETS := test-fast

.PHONY: help deps rust-deps test test-fast bench demo
help:
	@echo "make demo   - the same VM at 1, 4, 8 GiB: stock QEMU, QEMU through zerostart launch, zerostart's VMM"
	@echo "make test   - everything: $(TEST_TARGETS)"
	@echo "make test-fast | bench | $(filter-out test-fast,$(TEST_TARGETS))"
	@echo "other targets (see the comment at the top of each mk/*.mk):"
	@sed -n 's/^\.PHONY: *//p' mk/*.mk | tr ' ' '\n' | grep -v '^test-' | sort -u | tr '\n' ' ' | fold -s -w 78 | sed 's/^/  /'; echo

deps:
	@bash ci/install-deps.sh

# The workspace's hugetlb tests get their 2M pages (and a 1G page when the
# host can find one) reserved for the run and given back after.
test-fast: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 tests/lib/test_make_test.py
	bash vmm/guestmem/scripts/with-hugepages.sh 2048 64 -- \
	  bash vmm/guestmem/scripts/with-hugepages.sh 1048576 1 -- \
	  $(CARGO) test --workspace

include $(sort $(wildcard mk/*.mk))

# `test` runs every area's target, test-fast first, then in the order of the
# mk/*.mk files (alphabetical, as they are included), each to
# its end even after another failed, and counts the checks inside them
# (tests/lib/make_test.py): its last line is
# `make-test: N passed, N failed, N skipped`.
test:
	@MAKE="$(MAKE)" python3 tests/lib/make_test.py $(TEST_TARGETS)
