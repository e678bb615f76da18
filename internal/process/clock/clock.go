// Package clock is riffdb's one clock shape. Everything with leases, due
// times, retries, creation times or durations takes a Clock, so tests
// inject a fake one instead of sleeping (STYLE 13, 20).
package clock

import "time"

// Clock tells the time and waits for it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
var Real Clock = real{}

type real struct{}

func (real) Now() time.Time                         { return time.Now() }
func (real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Func is a Clock that reads the time from a function and waits in real
// time: for code that only reads the time, and for tests that pin it.
type Func func() time.Time

// Now implements Clock.
func (f Func) Now() time.Time { return f() }

// After implements Clock with a real timer.
func (Func) After(d time.Duration) <-chan time.Time { return time.After(d) }
