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
//
// # The house rules
//
// The same test run also holds every production (non-_test) Go file of the
// module to the house rules (HouseFile), so that `make test` fails on a
// breach and its message says what to do:
//
//   - at most MaxLines lines, unless the file is generated or listed in
//     LongFiles with a reason;
//   - no errors.Unwrap, and no *fs.PathError, *os.PathError or
//     *os.LinkError (type assertions, type switches, errors.As targets)
//     outside internal/hygiene/pathless, which is where errors lose their paths;
//   - the delivery vocabulary (deliverytype) imports only the standard
//     library, from the day it exists;
//   - no internal package imports a domain package (Domain), unless the
//     import is listed in InternalImports with a reason.
//
// Allowlist entries are temporary: an entry that no file needs any more
// fails the test too, so that it is removed.
package boundary
