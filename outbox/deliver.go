package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

func (p *pass) claimAndDeliver(run []primary.Intent, keys []event.Key, records [][]byte, after []primary.Intent) error {
	// The previous group's completion is applied before this claim, so the
	// claim's fsync makes it durable, and a failed completion stops the
	// pass before anything more is claimed.
	if err := p.awaitFlush(); err != nil {
		return err
	}
	runCtx, claimed, err := p.w.claim(p.ctx, run, p.now().Add(Lease))
	if err != nil {
		return p.claimFailed(err)
	}
	p.res.Claimed += len(claimed)
	return p.deliver(runCtx, claimed, keys, records, after)
}

// claimFailed handles a claim that failed: a conflict halts the pass (the
// index moved under the worker, which it should not: one worker per
// database), to be rescanned by the next one.
func (p *pass) claimFailed(err error) error {
	if errors.Is(err, primary.ErrConflict) {
		p.w.log.Warn("outbox claim conflict; rescanning", zap.Error(err))
		p.halted = true
		return nil
	}
	return fmt.Errorf("outbox: claim: %w", err)
}

// deliver delivers the claimed members of one run, one archive transaction
// each, and groups the accepted ones for completion. after is the rest of
// the page: once the run's first member is accepted, the next run is formed
// from it and claimed while this one is delivered (prepareNext).
func (p *pass) deliver(runCtx context.Context, claimed []primary.Intent, keys []event.Key, records [][]byte, after []primary.Intent) error {
	acc := acceptContext{parent: runCtx}
	defer acc.release()
	for k := range claimed {
		if err := p.ctx.Err(); err != nil {
			// Stopping: the members not reached stay delivering under
			// their lease (their attempt counted), as after a crash.
			return context.Cause(p.ctx)
		}
		m := claimed[k]
		if now := p.now(); !now.Before(m.LeaseDeadline) {
			var err error
			if m, err = p.w.renew(runCtx, m, now.Add(Lease)); err != nil {
				return fmt.Errorf("outbox: renew lease: %w", err)
			}
			p.res.Renewed++
		}
		outcome, err := p.w.accept(acc.get(), keys[k], records[k])
		if err != nil {
			if ferr := p.flush(flushFailure); ferr != nil {
				return ferr
			}
			if p.halted { // the group before m was not confirmed: m and the rest are retried
				return p.retryRest(claimed[k:])
			}
			if deliverytype.ClassOf(err) == deliverytype.Conflict {
				if err := p.conflict(m); err != nil {
					return err
				}
				continue // the rest of the run is delivered as usual
			}
			return p.halt(claimed[k:], err)
		}
		if outcome == deliverytype.Duplicate {
			p.res.Duplicates++
		} else {
			p.res.Stored++
		}
		p.delivering()
		p.group = append(p.group, m)
		p.groupCtx = append(p.groupCtx, runCtx)
		if len(p.group) == MaxGroup {
			if err := p.flush(flushBound); err != nil {
				return err
			}
			if p.halted { // not confirmed: the members not reached are retried too
				return p.retryRest(claimed[k+1:])
			}
		}
		if k == 0 {
			derr, err := p.prepareNext(keys[1:], records[1:], after)
			if err != nil || p.halted {
				return err
			}
			if derr != nil {
				// The destination failed its quota check: handled as a
				// failed acceptance of the run's next member would be.
				if err := p.flush(flushFailure); err != nil {
					return err
				}
				if p.halted {
					return p.retryRest(claimed[1:])
				}
				return p.halt(claimed[1:], derr)
			}
		}
	}
	return nil
}

// acceptReuse is how long a run's acceptance context serves acceptances
// after it was made: each acceptance has at least DeliveryTimeout minus
// acceptReuse, and at most DeliveryTimeout, before its context ends.
const acceptReuse = 100 * time.Millisecond

// acceptContext is the context the acceptances of one claim run are made
// under: the run's context (its claim span, for the archive's transaction
// spans and the exemplars) without the pass's cancellation, so that a
// stopping worker lets the transaction in flight finish (see pass), and
// with a deadline DeliveryTimeout after the context was made, so that no
// acceptance waits longer. One context serves the acceptances made within
// acceptReuse of it, most of a run on a busy worker, instead of a context
// with its timer and channel per event (2.7 % of the process's CPU samples
// while four databases drained on two cores, docs/benchmarks.md).
type acceptContext struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	made   time.Time
}

// get returns the context for the next acceptance: the current one, or a
// new one once the current one is acceptReuse old.
func (a *acceptContext) get() context.Context {
	now := time.Now()
	if a.ctx == nil || now.Sub(a.made) >= acceptReuse {
		a.release()
		a.ctx, a.cancel = context.WithDeadline(context.WithoutCancel(a.parent), now.Add(DeliveryTimeout))
		a.made = now
	}
	return a.ctx
}

// release ends the current context, if any.
func (a *acceptContext) release() {
	if a.cancel != nil {
		a.cancel()
		a.ctx, a.cancel = nil, nil
	}
}

// delivering turns health healthy at the pass's first acceptance: the
// archive was validated (it is open, and the pass probed it first if the
// worker was unhealthy) and it accepts events, so delivery works. A worker
// catching up on a backlog after a start or an outage is thus healthy while
// it delivers, not only once its pass reaches the end of the index. An
// identity conflict still keeps health degraded (healthState.set), and a
// pass whose worker is stopping changes nothing (see fail).
func (p *pass) delivering() {
	if p.accepted || p.ctx.Err() != nil {
		return
	}
	p.accepted = true
	p.w.health.set(StateHealthy, deliverytype.ReasonNone, p.now())
	p.w.halts.Clear()
}
