package backup_test

import (
	"testing"

	"golang.org/x/sys/unix"
)

func statfsFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Frsize)
}
