//go:build linux

package archive

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// storeInstance returns what identifies this store instance on the real
// filesystem: the inode number of the store directory and, where the
// filesystem records it, its birth time in nanoseconds. Both are fixed when
// Open creates the directory and never change afterwards (nothing renames or
// recreates it), while a copy of the archive, or an archive created again in
// the same place, gets another inode or another birth time. It reads the
// directory's metadata only (statx, no open).
func storeInstance(storeDir string) ([]byte, error) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, storeDir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME, &sx); err != nil {
		return nil, fmt.Errorf("archive: cannot stat the store directory: %w", err)
	}
	b := binary.BigEndian.AppendUint64(nil, sx.Ino)
	if sx.Mask&unix.STATX_BTIME != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(sx.Btime.Sec))
		b = binary.BigEndian.AppendUint32(b, sx.Btime.Nsec)
	}
	return b, nil
}
