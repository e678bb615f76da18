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

import (
	"runtime/debug"
	"sync"
)

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
	go call(fn, done)
	return done
}

// call runs fn and sends its Outcome on done; it returns whether fn
// returned. After runtime.Goexit in fn it does not return: the goroutine
// ends once the Outcome is sent.
func call(fn func() error, done chan<- Outcome) (returned bool) {
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
	return true
}

// Runner is Go on goroutines kept between calls. A call handed to an idle
// goroutine of the Runner neither starts a goroutine nor grows a new one's
// stack: a Pebble commit grows a fresh goroutine's stack from its first
// size several times over, and on a delivery's path that copying cost about
// 5 % of the CPU (docs/benchmarks/2026-12-01-multidb.md). A call that finds no goroutine idle
// (one still runs an earlier call, say one its caller stopped waiting for)
// starts one, which the Runner keeps too. A goroutine whose function did
// not return (runtime.Goexit, a panic) ends, as with Go. The zero Runner is
// not usable; make one with NewRunner, and Close it to end the idle
// goroutines.
type Runner struct {
	work chan job
	stop chan struct{}
	once sync.Once
}

type job struct {
	fn   func() error
	done chan Outcome
}

// NewRunner returns a Runner with no goroutine yet.
func NewRunner() *Runner {
	return &Runner{work: make(chan job), stop: make(chan struct{})}
}

// Go runs fn as the package's Go does, on an idle goroutine of r when there
// is one. After Close it still runs fn, each call on a goroutine of its own.
func (r *Runner) Go(fn func() error) <-chan Outcome {
	return r.GoOn(fn, make(chan Outcome, 1))
}

// GoOn is Go with a result channel of the caller's, so that a caller that
// makes one call after another need not make a channel for each: done must
// have room for one Outcome, be empty, and be no channel that an earlier
// call may still send on. A caller that received every earlier call's
// result on done can give it again; one that stopped waiting for a call (a
// timeout) must give a new channel from then on.
func (r *Runner) GoOn(fn func() error, done chan Outcome) <-chan Outcome {
	j := job{fn: fn, done: done}
	select {
	case r.work <- j: // an idle goroutine took it
	default:
		go r.serve(j)
	}
	return j.done
}

// serve runs j, then every call handed to it while idle, until Close or a
// call that did not return.
func (r *Runner) serve(j job) {
	for call(j.fn, j.done) {
		select {
		case j = <-r.work:
		case <-r.stop:
			return
		}
	}
}

// Close ends the idle goroutines, and each busy one once its call ends. It
// does not wait for them.
func (r *Runner) Close() { r.once.Do(func() { close(r.stop) }) }

// Call runs fn on the calling goroutine and sends its Outcome on done,
// which must have room for it: for an executor of its own that runs calls
// in order on one goroutine. It returns true when fn returned, false after
// a panic in fn (recovered, and reported on done). After runtime.Goexit in
// fn it does not return: the Outcome is sent and the calling goroutine
// ends, its deferred calls run.
func Call(fn func() error, done chan<- Outcome) bool { return call(fn, done) }

// Run is Go, waiting for the Outcome.
func Run(fn func() error) Outcome { return <-Go(fn) }
