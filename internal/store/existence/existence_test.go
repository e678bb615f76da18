package existence_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/internal/store/existence"
)

func write(t *testing.T, fs vfs.FS, name string, b []byte) {
	t.Helper()
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNeverCommitted(t *testing.T) {
	fs := vfs.NewMem()
	check := func(want bool) {
		t.Helper()
		got, err := existence.NeverCommitted(fs, "/d")
		if err != nil || got != want {
			t.Fatalf("NeverCommitted = %v, %v; want %v", got, err, want)
		}
	}
	check(true) // missing directory
	if err := fs.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	check(true)
	write(t, fs, "/d/000002.log", make([]byte, 4096)) // preallocated, zero-filled
	write(t, fs, "/d/MANIFEST-000001", []byte("x"))
	check(true)
	write(t, fs, "/d/000003.log", []byte{0, 0, 1})
	check(false)
	if err := fs.Remove("/d/000003.log"); err != nil {
		t.Fatal(err)
	}
	write(t, fs, "/d/000004.sst", nil)
	check(false)
}

// TestNewStoreIsFreshUntilItsFirstWrite pins the argument on Pebble itself:
// a store Pebble has just created holds no committed write, and the first
// synced write makes the directory non-fresh.
func TestNewStoreIsFreshUntilItsFirstWrite(t *testing.T) {
	fs := vfs.NewMem()
	db, err := pebble.Open("/d", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatValueSeparation})
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err := existence.NeverCommitted(fs, "/d"); err != nil || !fresh {
		t.Fatalf("after creation: %v, %v", fresh, err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if fresh, err := existence.NeverCommitted(fs, "/d"); err != nil || fresh {
		t.Fatalf("after a synced write: %v, %v", fresh, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := existence.Reset(fs, "/d", "LOCK"); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.List("/d"); len(names) != 1 || names[0] != "LOCK" {
		t.Fatalf("after Reset: %v", names)
	}
}
