//go:build race

package server

// raceEnabled reports whether the tests run under the race detector, which
// allocates on its own account (TestHTTPTelemetryAllocations).
const raceEnabled = true
