# End-to-end tests on real KVM inside the nested test host, and `make demo`.
# Owner: tests/nested-host, tests/guest-init. See docs/e2e.md.
TEST_TARGETS += test-nested-host

E2E_PY = E2E_KERNEL=$(E2E_KERNEL) python3 tests/nested-host/run.py

.PHONY: e2e-zerostart e2e-kernel bed-qemu test-nested-host-units test-nested-host demo e2e-image

# The kernel under test in L3: the patched one from guest-kernel-patches/
# (built once, cached by its inputs; the e2e scenarios are where its skip
# paths run on real KVM). E2E_KERNEL=stock skips building it and tests stock
# Debian 6.12. A failed kernel build fails the target: a silent fallback to
# stock would let every scenario pass without the series' skip paths ever
# running (E2E_KERNEL=stock asks for that run explicitly). The flock only
# serialises e2e runs with each other: build.sh itself takes no lock.
E2E_KERNEL ?= $(if $(wildcard guest-kernel-patches/build.sh),patched,stock)
E2E_KERNEL_BUILD ?= guest-kernel-patches/build.sh
e2e-kernel: deps
	@if [ "$(E2E_KERNEL)" = patched ]; then \
	  mkdir -p "$(ZEROSTART_CACHE)/kernel" && \
	  flock "$(ZEROSTART_CACHE)/kernel/.e2e-build.lock" $(PROGRESS) "guest kernel 6.12" 540 bash $(E2E_KERNEL_BUILD) >/dev/null || \
	    { echo "e2e: $(E2E_KERNEL_BUILD) failed, so there is no patched kernel to test; fix the build (its log is above), or run with E2E_KERNEL=stock to test stock Debian 6.12 on purpose" >&2; exit 1; }; \
	fi

# zerostart linked statically: L2 has no libc to load a dynamic binary with.
# The same invocation builds the demo's chart (vmm/slo's demo_chart example,
# DEMO_CHART): zerostart already depends on slo, so with the same profile,
# target and flags the chart costs its own crate only (6 CPU-seconds more,
# against 156 for the release build of slo's dependencies it had before:
# 2026-12-06, a 2-core AMD EPYC, fresh target directories, `/usr/bin/time`
# around each build). One invocation, so both resolve features alike and
# every harness that asks for e2e-zerostart finds the build up to date.
e2e-zerostart: deps
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --profile static --locked \
	  --target x86_64-unknown-linux-gnu -p zerostart -p slo --bin zerostart --example demo_chart
	@ldd $(ZEROSTART_STATIC) 2>&1 | grep -qE 'not a dynamic executable|statically linked' || \
	  { echo "e2e: $(ZEROSTART_STATIC) is not static"; exit 1; }

# The nested host's own QEMU (10.0.2 with one upstream fix, see
# tests/nested-host/bed-qemu), built once per input hash into the cache. make
# builds it before any harness runs: built lazily by the first L2 boot, its
# ~4-8 minutes counted against that boot's deadline (a fresh machine's
# test-firmware-boot lost its first run that way, "nested host silent").
bed-qemu: deps
	@$(PROGRESS) "nested host QEMU 10.0.2" 300 bash tests/nested-host/bed-qemu/build.sh >/dev/null

# Host-side units: the L3 guest's hint validator against the golden vectors,
# a dry run of the guest's zero check, and the harness's judging/timeouts.
test-nested-host-units: deps e2e-zerostart
	@mkdir -p target/e2e
	gcc -std=c11 -O2 -Wall -Wextra -Werror -I tests/vectors -o target/e2e/test_zshint \
	  tests/guest-init/test_zshint.c tests/guest-init/zshint.c
	target/e2e/test_zshint
	gcc -static -O2 -Wall -Wextra -Werror -I tests/vectors -o target/e2e/zsinit-dry \
	  tests/guest-init/zsinit.c tests/guest-init/zshint.c
	@# Not pid 1, so a dry run: no mounts, port writes or reboot; checks 64 MiB.
	set -o pipefail; target/e2e/zsinit-dry | tail -1 | grep -q '^ZSINIT: PASS'
	ZEROSTART_BIN=$(abspath $(ZEROSTART_STATIC)) python3 tests/nested-host/test_run.py
	python3 -m unittest zstest.test_l2image

# Builds (or finds cached) the L2 image only.
e2e-image: deps e2e-zerostart bed-qemu
	python3 -m zstest.l2image --zerostart $(ZEROSTART_STATIC) >/dev/null

test-nested-host: deps test-nested-host-units e2e-zerostart e2e-kernel bed-qemu
	$(E2E_PY) e2e --zerostart $(ZEROSTART_STATIC) $(E2E_ARGS)

# The side-by-side of tests/nested-host/demo.py: stock QEMU, QEMU through
# `zerostart launch`, zerostart's own VMM; OVMF from `make firmware-ovmf`,
# the chart from vmm/slo's demo_chart example.
#
# A newcomer's first command, so it builds only what the demo shows (the
# patched 6.12 image, OVMF, the bed QEMU, the rootfs, the static zerostart
# with the chart, the nested host's packages) and builds them side by side
# once the host packages are in: on 2 cores one build's download, unpack,
# configure and link phases leave a core idle that another build's compile
# fills.
# DEMO_JOBS=1 builds them one after the other. Their outputs are the caches
# `make test` uses (the firmware directory gains CLOUDHV.fd there).
DEMO_BUILDS := e2e-zerostart e2e-kernel bed-qemu firmware-ovmf rootfs e2e-fetch
DEMO_JOBS ?= $(words $(DEMO_BUILDS))
DEMO_CHART := $(TARGET_DIR)/x86_64-unknown-linux-gnu/static/examples/demo_chart
.PHONY: e2e-fetch
demo: deps
	@echo "demo: building $(DEMO_BUILDS) ($(DEMO_JOBS) at a time; cached after the first run)"
	@PROGRESS_SHARED=$(DEMO_JOBS) $(MAKE) --no-print-directory -j$(DEMO_JOBS) $(DEMO_BUILDS)
	@$(E2E_PY) demo --zerostart $(ZEROSTART_STATIC) --firmware "$(FW_DIR)/OVMF.fd" --chart-bin $(DEMO_CHART) $(DEMO_ARGS)

# The nested host's Debian packages (downloaded and verified, cached): the
# L2 image itself is built by the first harness that boots it, once the
# patched kernel it carries exists.
e2e-fetch: deps
	@python3 -m zstest.l2image --fetch-only >/dev/null
