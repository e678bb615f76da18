//go:build !linux

package archive

import (
	"errors"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// StoreDirName is the only entry allowed in the configured outbox directory.
const StoreDirName = "archive.pebble"

// ErrCustody marks every custody violation (symlink, owner, mode, extra entry,
// link count, file type). The outbox worker classifies it as destination
// refusal. Messages wrapping it name what is wrong but never a path or a file
// name.
var ErrCustody = errors.New("archive: custody violation")

// ErrUnsupportedPlatform is returned by everything on a non-Linux platform.
var ErrUnsupportedPlatform = errors.New("archive: this implementation requires Linux")

// Audit always fails with ErrUnsupportedPlatform: custody checks need Linux.
func Audit(dir string) (storeExists bool, err error) {
	return false, ErrUnsupportedPlatform
}

// auditResult is what a passing audit saw (see the Linux implementation).
type auditResult struct {
	exists    bool
	allocated int64
}

// audit always fails with ErrUnsupportedPlatform.
func audit(dir string) (auditResult, error) {
	return auditResult{}, ErrUnsupportedPlatform
}

// newCustodyFS returns fs unchanged: the archive refuses non-Linux platforms
// before it opens a store.
func newCustodyFS(fs vfs.FS) vfs.FS { return fs }

// allocatedBytes always fails with ErrUnsupportedPlatform.
func allocatedBytes(storeDir string) (int64, error) {
	return 0, ErrUnsupportedPlatform
}

// PathWatchable is false: there is no watch.
func PathWatchable(dir string) bool { return false }

// directoryHeld cannot tell: there is no watch.
func directoryHeld(fs vfs.FS, dir string, fi os.FileInfo) bool { return false }

// auditOpen always fails with ErrUnsupportedPlatform.
func auditOpen(fs vfs.FS, dir string) (storeExists bool, err error) {
	return false, ErrUnsupportedPlatform
}

// prearmOpen has nothing to arm: the archive refuses non-Linux platforms
// before it opens a store.
func prearmOpen(fs vfs.FS, dir string) (release func()) { return func() {} }
