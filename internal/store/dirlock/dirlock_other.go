//go:build !unix

package dirlock

import (
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Lock is vfs.Default's lock where fcntl locks do not exist.
func Lock(name string) (io.Closer, error) { return vfs.Default.Lock(name) }

// LockExisting refuses a missing file (an error wrapping os.ErrNotExist),
// then takes vfs.Default's lock.
func LockExisting(name string) (io.Closer, error) {
	if _, err := os.Lstat(name); err != nil {
		return nil, err
	}
	return vfs.Default.Lock(name)
}

// ReadHeld reports ok false: this package keeps no table of held files
// where fcntl locks do not exist (the locks there are not dropped by the
// close of another handle).
func ReadHeld(name string) (r *io.SectionReader, ok bool, err error) { return nil, false, nil }
