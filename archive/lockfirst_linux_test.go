package archive_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/internal/testsupport/treestate"
)

// TestOpenLocksBeforeReset: a store directory that provably never held a
// write (no floor file, no table, an all-zero WAL: an interrupted first
// start) is reset and created again, but only under the store's lock. While
// another holder has the lock, Open reports ErrBusy and touches nothing.
// Before, Open reset the directory first (removing the held LOCK with the
// rest) and then took a lock on a new LOCK file: two owners of one store.
//
// The other holder is an open file description lock on its own descriptor
// of LOCK, which conflicts with this process's own lock exactly as another
// process's would (internal/store/dirlock).
func TestOpenLocksBeforeReset(t *testing.T) {
	dir := privateDir(t)
	store := filepath.Join(dir, archive.StoreDirName)
	must(t, os.Mkdir(store, 0o700))
	for name, b := range map[string][]byte{
		"LOCK":            nil,
		"000002.log":      make([]byte, 4096),
		"MANIFEST-000001": []byte("an interrupted creation's manifest"),
		"OPTIONS-000003":  []byte("[Version]\n"),
	} {
		must(t, os.WriteFile(filepath.Join(store, name), b, 0o600))
	}
	f, err := os.OpenFile(filepath.Join(store, "LOCK"), os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	must(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk))

	before := treestate.MustTake(t, dir)
	opts := archive.Options{Database: db, QuotaEncodedBytes: 1 << 20, MinFreeBytes: -1}
	s, err := archive.Open(context.Background(), dir, opts)
	if err == nil {
		_ = s.Close()
	}
	if !errors.Is(err, archive.ErrBusy) {
		t.Errorf("Open while another holder has the lock = %v, want ErrBusy", err)
	}
	if d := diffTree(t, dir, before); d != nil {
		t.Fatalf("the store was touched while another holder had its lock: %q", d)
	}

	// Released, the interrupted creation is started over.
	lk.Type = unix.F_UNLCK
	must(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk))
	s, err = archive.Open(context.Background(), dir, opts)
	must(t, err)
	must(t, s.Close())
	storeFiles(t, dir, "marker.manifest.*") // created
	if b, err := os.ReadFile(filepath.Join(store, "MANIFEST-000001")); err != nil || string(b) == "an interrupted creation's manifest" {
		t.Fatalf("the leftovers of the interrupted creation were kept (%v)", err)
	}
}
