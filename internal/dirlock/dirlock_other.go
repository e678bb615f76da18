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
