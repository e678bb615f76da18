// Package testsignal lets production code tell a test that a step happened,
// so the test waits for the step instead of sleeping. It is modelled on
// River's internal/testsupport/testsignal.
//
// A component holds TestSignal fields, unexported and zero in production,
// and calls Signal at the step. A zero TestSignal does nothing: Signal is a
// no-op that neither blocks nor allocates. A test calls Init before it starts
// the component, then WaitOrTimeout(t) to wait for the step and
// RequireEmpty(t) to assert that it has not happened (again).
package testsignal

import "time"

// TB is the part of testing.TB the signal uses. It is an interface of its
// own so that production packages holding a TestSignal do not link the
// testing package.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// WaitTimeout is how long WaitOrTimeout waits before failing the test. It
// bounds a hang; it is not a timing assumption.
const WaitTimeout = 10 * time.Second

// bufferSize is how many signals may be pending before Signal reports an
// overflow. Generous: a test that lets this many accumulate is not reading
// them.
const bufferSize = 1000

// TestSignal is a buffered signal carrying values of type T. The zero value
// is inert. Init must happen before any concurrent Signal (for example,
// before the goroutine that signals is started).
type TestSignal[T any] struct {
	tb TB
	ch chan T
}

// Init arms the signal for tb (a *testing.T or *testing.B).
func (s *TestSignal[T]) Init(tb TB) {
	s.tb = tb
	s.ch = make(chan T, bufferSize)
}

// Signal records v if the signal was initialised, and otherwise does
// nothing. It never blocks: with the buffer full it reports an error on the
// test (which is safe from any goroutine) and drops v.
func (s *TestSignal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.tb.Errorf("testsignal: buffer of %d full, signal dropped", bufferSize)
	}
}

// WaitC returns the channel the signals arrive on, for a test that selects
// on it together with other events. Before Init it is nil: a receive from
// it never completes.
func (s *TestSignal[T]) WaitC() <-chan T { return s.ch }

// WaitOrTimeout returns the oldest pending signal, waiting for one for up
// to WaitTimeout; it fails tb if none arrives, or if the signal was never
// initialised. Call it from the test's goroutine.
func (s *TestSignal[T]) WaitOrTimeout(tb TB) T {
	tb.Helper()
	var zero T
	if !s.initialised(tb) {
		return zero
	}
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		tb.Fatalf("testsignal: no signal after %v", WaitTimeout)
		return zero // not reached: Fatalf ends the test's goroutine
	}
}

// RequireEmpty fails tb if a signal is pending, or if the signal was never
// initialised. Call it from the test's goroutine.
func (s *TestSignal[T]) RequireEmpty(tb TB) {
	tb.Helper()
	if !s.initialised(tb) {
		return
	}
	select {
	case v := <-s.ch:
		tb.Fatalf("testsignal: want no signal, got %+v", v)
	default:
	}
}

// initialised reports whether Init was called, failing tb if not: waiting
// on a signal nobody armed is a bug of the test.
func (s *TestSignal[T]) initialised(tb TB) bool {
	if s.ch == nil {
		tb.Fatalf("testsignal: TestSignal used before Init")
		return false
	}
	return true
}
