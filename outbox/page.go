package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// page forms and delivers claim runs over one scan page.
func (p *pass) page(page []primary.Intent) error {
	for i := 0; i < len(page); {
		if err := p.ctx.Err(); err != nil {
			return context.Cause(p.ctx)
		}
		if nx := p.next; nx != nil {
			// The run claimed while the one before it was delivered
			// (prepareNext) starts here.
			p.next = nil
			runCtx, claimed, err := p.awaitClaim(nx)
			if err != nil || p.halted {
				return err
			}
			if err := p.deliver(runCtx, claimed, nx.keys, nx.records, page[i+len(nx.run):]); err != nil || p.halted {
				return err
			}
			i += len(nx.run)
			continue
		}
		now := p.now()
		in := page[i]
		if !p.due(in, now) {
			i++
			continue
		}
		if p.exhausted(in) {
			if err := p.flush(flushFailure); err != nil || p.halted {
				return err
			}
			// Its last failure is the one its last retry recorded.
			if err := p.deadLetter(in, "attempts_exhausted", primary.Failure{}); err != nil {
				return err
			}
			i++
			continue
		}
		run := p.form(page[i:], now)
		keys, records, err := p.load(run)
		if err != nil {
			return err
		}
		n, err := p.w.dst.Fit(context.WithoutCancel(p.ctx), keys, records)
		if err != nil {
			if ferr := p.flush(flushFailure); ferr != nil {
				return ferr
			}
			return p.fail(err)
		}
		if n == 0 {
			// Too big even alone: pause without spending an attempt.
			if err := p.flush(flushFailure); err != nil {
				return err
			}
			return p.fail(errNoFit)
		}
		if err := p.claimAndDeliver(run[:n], keys[:n], records[:n], page[i+n:]); err != nil || p.halted {
			return err
		}
		i += n
	}
	return nil
}

func (p *pass) due(in primary.Intent, now time.Time) bool {
	switch in.State {
	case primary.IntentPending:
		return true
	case primary.IntentRetryScheduled:
		if in.NextAttempt.After(now) {
			if p.nextDue.IsZero() || in.NextAttempt.Before(p.nextDue) {
				p.nextDue = in.NextAttempt
			}
			return false
		}
		return true
	case primary.IntentDelivering:
		// Only an abandoned delivery (its lease passed) is due again; its
		// claim already counted as an attempt.
		return !now.Before(in.LeaseDeadline)
	}
	return false // dead letters are never retried automatically
}

// exhausted reports whether in has used its attempt budget.
func (p *pass) exhausted(in primary.Intent) bool { return in.Attempts >= uint32(p.w.opts.MaxAttempts) }

// form returns the claim run that starts at rest[0], which is due and has
// attempts left: up to MaxRun consecutive intents that are all due at now
// and have attempts left.
func (p *pass) form(rest []primary.Intent, now time.Time) []primary.Intent {
	j := 1
	for j < len(rest) && j < MaxRun && p.due(rest[j], now) && !p.exhausted(rest[j]) {
		j++
	}
	return rest[:j]
}

func (p *pass) load(run []primary.Intent) ([]event.Key, [][]byte, error) {
	db, inc := p.w.src.Identity(), p.w.src.Incarnation()
	keys := make([]event.Key, len(run))
	ids := make([]event.ID, len(run))
	for k, in := range run {
		ids[k] = in.Event
		keys[k] = event.Key{Database: db, Incarnation: inc, Event: in.Event}
	}
	records, err := p.w.src.LoadEvents(p.ctx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: load events %s..%s: %w", ids[0], ids[len(ids)-1], err)
	}
	return keys, records, nil
}
