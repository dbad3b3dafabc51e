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
# REDTEAM_CASES=... limits the hunt to some cases (see tests/redteam/run.sh).

REDTEAM_CASES ?=
TEST_TARGETS += test-redteam

.PHONY: test-redteam

test-redteam: deps
	bash tests/redteam/run.sh $(REDTEAM_CASES)
