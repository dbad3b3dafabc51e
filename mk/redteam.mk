# Red-team tests of the zero-leak invariant (docs/security.md).
#
#   make test-redteam   the redteam_* crate tests (the hint as the guest
#                       receives it from the real binary, write after
#                       freeze, named hugetlbfs files, trimming above 512
#                       ranges; hugepages required), then the leak
#                       hunt: the probe guest booted through `zerostart run
#                       --verify-hint` over host memory freed dirty, a reused
#                       hugetlbfs file holding a secret, odd sizes around the
#                       hole, max cmdline, 300 MiB initramfs, 32 vCPUs, plus
#                       negative controls (about 2 minutes; needs root and
#                       /dev/kvm)
#
# REDTEAM_CASES=... limits the hunt to some cases of the table in
# tests/redteam/cases.py (python3 tests/redteam/cases.py --list names them).

REDTEAM_CASES ?=
TEST_TARGETS += test-redteam

.PHONY: test-redteam

# The redteam_* crate tests need hugepages (required, not skipped, here).
test-redteam: deps zerostart-release probe
ifeq ($(CRATE_TESTS),1)
	bash vmm/guestmem/scripts/with-hugepages.sh 2048 16 -- \
	  $(CARGO) test --locked -p zerostart -p guestmem -p zerohint --test 'redteam_*'
else
	@echo "redteam_* crate tests: run once, by test-fast"
endif
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) python3 tests/redteam/cases.py $(REDTEAM_CASES)
