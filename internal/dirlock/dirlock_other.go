//go:build !unix

package dirlock

import (
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Lock is vfs.Default's lock where fcntl locks do not exist.
func Lock(name string) (io.Closer, error) { return vfs.Default.Lock(name) }
