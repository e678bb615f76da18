package archive

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/store/goexit"
)

// holdTxnGoroutine hands the store's transaction goroutine a call that
// runs until the returned function is called: until then nothing posted
// after it is applied.
func holdTxnGoroutine(t *testing.T, s *Store) (release func()) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txns == nil {
		t.Fatal("the store has no transaction goroutine yet")
	}
	running, released := make(chan struct{}), make(chan struct{})
	s.txns.work <- txnJob{fn: func() error { close(running); <-released; return nil }, done: make(chan goexit.Outcome, 1)}
	<-running
	return func() { close(released) }
}

// within runs fn on a goroutine of its own and reports whether it returned
// within d.
func within(d time.Duration, fn func()) (returned <-chan struct{}, ok bool) {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return done, true
	case <-time.After(d):
		return done, false
	}
}

// TestApplyPostsItsBatch: Apply of a new record returns without waiting
// for Pebble to apply its batch (the store's transaction goroutine applies
// it, in order), and whatever pairs a snapshot with the accounting waits
// for the posted batches first: a Reader sees every record an Apply that
// returned decided to store, a Checkpoint and a scrub pass find the
// records and the accounting in agreement, and Durable makes them all
// durable.
func TestApplyPostsItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, mem))
	defer s.Close()
	k, r := rec(t, testDatabase, 1, 0, "first")
	if out, err := s.Apply(ctx, k, r); err != nil || out != deliverytype.Stored {
		t.Fatalf("Apply(1) = %v, %v", out, err)
	}
	release := holdTxnGoroutine(t, s)
	for i := uint64(2); i <= 5; i++ {
		k, r := rec(t, testDatabase, i, 0, "posted")
		var out deliverytype.Outcome
		var err error
		done, ok := within(10*time.Second, func() { out, err = s.Apply(ctx, k, r) })
		if !ok {
			release()
			<-done
			t.Fatalf("Apply(%d) waited for the transaction goroutine, which was busy", i)
		}
		if err != nil || out != deliverytype.Stored {
			t.Fatalf("Apply(%d) = %v, %v", i, out, err)
		}
	}
	if u := s.Usage(); u.Records != 5 {
		t.Fatalf("Usage after five applies: %+v", u)
	}

	var ckErr error
	ckDone, ckReturned := within(100*time.Millisecond, func() { ckErr = s.Checkpoint(ctx) })
	var rd *Reader
	rdDone, rdReturned := within(100*time.Millisecond, func() { rd = s.NewReader() })
	if ckReturned || rdReturned {
		t.Errorf("Checkpoint returned %v, NewReader returned %v, before the posted batches were applied", ckReturned, rdReturned)
	}
	release()
	<-ckDone
	<-rdDone
	if ckErr != nil {
		t.Fatalf("Checkpoint after posted applies: %v", ckErr)
	}
	defer rd.Close()
	n := 0
	var after Cursor
	for {
		p, err := rd.ReadPage(ctx, after)
		if err != nil {
			t.Fatalf("ReadPage: %v", err)
		}
		n += len(p.Records)
		if p.Next == nil {
			break
		}
		after = p.Next
	}
	if n != 5 {
		t.Fatalf("a Reader made after the applies holds %d records, want 5", n)
	}
	release = holdTxnGoroutine(t, s)
	k, r = rec(t, testDatabase, 6, 0, "posted before a scrub")
	mustApply(t, s, k, r)
	scDone, scReturned := within(100*time.Millisecond, func() {
		sc, err := s.NewScrub()
		if err != nil {
			t.Errorf("NewScrub: %v", err)
			return
		}
		defer sc.Close()
		for {
			p, err := sc.Step(ctx)
			if err != nil {
				t.Errorf("scrub step: %v", err)
				return
			}
			if p.Complete {
				return
			}
		}
	})
	if scReturned {
		t.Error("a scrub pass began before the posted batch was applied")
	}
	release()
	<-scDone
	if err := s.Durable(ctx); err != nil {
		t.Fatalf("Durable: %v", err)
	}
	if err := s.Unusable(); err != nil {
		t.Fatalf("store unusable after posted applies: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, testOptions(t, mem))
	defer c.Close()
	if u := c.Usage(); u.Records != 6 {
		t.Fatalf("reopened after Durable: %+v, want 6 records", u)
	}
}

func mustApply(t *testing.T, s *Store, k event.Key, r []byte) {
	t.Helper()
	if out, err := s.Apply(context.Background(), k, r); err != nil || out != deliverytype.Stored {
		t.Fatalf("Apply = %v, %v", out, err)
	}
}

// TestPostedApplyThatFailsFailsDurable: a posted batch that Pebble refuses
// marks the store unusable, and the Durable that awaits it fails instead
// of reporting the group durable.
func TestPostedApplyThatFailsFailsDurable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	defer s.Close()
	k, r := rec(t, testDatabase, 1, 0, "first")
	mustApply(t, s, k, r)
	other, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// A batch of another store: Pebble refuses to apply it.
	s.mu.Lock()
	p := &postedApply{db: s.db, b: other.NewBatch()}
	if !s.txns.post(p, time.Minute) {
		s.mu.Unlock()
		t.Fatal("no room in the line")
	}
	s.posted++
	s.applied = append(s.applied, appliedTxn{b: p.b, ctx: ctx, span: trace.SpanFromContext(ctx), start: time.Now(), key: k, post: p})
	s.mu.Unlock()
	if err := s.Durable(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Durable after a refused apply = %v, want ErrUnavailable", err)
	}
	if err := s.Unusable(); err == nil {
		t.Fatal("the store is usable after a posted apply failed")
	}
}

// TestTxnCallsOutliveAPanic: a posted apply that panics marks the store
// unusable, and the calls handed over after it still run, in order, on the
// goroutine started in its place.
func TestTxnCallsOutliveAPanic(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	calls := newTxnCalls(st)
	defer calls.close()
	if !calls.post(&postedApply{}, time.Minute) { // no store: Apply panics
		t.Fatal("no room in the line")
	}
	fresh, _, _ := newTestState()
	if err := guardedTxn(context.Background(), fresh, time.Minute, "the next call", nil, calls, func() error { return nil }); err != nil {
		t.Fatalf("the call after the panic: %v", err)
	}
	if err := st.err(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("store error after a panicking apply: %v, want ErrUnavailable", err)
	}
}

// TestPostedApplyRefusals: a new record that Apply would post but that
// does not fit the quota, or whose context ended, is refused with the
// error Accept gives, and nothing is posted or counted.
func TestPostedApplyRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k1, r1 := rec(t, testDatabase, 1, 0, "first")
	k2, r2 := rec(t, testDatabase, 2, 0, "second")
	o := testOptions(t, newMemFS(t, false))
	o.QuotaEncodedBytes = Charge(k1, r1) + Charge(k2, r2) - 1
	s := mustOpen(t, o)
	mustApply(t, s, k1, r1)
	if out, err := s.Apply(ctx, k2, r2); !errors.Is(err, ErrCapacity) {
		t.Fatalf("Apply beyond the quota = %v, %v; want ErrCapacity", out, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	k3, r3 := rec(t, testDatabase, 3, 0, "")
	if out, err := s.Apply(cancelled, k3, r3); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Apply with an ended context = %v, %v; want ErrUnavailable", out, err)
	}
	if err := s.Unusable(); err != nil {
		t.Fatalf("a refused Apply left the store unusable: %v", err)
	}
	if err := s.Durable(ctx); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u.Records != 1 {
		t.Fatalf("Usage after one stored and two refused: %+v", u)
	}
}

// TestPostedApplyReadsTheClockTwice: a new record's transaction on the
// posting path reads the clock twice (its start, and once for the
// free-space guard's decision and its record), and Durable once for the
// group: #47 asks for no redundant clock reads on the delivery path. With
// the guard off the transaction reads it once: the guard reads no time it
// does not use.
func TestPostedApplyReadsTheClockTwice(t *testing.T) {
	t.Parallel()
	const group = 16
	for _, tc := range []struct {
		name    string
		minFree int64
		perTxn  int64
	}{
		{"guard on", 1 << 20, 2},
		{"guard off", -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fs := &diskFS{FS: newMemFS(t, false), avail: func() uint64 { return 1 << 40 }}
			var reads atomic.Int64
			base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
			opts := testOptions(t, fs)
			opts.MinFreeBytes = tc.minFree
			opts.Clock = clock.Func(func() time.Time { reads.Add(1); return base })
			s := mustOpen(t, opts)
			k, r := rec(t, testDatabase, 1, 0, "first") // measures the free space
			mustApply(t, s, k, r)
			if err := s.Durable(ctx); err != nil {
				t.Fatal(err)
			}
			before := reads.Load()
			for i := uint64(2); i < 2+group; i++ {
				k, r := rec(t, testDatabase, i, 0, "posted")
				mustApply(t, s, k, r)
			}
			if err := s.Durable(ctx); err != nil {
				t.Fatal(err)
			}
			if got, want := reads.Load()-before, tc.perTxn*group+1; got != want {
				t.Fatalf("%d posted transactions and their Durable read the clock %d times, want %d", group, got, want)
			}
			if s.posted != 0 || len(s.applied) != 0 {
				t.Fatalf("posted %d, applied %d after Durable", s.posted, len(s.applied))
			}
		})
	}
}
