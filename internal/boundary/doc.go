// Package boundary checks the dependency rules of CONTRIBUTING.md and
// DESIGN.md §7: the core packages primary, archive and outbox never import
// telemetry, cli, the Prometheus client, or the OpenTelemetry SDK and
// exporters. They use only the OpenTelemetry API, with providers passed in.
//
// The rule binds riffdb's own code, transitively: no riffdb package that a
// core package depends on (the core package included) may import a forbidden
// package, so moving a forbidden import into a helper package does not hide
// it. Third-party dependencies are outside the rule: Pebble itself imports
// client_golang for its latency histograms, which registers nothing.
// Test files are outside it too; tests may read metrics through the SDK.
//
// This package's test asks the go command for each core package's dependency
// graph (go list -deps), so `go test ./...` fails as soon as a forbidden
// import appears.
package boundary
