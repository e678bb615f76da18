package testutil

import (
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SlowTables is a Pebble filesystem that waits Delay before it creates a
// table file (*.sst): a store on it flushes and compacts slowly, so that
// writes faster than that make Pebble stall them.
type SlowTables struct {
	vfs.FS
	Delay time.Duration
}

// Create implements vfs.FS.
func (f SlowTables) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		time.Sleep(f.Delay)
	}
	return f.FS.Create(name, cat)
}
