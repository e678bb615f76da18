//go:build linux

package backup

import (
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

// freeBytes returns the bytes free for an unprivileged user (f_bavail
// blocks of f_frsize bytes) on the filesystem holding dir. The error names
// no path.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, pathless.Error(&os.PathError{Op: "statfs", Path: dir, Err: err})
	}
	bsize := uint64(st.Frsize)
	if st.Frsize <= 0 {
		bsize = uint64(max(st.Bsize, 0))
	}
	if bsize != 0 && st.Bavail > math.MaxInt64/bsize {
		return math.MaxInt64, nil
	}
	return int64(st.Bavail * bsize), nil
}
