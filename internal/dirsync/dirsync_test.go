package dirsync_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/dirsync"
)

// TestSyncKeepsANewNameAcrossACrash creates a synced file in a synced
// directory, and a second synced file whose directory is synced only by
// Sync: after a crash that keeps exactly what was synced, both names are
// there only when Sync synced the directory.
func TestSyncKeepsANewNameAcrossACrash(t *testing.T) {
	for _, sync := range []bool{false, true} {
		mem := vfs.NewCrashableMem()
		if err := mem.MkdirAll("/d", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := dirsync.Sync(mem, "/"); err != nil {
			t.Fatal(err)
		}
		f, err := mem.Create("/d/f", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := dirsync.Sync(mem, "/d"); err != nil {
				t.Fatal(err)
			}
		}
		crashed := mem.CrashClone(vfs.CrashCloneCfg{})
		_, err = crashed.Stat("/d/f")
		switch {
		case sync && err != nil:
			t.Fatalf("after Sync the name was lost in a crash: %v", err)
		case !sync && !errors.Is(err, fs.ErrNotExist):
			t.Fatalf("without Sync the crash kept the name (err %v): the test cannot tell Sync's effect", err)
		}
	}
}

// TestSyncReportsAMissingDirectory: a directory that is not there is an
// error, not a silent success.
func TestSyncReportsAMissingDirectory(t *testing.T) {
	if err := dirsync.Sync(vfs.NewMem(), "/nowhere"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sync of a missing directory = %v, want ErrNotExist", err)
	}
}
