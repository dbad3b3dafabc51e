# Zeroing engine benchmark (vmm/prezero, vmm/zerobench).
#
# make bench        - one run of every backend, auto, memset and kernel
#                     prefault at 1..N threads on a warm 4 GiB buffer;
#                     table on stdout, JSON in target/bench/zero.json
# make bench-check  - the same, then fail unless auto is >= 95% of the best
#                     backend at every thread count (the median of 15
#                     alternating auto/backend pairs timed after each thread
#                     count's rounds) and >= 4x hugetlb populate,
#                     and unless auto's pick at every thread count follows
#                     its rule (tie band, scaling)
# make test-bench   - smoke run of the release bench CLI on 128 MiB (no
#                     hugepage pool changes, auto measured afresh: no cache)
#                     and a check of its JSON with jq, auto's picking rule
#                     (not speed) included; then a run with the backend
#                     pinned (ZEROSTART_AUTO_BACKEND), which auto must obey;
#                     the crates' unit/property/schema tests run in test-fast
# make bench-host   - the host-scale table (issue 33, docs/pool.md "Host
#                     scale"): engine, auto, memset and kernel populate at
#                     1, 2, 4, ... all CPUs, NUMA, pool fill, lease latency,
#                     scrub under leases, memory_ready; everything under
#                     BENCH_HOST_OUT (JSON, PNG, table)
#
# `bench` uses `zerostart bench zero` once the zerostart binary mounts
# zerobench, and zerobench's bench_zero example until then. Either may grow
# the 2 MiB hugepage pool when run as root, and always restores it.
BENCH_SIZE ?= 4G
BENCH_ARGS ?= --size $(BENCH_SIZE) --json target/bench/zero.json
BENCH_CMD = $(if $(shell grep -qs zerobench vmm/zerostart/Cargo.toml && echo y),\
	$(CARGO) run --release -p zerostart -- bench zero,\
	$(CARGO) run --release -p zerobench --example bench_zero --)

.PHONY: bench bench-check test-bench bench-host
TEST_TARGETS += test-bench

bench:
	@mkdir -p target/bench
	$(BENCH_CMD) $(BENCH_ARGS)

# More reps than `bench`: auto is one of the backends, so "95% of the best"
# compares a backend with itself across runs and needs the noise low.
bench-check:
	@mkdir -p target/bench
	$(CARGO) run --release -p zerobench --example bench_zero -- $(BENCH_ARGS) --reps 5 --check --check-picks

# Every required method must appear at every thread count, with sane numbers.
BENCH_SMOKE_JSON := target/bench/smoke.json
BENCH_PINNED_JSON := target/bench/smoke-pinned.json
test-bench: deps
	@mkdir -p target/bench
	ZEROSTART_AUTO_CACHE=off $(CARGO) run --release -p zerobench --example bench_zero -- \
		--size 128M --threads 1,2 --reps 1 --no-hugepage-reserve --json $(BENCH_SMOKE_JSON) --check-picks
	jq -e -f vmm/zerobench/tests/report.jq $(BENCH_SMOKE_JSON)
	ZEROSTART_AUTO_CACHE=off ZEROSTART_AUTO_BACKEND=portable $(CARGO) run --release -p zerobench --example bench_zero -- \
		--size 64M --threads 1,2 --reps 1 --no-hugepage-reserve --json $(BENCH_PINNED_JSON) --check-picks
	jq -e '[.auto_picks[] | select(.source == "pinned" and .backend == "portable")] | length == 2' $(BENCH_PINNED_JSON)
	@echo "test-bench: bench CLI smoke run OK ($$(jq -r .auto_backend $(BENCH_SMOKE_JSON)) is auto; the pin was obeyed)"

# The host-scale run (issue 33): needs root for the hugepage reservation
# (given back on exit). On another machine, with only the release binary:
# `zerostart bench host --out DIR` (docs/pool.md, "Host scale").
BENCH_HOST_OUT ?= target/bench-host
BENCH_HOST_ARGS ?=
bench-host:
	@mkdir -p $(BENCH_HOST_OUT)
	$(CARGO) run --release -p zerobench --example bench_host -- --out $(BENCH_HOST_OUT) $(BENCH_HOST_ARGS)
