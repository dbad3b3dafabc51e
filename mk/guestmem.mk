# Guest memory (vmm/guestmem, vmm/hostmem). See docs/memory.md. (The devices
# crate's tests run with the VMM's, in mk/vmm.mk.)
#   make test-guestmem     crate tests, incl. hugetlb memfd/hugetlbfs tests with
#                        2 MiB hugepages reserved for the run and given back
#   make bench-prefault  NT engine vs MADV_POPULATE_WRITE prefault per backing
#                        (PREFAULT_SIZE, PREFAULT_REPS), hugepages reserved likewise;
#                        then prefault=on vs cloud-hypervisor's parallel
#                        MADV_POPULATE_WRITE rule at PREFAULT_CH_SIZES GiB
#                        (THP and 2M hugetlb; reserves the largest size)

# Not in `make test`: there its crate tests and clippy would only print
# "run once, by test-fast" (test-fast runs the workspace's tests with the
# same hugepage reservation), and a target that checks nothing must not
# count as a passed check.

GUESTMEM_HUGEPAGES := vmm/guestmem/scripts/with-hugepages.sh
PREFAULT_SIZE ?= 2G
PREFAULT_REPS ?= 5
PREFAULT_CH_SIZES ?= 1,4,8
PREFAULT_CH_REPS ?= 3
# 2 MiB pages covering the largest of PREFAULT_CH_SIZES (GiB) and
# PREFAULT_SIZE (binary units, zstest.sizes), and 1 GiB pages.
PREFAULT_CH_2M_PAGES = $(shell python3 -c "print(max(int(x) for x in '$(PREFAULT_CH_SIZES)'.split(','))*512)")
PREFAULT_2M_PAGES = $(shell python3 -m zstest.sizes --pages 2048 $(PREFAULT_SIZE))
PREFAULT_1G_PAGES = $(shell python3 -m zstest.sizes --pages 1048576 $(PREFAULT_SIZE))

.PHONY: test-guestmem bench-prefault

# A missing hugepage pool or hugetlbfs mount fails the run instead of
# skipping the hugetlb tests (ZEROSTART_REQUIRE_HUGEPAGES=1, from the Makefile).
test-guestmem: deps
ifeq ($(CRATE_TESTS),1)
	$(CARGO) clippy -p guestmem -p hostmem --all-targets -- -D warnings
	$(CARGO) test --locked -p hostmem
	bash $(GUESTMEM_HUGEPAGES) 2048 64 -- bash $(GUESTMEM_HUGEPAGES) 1048576 1 -- \
	  $(CARGO) test --locked -p guestmem
else
	@echo "crate tests and clippy of guestmem, hostmem: run once, by test-fast"
endif

bench-prefault: deps
	$(CARGO) build --release -p guestmem --example prefault_bench
	bash $(GUESTMEM_HUGEPAGES) 2048 $(PREFAULT_2M_PAGES) -- \
	  bash $(GUESTMEM_HUGEPAGES) 1048576 $(PREFAULT_1G_PAGES) -- \
	  $(TARGET_DIR)/release/examples/prefault_bench $(PREFAULT_SIZE) $(PREFAULT_REPS)
	$(CARGO) build --release -p guestmem --example prefault_vs_ch
	bash $(GUESTMEM_HUGEPAGES) 2048 $(PREFAULT_CH_2M_PAGES) -- \
	  $(TARGET_DIR)/release/examples/prefault_vs_ch $(PREFAULT_CH_SIZES) $(PREFAULT_CH_REPS)
