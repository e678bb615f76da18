package backup_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/riffdb/riffdb/backup"
)

// TestRestoredFilesArePrivate: a restore run under a umask of 022 (a
// shell's usual one; the server runs with 077) leaves every file of the
// restored database and under backup_root 0600 and every directory 0700,
// the files the storage engine writes when the copy is stamped included.
// Not parallel: the umask is the process's.
func TestRestoredFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o077) // the server's, which made the database and the backup
	defer syscall.Umask(old)
	e, m := backedUp(t, 3, 2)
	syscall.Umask(0o022)
	if _, err := backup.Restore(context.Background(), e.request(m.Name)); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{e.opts.Path, e.root} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			want := fs.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			if fi.Mode().Perm() != want {
				rel, _ := filepath.Rel(filepath.Dir(dir), p)
				t.Errorf("%s: mode %v, want %v", rel, fi.Mode().Perm(), want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
