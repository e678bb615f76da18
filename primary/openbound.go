package primary

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/store/goexit"
)

// DefaultStorageFullWait is how long Open keeps the storage engine retrying
// on a full filesystem before it gives up with ErrStorageFull, when
// Options.StorageFullWait is 0: long enough for space freed by a rotated
// log or a removed temporary file, short enough that a start on a full disk
// fails visibly instead of hanging.
const DefaultStorageFullWait = 5 * time.Second

// storageFullBackoff bounds the pause between two of the storage engine's
// attempts while Open waits on a full filesystem.
const (
	storageFullFirstPause = 50 * time.Millisecond
	storageFullMaxPause   = time.Second
)

// noSpace reports whether err says that the filesystem (or the user's
// quota on it) is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// openResult is what openStore returned, read by openBounded once the
// goroutine that ran it has reported.
type openResult struct {
	store *pebble.DB
	lock  *pebble.Lock
	fresh bool
	floor floorRecord
	err   error
}

// openBounded runs openStore on its own goroutine and waits for it, for ctx
// and for a full filesystem, whichever comes first.
//
// pebble.Open cannot be interrupted, and on a full filesystem it does not
// return: an existing store's WAL is replayed into a memtable that Open
// flushes before it returns, and Pebble retries a failed flush at once,
// without backoff and without end (DB.flush, "TODO: backoff"), while Open
// waits for it. The store's BackgroundError handler sees each failure; while
// Open runs, a no-space failure makes the retrying goroutine pause (50 ms,
// doubling to 1 s) so the retries cost no CPU, and starts the bound: Open is
// given wait (DefaultStorageFullWait) more, with one warning logged, then
// fails with ErrStorageFull. When Pebble ends instead (a MANIFEST write that
// failed calls Logger.Fatalf, whose goroutine pebbleLogger ends: Open's own
// or the flush's, which Open would wait for in vain), Open fails at once,
// with ErrStorageFull when the cause was a full filesystem.
//
// When openBounded gives up (the bound or ctx), the open is abandoned: the
// retrying goroutine, at its next failure, ends itself (runtime.Goexit)
// instead of writing again, which leaves pebble.Open waiting for good, with
// the directory's lock held until the process exits; an open that completes
// after all is closed again. So nothing is written after the failure is
// reported, and the store is left as the last failed flush left it: the
// WAL replayed again by the next start, the partial table removed by Pebble.
func (db *DB) openBounded(ctx context.Context, vfsys vfs.FS, dir string, po *pebble.Options, wait time.Duration) (openResult, error) {
	w := &openWatch{clock: db.opts.Clock, full: make(chan struct{}), abandon: make(chan struct{}), opening: true}
	onBackground := po.EventListener.BackgroundError
	po.EventListener.BackgroundError = func(err error) {
		if onBackground != nil {
			onBackground(err)
		}
		w.backgroundError(err)
	}
	var res openResult
	done := goexit.Go(func() error {
		res.store, res.lock, res.fresh, res.floor, res.err = openStore(vfsys, dir, po, db.log, db.decide)
		w.opened()
		return res.err
	})
	full := w.full
	var bound <-chan time.Time
	var cause error
	for cause == nil {
		select {
		case o := <-done:
			switch {
			case o.Returned && noSpace(res.err):
				return res, fmt.Errorf("%w: %w", ErrStorageFull, res.err)
			case o.Returned:
				return res, res.err
			case o.Panic != nil:
				return res, fmt.Errorf("primary: the storage engine panicked while opening the store: %v", o.Panic)
			}
			// Pebble called Logger.Fatalf: db.fail recorded why.
			err := errors.New("primary: the storage engine failed while opening the store")
			if p := db.failErr.Load(); p != nil {
				err = fmt.Errorf("%w: %w", err, *p)
			}
			if noSpace(err) {
				err = fmt.Errorf("%w: %w", ErrStorageFull, err)
			}
			return res, err
		case <-db.failCh:
			// Pebble called Logger.Fatalf on another goroutine (the flush
			// of the replayed log could not write its manifest edit): that
			// goroutine is gone, and Open would wait for it for good.
			cause = db.openFailed(fmt.Errorf("primary: the storage engine failed while opening the store: %w", db.Err()))
		case <-full:
			full = nil
			db.log.Warn("the database's filesystem is full: the storage engine cannot flush the log it replayed; "+
				"retrying until the bound, then the start fails (free space on the database's filesystem)",
				zap.Duration("bound", wait))
			bound = w.clock.After(wait)
		case <-bound:
			cause = fmt.Errorf("%w: the storage engine could not write the store within %s", ErrStorageFull, wait)
		case <-ctx.Done():
			cause = fmt.Errorf("primary: opening the store was interrupted: %w", context.Cause(ctx))
		}
	}
	w.abandonOpen()
	go func() {
		// An open that completes after all is closed again; one that
		// ended midway (Fatalf) or was parked holds nothing to close here.
		if o := <-done; o.Returned && res.err == nil {
			_ = res.store.Close()
			_ = res.lock.Close()
		}
	}()
	return openResult{}, cause
}

// openWatch follows the storage engine's background errors while Open runs.
type openWatch struct {
	clock   clock.Clock
	full    chan struct{} // closed at the first no-space failure during Open
	abandon chan struct{} // closed when openBounded gives up

	mu       sync.Mutex
	opening  bool
	sawFull  bool
	pause    time.Duration
	quitting bool
}

// backgroundError is the part of the store's BackgroundError handler that
// acts during Open (see openBounded). It runs on the goroutine of the failed
// flush, which holds the store's mutex: Open, waiting for the flush, needs
// nothing else of it.
func (w *openWatch) backgroundError(err error) {
	w.mu.Lock()
	if !w.opening || (!noSpace(err) && !w.quitting) {
		w.mu.Unlock()
		return
	}
	if !w.sawFull {
		w.sawFull = true
		close(w.full)
	}
	w.pause = min(max(2*w.pause, storageFullFirstPause), storageFullMaxPause)
	pause, quitting := w.pause, w.quitting
	w.mu.Unlock()
	if !quitting {
		select {
		case <-w.clock.After(pause):
			return
		case <-w.abandon:
		}
	}
	// The open was abandoned: end this goroutine rather than let the
	// storage engine write again (its deferred unlock of the store runs).
	runtime.Goexit()
}

// opened records that Open returned: background errors from now on are the
// running store's, logged and retried as Pebble does.
func (w *openWatch) opened() {
	w.mu.Lock()
	w.opening = false
	w.mu.Unlock()
}

// abandonOpen records that openBounded gave up.
func (w *openWatch) abandonOpen() {
	w.mu.Lock()
	w.quitting = true
	w.mu.Unlock()
	close(w.abandon)
}

// openFailed is err, a failure of Open after the store was opened, matching
// ErrStorageFull as well when err or the store's failure says that the
// filesystem is full (a new database's first commit fails that way: its
// WAL write reaches Logger.Fatalf, and the commit returns ErrFailed).
func (db *DB) openFailed(err error) error {
	if errors.Is(err, ErrStorageFull) {
		return err
	}
	if noSpace(err) {
		return fmt.Errorf("%w: %w", ErrStorageFull, err)
	}
	if p := db.failErr.Load(); p != nil && noSpace(*p) {
		return fmt.Errorf("%w: %w: %w", ErrStorageFull, err, *p)
	}
	return err
}
