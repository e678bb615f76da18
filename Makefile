# riffdb — run `make help` for the targets.
GO ?= go
PKGS ?= ./...
# The race pass leaves out ./e2e: its tests drive a binary built without
# -race, so a second run there would repeat `unit` and prove nothing new.
# It runs the fast tier (-short): the campaigns run once, in unit. Neither
# pass runs go test's vet subset: lint's go vet ./... covers the same files
# with every analyzer. Test binaries are linked without DWARF (-ldflags=-w):
# panics and race reports still carry function, file and line (those come
# from the pclntab), and each link costs about a third less CPU.
TESTFLAGS ?= -vet=off -ldflags=-w
# It also leaves out RACE_SKIP: packages whose fast tier starts no goroutine
# and imports nothing that does (generators, codecs, source checks), where
# the race detector has nothing to report; internal/testsupport/boundary's
# TestRaceSkipRunsNoGoroutines holds every file of them to that.
RACE_SKIP ?= bench/cmd/benchreport dashboards dashboards/gen dashboards/cmd/gendashboards \
	deliverytype internal/hygiene/alias internal/hygiene/pathless internal/hygiene/strictjson \
	internal/observe/promtext internal/store/pace internal/testsupport/treestate \
	internal/testsupport/boundary internal/testsupport/securitydoc internal/tools/crosscheck
RACE_PKGS ?= $(shell $(GO) list $(PKGS) | grep -vxF $(addprefix -e github.com/riffdb/riffdb/,e2e $(RACE_SKIP)))

.PHONY: help run test check deps lint unit race bench bench-startup-10m drain-chain abdrain abcommands soak inspect-steps dashboards loadtest reliability e2e-tracing clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## run the server on the embedded default configuration (data in ./riffdb-dev)
	$(GO) run ./cmd/riffdb server run --dev

test: deps lint unit race ## the whole suite: install test tools, lint, tests, race tests (what CI runs)

check: ## the fast tier while working: go vet and go test -short ./... (skips the campaigns, live Prometheus and multi-second end-to-end scenarios)
	$(GO) vet $(PKGS)
	$(GO) test -short -ldflags=-w $(PKGS)

deps: ## install what the tests need (promtool, staticcheck) when missing
	./scripts/install-test-deps.sh

lint: ## gofmt, go vet, staticcheck, darwin and windows type check, go mod tidy check
	./scripts/lint.sh

unit: ## go test ./... (unit, property, crash, fuzz-seed and end-to-end tests); prints the damage matrix and the live Prometheus table
	@mkdir -p bin && rm -f bin/damage-matrix.md bin/prometheus-live.txt
	RIFFDB_DAMAGE_REPORT=$(CURDIR)/bin/damage-matrix.md RIFFDB_PROMETHEUS_REPORT=$(CURDIR)/bin/prometheus-live.txt $(GO) test -count=1 $(TESTFLAGS) -timeout 20m $(PKGS)
	@if [ -s bin/damage-matrix.md ]; then echo "== damage matrix (e2e TestDamageMatrix): every file of every store damaged, inspected and started =="; cat bin/damage-matrix.md; fi
	@if [ -s bin/prometheus-live.txt ]; then echo "== live Prometheus (e2e TestPrometheusEvaluatesDashboardsAndAlerts): every recording rule and panel query, phase and series =="; cat bin/prometheus-live.txt; fi

race: ## go test -race -short over every package but ./e2e and RACE_SKIP (the campaigns and ./e2e run once, in unit)
	$(GO) test -race -short -count=1 $(TESTFLAGS) -timeout 20m $(RACE_PKGS)

bench: ## benchmarks with their same-run baselines (raw fdatasync, bare Pebble, N raw writers), then the soak's 5-minute form (SOAK=0 skips it)
	./scripts/bench.sh

bench-startup-10m: ## process start to first delivery with a 10,000,000-record archive against a 10,000-record one (about 5 min, 11 GB of disk)
	RIFFDB_STARTUP_RECORDS=10000000 $(GO) test -run '^$$' -bench '^BenchmarkStartup$$' -benchtime 15x -timeout 0 ./bench/

drain-chain: ## where each database's delivery time goes while N drain at once, from execution traces (N=4, RUNS=3 by default)
	./scripts/drain-chain.sh

abdrain: ## the tmpfs drain of the working tree against the commit BASE, in alternated pairs, with the paired difference and its standard error (PAIRS=10 by default)
	./scripts/abdrain.sh "$(BASE)" $(or $(PAIRS),10)

abcommands: ## the server CPU per command of the working tree against the commit BASE, both servers at once on tmpfs, with the mean difference and its standard error (ROUNDS=10 by default)
	./scripts/abcommands.sh "$(BASE)" $(or $(ROUNDS),10)

soak: ## the soak: the real binary at half its drain rate for 60 minutes (SOAK=5m for the short form); CSV and SVG in bench/results/
	./scripts/soak.sh

dashboards: ## regenerate the Grafana dashboards (dashboards/*.json) from dashboards/gen
	$(GO) run ./dashboards/cmd/gendashboards

inspect-steps: ## a 1,000,000-record archive reconciled by `inspect --after` in steps of 256 pages, each step's peak RSS against a 10,000-record one-shot inspect
	./scripts/inspect-steps.sh

# The reliability campaign: RELIABILITY_KILLS SIGKILLs of the real binary
# (e2e TestReliability), crash points inside the worker and archive faults
# (delivery TestReliability*), the outbox crash tests and the damage matrix
# (e2e TestDamageMatrix). It rewrites docs/reliability.md; the ordinary suite
# runs the same tests with 25 kills and writes nothing.
RELIABILITY_KILLS ?= 200
RELIABILITY_TESTS ?= TestReliability|TestDamageMatrix|TestCrashReplayIsAcceptedOnce|TestPassEndMakesCompletionsDurable|TestFlushBefore

reliability: ## the reliability campaign (200 SIGKILLs, crash points, archive faults, damage matrix); rewrites docs/reliability.md
	@mkdir -p bin/reliability
	RIFFDB_RELIABILITY_KILLS=$(RELIABILITY_KILLS) \
	RIFFDB_RELIABILITY_REPORT=$(CURDIR)/docs/reliability.md \
	RIFFDB_RELIABILITY_COMMIT=$${RIFFDB_RELIABILITY_COMMIT:-$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)} \
	RIFFDB_DAMAGE_REPORT=$(CURDIR)/bin/reliability/damage-matrix.md \
	$(GO) test ./e2e ./delivery ./outbox -run '$(RELIABILITY_TESTS)' -count=1 -timeout 60m -v -p 1; \
	status=$$?; ./scripts/reliability-report.sh docs/reliability.md bin/reliability/damage-matrix.md; exit $$status

loadtest: ## traced load against a running dev server (start `make run` first)
	$(GO) run ./cmd/riffdb loadtest --token-file riffdb-dev/dev-token --rate 500 --duration 10s

e2e-tracing: ## opt-in: build Jaeger v1.76.0 (tools/jaeger; ~8 min once, cached in bin/), trace the server and a loadtest into it, check the traces via its query API
	./scripts/e2e-tracing.sh

clean: ## remove build and dev-run outputs
	rm -rf bin riffdb-dev
