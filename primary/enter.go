package primary

import "context"

// enter registers an in-flight operation; the returned function ends it.
func (db *DB) enter() (func(), error) {
	db.life.RLock()
	defer db.life.RUnlock()
	if db.closed {
		return nil, ErrClosed
	}
	if db.failed.Load() {
		return nil, ErrFailed
	}
	db.ops.Add(1)
	return db.opsDone, nil
}

// enterReady is enter, then waits until the undelivered index is built.
func (db *DB) enterReady(ctx context.Context) (func(), error) {
	done, err := db.enter()
	if err != nil {
		return nil, err
	}
	select {
	case <-db.ready: // built: ctx's Done channel is not made (an allocation per call)
		return done, nil
	default:
	}
	select {
	case <-db.ready:
		return done, nil
	case <-db.failCh:
		done()
		return nil, ErrFailed
	case <-ctx.Done():
		done()
		return nil, context.Cause(ctx)
	}
}
