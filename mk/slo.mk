# The boot-time SLO runner (vmm/slo, tests/slo). See docs/slo.md.
#
#   make test-slo    unit tests (percentiles, config errors, JUnit), then
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

TEST_TARGETS += test-slo
SLO_CONFIG ?= tests/slo/example.toml

.PHONY: test-slo slo

test-slo: deps vmm-static firmware
	$(CARGO) test --locked -p slo
	bash tests/slo/run.sh
	$(MAKE) --no-print-directory slo-nested
	jq -e '.scenarios | length > 0' target/slo-nested/report.json >/dev/null
	test -s target/slo-nested/junit.xml

slo: deps
	$(CARGO) build --release --locked -p zerostart -p slo
	bash tests/probe/build.sh
	bash tests/slo/prepare.sh
	ZEROSTART_BIN=$${CARGO_TARGET_DIR:-target}/release/zerostart \
	  $${CARGO_TARGET_DIR:-target}/release/zerostart-slo --config $(SLO_CONFIG) --out target/slo

# SLOs through the nested test host (zerostart on real KVM inside L2; the
# static binary and the L2 image come from `make vmm-static` / e2e's cache).
.PHONY: slo-nested
slo-nested: deps vmm-static
	$(CARGO) build --release --locked -p slo
	$${CARGO_TARGET_DIR:-target}/release/zerostart-slo --config tests/slo/nested.toml --out target/slo-nested
