# The boot-time SLO runner (vmm/slo, tests/slo). See docs/slo.md.
#
#   make test-slo    unit tests (percentiles, config errors, JUnit; the
#                    report checks of tests/slo/test_cases.py), then the case
#                    table tests/slo/cases.py (zstest.suite):
#                    tests/slo/example.toml through the runner: zerostart +
#                    probe on /dev/kvm and Debian's kernel under QEMU TCG;
#                    checks report.json, junit.xml and chart.png, and that
#                    an SLO that cannot hold exits non-zero (about 1 min);
#                    tests/slo/pool.toml (zerostart on a pool) and
#                    tests/slo/launch.toml (QEMU TCG + OVMF through
#                    `zerostart launch` on the same pool, ~15 s);
#                    then tests/slo/nested.toml through the nested test host
#                    (zerostart booting Linux on real KVM in L2, ~1 min)
#   make slo SLO_CONFIG=path.toml   run any config; reports in target/slo
#
# make builds everything (zerostart, the runner, the probe, the Linux guest of
# tests/slo/prepare.sh, the firmware) and runs the nested harness; the runner
# runs no script under tests/ (a nested scenario reads the harness's report).
# The 2M hugepages of the hugetlb scenario and the pool are reserved per
# case by zstest.hugepages and given back when the suite ends.

TEST_TARGETS += test-slo
SLO_CONFIG ?= tests/slo/example.toml

.PHONY: test-slo slo slo-guest slo-nested

# The Linux guest of the example configs (Debian's kernel + busybox, cached).
slo-guest: deps
	bash tests/slo/prepare.sh

test-slo: deps zerostart-release slo-release probe slo-guest firmware
	$(call crate_tests,-p slo)
	python3 tests/slo/test_cases.py
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) SLO_BIN=$(SLO_RELEASE) ZEROSTART_FIRMWARE_DIR="$(FW_DIR)" python3 tests/slo/cases.py
	$(MAKE) --no-print-directory slo-nested
	jq -e '.scenarios | length > 0' target/slo-nested/report.json >/dev/null
	test -s target/slo-nested/junit.xml

slo: deps zerostart-release slo-release probe slo-guest
	ZEROSTART_BIN=$(ZEROSTART_RELEASE) $(SLO_RELEASE) --config $(SLO_CONFIG) --out target/slo

# SLOs through the nested test host (zerostart on real KVM inside L2): make
# runs the harness for tests/slo/nested.toml's scenario and repetitions
# (SLO_NESTED_SCENARIO, SLO_NESTED_REPS must match it), then the runner
# judges the report it wrote (a run the harness judged failed fails the SLO;
# a missing report fails every run). The runner runs whatever the harness's
# exit status, and that status is judged after it: a harness that failed
# (a fatal end, a scenario that never reported) fails the target with a FAIL
# line. Its summary, SKIP, FAIL and RETRY lines are echoed from its log, so
# make test counts its checks and lists its retries. The reports of an
# earlier run are deleted first: a stale nested-report.json is never judged.
SLO_NESTED_SCENARIO := zs-prezero-1g
SLO_NESTED_REPS := 2
SLO_NESTED_REPORT := target/slo-nested/nested-report.json
SLO_NESTED_LOG := $(SLO_NESTED_REPORT:.json=.log)
slo-nested: deps e2e-zerostart bed-qemu slo-release
	@mkdir -p $(dir $(SLO_NESTED_REPORT))
	rm -f $(SLO_NESTED_REPORT) $(SLO_NESTED_LOG) target/slo-nested/report.json target/slo-nested/junit.xml
	@e2e=0; python3 tests/nested-host/run.py e2e --zerostart $(ZEROSTART_STATIC) --only $(SLO_NESTED_SCENARIO) \
	  --repeat $(SLO_NESTED_REPS) --report $(SLO_NESTED_REPORT) > $(SLO_NESTED_LOG) 2>&1 || e2e=$$?; \
	grep -E '^(RETRY |SKIP |FAIL|e2e: [0-9]+ passed)' $(SLO_NESTED_LOG); \
	slo=0; $(SLO_RELEASE) --config tests/slo/nested.toml --out target/slo-nested || slo=$$?; \
	if [ $$e2e != 0 ]; then \
	  echo "FAIL slo-nested: the nested e2e harness exited $$e2e; read $(SLO_NESTED_LOG) for why (the SLOs above judged only what it reported)"; \
	fi; \
	[ $$e2e = 0 ] && [ $$slo = 0 ]
