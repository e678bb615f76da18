// Package dashboards holds riffdb's Prometheus recording and alerting rules
// (riffdb-rules.yml) and their promtool unit tests (riffdb-rules_test.yml).
//
// The package has no Go API: its tests run `promtool check rules` and
// `promtool test rules` on the files, prove by mutation that every rule is
// covered by a unit test that fails when the rule stops matching, and check
// that every series a rule reads is documented in docs/metrics.md. The
// end-to-end test e2e/metrics_test.go closes the loop by checking that every
// documented contract series is served by the running binary, so the rules,
// the reference and the code cannot drift apart unnoticed.
//
// The tests skip, naming the missing tool, when promtool is not on PATH
// (Debian: apt-get install prometheus; scripts/install-test-deps.sh does it).
package dashboards
