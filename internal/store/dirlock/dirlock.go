// Package dirlock takes a Pebble store's directory lock without touching the
// lock file, and in a way that no other descriptor of the file can drop.
//
// Pebble's own vfs.Default.Lock opens LOCK with O_CREATE|O_TRUNC, so every
// attempt, even one that then fails because another process holds the
// lock, bumps LOCK's mtime. A store that riffdb refuses to open must be left
// exactly as it was, so riffdb opens LOCK without O_TRUNC.
//
// Pebble takes a POSIX record lock (fcntl F_SETLK). Such a lock belongs to
// the process, and the kernel drops it when the process closes any
// descriptor of the file: a restore that checksummed the directory it
// replaces (open LOCK, read, close) released its own lock, and a server
// started in that window acknowledged commands into a store the restore then
// moved aside. On Linux this package therefore takes an open file
// description lock (F_OFD_SETLK) instead: it belongs to the one open file
// description, survives the closing of every other descriptor, and
// conflicts with Pebble's record locks, so a Pebble process and a riffdb
// process still exclude each other. Other Unix systems keep the record lock.
//
// The rule that goes with it: nothing in riffdb opens a LOCK file it holds
// except through the held descriptor (ReadHeld). The price of a lock that
// belongs to a descriptor: a child process holds copies of the parent's
// descriptors from its fork until its exec closes them (O_CLOEXEC), and the
// lock lasts as long as any copy. riffdb starts no child process, but its
// tests do; so a lock that is held is tried again for up to 100 ms before
// it is reported busy. Like Pebble, the package
// keeps a table of the files this process holds, so a second Lock of a held
// file in the same process fails at once with ErrHeld.
package dirlock

import (
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrHeld is returned by Lock when this process already holds the lock. Its
// text is Pebble's, so callers that recognise Pebble's error recognise it.
var ErrHeld = errors.New("lock held by current process")

// FS returns fs with its Lock replaced by this package's when fs is the real
// filesystem (vfs.Default); any other filesystem is returned as it is.
func FS(fs vfs.FS) vfs.FS {
	if fs != vfs.Default {
		return fs
	}
	return lockFS{FS: fs}
}

// ReadOnlyFS returns fs with its Lock replaced by LockExisting when fs is
// the real filesystem (vfs.Default): a reader that must create nothing takes
// the lock of an existing LOCK file or fails. Any other filesystem is
// returned as it is.
func ReadOnlyFS(fs vfs.FS) vfs.FS {
	if fs != vfs.Default {
		return fs
	}
	return lockFS{FS: fs, existing: true}
}

type lockFS struct {
	vfs.FS
	existing bool
}

// Lock implements vfs.FS.
func (l lockFS) Lock(name string) (io.Closer, error) {
	if l.existing {
		return LockExisting(name)
	}
	return Lock(name)
}

// Unwrap implements vfs.FS.
func (l lockFS) Unwrap() vfs.FS { return l.FS }
