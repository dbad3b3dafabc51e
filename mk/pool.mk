# The pre-zeroed memory pool (vmm/pool, tests/pool). See docs/pool.md.
#
#   make test-pool    crate tests (state machine, protocol, scrub/verify),
#                     then the kill tests (daemon or client SIGKILLed at
#                     every region state; later leases scanned in full) on
#                     4K shmem, 2M hugetlb memfds and a hugetlbfs mount
#                     (hugepages reserved as root and put back on exit)
#   make bench-pool   memory-ready time: pool lease vs fresh hugetlb with
#                     NT-zero prefault vs MADV_POPULATE_WRITE vs no
#                     prefault, 1/4/8 GiB (reserves up to 8 GiB of 2M pages
#                     and puts the old count back)

TEST_TARGETS += test-pool
POOL_BENCH_SIZES ?= 1,4,8

.PHONY: test-pool bench-pool

test-pool: deps
	bash tests/pool/run.sh

bench-pool: deps
	bash tests/pool/bench.sh $(POOL_BENCH_SIZES)
