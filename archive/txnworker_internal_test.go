package archive

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/goexit"
)

// waitOutcome returns the outcome of a transaction the worker ran, failing
// the test if none arrives (a bound for a broken worker, not a timing).
func waitOutcome(t *testing.T, done <-chan goexit.Outcome) goexit.Outcome {
	t.Helper()
	select {
	case o := <-done:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome")
		return goexit.Outcome{}
	}
}

// waitWorkersEnded fails the test unless every worker goroutine of w ends.
func waitWorkersEnded(t *testing.T, w *txnWorker) {
	t.Helper()
	ended := make(chan struct{})
	go func() { w.live.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("a worker goroutine did not end")
	}
}

// ranOnWorker runs a transaction through w and fails the test unless a
// worker goroutine (not a fallback goroutine) ran it.
func ranOnWorker(t *testing.T, w *txnWorker) {
	t.Helper()
	before := w.fallbacks.Load()
	o := waitOutcome(t, w.run(func(*txnPhase) error { return nil }, nil))
	if !o.Returned || o.Err != nil {
		t.Fatalf("outcome %+v", o)
	}
	if got := w.fallbacks.Load(); got != before {
		t.Fatalf("the transaction ran on a new goroutine (%d fallbacks), not on the worker", got-before)
	}
}

// TestTxnWorkerPanicIsCaughtAndReplaced: a transaction that panics on the
// worker marks the store unusable with an error, as on a goroutine of its
// own, and a replacement worker runs the next transaction.
func TestTxnWorkerPanicIsCaughtAndReplaced(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	t.Cleanup(st.txn.stop)
	w := &st.txn
	if err := guardedTxn(context.Background(), st, time.Minute, "the transaction", new(txnPhase), func(*txnPhase) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := guardedTxn(context.Background(), st, time.Minute, "the transaction", new(txnPhase), func(*txnPhase) error { panic("wal rotation failed") })
	if !errors.Is(err, ErrUnavailable) || st.err() == nil {
		t.Fatalf("panic: %v (store error %v)", err, st.err())
	}
	if w.fallbacks.Load() != 0 || w.spawned.Load() != 1 {
		t.Fatalf("fallbacks %d, workers %d; want both transactions on one worker", w.fallbacks.Load(), w.spawned.Load())
	}
	ranOnWorker(t, w)
	if got := w.spawned.Load(); got != 2 {
		t.Fatalf("%d workers started; want the first and its replacement", got)
	}
	ranOnWorker(t, w)
	w.stop()
	waitWorkersEnded(t, w)
}

// TestTxnWorkerGoexitIsCaughtAndReplaced: Pebble's Fatalf (runtime.Goexit)
// in a transaction on the worker ends only the worker; the caller gets the
// recorded error, and a replacement runs the next transaction.
func TestTxnWorkerGoexitIsCaughtAndReplaced(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	t.Cleanup(st.txn.stop)
	w := &st.txn
	ranOnWorker(t, w)
	l := pebbleLogger{st: st}
	err := guardedTxn(context.Background(), st, time.Minute, "the transaction", new(txnPhase), func(*txnPhase) error {
		l.Fatalf("pebble: fatal commit error: %v", fmt.Errorf("write: %w", syscall.EIO))
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Fatalf on the worker: %v", err)
	}
	if w.fallbacks.Load() != 0 || w.spawned.Load() != 1 {
		t.Fatalf("fallbacks %d, workers %d; want the Fatalf on the worker", w.fallbacks.Load(), w.spawned.Load())
	}
	ranOnWorker(t, w)
	if got := w.spawned.Load(); got != 2 {
		t.Fatalf("%d workers started; want the first and its replacement", got)
	}
	w.stop()
	waitWorkersEnded(t, w)
}

// TestTxnWorkerStuckIsAbandoned: a transaction stuck on the worker times
// out and marks the store unusable; a later guardedTxn returns that error
// without waiting for the worker, and a transaction run meanwhile (one
// that passed the store check before the timeout) runs on a new goroutine.
// Once the stuck transaction returns after stop, the worker ends.
func TestTxnWorkerStuckIsAbandoned(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	t.Cleanup(st.txn.stop)
	w := &st.txn
	release := make(chan struct{})
	err := guardedTxn(context.Background(), st, 10*time.Millisecond, "the transaction", new(txnPhase), func(phase *txnPhase) error {
		phase.beginWrite()
		<-release
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || st.err() == nil {
		t.Fatalf("stuck transaction: %v (store error %v)", err, st.err())
	}
	ran := false
	if err := guardedTxn(context.Background(), st, time.Minute, "the transaction", new(txnPhase), func(*txnPhase) error { ran = true; return nil }); !errors.Is(err, ErrUnavailable) || ran {
		t.Fatalf("later call on the unusable store: %v (ran %v)", err, ran)
	}
	o := waitOutcome(t, w.run(func(*txnPhase) error { return nil }, nil))
	if !o.Returned || w.fallbacks.Load() != 1 || w.spawned.Load() != 1 {
		t.Fatalf("outcome %+v, fallbacks %d, workers %d; want one fallback beside the stuck worker", o, w.fallbacks.Load(), w.spawned.Load())
	}
	w.stop()
	close(release)
	waitWorkersEnded(t, w)
	o = waitOutcome(t, w.run(func(*txnPhase) error { return nil }, nil))
	if !o.Returned || w.spawned.Load() != 1 || w.fallbacks.Load() != 2 {
		t.Fatalf("after stop: outcome %+v, workers %d, fallbacks %d; want no new worker", o, w.spawned.Load(), w.fallbacks.Load())
	}
}

// TestStoreCloseStopsTxnWorker: a store's transactions run on its worker,
// and Close ends the worker goroutine.
func TestStoreCloseStopsTxnWorker(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	for i := range 3 {
		k, r := rec(t, testDatabase, 1, uint32(i+1), "x")
		mustAccept(t, s, k, r, Stored)
	}
	w := &s.st.txn
	if w.spawned.Load() != 1 || w.fallbacks.Load() != 0 {
		t.Fatalf("workers %d, fallbacks %d; want every transaction on one worker", w.spawned.Load(), w.fallbacks.Load())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitWorkersEnded(t, w)
}
