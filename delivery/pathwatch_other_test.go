//go:build !linux

package delivery

import "testing"

// skipUnlessPathWatchable skips: the archive watches paths on Linux only.
func skipUnlessPathWatchable(t *testing.T, dir string) {
	t.Helper()
	t.Skip("the archive watches its path on Linux only")
}
