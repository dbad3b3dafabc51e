# Hint ABI (vmm/zerohint, tests/vectors): golden vectors in sync, C header
# compiles and matches, independent Python validator agrees, crate tests,
# no_std build, and a fuzz smoke run.
#
#   make test-abi         fast checks (about a minute on a fresh machine)
#   make test-abi-fuzz    installs cargo-fuzz if needed, fuzzes `decode` 20 s
#   make fuzz-abi         fuzz for FUZZ_SECONDS (default 60)
#   make abi-vectors      regenerate tests/vectors after an intended change

ABI_CACHE := $(ZEROSTART_CACHE)/abi
ABI_FUZZ_DIR := vmm/zerohint/fuzz
FUZZ_SECONDS ?= 60
# Entry-count limit 512 needs 12320 bytes; leave room for trailing bytes.
ABI_FUZZ_MAX_LEN := 13000
ABI_CFLAGS := -Wall -Wextra -Werror -Wstrict-prototypes

TEST_TARGETS += test-abi test-abi-fuzz

.PHONY: test-abi test-abi-fuzz fuzz-abi abi-vectors abi-fuzz-tools

test-abi: deps
	$(call crate_tests,-p zerohint)
	$(CARGO) build -p zerohint --no-default-features
	$(CARGO) clippy -p zerohint --no-default-features -- -D warnings
	$(CARGO) clippy -p zerohint --all-targets --features std -- -D warnings
	@mkdir -p $(ABI_CACHE)
	$(CC) -std=c99 -pedantic $(ABI_CFLAGS) -o $(ABI_CACHE)/check_c_header tests/vectors/check_c_header.c
	$(CC) -std=gnu11 -Wdeclaration-after-statement $(ABI_CFLAGS) -fsyntax-only tests/vectors/check_c_header.c
	$(ABI_CACHE)/check_c_header tests/vectors $(ABI_CACHE)/text-header.json
	python3 tests/vectors/check_vectors.py tests/vectors --c-text $(ABI_CACHE)/text-header.json

abi-vectors:
	$(CARGO) run -p zerohint --example gen_vectors -- tests/vectors
	@git status --short tests/vectors

# cargo-fuzz needs the nightly toolchain (installed with the machine; it
# cannot be downloaded here) and is itself built from crates.io once.
abi-fuzz-tools:
	@rustup toolchain list | grep -q '^nightly' || { echo "fuzz-abi: no nightly toolchain; install it with 'rustup toolchain install nightly'" >&2; exit 1; }
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked --version 0.13.2

# Runs each target for FUZZ_SECONDS: `decode` (consumer side; its corpus,
# kept in the cache, not the tree, is seeded with every golden vector) and
# `builder` (producer side: never claims a byte it was not given), with
# mk/fuzz.mk's `fuzz_run` recipe.
ABI_FUZZ_TARGETS := decode builder
fuzz-abi: abi-fuzz-tools
	@mkdir -p $(ABI_CACHE)/fuzz/corpus-decode
	cp tests/vectors/*.bin $(ABI_CACHE)/fuzz/corpus-decode/
	$(call fuzz_run,$(ABI_FUZZ_DIR),$(ABI_FUZZ_TARGETS),$(ABI_CACHE)/fuzz,$(FUZZ_SECONDS),$(ABI_FUZZ_MAX_LEN),)

test-abi-fuzz:
	$(MAKE) --no-print-directory fuzz-abi FUZZ_SECONDS=20
