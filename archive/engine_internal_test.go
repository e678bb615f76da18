package archive

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) || Classify(err) != ClassCapacity {
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
	st.backgroundError(errors.New("again"))
	entries := logs.All()
	if len(entries) != 2 || entries[1].ContextMap()["suppressed"] != int64(999) {
		t.Fatalf("entries %v", entries)
	}
	if st.err() != nil {
		t.Fatal("a background error alone must not make the store unusable")
	}
}
