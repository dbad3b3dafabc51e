# Device-model fuzzing (vmm/devices/fuzz, cargo-fuzz on nightly): the port
# bus with every device the VMM puts on it (`port_bus`), and fw_cfg DMA
# against guest memory with holes checked by a reference model
# (`fw_cfg_dma`), virtio-blk through its virtio-mmio registers against
# guest RAM with holes (`virtio_blk`), virtio-net's user-space TX/RX queue
# handling the same way with frames arriving from the "tap" (`virtio_net`),
# and the ring checks done before a queue goes to a kernel vhost backend
# against a reference (`vhost_rings`). Seeds live in the tree (vmm/devices/fuzz/corpus/<target>,
# small); what a run finds goes to the cache, not the tree.
#
#   make test-devices-fuzz     short run, DEVICES_FUZZ_SMOKE seconds per target (in `make test`)
#   make fuzz-devices          FUZZ_SECONDS per target (default 60)
#   make fuzz-devices-long     FUZZ_LONG_SECONDS per target (default 3600)
#   make fuzz-devices-runs     FUZZ_RUNS executions per target (default 10^6; no time limit)
#   make fuzz-devices-corpus   merge inputs that add coverage from the cache into the tree corpus
#
# `fuzz_run` is the one recipe for every cargo-fuzz run here (fuzz-abi uses
# it too): $(call fuzz_run,DIR,TARGETS,CACHE,SECONDS,MAX_LEN,SEED_ROOT[,RUNS])
# runs each target for SECONDS (or RUNS executions, when given) with its corpus in CACHE/corpus-<target>
# (written) and SEED_ROOT/<target> (read, if given), and stops at the first
# crash with the reproducer's path and the command to replay it.

DEVICES_FUZZ_DIR := vmm/devices/fuzz
DEVICES_FUZZ_TARGETS := port_bus fw_cfg_dma virtio_blk virtio_net vhost_rings
DEVICES_FUZZ_CACHE := $(ZEROSTART_CACHE)/devices-fuzz
DEVICES_FUZZ_SEEDS := $(CURDIR)/$(DEVICES_FUZZ_DIR)/corpus
DEVICES_FUZZ_MAX_LEN := 4096
DEVICES_FUZZ_SMOKE ?= 20
FUZZ_SECONDS ?= 60
FUZZ_LONG_SECONDS ?= 3600
FUZZ_RUNS ?= 1000000

TEST_TARGETS += test-devices-fuzz

.PHONY: test-devices-fuzz fuzz-devices fuzz-devices-long fuzz-devices-runs fuzz-devices-corpus

define fuzz_run
@mkdir -p $(3)/artifacts $(addprefix $(3)/corpus-,$(2))
@set -o pipefail; for t in $(2); do \
	echo "fuzz: $$t for $(if $(7),$(7) executions,$(4) s)"; \
	( cd $(1) && $(CARGO) +nightly fuzz run --target-dir $(3)/target $$t \
		$(3)/corpus-$$t $(if $(6),$$(test -d $(6)/$$t && echo $(6)/$$t)) -- $(if $(7),-runs=$(7),-max_total_time=$(4)) -max_len=$(5) \
		-artifact_prefix=$(3)/artifacts/$$t- -print_final_stats=1 ) 2>&1 \
		| { grep -v -e '^#[0-9]' -e '^"' -e 'ecommended dictionary' -e '^INFO: ' -e 'NEW_FUNC' -e '^ *Compiling' || true; } \
	|| { echo "fuzz: $$t failed; reproducer in $(3)/artifacts/ (replay: cd $(1) && cargo +nightly fuzz run $$t <file>)" >&2; exit 1; }; \
done
endef

fuzz-devices: abi-fuzz-tools
	$(call fuzz_run,$(DEVICES_FUZZ_DIR),$(DEVICES_FUZZ_TARGETS),$(DEVICES_FUZZ_CACHE),$(FUZZ_SECONDS),$(DEVICES_FUZZ_MAX_LEN),$(DEVICES_FUZZ_SEEDS))

test-devices-fuzz:
	$(MAKE) --no-print-directory fuzz-devices FUZZ_SECONDS=$(DEVICES_FUZZ_SMOKE)

fuzz-devices-long:
	$(MAKE) --no-print-directory fuzz-devices FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

# A count, not a time: what docs/vmm.md reports ("10^6 executions, no
# crash") does not depend on how busy the machine was. One target:
# `make fuzz-devices-runs DEVICES_FUZZ_TARGETS=port_bus`.
fuzz-devices-runs: abi-fuzz-tools
	$(call fuzz_run,$(DEVICES_FUZZ_DIR),$(DEVICES_FUZZ_TARGETS),$(DEVICES_FUZZ_CACHE),$(FUZZ_SECONDS),$(DEVICES_FUZZ_MAX_LEN),$(DEVICES_FUZZ_SEEDS),$(FUZZ_RUNS))

# Adds to the tree corpus only the cached inputs that reach new coverage
# (libFuzzer -set_cover_merge=1), so it stays small.
fuzz-devices-corpus: abi-fuzz-tools
	@set -e; for t in $(DEVICES_FUZZ_TARGETS); do \
		mkdir -p $(DEVICES_FUZZ_SEEDS)/$$t; \
		( cd $(DEVICES_FUZZ_DIR) && $(CARGO) +nightly fuzz run --target-dir $(DEVICES_FUZZ_CACHE)/target $$t \
			$(DEVICES_FUZZ_SEEDS)/$$t $(DEVICES_FUZZ_CACHE)/corpus-$$t -- -set_cover_merge=1 -max_len=$(DEVICES_FUZZ_MAX_LEN) ); \
	done
	@du -sh $(DEVICES_FUZZ_SEEDS)/*
