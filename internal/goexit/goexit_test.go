package goexit_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/riffdb/riffdb/internal/goexit"
)

func TestRunReturned(t *testing.T) {
	t.Parallel()
	want := errors.New("write refused")
	got := goexit.Run(func() error { return want })
	if !got.Returned || !errors.Is(got.Err, want) || got.Panic != nil {
		t.Fatalf("Run = %+v, want returned with %v", got, want)
	}
	if got := goexit.Run(func() error { return nil }); !got.Returned || got.Err != nil {
		t.Fatalf("Run = %+v, want returned with nil", got)
	}
}

func TestRunGoexit(t *testing.T) {
	t.Parallel()
	got := goexit.Run(func() error {
		runtime.Goexit()
		return errors.New("unreachable")
	})
	if got.Returned || got.Err != nil || got.Panic != nil {
		t.Fatalf("Run = %+v, want ended without returning and no panic", got)
	}
}

func TestRunPanic(t *testing.T) {
	t.Parallel()
	got := goexit.Run(func() error { panic("wal rotation failed") })
	if got.Returned || got.Err != nil || got.Panic != "wal rotation failed" || len(got.Stack) == 0 {
		t.Fatalf("Run = %+v, want ended without returning with the panic and its stack", got)
	}
}

func TestRunPanicNil(t *testing.T) {
	t.Parallel()
	got := goexit.Run(func() error { panic(nil) })
	var pe *runtime.PanicNilError
	if got.Returned || !errors.As(asError(got.Panic), &pe) {
		t.Fatalf("Run = %+v, want a reported panic(nil)", got)
	}
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}

// TestGoBuffered: a caller that stops waiting (a timeout) leaves the
// goroutine a place for its one Outcome, so it ends instead of leaking.
func TestGoBuffered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	done := goexit.Go(func() error { <-release; return nil })
	if cap(done) != 1 {
		t.Fatalf("cap = %d, want 1", cap(done))
	}
	close(release)
	if got := <-done; !got.Returned {
		t.Fatalf("Go = %+v, want returned", got)
	}
}
