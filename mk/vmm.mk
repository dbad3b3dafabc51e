# The zerostart VMM on /dev/kvm (vmm/arch, vmm/devices, vmm/options,
# vmm/zerostart, tests/vmm).
# See docs/vmm.md.
#
#   make test-vmm     crate tests of arch, devices, options, zerostart (bad-input tests run the
#                     binary), then the probe guest booted through
#                     `zerostart run` with 4K/THP/2M backings, with and
#                     without the hint, corrupted and dirty hints, 4 vCPUs
#                     and 4 GiB (about a minute after the build)
#   make vmm-static   the statically linked binary for the nested test host
#
# VMM_CASES=... limits the probe boots to some cases of the table in
# tests/vmm/cases.py (python3 tests/vmm/cases.py --list names them).

VMM_CASES ?=
TEST_TARGETS += test-vmm

.PHONY: test-vmm vmm-static

test-vmm: deps zerostart-release probe
	$(call crate_tests,-p arch -p devices -p options -p zerostart)
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) python3 tests/vmm/cases.py $(VMM_CASES)

# The same binary as e2e-zerostart (mk/nested-host.mk).
vmm-static: e2e-zerostart
