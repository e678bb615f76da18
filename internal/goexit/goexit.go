// Package goexit runs a function on a goroutine of its own and reports
// whether the function returned.
//
// Pebble reports a fatal write error by calling its Logger's Fatalf in the
// goroutine that met it. The stores of this repository (primary, archive)
// give Pebble a logger whose Fatalf records the failure and ends that
// goroutine with runtime.Goexit instead of exiting the process. A call into
// Pebble therefore runs on a goroutine of its own, through Go or Run, so
// that its caller survives and learns that the call ended without returning;
// what a store does then (fail closed, map the error) stays its own.
package goexit

import "runtime/debug"

// Outcome is how a function run by Go or Run ended.
type Outcome struct {
	// Returned is false when the goroutine ended without the function
	// returning: runtime.Goexit, or a panic.
	Returned bool
	// Err is what the function returned; nil when it did not return.
	Err error
	// Panic is the recovered value when the function panicked (nil after
	// runtime.Goexit), and Stack the panicking goroutine's stack.
	Panic any
	Stack []byte
}

// Go runs fn on a new goroutine and returns a channel that receives its
// Outcome once. The channel has room for that one value, so a caller that
// stops waiting (a timeout) leaks nothing. A panic in fn is recovered and
// reported in the Outcome, never left to end the process.
func Go(fn func() error) <-chan Outcome {
	done := make(chan Outcome, 1)
	go func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			o := Outcome{Panic: recover()}
			if o.Panic != nil {
				o.Stack = debug.Stack()
			}
			done <- o
		}()
		err := fn()
		returned = true
		done <- Outcome{Returned: true, Err: err}
	}()
	return done
}

// Run is Go, waiting for the Outcome.
func Run(fn func() error) Outcome { return <-Go(fn) }
