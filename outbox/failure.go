package outbox

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/primary"
)

// fail moves health according to the class of err and halts the pass.
//
// A failure seen once the pass's context has ended is the worker stopping,
// not the destination failing (the destination fails because its context
// ended): fail then returns the context's cause and changes nothing — no
// health change, no log line, no halt reason — and the caller must return it
// without applying the retry rules. The members claimed and not delivered
// stay delivering under their lease; a restart returns them to pending with
// their claim counted, as after a crash.
func (p *pass) fail(err error) error {
	if p.ctx.Err() != nil {
		return context.Cause(p.ctx)
	}
	p.halted = true
	state, reason := healthOf(err)
	p.res.Halted = reason
	// The members this failure charges record it as their last failure.
	class := deliverytype.ClassOf(marked(err))
	if reason == deliverytype.ReasonNone {
		reason = class.Reason()
	}
	p.failure = primary.Failure{At: p.now(), Class: class.String(), Reason: string(reason)}
	if n, ok := MissingRecords(err); ok {
		p.w.health.missing(n)
	}
	p.w.health.set(state, reason, p.now())
	// At a bounded rate (Worker.halts): one line per class of failure, the
	// first at once, then after 1 s, 2 s, 4 s, ... up to 30 s while it
	// recurs, each with the reports it stands for.
	text := ratelog.Clean(err)
	p.w.halts.Report(state+" "+string(reason)+" "+ratelog.Class(text), text,
		zap.String("state", state), zap.String("reason", string(reason)))
	return nil
}

// halt applies the retry rules to the failed member rest[0] and to the
// claimed members not yet reached, then halts the pass.
func (p *pass) halt(rest []primary.Intent, cause error) error {
	if err := p.fail(cause); err != nil {
		return err
	}
	if err := p.retryRest(rest); err != nil {
		return err
	}
	p.halted = true
	return nil
}

// conflict dead-letters a member whose identity holds different bytes in the
// archive; health reports it until an operator restarts after investigation.
func (p *pass) conflict(m primary.Intent) error {
	p.w.health.conflict(p.now())
	p.w.log.Error("archive holds different bytes under this event's identity; dead-lettering it",
		zap.Stringer("event", m.Event))
	return p.deadLetter(m, "identity_conflict", primary.Failure{At: p.now(), Class: deliverytype.Conflict.String(),
		Reason: string(deliverytype.ReasonIdentityConflict)})
}

// retryRest applies retry to each member of rest, the claimed members of
// the run being delivered that were not reached, and then releases the
// members of the next run, if it was claimed already (prepareNext): the
// sequential algorithm would not have claimed them yet, and a member that
// was never attempted is not charged for another member's failure. Their
// claim's attempt is taken back and they are pending again.
func (p *pass) retryRest(rest []primary.Intent) error {
	if err := p.retryAll(rest); err != nil {
		p.dropNext()
		return err
	}
	return p.release(p.dropNext())
}

// release returns the members of a run claimed ahead, never attempted, to
// pending with their claim's attempt taken back, in one synced primary
// transaction. Should it fail (the primary failed), they stay delivering
// under their lease, as after a crash.
func (p *pass) release(ahead []primary.Intent) error {
	if len(ahead) == 0 {
		return nil
	}
	if _, err := p.w.src.Release(context.WithoutCancel(p.ctx), ahead); err != nil {
		return fmt.Errorf("outbox: release the run claimed ahead: %w", err)
	}
	p.res.Released += len(ahead)
	return nil
}

// retryAll applies retry to each member of rest.
func (p *pass) retryAll(rest []primary.Intent) error {
	for _, m := range rest {
		if err := p.retry(m); err != nil {
			return err
		}
	}
	return nil
}

// retry schedules a claimed member for another attempt, or dead-letters it
// when it has used every attempt, recording the pass's failure as its last.
func (p *pass) retry(m primary.Intent) error {
	if p.exhausted(m) {
		return p.deadLetter(m, "attempts_exhausted", p.failure)
	}
	at := p.now().Add(RetryDelay)
	if _, err := p.w.src.Retry(p.ctx, m, at, p.failure); err != nil {
		return fmt.Errorf("outbox: schedule retry: %w", err)
	}
	p.w.inst.retry(p.ctx, p.w.opts.Alias)
	p.res.Retried++
	if p.nextDue.IsZero() || at.Before(p.nextDue) {
		p.nextDue = at
	}
	return nil
}

// deadLetter dead-letters in for reason, recording failure (zero: keep
// the one it has) as its last failure.
func (p *pass) deadLetter(in primary.Intent, reason string, failure primary.Failure) error {
	if _, err := p.w.src.DeadLetter(p.ctx, in, reason, failure); err != nil {
		return fmt.Errorf("outbox: dead-letter: %w", err)
	}
	p.w.inst.deadLetter(p.ctx, p.w.opts.Alias, reason)
	p.res.DeadLettered++
	return nil
}
