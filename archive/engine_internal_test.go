package archive

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/deliverytype"
)

func newTestState() (*engineState, *observer.ObservedLogs, *time.Time) {
	core, logs := observer.New(zap.DebugLevel)
	now := time.Unix(1000, 0)
	return &engineState{log: zap.New(core), clock: func() time.Time { return now }}, logs, &now
}

func TestFatalfEndsOnlyTheCallingGoroutine(t *testing.T) {
	t.Parallel()
	st, logs, _ := newTestState()
	l := pebbleLogger{st: st}
	cause := fmt.Errorf("write: %w", syscall.ENOSPC)
	err := guarded(context.Background(), st, time.Minute, "committing", true, func() error {
		l.Fatalf("pebble: fatal commit error: %v", cause)
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) || ClassOf(err) != deliverytype.Capacity {
		t.Fatalf("guarded Fatalf = %v", err)
	}
	if logs.FilterMessageSnippet("fatal").Len() != 1 {
		t.Fatal("fatal not logged")
	}
	// Every later call returns the recorded error without running.
	ran := false
	if err := guarded(context.Background(), st, time.Minute, "reading", false, func() error { ran = true; return nil }); !errors.Is(err, ErrUnavailable) || ran {
		t.Fatalf("later call: %v (ran %v)", err, ran)
	}
}

func TestGuardedRecoversPanics(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	err := guarded(context.Background(), st, time.Minute, "rotating", true, func() error { panic("wal rotation failed") })
	if !errors.Is(err, ErrUnavailable) || st.err() == nil {
		t.Fatalf("panic: %v", err)
	}
}

func TestCorruptionOutranksUnavailability(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	st.fail(newError(ErrUnavailable, "x", nil))
	st.fail(newError(ErrCorrupt, "y", nil))
	st.fail(newError(ErrUnavailable, "z", nil))
	if !errors.Is(st.err(), ErrCorrupt) {
		t.Fatalf("recorded %v", st.err())
	}
}

func TestBackgroundErrorsAreRateLimited(t *testing.T) {
	t.Parallel()
	st, logs, now := newTestState()
	for i := 0; i < 1000; i++ {
		st.backgroundError(errors.New("flush: no space left on device"))
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d log lines for a burst, want 1", n)
	}
	*now = now.Add(time.Second)
	st.backgroundError(errors.New("flush: no space left on device"))
	entries := logs.All()
	if len(entries) != 2 || entries[1].ContextMap()["suppressed"] != int64(999) {
		t.Fatalf("entries %v", entries)
	}
	if st.err() != nil {
		t.Fatal("a background error alone must not make the store unusable")
	}
}

// handoffCtx is a context whose cancellation is handed over rather than
// broadcast: its Done channel is unbuffered, so cancel returns only once the
// goroutine waiting on Done (guardedTxn's) has taken the cancellation. That
// proves the wait saw ctx end, where a sleep could only hope it had.
type handoffCtx struct {
	context.Context
	done     chan struct{}
	canceled atomic.Bool
}

func newHandoffCtx() *handoffCtx {
	return &handoffCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *handoffCtx) Done() <-chan struct{} { return c.done }

func (c *handoffCtx) Err() error {
	if c.canceled.Load() {
		return context.Canceled
	}
	return nil
}

// cancel ends the context and reports whether a receiver took the
// cancellation within d.
func (c *handoffCtx) cancel(d time.Duration) bool {
	c.canceled.Store(true)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case c.done <- struct{}{}:
		return true
	case <-timer.C:
		return false
	}
}

// TestGuardedTxnCancelWhileReading: ctx ending before the write began does
// not abandon the call nor mark the store unusable; fn sees the
// cancellation and returns without writing.
func TestGuardedTxnCancelWhileReading(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	ctx := newHandoffCtx()
	wrote := false
	phase := new(txnPhase)
	err := guardedTxn(ctx, st, time.Minute, "the transaction", phase, nil, func() error {
		// The read: ctx ends meanwhile, and guardedTxn has taken the
		// cancellation once cancel returns. fn then tries to begin its
		// write, which fails: it returns without writing.
		if !ctx.cancel(10 * time.Second) {
			t.Error("guardedTxn did not wait on ctx while fn was reading")
		}
		// guardedTxn aborts the phase just after taking the cancellation.
		for deadline := time.Now().Add(10 * time.Second); phase.v.Load() != phaseAborted; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Error("guardedTxn did not abort the reading phase")
				break
			}
		}
		if !phase.beginWrite() {
			return fmt.Errorf("%w: cancelled before writing: %w", ErrUnavailable, ctx.Err())
		}
		wrote = true
		return nil
	})
	if !errors.Is(err, context.Canceled) || wrote {
		t.Fatalf("err = %v, wrote = %v; want the cancellation and no write", err, wrote)
	}
	if st.err() != nil {
		t.Fatalf("store marked unusable by a cancellation before any write: %v", st.err())
	}
}

// TestGuardedTxnCancelWhileWriting: ctx ending once the write began
// abandons the call at once and marks the store unusable (the outcome of
// the write is unknown).
func TestGuardedTxnCancelWhileWriting(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	phase := new(txnPhase)
	err := guardedTxn(ctx, st, time.Minute, "the transaction", phase, nil, func() error {
		if !phase.beginWrite() {
			t.Error("the write could not begin")
		}
		cancel() // ctx ends while the "commit" hangs
		<-release
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) || st.err() == nil {
		t.Fatalf("err = %v, store error = %v; want an abandoned call and an unusable store", err, st.err())
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("abandoning waited for the hung write")
	}
}

// TestTxnCallsAfterATimeout: a caller's kept channel is not given to the
// call after one that timed out. The late result of the call given up on
// reaches the channel that call had, and the next call returns its own.
func TestTxnCallsAfterATimeout(t *testing.T) {
	t.Parallel()
	st, _, _ := newTestState()
	calls := newTxnCalls(st)
	defer calls.close()
	ctx := context.Background()
	if err := guardedTxn(ctx, st, time.Minute, "the first transaction", nil, calls, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	first := calls.done
	late := errors.New("the late result")
	release := make(chan struct{})
	err := guardedTxn(ctx, st, 20*time.Millisecond, "the hung transaction", nil, calls, func() error { <-release; return late })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung call: %v, want a timeout", err)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); len(first) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the late result never arrived")
		}
	}
	next, _, _ := newTestState() // a state not failed by the timeout
	if err := guardedTxn(ctx, next, time.Minute, "the next transaction", nil, calls, func() error { return nil }); err != nil {
		t.Fatalf("the call after the timeout returned %v, want its own nil", err)
	}
}
