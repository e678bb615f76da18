package testsignal

import (
	"sync"
	"testing"
)

func TestZeroValueIsInert(t *testing.T) {
	t.Parallel()
	var s TestSignal[int]
	s.Signal(1) // must neither block nor panic
	if s.ch != nil {
		t.Fatal("Signal armed an uninitialised signal")
	}
}

func TestSignalThenWait(t *testing.T) {
	t.Parallel()
	var s TestSignal[string]
	s.Init(t)
	s.RequireEmpty(t)
	s.Signal("a")
	s.Signal("b")
	if got := s.WaitOrTimeout(t); got != "a" {
		t.Fatalf("first signal %q, want a", got)
	}
	if got := s.WaitOrTimeout(t); got != "b" {
		t.Fatalf("second signal %q, want b", got)
	}
	s.RequireEmpty(t)
}

func TestWaitForAnotherGoroutine(t *testing.T) {
	t.Parallel()
	var s TestSignal[struct{}]
	s.Init(t)
	var wg sync.WaitGroup
	wg.Go(func() { s.Signal(struct{}{}) })
	s.WaitOrTimeout(t)
	wg.Wait()
	s.RequireEmpty(t)
	select {
	case <-s.WaitC():
		t.Fatal("WaitC delivered a signal already consumed")
	default:
	}
}

// recorder is a testing.TB that records failures instead of ending the
// test, so the failure paths can be checked.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, format)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(r)
}

func TestRequireEmptyFailsOnAPendingSignal(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	var s TestSignal[int]
	s.Init(rec)
	s.Signal(7)
	func() {
		defer func() {
			if r := recover(); r != rec {
				t.Fatalf("recovered %v, want the recorder's Fatalf", r)
			}
		}()
		s.RequireEmpty(rec)
	}()
	if len(rec.failed) != 1 {
		t.Fatalf("failures %q, want one", rec.failed)
	}
}

func TestSignalNeverBlocks(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	var s TestSignal[int]
	s.Init(rec)
	for i := range bufferSize + 1 {
		s.Signal(i)
	}
	if len(rec.failed) != 1 {
		t.Fatalf("failures %q, want one overflow report", rec.failed)
	}
	if got := s.WaitOrTimeout(rec); got != 0 {
		t.Fatalf("oldest signal %d, want 0", got)
	}
}

// TestUseBeforeInitFailsTheTest: waiting on a signal that was never
// initialised fails the test instead of panicking or hanging.
func TestUseBeforeInitFailsTheTest(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	var s TestSignal[int]
	for _, use := range []func(){func() { s.WaitOrTimeout(rec) }, func() { s.RequireEmpty(rec) }} {
		func() {
			defer func() {
				if r := recover(); r != rec {
					t.Fatalf("recovered %v, want the recorder's Fatalf", r)
				}
			}()
			use()
		}()
	}
	if len(rec.failed) != 2 {
		t.Fatalf("failures %q, want two", rec.failed)
	}
	if s.WaitC() != nil {
		t.Fatal("WaitC of an uninitialised signal is not nil")
	}
}
