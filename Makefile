# riffdb — run `make help` for the targets.
GO ?= go
PKGS ?= ./...

.PHONY: help run test deps lint unit race bench loadtest clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

run: ## run the server on the embedded default configuration (data in ./riffdb-dev)
	$(GO) run ./cmd/riffdb server run --dev

test: deps lint unit race ## the whole suite: install test tools, lint, tests, race tests (what CI runs)

deps: ## install what the tests need (promtool, staticcheck) when missing
	./scripts/install-test-deps.sh

lint: ## gofmt, go vet, staticcheck, cross-platform build, go mod tidy check
	./scripts/lint.sh

unit: ## go test ./... (unit, property, crash, fuzz-seed and end-to-end tests)
	$(GO) test -count=1 -timeout 20m $(PKGS)

race: ## go test -race ./... (the end-to-end tests drive a binary built without -race)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

bench: ## benchmarks with their same-run baselines (raw fdatasync, bare Pebble)
	./scripts/bench.sh

loadtest: ## traced load against a running dev server (start `make run` first)
	$(GO) run ./cmd/riffdb loadtest --token-file riffdb-dev/dev-token --rate 500 --duration 10s

clean: ## remove build and dev-run outputs
	rm -rf bin riffdb-dev
