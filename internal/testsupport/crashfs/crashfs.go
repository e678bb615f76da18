// Package crashfs wraps Pebble's crashable in-memory filesystem for crash
// tests that take a crash clone while the store is working.
//
// vfs.MemFS guards its tree with a clone mutex: modifications read-lock it
// and CrashClone write-locks it. ReuseForWrite (WAL recycling) and Link
// read-lock it and then call a method that read-locks it again. A
// CrashClone that asks for the write lock between the two waits for the
// first read lock, while the second waits behind it: the test hangs (seen
// about once in 15 to 45 runs of a crash test that clones from inside a
// write operation). FS serializes CrashClone with those two calls.
//
// Wrap the errorfs injector around FS, not the other way round, so that an
// injector taking a clone runs before FS's lock is taken.
package crashfs

import (
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is a crashable vfs.MemFS whose CrashClone never deadlocks with WAL
// reuse or links.
type FS struct {
	*vfs.MemFS
	mu sync.RWMutex // write: CrashClone; read: ReuseForWrite, Link
}

// New returns an empty crashable filesystem.
func New() *FS { return &FS{MemFS: vfs.NewCrashableMem()} }

// ReuseForWrite implements vfs.FS.
func (f *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.MemFS.ReuseForWrite(oldname, newname, category)
}

// Link implements vfs.FS.
func (f *FS) Link(oldname, newname string) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.MemFS.Link(oldname, newname)
}

// CrashClone returns the filesystem as a crash would leave it (see
// vfs.MemFS.CrashClone).
func (f *FS) CrashClone(cfg vfs.CrashCloneCfg) *vfs.MemFS {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.MemFS.CrashClone(cfg)
}
