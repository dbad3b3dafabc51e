# `zerostart launch`: QEMU (and cloud-hypervisor, when on PATH) on pool
# memory with the zero hint. Owner: vmm/zerostart/src/launch, tests/nested-host
# (launch.py, l2-launch.sh). See docs/launch.md.
TEST_TARGETS += test-launch

.PHONY: test-launch test-launch-units

# Host part: argument building and hint layout (unit tests against the
# shared layout facts), kill tests with the host's QEMU and a real pool,
# cloud-hypervisor's own --help when it is on PATH (SKIP otherwise), and the
# nested harness's judge on synthetic consoles (with the static zerostart the
# nested part runs: the row commands are built by it, so it must be current).
test-launch-units: deps e2e-zerostart
	python3 tests/nested-host/test_launch.py
ifeq ($(CRATE_TESTS),1)
	$(CARGO) test --locked -p zerostart --bin zerostart launch
	$(CARGO) test --locked -p zerostart --bin zerostart hint
	$(CARGO) test --locked -p zerostart --test launch -- --nocapture 2>&1 | grep -E '^(SKIP|test |test result)' ; \
	  exit $${PIPESTATUS[0]}
else
	@echo "crate tests of zerostart's launch and hint: run once, by test-fast"
endif

# Nested part: QEMU 10 in L2 through `zerostart launch` on real kvm-amd,
# pool in L2, OVMF (ZeroStartPkg), patched kernel with prezero.verify=1.
# Writes target/launch/report.json.
test-launch: deps test-launch-units e2e-zerostart bed-qemu e2e-kernel firmware
	python3 tests/nested-host/run.py launch --zerostart $(ZEROSTART_STATIC) --firmware "$(FW_DIR)/OVMF.fd" $(LAUNCH_ARGS)
