# zerostart entry points. `make demo` and `make test` do all set-up on a
# fresh machine. Each area adds its targets in mk/<area>.mk and appends its
# test target to TEST_TARGETS.
SHELL := /bin/bash
.DEFAULT_GOAL := help

export ZEROSTART_CACHE ?= $(HOME)/.cache/zerostart
export CARGO_TERM_COLOR ?= never
CARGO ?= cargo

TEST_TARGETS := test-fast

.PHONY: help deps rust-deps test test-fast bench demo
help:
	@echo "make demo   - boot a 4 GiB pre-zeroed VM with zerostart and print its boot timeline"
	@echo "make test   - everything: $(TEST_TARGETS)"
	@echo "make test-fast | bench | $(filter-out test-fast,$(TEST_TARGETS))"
	@echo "other targets (see the comment at the top of each mk/*.mk):"
	@sed -n 's/^\.PHONY: *//p' mk/*.mk | tr ' ' '\n' | grep -v '^test-' | sort -u | tr '\n' ' ' | fold -s -w 78 | sed 's/^/  /'; echo

deps:
	@bash ci/install-deps.sh

test-fast: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace

include $(sort $(wildcard mk/*.mk))

# `test` runs every area's target, in the order areas were added.
test: $(TEST_TARGETS)
	@echo "make test: every area passed: $(TEST_TARGETS)"
	@echo "make-test: $(words $(TEST_TARGETS)) passed, 0 failed"
