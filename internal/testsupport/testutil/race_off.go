//go:build !race

package testutil

// RaceEnabled reports whether the build runs under the race detector, which
// allocates on its own account: allocation-count tests skip under it.
const RaceEnabled = false
