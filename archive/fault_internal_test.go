package archive

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/crashfs"
)

// TestCrashAtEveryWriteOp takes a crash clone of the filesystem at every
// write-type operation of a workload (store creation, synced accepts
// including duplicates, memtable flushes, close) and checks each clone after
// reopening: startup validation passes (no record without its charge and no
// charge without its record), and every record whose Accept had returned
// before the crash is present.
func TestCrashAtEveryWriteOp(t *testing.T) {
	t.Parallel()
	const events = 24
	keys := make([]event.Key, events)
	recs := make([][]byte, events)
	for i := range keys {
		keys[i], recs[i] = rec(t, testDatabase, uint64(i+1), 0, strings.Repeat("p", 1500+i))
	}

	// First pass: count the write ops of the workload.
	total := runCrashWorkload(t, keys, recs, -1, nil)
	if total < 40 {
		t.Fatalf("workload performed only %d write ops", total)
	}
	step := 1
	if testing.Short() {
		step = 7
	}
	checked := 0
	for k := 1; k <= total; k += step {
		var res crashResult
		runCrashWorkload(t, keys, recs, k, &res)
		if res.clone == nil {
			// Background work makes the op count vary a little between runs.
			continue
		}
		checked++
		checkCrashClone(t, k, res.clone, keys, recs, res.acked)
		if k%5 == 0 { // also a clone with part of the unsynced data
			checkCrashClone(t, k, res.partial, keys, recs, res.acked)
		}
	}
	if checked < total/step*9/10 {
		t.Fatalf("only %d of %d crash points were reached", checked, total/step)
	}
	t.Logf("checked %d crash points", checked)
}

type crashResult struct {
	clone, partial *vfs.MemFS
	acked          int
}

// runCrashWorkload runs the workload on a fresh crashable MemFS and returns
// the number of write ops; at op cloneAt it records the crash clones.
func runCrashWorkload(t *testing.T, keys []event.Key, recs [][]byte, cloneAt int, res *crashResult) int {
	t.Helper()
	mem := crashfs.New()
	prepareArchiveDir(t, mem)
	var ops atomic.Int64
	var acked atomic.Int64
	rng := rand.New(rand.NewPCG(uint64(cloneAt), 7))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && int(ops.Add(1)) == cloneAt {
			res.acked = int(acked.Load())
			res.clone = mem.CrashClone(vfs.CrashCloneCfg{})
			res.partial = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
		}
		return nil
	})
	opts := testOptions(t, errorfs.Wrap(mem, inj))
	s, err := Open(context.Background(), testDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		mustAccept(t, s, keys[i], recs[i], deliverytype.Stored)
		acked.Store(int64(i + 1))
		if i%6 == 5 {
			mustAccept(t, s, keys[i-1], recs[i-1], deliverytype.Duplicate)
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return int(ops.Load())
}

func checkCrashClone(t *testing.T, k int, fs *vfs.MemFS, keys []event.Key, recs [][]byte, acked int) {
	t.Helper()
	opts := testOptions(t, fs)
	s, err := Open(context.Background(), testDir, opts)
	if err != nil {
		t.Fatalf("crash at op %d (acked %d): reopen: %v", k, acked, err)
	}
	defer s.Close()
	u := s.Usage()
	if u.Records < int64(acked) {
		t.Fatalf("crash at op %d: %d records, but %d accepts had returned", k, u.Records, acked)
	}
	var want int64
	for i := 0; i < int(u.Records); i++ {
		want += Charge(keys[i], recs[i])
	}
	if u.EncodedBytes != want {
		t.Fatalf("crash at op %d: accounting %d bytes, records charge %d", k, u.EncodedBytes, want)
	}
	for i := 0; i < acked; i++ {
		mustAccept(t, s, keys[i], recs[i], deliverytype.Duplicate)
	}
	// The recovered store accepts new work.
	for i := acked; i < len(keys); i++ {
		if _, err := s.Accept(context.Background(), keys[i], recs[i]); err != nil {
			t.Fatalf("crash at op %d: Accept after recovery: %v", k, err)
		}
	}
}

// faultFS injects err into operations matching match while on is set.
type faultFS struct {
	on    atomic.Bool
	err   error
	match func(errorfs.Op) bool
}

func (f *faultFS) MaybeError(op errorfs.Op) error {
	if f.on.Load() && f.match(op) {
		return &os.PathError{Op: "inject", Path: op.Path, Err: f.err}
	}
	return nil
}

func (f *faultFS) String() string { return "faultFS" }

func walWrite(op errorfs.Op) bool {
	return strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt)
}

func walSync(op errorfs.Op) bool {
	return strings.HasSuffix(op.Path, ".log") &&
		(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo)
}

// TestWALFaultsKeepTheProcessAlive injects ENOSPC and EIO into WAL writes and
// syncs. Pebble treats them as fatal; Accept must return a classified error
// within its timeout without the process exiting, every later call must
// return it too, and after the fault is cleared Close+Open must accept again
// with nothing lost.
func TestWALFaultsKeepTheProcessAlive(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		errno syscall.Errno
		match func(errorfs.Op) bool
		class deliverytype.Class
	}{
		{"ENOSPC on WAL write", syscall.ENOSPC, walWrite, deliverytype.Capacity},
		{"EIO on WAL write", syscall.EIO, walWrite, deliverytype.Unavailable},
		{"ENOSPC on WAL sync", syscall.ENOSPC, walSync, deliverytype.Capacity},
		{"EIO on WAL sync", syscall.EIO, walSync, deliverytype.Unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mem := newMemFS(t, false)
			inj := &faultFS{err: tc.errno, match: tc.match}
			opts := testOptions(t, errorfs.Wrap(mem, inj))
			opts.TxnTimeout = 5 * time.Second
			s, err := Open(ctx, testDir, opts)
			if err != nil {
				t.Fatal(err)
			}
			k1, r1 := rec(t, testDatabase, 1, 0, "one")
			k2, r2 := rec(t, testDatabase, 2, 0, "two")
			k3, r3 := rec(t, testDatabase, 3, 0, "three")
			mustAccept(t, s, k1, r1, deliverytype.Stored)

			inj.on.Store(true)
			_, err = s.Accept(ctx, k2, r2)
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, tc.errno) || ClassOf(err) != tc.class {
				t.Fatalf("Accept under fault = %v (class %v), want %v wrapping %v", err, ClassOf(err), tc.class, tc.errno)
			}
			assertNoPath(t, err)
			if s.Unusable() == nil {
				t.Fatal("store not marked unusable")
			}
			// Later calls fail fast with the recorded error.
			if _, err := s.Accept(ctx, k3, r3); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("later Accept: %v", err)
			}
			if _, err := s.Fit(ctx, []event.Key{k3}, [][]byte{r3}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("later Fit: %v", err)
			}
			inj.on.Store(false)
			_ = s.Close() // returns the sticky error, but releases the store

			s2, err := Open(ctx, testDir, opts)
			if err != nil {
				t.Fatalf("reopen after clearing the fault: %v", err)
			}
			defer s2.Close()
			mustAccept(t, s2, k1, r1, deliverytype.Duplicate)
			if _, err := s2.Accept(ctx, k2, r2); err != nil { // stored or, if the write made it, duplicate
				t.Fatal(err)
			}
			mustAccept(t, s2, k3, r3, deliverytype.Stored)
		})
	}
}

// blockingFS blocks WAL syncs while armed until released.
type blockingFS struct {
	armed   atomic.Bool
	release chan struct{}
	once    sync.Once
	entered chan struct{}
}

func (b *blockingFS) MaybeError(op errorfs.Op) error {
	if b.armed.Load() && walSync(op) {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return nil
}

func (b *blockingFS) String() string { return "blockingFS" }

// hangableOptions returns the options of a store on memory whose WAL syncs
// hang while the returned injector is armed.
func hangableOptions(t *testing.T) (*blockingFS, Options) {
	t.Helper()
	inj := &blockingFS{release: make(chan struct{}), entered: make(chan struct{})}
	return inj, testOptions(t, errorfs.Wrap(newMemFS(t, false), inj))
}

// TestHungCommitTimesOut makes a WAL sync hang: Accept must return
// ErrUnavailable once TxnTimeout passes, and the store becomes unusable.
func TestHungCommitTimesOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inj, opts := hangableOptions(t)
	opts.TxnTimeout = 50 * time.Millisecond
	s, err := Open(ctx, testDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	k1, r1 := rec(t, testDatabase, 1, 0, "one")
	inj.armed.Store(true)
	_, err = s.Accept(ctx, k1, r1)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || ClassOf(err) != deliverytype.Unavailable {
		t.Fatalf("hung Accept: %v", err)
	}
	<-inj.entered
	if _, err := s.Accept(ctx, k1, r1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Accept on an unusable store: %v", err)
	}
	inj.armed.Store(false)
	close(inj.release)
	_ = s.Close()
	opts.TxnTimeout = 10 * time.Second
	s2, err := Open(ctx, testDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Accept(ctx, k1, r1); err != nil {
		t.Fatal(err)
	}
}

// TestHungCommitTimesOutAfterEarlierTransactions: Accept reuses one timer
// for its transactions, so a hang after many quick transactions must still
// time out, and only once its own TxnTimeout has passed (a value left from
// an earlier setting would end it early; a timer not set again, never).
func TestHungCommitTimesOutAfterEarlierTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inj, opts := hangableOptions(t)
	const timeout = 200 * time.Millisecond
	opts.TxnTimeout = timeout
	s, err := Open(ctx, testDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		inj.armed.Store(false)
		close(inj.release)
		_ = s.Close()
	}()
	for i := range 50 {
		k, r := rec(t, testDatabase, uint64(i+1), 0, "quick")
		if _, err := s.Accept(ctx, k, r); err != nil {
			t.Fatalf("transaction %d: %v", i+1, err)
		}
	}
	k, r := rec(t, testDatabase, 51, 0, "hangs")
	inj.armed.Store(true)
	start := time.Now()
	_, err = s.Accept(ctx, k, r)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung Accept after 50 quick ones: %v", err)
	}
	if elapsed < timeout {
		t.Fatalf("hung Accept returned after %s, before its %s timeout", elapsed, timeout)
	}
	<-inj.entered
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want deliverytype.Class
	}{
		{ErrConflict, deliverytype.Conflict},
		{ErrInvalidRecord, deliverytype.Conflict},
		{ErrBindingChanged, deliverytype.Stop},
		{ErrIncompatibleFormat, deliverytype.Stop},
		{ErrCorrupt, deliverytype.Stop},
		{ErrCapacity, deliverytype.Capacity},
		{mapError("x", &os.PathError{Op: "write", Path: "/p", Err: syscall.ENOSPC}), deliverytype.Capacity},
		{mapError("x", &os.PathError{Op: "open", Path: "/p", Err: syscall.EACCES}), deliverytype.Refused},
		{mapError("x", &os.PathError{Op: "open", Path: "/p", Err: syscall.EPERM}), deliverytype.Refused},
		{mapError("x", &os.PathError{Op: "open", Path: "/p", Err: syscall.EROFS}), deliverytype.Refused},
		{mapError("x", &os.PathError{Op: "open", Path: "/p", Err: syscall.ENOENT}), deliverytype.Unavailable},
		{mapError("x", &os.PathError{Op: "write", Path: "/p", Err: syscall.EIO}), deliverytype.Unavailable},
		{mapError("x", &os.PathError{Op: "lock", Path: "/p", Err: syscall.EAGAIN}), deliverytype.Unavailable},
		{mapError("x", context.DeadlineExceeded), deliverytype.Unavailable},
		{ErrCustody, deliverytype.Refused},
		{ErrUnsupportedPlatform, deliverytype.Refused},
		{ErrBusy, deliverytype.Unavailable},
		{ErrClosed, deliverytype.Unavailable},
	}
	for _, tc := range cases {
		if got := ClassOf(tc.err); got != tc.want {
			t.Errorf("ClassOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
		assertNoPath(t, tc.err, "/p")
	}
	if err := mapError("x", &os.PathError{Op: "lock", Path: "/p", Err: syscall.EAGAIN}); !errors.Is(err, ErrBusy) {
		t.Errorf("EAGAIN maps to %v", err)
	}
}
