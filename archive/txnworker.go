package archive

import (
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/riffdb/riffdb/internal/goexit"
)

// txnWorker is the long-lived goroutine that runs an engine's transactions
// (guardedTxn). A transaction run on a new goroutine grows that goroutine's
// stack inside Pebble's Get on every call (runtime.newstack was ~2 % of the
// process's CPU samples in BenchmarkAcceptTxnWorker); the worker's stack
// stays grown between transactions.
//
// The worker does not change where a transaction runs relative to its
// caller: it is still a goroutine of its own, so Pebble's Fatalf (runtime.Goexit) and
// panics end it and not the caller, and a caller that stops waiting (the
// timeout, an abandoned write) simply leaves it behind. Precisely:
//
//   - run hands a transaction to the worker only while the worker is idle
//     (it claims it with a compare-and-swap, so it never waits for it); a
//     busy or stuck worker, or none after stop, makes run start a new
//     goroutine for it instead, as before the worker.
//   - A transaction that panics or calls runtime.Goexit ends the worker after
//     its outcome is recorded; the next run starts a replacement and hands
//     it that transaction.
//   - A worker stuck in a transaction whose caller timed out is abandoned,
//     like any goroutine of such a call: the store is marked unusable then,
//     so no later transaction is handed to it.
//   - stop (closeDB) ends the waiting worker, and a busy one once its
//     transaction returns; no worker is started after it.
//
// The zero value is ready to use; the first run starts the worker.
type txnWorker struct {
	jobs chan txnJob   // room for the one job a run claimed the worker for
	quit chan struct{} // closed by stop
	// idle is true while the worker waits for a transaction that no run
	// has claimed yet. The worker sets it before it sends an outcome, so a
	// caller's next transaction finds it idle.
	idle atomic.Bool

	mu      sync.Mutex // guards running, stopped, and making jobs and quit
	running bool       // a worker goroutine exists (waiting, busy or stuck)
	stopped bool

	live      sync.WaitGroup // worker goroutines not yet ended
	spawned   atomic.Int64   // worker goroutines started
	fallbacks atomic.Int64   // transactions run on a new goroutine
}

// txnJob is one transaction: fn(phase), whose outcome goes to done (room
// for one, so a caller that stopped waiting leaks nothing).
type txnJob struct {
	fn    func(*txnPhase) error
	phase *txnPhase
	done  chan goexit.Outcome
}

// run runs fn(phase) on the worker, or on a new goroutine when the worker
// is busy or stopped, and returns the channel that receives its outcome
// once, as goexit.Go does.
func (w *txnWorker) run(fn func(*txnPhase) error, phase *txnPhase) <-chan goexit.Outcome {
	j := txnJob{fn: fn, phase: phase, done: make(chan goexit.Outcome, 1)}
	if w.idle.CompareAndSwap(true, false) {
		w.jobs <- j
		return j.done
	}
	w.mu.Lock()
	if !w.running && !w.stopped {
		if w.jobs == nil {
			w.jobs = make(chan txnJob, 1)
			w.quit = make(chan struct{})
		}
		w.running = true
		w.live.Add(1)
		w.spawned.Add(1)
		w.mu.Unlock()
		go w.loop(j)
		return j.done
	}
	w.mu.Unlock()
	w.fallbacks.Add(1)
	go w.exec(j, false)
	return j.done
}

// loop is a worker goroutine: it runs j, then every transaction handed to
// it, until stop or until a transaction does not return.
func (w *txnWorker) loop(j txnJob) {
	defer w.live.Done()
	for {
		if !w.exec(j, true) {
			return
		}
		select {
		case j = <-w.jobs:
		case <-w.quit:
			if w.idle.CompareAndSwap(true, false) {
				w.ended()
				return
			}
			j = <-w.jobs // a run claimed the worker just before stop
		}
	}
}

// exec runs j and sends its outcome. It reports false when fn panicked
// (the panic is recovered into the outcome); after runtime.Goexit it does
// not return at all. On the worker (worker true), either ends the worker,
// and the worker is marked ended before the outcome is sent, so that the
// caller's next run starts a replacement.
func (w *txnWorker) exec(j txnJob, worker bool) (returned bool) {
	defer func() {
		if returned {
			return
		}
		o := goexit.Outcome{Panic: recover()}
		if o.Panic != nil {
			o.Stack = debug.Stack()
		}
		if worker {
			w.ended()
		}
		j.done <- o
	}()
	err := j.fn(j.phase)
	returned = true
	if worker {
		w.idle.Store(true)
	}
	j.done <- goexit.Outcome{Returned: true, Err: err}
	return true
}

// ended records that the worker goroutine is ending.
func (w *txnWorker) ended() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = false
}

// stop ends the worker (see txnWorker); later transactions each run on a
// new goroutine. It does not wait, and it is idempotent.
func (w *txnWorker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	if w.quit != nil {
		close(w.quit)
	}
}
