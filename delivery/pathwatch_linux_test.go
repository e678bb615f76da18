//go:build linux

package delivery

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// skipUnlessPathWatchable skips a test of the path's watch when a directory
// on dir's path is on a filesystem the archive's watch does not trust (the
// types of archive's watchable): there every audit opens the path.
func skipUnlessPathWatchable(t *testing.T, dir string) {
	t.Helper()
	for d := dir; ; d = filepath.Dir(d) {
		var fs unix.Statfs_t
		if err := unix.Statfs(d, &fs); err != nil {
			t.Fatal(err)
		}
		switch uint32(fs.Type) {
		case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.F2FS_SUPER_MAGIC, 0x2fc12fc1:
		default:
			t.Skipf("a directory on the test directory's path is on a filesystem (f_type %#x) the archive's watch does not trust", fs.Type)
		}
		if d == "/" {
			return
		}
	}
}
