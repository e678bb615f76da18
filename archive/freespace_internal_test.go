package archive

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/process/clock"
)

// diskFS is a MemFS whose GetDiskUsage reports avail() and counts its calls.
type diskFS struct {
	vfs.FS
	mu    sync.Mutex
	avail func() uint64
	calls int
}

func (f *diskFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return vfs.DiskUsage{AvailBytes: f.avail(), TotalBytes: 1 << 40}, nil
}

func (f *diskFS) setAvail(avail func() uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.avail = avail
}

func (f *diskFS) measured() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// freeSpaceSetup opens a store with a 1 MiB free-space guard on a diskFS
// reporting avail, with a clock that moves only when the test moves *now.
func freeSpaceSetup(t *testing.T, avail uint64) (*Store, *diskFS, *time.Time) {
	t.Helper()
	fs := &diskFS{FS: newMemFS(t, false), avail: func() uint64 { return avail }}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	opts := testOptions(t, fs)
	opts.MinFreeBytes = 1 << 20
	opts.Clock = clock.Func(func() time.Time { return now })
	return mustOpen(t, opts), fs, &now
}

// TestFreeSpaceGuardMeasuresOncePerMaxAge: with plenty of space, the
// transactions within one freeSpaceMaxAge share one measurement, and the
// next one after it measures again.
func TestFreeSpaceGuardMeasuresOncePerMaxAge(t *testing.T) {
	t.Parallel()
	s, fs, now := freeSpaceSetup(t, 1<<40)
	base := fs.measured()
	for i := range 200 {
		k, r := rec(t, testDatabase, uint64(i+1), 0, "x")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	if got := fs.measured() - base; got != 1 {
		t.Fatalf("200 transactions within %v measured free space %d times; want 1", freeSpaceMaxAge, got)
	}
	*now = now.Add(freeSpaceMaxAge)
	k, r := rec(t, testDatabase, 1000, 0, "x")
	mustAccept(t, s, k, r, deliverytype.Stored)
	if got := fs.measured() - base; got != 2 {
		t.Fatalf("a transaction %v after the measurement measured %d times in all; want 2", freeSpaceMaxAge, got)
	}
}

// TestFreeSpaceGuardRefusesAsPerCallMeasurement: when the disk fills with
// the store's own writes, the guard refuses at exactly the transaction a
// statfs per transaction would have refused, although the clock stands
// still, and every refusal rests on a fresh measurement.
func TestFreeSpaceGuardRefusesAsPerCallMeasurement(t *testing.T) {
	t.Parallel()
	payload := strings.Repeat("x", 64<<10)
	k0, r0 := rec(t, testDatabase, 1, 0, payload)
	charge := Charge(k0, r0)
	const minFree = 1 << 20
	// Room for exactly 48 records above the guard (about 4 MiB free at
	// first): the first ones leave the estimate above twice the guard.
	initial := uint64(minFree + 48*charge)
	s, fs, _ := freeSpaceSetup(t, initial)
	fs.setAvail(func() uint64 { return initial - uint64(s.encoded.Load()) })
	base := fs.measured()
	stored := 0
	for i := range 100 {
		k, r := rec(t, testDatabase, uint64(i+1), 0, payload)
		before := fs.measured()
		_, err := s.Accept(context.Background(), k, r)
		if errors.Is(err, ErrCapacity) {
			if fs.measured() == before {
				t.Fatalf("transaction %d refused without measuring", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stored++
	}
	if stored != 48 {
		t.Fatalf("stored %d records before the guard refused; want 48 (as with a statfs per transaction)", stored)
	}
	t.Logf("%d transactions, %d measurements", stored+1, fs.measured()-base)
	if got := fs.measured() - base; got >= stored {
		t.Fatalf("%d transactions measured %d times; want fewer while space was plentiful", stored+1, got)
	}
	// Fit applies the same guard to a group.
	k, r := rec(t, testDatabase, 1000, 0, "x")
	if _, err := s.Fit(context.Background(), []event.Key{k}, [][]byte{r}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("Fit below the guard: %v", err)
	}
}

// TestFreeSpaceGuardSeesOtherUseWithinMaxAge: space taken by something
// else is seen at the latest by the first transaction freeSpaceMaxAge after
// the last measurement, and the guard admits again once space is freed.
func TestFreeSpaceGuardSeesOtherUseWithinMaxAge(t *testing.T) {
	t.Parallel()
	s, fs, now := freeSpaceSetup(t, 1<<40)
	k, r := rec(t, testDatabase, 1, 0, "x")
	mustAccept(t, s, k, r, deliverytype.Stored)
	fs.setAvail(func() uint64 { return 1 << 20 }) // another writer filled the disk
	*now = now.Add(freeSpaceMaxAge)
	k, r = rec(t, testDatabase, 2, 0, "x")
	if _, err := s.Accept(context.Background(), k, r); !errors.Is(err, ErrCapacity) {
		t.Fatalf("Accept %v after the disk filled: %v; want ErrCapacity", freeSpaceMaxAge, err)
	}
	// A refusal leaves the next transaction to measure again, clock or not.
	fs.setAvail(func() uint64 { return 1 << 40 })
	mustAccept(t, s, k, r, deliverytype.Stored)
}

// TestFreeSpaceGuardClockBack: a clock that went back does not extend the
// life of a measurement.
func TestFreeSpaceGuardClockBack(t *testing.T) {
	t.Parallel()
	s, fs, now := freeSpaceSetup(t, 1<<40)
	k, r := rec(t, testDatabase, 1, 0, "x")
	mustAccept(t, s, k, r, deliverytype.Stored)
	fs.setAvail(func() uint64 { return 1 << 20 })
	*now = now.Add(-time.Second)
	k, r = rec(t, testDatabase, 2, 0, "x")
	if _, err := s.Accept(context.Background(), k, r); !errors.Is(err, ErrCapacity) {
		t.Fatalf("Accept after the clock went back and the disk filled: %v; want ErrCapacity", err)
	}
}
