package primary

import (
	"context"
	"sync"
	"sync/atomic"
)

// frontier tracks the publication frontier: the highest sequence such that
// every sequence at or below it is durable. The syncer (committer.go) answers
// groups in sequence order, so it moves the frontier to each group's last
// sequence once that group's fsync has returned.
type frontier struct {
	mu     sync.Mutex
	value  atomic.Uint64
	wake   chan struct{} // closed and replaced whenever the frontier advances
	notify chan struct{} // cap 1, non-blocking send on every advance
}

func (f *frontier) init() {
	f.wake = make(chan struct{})
	f.notify = make(chan struct{}, 1)
}

func (f *frontier) reset(v uint64) { f.value.Store(v) }

// advance moves the frontier to seq, which the caller knows to be durable
// together with every sequence below it.
func (f *frontier) advance(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq <= f.value.Load() {
		return
	}
	f.value.Store(seq)
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
// non-blocking send) whenever the frontier advances or a redrive returned
// dead letters to pending: whenever the outbox worker has new work. One
// receive may stand for several of them.
func (db *DB) Notify() <-chan struct{} { return db.frontier.notify }
