// Package dirsync makes a directory's entries durable. A file's fsync
// covers its data, not its name: after a file is created, renamed or
// removed, the directory that holds the name must itself be synced for the
// change to survive a crash (fsync(2), "Calling fsync() does not
// necessarily ensure that the entry in the directory containing the file
// has also reached disk").
package dirsync

import (
	"errors"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Sync syncs the directory dir of fs. Callers that use the operating
// system's files pass vfs.Default.
func Sync(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// WriteFile replaces dir/name with data atomically and durably: data goes
// into a new dir/name.tmp (created 0600; one an interrupted write left is
// removed first), which is synced, renamed over dir/name, and the directory is synced.
// A crash leaves either the old file or the new one, and at most a
// temporary file that the next WriteFile replaces. On an error the
// temporary file is removed; the error names the step and keeps the
// filesystem's error, which may hold a path (callers strip it at their
// output, internal/hygiene/pathless).
func WriteFile(fs vfs.FS, dir, name string, data []byte) error {
	tmp := fs.PathJoin(dir, name+".tmp")
	if err := fs.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := create(fs, tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	if err := fs.Rename(tmp, fs.PathJoin(dir, name)); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	return Sync(fs, dir)
}

// create creates name for writing: on the operating system's files with
// mode 0600 exactly, whatever the umask (a umask of 0277 would otherwise
// leave 0400, which a store that checks its files' modes refuses);
// elsewhere as fs creates.
func create(fs vfs.FS, name string) (interface {
	Write([]byte) (int, error)
	Sync() error
	Close() error
}, error) {
	if fs != vfs.Default {
		return fs.Create(name, vfs.WriteCategoryUnspecified)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		_ = os.Remove(name)
		return nil, err
	}
	return f, nil
}
