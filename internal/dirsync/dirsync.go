// Package dirsync makes a directory's entries durable. A file's fsync
// covers its data, not its name: after a file is created, renamed or
// removed, the directory that holds the name must itself be synced for the
// change to survive a crash (fsync(2), "Calling fsync() does not
// necessarily ensure that the entry in the directory containing the file
// has also reached disk").
package dirsync

import (
	"errors"

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
