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

// errNoFit halts a pass whose next event does not fit the archive quota even
// alone: delivery pauses without spending an attempt.
var errNoFit = deliverytype.New("outbox: the next event does not fit the archive quota",
	deliverytype.Capacity, deliverytype.ReasonCapacityExhausted)

// PassResult summarizes one pass, for tests and logs.
type PassResult struct {
	Claimed      int // members claimed (one attempt each)
	Stored       int // archive transactions that stored a record
	Duplicates   int // archive transactions that found equal bytes
	Completed    int // intents completed on the primary
	Retried      int // members scheduled for retry
	DeadLettered int // intents dead-lettered
	Renewed      int // leases renewed before delivery
	// Halted is the health reason that ended the pass early, or
	// deliverytype.ReasonNone.
	Halted deliverytype.Reason
}

// RunOnce runs one pass over the undelivered index and returns what it did.
// It is what the loop runs; tests call it directly with a fake clock.
func (w *Worker) RunOnce(ctx context.Context) (PassResult, error) {
	w.passMu.Lock()
	defer w.passMu.Unlock()
	p := &pass{w: w, ctx: ctx}
	err := p.run()
	// A run claimed ahead (prepareNext) that the pass did not reach: its
	// claim is awaited, and its members stay delivering under their lease,
	// as after a crash. Every failure that the retry rules apply to has
	// already retried them (retryRest); what is left is a stopping worker
	// or a failure of the primary itself.
	p.dropNext()
	// However the pass ended (an error, a halt, a cancelled context), the
	// members it accepted and has not completed yet are completed here,
	// before the failure is handled: left delivering, they would be claimed
	// again after their lease, spend one more attempt and arrive again as
	// duplicates. Doing it once, here, means no failure path can forget it.
	// A pass that ran to its end has flushed at page end; this only awaits
	// that flush.
	reason := flushPageEnd
	if err != nil || p.halted {
		reason = flushFailure
	}
	if ferr := p.flush(reason); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if ferr := p.awaitFlush(); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if p.unsynced {
		// Completions are applied without their own fsync (the next claim's
		// makes them durable); make the last ones durable before the worker
		// goes idle, so a crash replays at most the work in flight.
		if serr := w.src.Sync(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("outbox: sync completions: %w", serr)
		}
	}
	w.mu.Lock()
	w.nextDue = p.nextDue
	w.mu.Unlock()
	return p.res, err
}

// pass is one run over the undelivered index. Its ctx ends when the worker
// stops: the pass then stops before its next step. A destination call
// already in flight is not cancelled (it is called with a context without
// that cancellation): an archive transaction abandoned midway has an unknown
// outcome, and the archive would then fence its storage engine off as
// unusable; finishing it is bounded by the delivery timeout (Accept) or the
// archive's own call timeout (Probe, Fit).
type pass struct {
	w       *Worker
	ctx     context.Context
	res     PassResult
	group   []primary.Intent // accepted, awaiting completion
	nextDue time.Time
	halted  bool
	// accepted is set at the pass's first acceptance (see delivering).
	accepted bool
	// unsynced is set once a completion was applied; RunOnce syncs the
	// source at the end of the pass.
	unsynced bool
	// flushing carries the result of the completion flush in flight, if
	// any (see flush); flushingN is its size.
	flushing  chan error
	flushingN int
	// next is the run claimed while the one before it is delivered, if any
	// (see prepareNext).
	next *nextRun
}

func (p *pass) now() time.Time { return p.w.clock.Now() }

func (p *pass) run() error {
	w := p.w
	h := w.Health()
	if h.State == StateStopped {
		p.res.Halted = h.Reason
		return nil
	}
	// While unhealthy, probe before claiming anything: an outage must not
	// spend attempts. A destination that failed between calls (Watched)
	// is probed too, so that an idle worker reports it.
	if h.State != StateHealthy || h.Reason == deliverytype.ReasonIdentityConflict || w.destinationFailed() {
		if err := w.dst.Probe(context.WithoutCancel(p.ctx)); err != nil {
			return p.fail(err)
		}
	}
	// Skip the leading dead letters: a large dead-letter population must
	// not be rescanned by every pass.
	after := w.deadEnd
	leading := true // every intent scanned so far is a dead letter
	for {
		if err := p.awaitFlush(); err != nil { // the page-end flush
			return err
		}
		page, err := w.src.ScanIntents(p.ctx, after, w.opts.PageSize)
		if err != nil {
			return fmt.Errorf("outbox: scan undelivered index: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for i := 0; leading && i < len(page); i++ {
			if page[i].State != primary.IntentDeadLetter {
				leading = false
				break
			}
			id := page[i].Event
			w.deadEnd = &id
		}
		if err := p.page(page); err != nil || p.halted {
			return err
		}
		if err := p.flush(flushPageEnd); err != nil || p.halted {
			return err
		}
		last := page[len(page)-1].Event
		after = &last
		if len(page) < w.opts.PageSize {
			break
		}
	}
	if !p.halted {
		w.health.set(StateHealthy, deliverytype.ReasonNone, p.now())
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

func exhausted(in primary.Intent) bool { return in.Attempts >= MaxAttempts }

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
		if exhausted(in) {
			if err := p.flush(flushFailure); err != nil || p.halted {
				return err
			}
			if err := p.deadLetter(in, "attempts_exhausted"); err != nil {
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

// form returns the claim run that starts at rest[0], which is due and has
// attempts left: up to MaxRun consecutive intents that are all due at now
// and have attempts left.
func (p *pass) form(rest []primary.Intent, now time.Time) []primary.Intent {
	j := 1
	for j < len(rest) && j < MaxRun && p.due(rest[j], now) && !exhausted(rest[j]) {
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
		outcome, err := p.w.accept(acc.get(), keys[k], records[k], m)
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

// nextRun is a claim run claimed while the run before it is delivered.
type nextRun struct {
	run     []primary.Intent
	keys    []event.Key
	records [][]byte
	done    chan claimResult
}

type claimResult struct {
	ctx     context.Context
	claimed []primary.Intent
	err     error
}

// prepareNext forms the run that follows the one being delivered (after is
// the rest of the page), loads its events, checks it against the quota
// together with that run's members not yet accepted (pendingKeys and
// pendingRecords, whose charges the archive will hold by the time the next
// run is delivered), and starts its claim transaction in a goroutine of its
// own. The claim's fsync on the primary's log then runs while the archive
// transactions of the current run run on the archive's, instead of between
// the two runs: it was about a tenth of each database's chain of synced
// steps while four drained on one disk (docs/benchmarks.md).
//
// A failure of the destination's quota check (an unusable store, a
// custody refusal found by its audit) is returned as destErr, for deliver
// to handle as a failed acceptance; err is a failure of the source.
//
// It is called once the current run's first member was accepted, so the
// archive takes events right now: an outage found by that member claims
// nothing more. Nothing changes for the claim itself: the group completed
// so far is applied before it (its fsync makes that completion durable),
// and its members are delivered only after it returned, in order, as a run
// claimed the usual way. A run that starts with an intent not due or out of
// attempts, or that does not fit the quota, is left to page, which handles
// it as before. A failure of the current run retries the next run's
// members too (retryRest); a stopping worker leaves them delivering under
// their lease, as it leaves the current run's (see pass).
func (p *pass) prepareNext(pendingKeys []event.Key, pendingRecords [][]byte, after []primary.Intent) (destErr, err error) {
	if len(after) == 0 {
		return nil, nil
	}
	now := p.now()
	if !p.due(after[0], now) || exhausted(after[0]) {
		return nil, nil
	}
	run := p.form(after, now)
	keys, records, err := p.load(run)
	if err != nil {
		return nil, err
	}
	allKeys := append(append(make([]event.Key, 0, len(pendingKeys)+len(keys)), pendingKeys...), keys...)
	allRecords := append(append(make([][]byte, 0, len(pendingRecords)+len(records)), pendingRecords...), records...)
	n, err := p.w.dst.Fit(context.WithoutCancel(p.ctx), allKeys, allRecords)
	if deliverytype.ClassOf(err) == deliverytype.Capacity {
		// The free-space guard refused the two runs together: page
		// decides once this run is alone.
		return nil, nil
	}
	if err != nil {
		return err, nil
	}
	n -= len(pendingKeys)
	if n <= 0 {
		return nil, nil
	}
	if err := p.awaitFlush(); err != nil {
		return nil, err
	}
	nx := &nextRun{run: run[:n], keys: keys[:n], records: records[:n], done: make(chan claimResult, 1)}
	lease := now.Add(Lease)
	go func() {
		ctx, claimed, err := p.w.claim(p.ctx, nx.run, lease)
		nx.done <- claimResult{ctx: ctx, claimed: claimed, err: err}
	}()
	p.next = nx
	return nil, nil
}

// awaitClaim waits for the next run's claim and returns its run context and
// claimed members, or handles its failure as claimAndDeliver would.
func (p *pass) awaitClaim(nx *nextRun) (context.Context, []primary.Intent, error) {
	r := p.receive(nx)
	if r.err != nil {
		return nil, nil, p.claimFailed(r.err)
	}
	return r.ctx, r.claimed, nil
}

// receive waits for nx's claim and counts the members it claimed.
func (p *pass) receive(nx *nextRun) claimResult {
	r := <-nx.done
	if r.err == nil {
		p.res.Claimed += len(r.claimed)
	}
	return r
}

// dropNext waits for the next run's claim, if one is in flight, and returns
// the members it claimed, which will not be delivered by this pass.
func (p *pass) dropNext() []primary.Intent {
	nx := p.next
	if nx == nil {
		return nil
	}
	p.next = nil
	if r := p.receive(nx); r.err == nil {
		return r.claimed
	}
	return nil // all or nothing: a failed claim claimed nothing
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
}

// conflict dead-letters a member whose identity holds different bytes in the
// archive; health reports it until an operator restarts after investigation.
func (p *pass) conflict(m primary.Intent) error {
	p.w.health.conflict(p.now())
	p.w.log.Error("archive holds different bytes under this event's identity; dead-lettering it",
		zap.Stringer("event", m.Event))
	return p.deadLetter(m, "identity_conflict")
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

// retryRest applies retry to each member of rest, the claimed members of
// the run being delivered that were not reached, and then to the members of
// the next run, if it was claimed already (prepareNext).
func (p *pass) retryRest(rest []primary.Intent) error {
	if err := p.retryAll(rest); err != nil {
		p.dropNext()
		return err
	}
	return p.retryAll(p.dropNext())
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
// when it has used every attempt.
func (p *pass) retry(m primary.Intent) error {
	if exhausted(m) {
		return p.deadLetter(m, "attempts_exhausted")
	}
	at := p.now().Add(RetryDelay)
	if _, err := p.w.src.Retry(p.ctx, m, at); err != nil {
		return fmt.Errorf("outbox: schedule retry: %w", err)
	}
	p.w.inst.retry(p.ctx, p.w.opts.Alias)
	p.res.Retried++
	if p.nextDue.IsZero() || at.Before(p.nextDue) {
		p.nextDue = at
	}
	return nil
}

func (p *pass) deadLetter(in primary.Intent, reason string) error {
	if _, err := p.w.src.DeadLetter(p.ctx, in, reason); err != nil {
		return fmt.Errorf("outbox: dead-letter: %w", err)
	}
	p.w.inst.deadLetter(p.ctx, p.w.opts.Alias, reason)
	p.res.DeadLettered++
	return nil
}

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
	group := p.group
	p.group = nil
	if confirmed, err := p.confirm(group); err != nil || !confirmed {
		return err
	}
	p.unsynced = true
	done := make(chan error, 1)
	p.flushing, p.flushingN = done, len(group)
	ctx := context.WithoutCancel(p.ctx)
	if reason == flushFailure {
		done <- p.w.complete(ctx, group, reason)
		return p.awaitFlush()
	}
	go func() { done <- p.w.complete(ctx, group, reason) }()
	return nil
}

// confirm asks a Confirmer destination to confirm the group's acceptances
// before they are completed. If it cannot, nothing of the group is
// completed: the pass halts on the failure and each member is retried (or
// dead-lettered once it has used every attempt), so that it is delivered
// again, as a Duplicate where its record did reach the archive. Every caller
// of flush that goes on after it checks p.halted.
func (p *pass) confirm(group []primary.Intent) (confirmed bool, err error) {
	c, ok := p.w.dst.(Confirmer)
	if !ok {
		return true, nil
	}
	cerr := c.Confirm(context.WithoutCancel(p.ctx))
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
	err := <-p.flushing
	p.flushing = nil
	if err != nil {
		return fmt.Errorf("outbox: complete: %w", err)
	}
	p.res.Completed += p.flushingN
	return nil
}

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
	if n, ok := MissingRecords(err); ok {
		p.w.health.missing(n)
	}
	p.w.health.set(state, reason, p.now())
	p.w.log.Warn("outbox delivery halted", zap.String("state", state), zap.String("reason", string(reason)), zap.Error(err))
	return nil
}
