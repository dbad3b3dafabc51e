# The bare-metal probe guest (tests/probe): a bzImage booted like Linux that
# checks boot_params, e820, setup_data and the pre-zeroed hint, and that every
# hinted byte reads as zero. See tests/probe/README.md.
#
#   make probe        build target/probe/probe.bzImage (fast when up to date)
#   make test-probe   probe unit tests + KVM boot tests of every verdict
#                     (needs /dev/kvm; about a minute)
#
TEST_TARGETS += test-probe

PROBE_BZIMAGE ?= target/probe/probe.bzImage

.PHONY: probe test-probe

probe: deps
	PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) bash tests/probe/build.sh

test-probe: deps
	PROBE_BZIMAGE=$(abspath $(PROBE_BZIMAGE)) bash tests/probe/build.sh test
