package archive

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/testsupport/crashfs"
)

// heldSyncs is a filesystem whose write-ahead log syncs, once held is set,
// wait until released (or fail with EIO when fail is set): a disk whose
// fdatasync has not returned yet.
type heldSyncs struct {
	vfs.FS
	held, fail atomic.Bool
	waiting    atomic.Int32
	mu         sync.Mutex
	release    chan struct{}
}

func newHeldSyncs(fs vfs.FS) *heldSyncs { return &heldSyncs{FS: fs, release: make(chan struct{})} }

func (h *heldSyncs) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return heldFile{File: f, h: h}, nil
}

func (h *heldSyncs) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := h.FS.Create(name, c)
	return h.wrap(name, f, err)
}

func (h *heldSyncs) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := h.FS.ReuseForWrite(oldname, newname, c)
	return h.wrap(newname, f, err)
}

// unhold lets every held sync, and every later one, go on.
func (h *heldSyncs) unhold() {
	h.held.Store(false)
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

type heldFile struct {
	vfs.File
	h *heldSyncs
}

func (f heldFile) wait() error {
	if f.h.held.Load() {
		f.h.waiting.Add(1)
		<-f.h.release
	}
	if f.h.fail.Load() {
		return syscall.EIO
	}
	return nil
}

func (f heldFile) Sync() error {
	if err := f.wait(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f heldFile) SyncData() error {
	if err := f.wait(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f heldFile) SyncTo(length int64) (bool, error) {
	if err := f.wait(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// openHeld opens a store on a crashable filesystem whose log syncs are
// held from then on (heldSyncs).
func openHeld(t *testing.T) (*crashfs.FS, *heldSyncs, *Store) {
	mem := crashfs.New()
	prepareArchiveDir(t, mem)
	h := newHeldSyncs(mem)
	s := mustOpen(t, testOptions(t, h))
	t.Cleanup(h.unhold) // before the store's Close (cleanups run last first)
	h.held.Store(true)
	return mem, h, s
}

// TestApplyDoesNotWaitAndDurableDoes: Apply returns while the log's sync
// has not returned, and a crash then loses what it applied, accounting and
// all; Durable waits for the sync, and after it a crash loses nothing.
func TestApplyDoesNotWaitAndDurableDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, h, s := openHeld(t)
	for i := uint64(1); i <= 3; i++ {
		k, r := rec(t, testDatabase, i, 0, "payload")
		if out, err := s.Apply(ctx, k, r); err != nil || out != deliverytype.Stored {
			t.Fatalf("Apply(%d) = %v, %v while the log's sync is held", i, out, err)
		}
	}
	// The same key again is a Duplicate of what was applied.
	k, r := rec(t, testDatabase, 2, 0, "payload")
	if out, err := s.Apply(ctx, k, r); err != nil || out != deliverytype.Duplicate {
		t.Fatalf("Apply of an applied key = %v, %v; want Duplicate", out, err)
	}
	if u := s.Usage(); u.Records != 3 {
		t.Fatalf("Usage after three applies: %+v", u)
	}
	done := make(chan error, 1)
	go func() { done <- s.Durable(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Durable returned (%v) while the log's sync was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	if h.waiting.Load() == 0 {
		t.Fatal("no sync of the log was held: the test proves nothing")
	}

	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	c := mustOpen(t, testOptions(t, crashed))
	if u := c.Usage(); u.Records != 0 || u.EncodedBytes != 0 {
		t.Fatalf("a crash before the sync kept %+v", u)
	}
	_ = c.Close()

	h.unhold()
	if err := <-done; err != nil {
		t.Fatalf("Durable: %v", err)
	}
	crashed = mem.CrashClone(vfs.CrashCloneCfg{})
	c = mustOpen(t, testOptions(t, crashed))
	if u := c.Usage(); u.Records != 3 {
		t.Fatalf("a crash after Durable kept %+v, want 3 records", u)
	}
	for i := uint64(1); i <= 3; i++ {
		k, r := rec(t, testDatabase, i, 0, "payload")
		mustAccept(t, c, k, r, deliverytype.Duplicate)
	}
	if err := s.Durable(ctx); err != nil {
		t.Fatalf("Durable with nothing applied: %v", err)
	}
}

// TestDurableFailsWhenTheSyncFails: a log sync that fails after Apply
// returned fails Durable with ErrUnavailable and leaves the store unusable,
// so that nothing applied since the last Durable is trusted.
func TestDurableFailsWhenTheSyncFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, h, s := openHeld(t)
	k, r := rec(t, testDatabase, 1, 0, "payload")
	if out, err := s.Apply(ctx, k, r); err != nil || out != deliverytype.Stored {
		t.Fatalf("Apply = %v, %v", out, err)
	}
	h.fail.Store(true)
	h.unhold()
	err := s.Durable(ctx)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Durable after a failed sync = %v, want ErrUnavailable", err)
	}
	if s.Unusable() == nil {
		t.Fatal("the store is usable after a failed sync")
	}
	k, r = rec(t, testDatabase, 2, 0, "payload")
	if _, err := s.Apply(ctx, k, r); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Apply after a failed sync = %v, want ErrUnavailable", err)
	}
}
