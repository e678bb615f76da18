// Package dashboards holds riffdb's Grafana dashboards (riffdb-*.json), its
// Prometheus recording and alerting rules (riffdb-rules.yml) and their
// promtool unit tests (riffdb-rules_test.yml). README.md says what each
// dashboard is for and how to import the dashboards and load the rules.
//
// The dashboards are generated from Go by package dashboards/gen with the
// Grafana Foundation SDK; the JSON is checked in so it can be imported
// without building anything. After changing a dashboard in gen, regenerate
// the JSON and commit both:
//
//	go run ./dashboards/cmd/gendashboards   # from the repository root
//	go generate ./dashboards                # the same
//
// The package has no Go API. Its tests check that the checked-in JSON is
// exactly what the generator produces (TestDashboardsMatchGenerator); that
// every panel has a description asking the question it answers and naming
// the alerts that relate to it, all defined in riffdb-rules.yml; that every
// panel query follows the variable conventions, parses as PromQL (through
// `promtool check rules`) and reads only series docs/metrics.md documents (or
// the go_* and process_* collectors); that `promtool check rules` and
// `promtool test rules` pass; that every rule is covered by a unit test that
// fails when the rule stops matching (by mutation); and that every series a
// rule reads is documented. The end-to-end tests close the loop against the
// running binary: e2e/metrics_test.go checks that every documented contract
// series is served, and e2e/prometheus_test.go evaluates every panel query
// and rule in a real Prometheus scraping riffdb under load and induced
// faults. No test needs Grafana, which is not a dependency.
//
// The tests that run promtool skip, naming the missing tool, when promtool is
// not on PATH (Debian: apt-get install prometheus;
// scripts/install-test-deps.sh does it).
package dashboards

//go:generate go run ./cmd/gendashboards -dir .
