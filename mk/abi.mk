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
	$(CARGO) test -p zerohint
	$(CARGO) build -p zerohint --no-default-features
	$(CARGO) clippy -p zerohint --no-default-features -- -D warnings
	$(CARGO) clippy -p zerohint --all-targets --features std -- -D warnings
	python3 tests/vectors/check_vectors.py tests/vectors
	@mkdir -p $(ABI_CACHE)
	$(CC) -std=c99 -pedantic $(ABI_CFLAGS) -o $(ABI_CACHE)/check_c_header tests/vectors/check_c_header.c
	$(CC) -std=gnu11 -Wdeclaration-after-statement $(ABI_CFLAGS) -fsyntax-only tests/vectors/check_c_header.c
	$(ABI_CACHE)/check_c_header tests/vectors

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
# `builder` (producer side: never claims a byte it was not given).
ABI_FUZZ_TARGETS := decode builder
fuzz-abi: abi-fuzz-tools
	@mkdir -p $(ABI_CACHE)/fuzz/artifacts $(addprefix $(ABI_CACHE)/fuzz/corpus-,$(ABI_FUZZ_TARGETS))
	cp tests/vectors/*.bin $(ABI_CACHE)/fuzz/corpus-decode/
	@set -o pipefail; for t in $(ABI_FUZZ_TARGETS); do \
		echo "fuzz-abi: $$t for $(FUZZ_SECONDS) s"; \
		( cd $(ABI_FUZZ_DIR) && $(CARGO) +nightly fuzz run --target-dir $(ABI_CACHE)/fuzz/target $$t \
			$(ABI_CACHE)/fuzz/corpus-$$t -- -max_total_time=$(FUZZ_SECONDS) -max_len=$(ABI_FUZZ_MAX_LEN) \
			-artifact_prefix=$(ABI_CACHE)/fuzz/artifacts/$$t- -print_final_stats=1 ) 2>&1 \
			| { grep -v -e '^#[0-9]' -e '^"' -e 'ecommended dictionary' -e '^INFO: ' -e 'NEW_FUNC' -e '^ *Compiling' || true; } \
		|| { echo "fuzz-abi: $$t failed; reproducer in $(ABI_CACHE)/fuzz/artifacts/ (replay: cd $(ABI_FUZZ_DIR) && cargo +nightly fuzz run $$t <file>)" >&2; exit 1; }; \
	done

test-abi-fuzz:
	$(MAKE) --no-print-directory fuzz-abi FUZZ_SECONDS=20
