package primary

import (
	"context"
	"sync"
	"sync/atomic"
)

// frontier tracks the publication frontier: the highest sequence such that
// every sequence at or below it is durable and acknowledged. Commits become
// durable out of order (group commit wakes waiters in any order), so
// completions are recorded and the frontier advances only while the next
// sequence is done.
type frontier struct {
	mu     sync.Mutex
	value  atomic.Uint64
	done   map[uint64]struct{}
	wake   chan struct{} // closed and replaced whenever the frontier advances
	notify chan struct{} // cap 1, non-blocking send on every advance
}

func (f *frontier) init() {
	f.done = make(map[uint64]struct{})
	f.wake = make(chan struct{})
	f.notify = make(chan struct{}, 1)
}

func (f *frontier) reset(v uint64) { f.value.Store(v) }

// complete records that seq is durable and advances the frontier as far as
// contiguity allows.
func (f *frontier) complete(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.value.Load()
	if seq <= v {
		return
	}
	f.done[seq] = struct{}{}
	for {
		if _, ok := f.done[v+1]; !ok {
			break
		}
		delete(f.done, v+1)
		v++
	}
	if v == f.value.Load() {
		return
	}
	f.value.Store(v)
	close(f.wake)
	f.wake = make(chan struct{})
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// wait blocks until the frontier reaches seq, the store fails, or ctx ends.
func (f *frontier) wait(ctx context.Context, seq uint64, failed <-chan struct{}) error {
	for {
		f.mu.Lock()
		if f.value.Load() >= seq {
			f.mu.Unlock()
			return nil
		}
		w := f.wake
		f.mu.Unlock()
		select {
		case <-w:
		case <-failed:
			return ErrFailed
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Frontier returns the publication frontier: the highest commit sequence
// such that every sequence at or below it is durable and acknowledged. It
// reads no store.
func (db *DB) Frontier() uint64 { return db.frontier.value.Load() }

// Notify returns a channel with capacity 1 that receives a value (by a
// non-blocking send) whenever the frontier advances. One receive may stand
// for several advances.
func (db *DB) Notify() <-chan struct{} { return db.frontier.notify }
