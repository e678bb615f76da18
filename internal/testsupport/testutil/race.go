package testutil

import "testing"

// SkipUnderRace skips a test that counts allocations when the race detector
// is on (RaceEnabled): it allocates on its own account. make unit runs such
// tests without it.
func SkipUnderRace(t testing.TB) {
	t.Helper()
	if RaceEnabled {
		t.Skip("the race detector allocates on its own account; make unit runs this test without it")
	}
}
