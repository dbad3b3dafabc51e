# The pre-zeroed memory pool (vmm/pool, tests/pool). See docs/pool.md.
#
#   make test-pool    crate tests (state machine, protocol, scrub/verify),
#                     then the kill tests (daemon or client SIGKILLed at
#                     every region state; later leases scanned in full) on
#                     4K shmem, 2M hugetlb memfds and a hugetlbfs mount
#                     (hugepages reserved as root and put back on exit),
#                     then the pool in the nested host (real kvm-amd, ~40
#                     s): 1 GiB leases to the probe (twice: the second
#                     region was scrubbed after the first VM) and to L3
#                     Linux, the probe again after Linux used the region,
#                     every hinted byte zero; and a pool whose scrub skips
#                     the zeroing must be caught (target/pool-nested/check.json)
#   make bench-pool   memory-ready time: pool lease vs fresh hugetlb with
#                     NT-zero prefault vs MADV_POPULATE_WRITE vs no
#                     prefault, 1/4/8 GiB (reserves up to 8 GiB of 2M pages
#                     and puts the old count back)
#   make bench-pool-reuse
#                     cost per GiB of making a returned region clean:
#                     in-place NT zeroing (old, unsafe: a former lessee's
#                     pipe/io_uring/fd still reaches those pages) vs punch +
#                     repopulate vs a new file (what the pool does), 4K and
#                     2M, interleaved (reserves 512 2M pages, puts them back)
#   make bench-pool-nested
#                     launch -> first vCPU instruction of the probe guest,
#                     pool vs populate vs nt vs no prefault, 1/4/8 GiB x 3,
#                     interleaved, in ONE boot of the nested test host (real
#                     kvm-amd in L2; hugepages reserved only inside L2),
#                     then 2 rounds booting L3 Linux + zsinit at 4 GiB;
#                     every guest must find its memory all zero.
#                     Table + target/pool-nested/report.json (~6-9 min)
#   make bench-pool-interference
#                     who pays for zeroing: a memory-bound workload's GiB/s
#                     while a 4 GiB pool fills (idle priority, normal
#                     priority, idle + 1 GiB/s cap) vs idle, interleaved,
#                     1 and 2 workload threads (reserves 2048 2M pages,
#                     puts them back)
#   make bench-pool-first-fill
#                     a new 1 GiB region made clean with one zeroing (the
#                     kernel's, at populate) vs two (populate + engine),
#                     and daemon start to all clean, interleaved

TEST_TARGETS += test-pool
POOL_BENCH_SIZES ?= 1,4,8
POOL_NESTED_REPS ?= 3
POOL_NESTED_ARGS ?= --linux 4 --linux-reps 2

POOL_INTERF_ARGS ?= 4 3
POOL_INTERF_CAP_MIB ?= 1024

.PHONY: test-pool bench-pool bench-pool-reuse bench-pool-nested \
	bench-pool-interference bench-pool-first-fill

# The kill, holder and --hugetlbfs tests run again on 2M hugetlb memory (a
# configuration test-fast's 4K run does not cover), then the VMM boots the
# probe from pool memory (the case table tests/pool/cases.py), then the nested part.
test-pool: deps e2e-zerostart bed-qemu e2e-kernel zerostart-release probe
	$(call crate_tests,-p pool)
	set -o pipefail; bash tests/pool/with-hugetlbfs.sh -- \
	  $(CARGO) test --locked -p pool --test kill --test holders --test hugetlbfs -- --test-threads 4 --nocapture 2>&1 | \
	  grep -E '^(test |SKIP|FAIL|test result|thread .* panicked|  left|  right)'
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) python3 tests/pool/cases.py
	ZEROSTART_BIN=$(abspath $(ZEROSTART_STATIC)) python3 tests/pool/test_nested_bench.py
	python3 tests/pool/nested_bench.py --zerostart $(ZEROSTART_STATIC) --sizes 1 --reps 2 --methods pool --reserve-gib 2 \
	  --linux 1 --linux-reps 1 --leak-check 1 --report target/pool-nested/check.json

bench-pool: deps
	$(CARGO) build --release --locked -p pool --example memready
	bash tests/pool/bench.sh $(TARGET_DIR)/release/examples/memready $(POOL_BENCH_SIZES)

bench-pool-reuse: deps
	$(CARGO) build --release --locked -p pool --example reuse_cost
	bash tests/pool/reuse-cost.sh $(TARGET_DIR)/release/examples/reuse_cost 1 5

bench-pool-nested: deps e2e-zerostart bed-qemu probe
	python3 tests/pool/nested_bench.py --zerostart $(ZEROSTART_STATIC) --sizes $(POOL_BENCH_SIZES) --reps $(POOL_NESTED_REPS) $(POOL_NESTED_ARGS)

bench-pool-interference: deps
	$(CARGO) build --release --locked -p pool --example interference
	bash tests/pool/interference.sh $(TARGET_DIR)/release/examples/interference $(POOL_INTERF_ARGS) 1 $(POOL_INTERF_CAP_MIB) 5
	bash tests/pool/interference.sh $(TARGET_DIR)/release/examples/interference $(POOL_INTERF_ARGS) 2 $(POOL_INTERF_CAP_MIB) 5

bench-pool-first-fill: deps
	$(CARGO) build --release --locked -p pool --example first_fill
	bash tests/pool/first-fill.sh $(TARGET_DIR)/release/examples/first_fill 1 5
