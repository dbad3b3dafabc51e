# The zerostart VMM on /dev/kvm (vmm/arch, vmm/zerostart, tests/kvm).
# See docs/vmm.md.
#
#   make test-kvm     crate tests of arch + zerostart (bad-input tests run the
#                     binary), then the probe guest booted through
#                     `zerostart run` with 4K/THP/2M backings, with and
#                     without the hint, corrupted and dirty hints, 4 vCPUs
#                     and 4 GiB (about a minute after the build)
#   make vmm-static   the statically linked binary for the nested test host
#
# KVM_CASES=... limits the probe boots to some cases (see tests/kvm/run.sh).

KVM_CASES ?=
TEST_TARGETS += test-kvm

.PHONY: test-kvm vmm-static

test-kvm: deps
	$(CARGO) test --locked -p arch -p zerostart
	bash tests/kvm/run.sh $(KVM_CASES)

vmm-static: deps
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --locked --profile static \
	  --target x86_64-unknown-linux-gnu -p zerostart
