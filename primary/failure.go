package primary

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/goexit"
)

// fail marks the store failed: from now on every operation returns
// ErrFailed. It is called for WAL write/sync errors and corruption.
func (db *DB) fail(err error) {
	db.failOne.Do(func() {
		db.failErr.Store(&err)
		db.failed.Store(true)
		db.idx.degrade()
		// The cause is logged as its path-free text: zap.Error would add
		// the verbose form of a Pebble error, its stack trace.
		db.log.Error("primary store failed; durability can no longer be promised, the server must stop",
			zap.String("error", pathless.Message(err)))
		close(db.failCh)
	})
}

// Failed returns a channel closed when the store has failed, and the cause.
func (db *DB) Failed() <-chan struct{} { return db.failCh }

// Err returns the cause of the failure, or nil while the store is healthy.
func (db *DB) Err() error {
	if p := db.failErr.Load(); p != nil {
		// Pebble's errors name files by their full path and carry stacks.
		return fmt.Errorf("%w: %w", ErrFailed, pathless.Clean(*p))
	}
	return nil
}

// guard runs fn, which writes to the store, on its own goroutine (see
// internal/store/goexit). Pebble reports a fatal commit error through
// Logger.Fatalf in the committing goroutine; our logger marks the DB failed
// and ends that goroutine with runtime.Goexit, so the caller here receives
// ErrFailed instead of the process exiting. A panic in fn (a storage-engine
// invariant) fails the DB the same way, its stack logged: the server then
// stops with an error, not a stack trace. Write errors that fn returns must
// go through writeFailed.
func (db *DB) guard(fn func() error) error {
	var o goexit.Outcome
	if db.guards != nil {
		// guard always receives the one Outcome a call sends, so its
		// channel is empty afterwards and can serve the next call.
		done := outcomeChans.Get().(chan goexit.Outcome)
		o = <-db.guards.GoOn(fn, done)
		outcomeChans.Put(done)
	} else {
		o = <-goexit.Go(fn)
	}
	if o.Returned {
		return o.Err
	}
	if o.Panic != nil {
		// The stack names source files of the build: for debugging only.
		db.log.Debug("primary store write panicked", zap.String("panic", pathless.Text(fmt.Sprint(o.Panic))), zap.ByteString("stack", o.Stack))
		db.fail(fmt.Errorf("store write panicked: %v", o.Panic))
		return ErrFailed
	}
	db.fail(errors.New("store write ended without returning"))
	return ErrFailed
}

// outcomeChans holds guard's result channels between calls.
var outcomeChans = sync.Pool{New: func() any { return make(chan goexit.Outcome, 1) }}

// closeGuards ends guard's idle goroutines (a later call runs on one of its
// own).
func (db *DB) closeGuards() {
	if db.guards != nil {
		db.guards.Close()
	}
}

// writeFailed fails the store after a write (apply or sync) error: a write
// Pebble refused leaves its WAL in an unknown state, so durability can no
// longer be promised.
func (db *DB) writeFailed(err error) error {
	db.fail(err)
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// pebbleLogger routes Pebble's logging into zap. Fatalf never exits the
// process: it fails the DB and ends the calling goroutine.
type pebbleLogger struct{ db *DB }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.db.log.Debug(fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.db.log.Error(fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.db.fail(newFatalError(format, args...))
	runtime.Goexit()
}

// fatalError is what Pebble reported through Logger.Fatalf: its message
// without paths or stack lines (pathless.Text; some of Pebble's fatal
// messages quote a file's path or embed debug.Stack), and the errors among
// its arguments, so that errors.Is still sees their causes (a full
// filesystem, an I/O error).
type fatalError struct {
	msg    string
	causes []error
}

func newFatalError(format string, args ...any) fatalError {
	e := fatalError{msg: pathless.Text(fmt.Sprintf(format, args...))}
	for _, a := range args {
		if err, ok := a.(error); ok {
			e.causes = append(e.causes, err)
		}
	}
	return e
}

func (e fatalError) Error() string   { return e.msg }
func (e fatalError) Unwrap() []error { return e.causes }
