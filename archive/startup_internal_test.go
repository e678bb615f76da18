//go:build linux

package archive

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestAuditMeasuresAllocated: the custody audit's pass over the store's
// files also sums their allocated bytes, the measure allocatedBytes takes
// on its own; a directory without a store measures nothing, and a custody
// violation still fails the audit.
func TestAuditMeasuresAllocated(t *testing.T) {
	t.Parallel()
	dir := bulkDir(t)
	a, err := audit(dir)
	if err != nil || a.exists || a.allocated != 0 {
		t.Fatalf("audit(empty) = %+v, %v; want no store, 0 bytes", a, err)
	}
	bulkLoad(t, dir, testDatabase, 2000, bulkPayload)
	store := filepath.Join(dir, StoreDirName)
	want, err := allocatedBytes(store)
	if err != nil {
		t.Fatal(err)
	}
	a, err = audit(dir)
	if err != nil || !a.exists || a.allocated != want || want <= 0 {
		t.Fatalf("audit(store) = %+v, %v; want the store and its %d allocated bytes", a, err, want)
	}
	if err := os.WriteFile(filepath.Join(store, "extra"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := audit(dir); !errors.Is(err, ErrCustody) {
		t.Fatalf("audit(store with a 0644 file) = %v, want ErrCustody", err)
	}
}

// TestOpenTakesAllocatedFromAudit: Open of an existing store on the real
// filesystem serves the allocated bytes its custody audit measured (the
// store's files before Pebble's open added its new log and manifest)
// instead of stating every file a second time, and they are measured again
// in the background once AllocatedRefresh has passed, like any other
// measure.
func TestOpenTakesAllocatedFromAudit(t *testing.T) {
	t.Parallel()
	dir := bulkDir(t)
	bulkLoad(t, dir, testDatabase, 2000, bulkPayload)
	store := filepath.Join(dir, StoreDirName)
	before, err := allocatedBytes(store)
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	m := new(Monitor)
	s, err := Open(context.Background(), dir, Options{
		Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1, Monitor: m,
		Clock: clock.Func(func() time.Time { return time.Unix(0, now.Load()) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := allocatedBytes(store)
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatal("Pebble's open left the store's allocated bytes unchanged; the test cannot tell the measures apart")
	}
	if u, ok := m.Usage(); !ok || u.AllocatedBytes != before {
		t.Fatalf("allocated bytes after Open = %d, %v; want the audit's %d (a second measure finds %d)", u.AllocatedBytes, ok, before, after)
	}
	now.Add(int64(AllocatedRefresh))
	testutil.WaitFor(t, 10*time.Second, 5*time.Millisecond, "a background measurement", func() bool {
		u, _ := m.Usage()
		return u.AllocatedBytes != before
	})
}

// TestOpenMeasuresAllocatedOfRecreatedStore: when Open creates the store
// again (an interrupted creation left the store directory behind), the
// audit measured files that the open replaced, so the allocated bytes are
// measured after the open instead.
func TestOpenMeasuresAllocatedOfRecreatedStore(t *testing.T) {
	t.Parallel()
	dir := bulkDir(t)
	if err := os.Mkdir(filepath.Join(dir, StoreDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if a, err := audit(dir); err != nil || !a.exists || a.allocated != 0 {
		t.Fatalf("audit(empty store directory) = %+v, %v; want the store, 0 bytes", a, err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	m := new(Monitor)
	s, err := Open(context.Background(), dir, Options{
		Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1, Monitor: m,
		Clock: clock.Func(func() time.Time { return now }),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if u, ok := m.Usage(); !ok || u.AllocatedBytes <= 0 {
		t.Fatalf("allocated bytes of the created store = %d, %v; want its files measured after the open", u.AllocatedBytes, ok)
	}
}
