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

test-kvm: deps zerostart-release probe
	$(call crate_tests,-p arch -p zerostart)
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) bash tests/kvm/run.sh $(KVM_CASES)

# The same binary as e2e-zerostart (mk/e2e.mk).
vmm-static: e2e-zerostart
