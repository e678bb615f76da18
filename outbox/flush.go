package outbox

import (
	"context"
	"fmt"

	"github.com/riffdb/riffdb/primary"
)

// Completion flush reasons (the metric label).
const (
	flushBound   = "bound"
	flushPageEnd = "page_end"
	flushFailure = "failure"
)

// flush completes the accepted group. A flush at the bound or at page end
// runs in its own goroutine while the worker loads and fits the next run
// (the completion is a primary transaction without an fsync: CPU work that
// can overlap); it is awaited before the next claim, the next flush, the
// next page scan and the end of the pass. A flush before failure handling
// completes before it returns.
//
// The completion runs without the pass's cancellation: it is a short
// primary transaction without an fsync, and a flush that a cancelled
// context skipped would leave accepted members delivering, to be claimed
// and delivered once more after their lease.
func (p *pass) flush(reason string) error {
	if err := p.awaitFlush(); err != nil {
		return err
	}
	if len(p.group) == 0 {
		return nil
	}
	group, ctxs := p.group, p.groupCtx
	// The flush keeps group until it is awaited; the next group goes into
	// the array of the group completed before it (awaitFlush), or a new
	// one with room for a whole group, instead of growing to it.
	p.group, p.groupCtx = p.spare, ctxs[:0]
	if p.group == nil {
		p.group = make([]primary.Intent, 0, MaxGroup)
	}
	p.spare = nil
	if confirmed, err := p.confirm(group); err != nil || !confirmed {
		clear(ctxs)
		return err
	}
	p.w.archived(ctxs, group)
	clear(ctxs) // no run's context (its span) is kept past its group
	p.unsynced = true
	p.flushing = p.w.startFlush(context.WithoutCancel(p.ctx), group, reason)
	if reason == flushFailure {
		return p.awaitFlush()
	}
	return nil
}

// completionFlush is the completion of one accepted group on the primary,
// in flight: a flush at the bound or at page end runs in a goroutine of its
// own, a flush before failure handling has run when startFlush returns.
type completionFlush struct {
	done  chan error
	group []primary.Intent
}

// startFlush starts the completion of group (see pass.flush).
func (w *Worker) startFlush(ctx context.Context, group []primary.Intent, reason string) *completionFlush {
	f := &completionFlush{done: make(chan error, 1), group: group}
	if reason == flushFailure {
		f.done <- w.complete(ctx, group, reason)
		return f
	}
	w.helpers.Go(func() error {
		f.done <- w.complete(ctx, group, reason)
		return nil
	})
	return f
}

// wait returns the group the flush completed, or its error. Once it
// returned, nothing reads the group any more.
func (f *completionFlush) wait() ([]primary.Intent, error) {
	if err := <-f.done; err != nil {
		return nil, err
	}
	return f.group, nil
}

// confirm asks the destination to confirm the group's acceptances (they are
// durable, in the store that took them) before they are completed. If it cannot, nothing of the group is
// completed: the pass halts on the failure and each member is retried (or
// dead-lettered once it has used every attempt), so that it is delivered
// again, as a Duplicate where its record did reach the archive. Every caller
// of flush that goes on after it checks p.halted.
func (p *pass) confirm(group []primary.Intent) (confirmed bool, err error) {
	cerr := p.w.dst.Confirm(context.WithoutCancel(p.ctx))
	if cerr == nil {
		return true, nil
	}
	return false, p.halt(group, fmt.Errorf("outbox: the archive could not confirm %d accepted events: %w", len(group), marked(cerr)))
}

// awaitFlush waits for the completion flush in flight, if any.
func (p *pass) awaitFlush() error {
	if p.flushing == nil {
		return nil
	}
	group, err := p.flushing.wait()
	p.flushing = nil
	if err != nil {
		return fmt.Errorf("outbox: complete: %w", err)
	}
	p.res.Completed += len(group)
	p.spare = group[:0]
	return nil
}
