package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riffdb/riffdb/deliverytype"
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
	Released     int // members of a run claimed ahead, never attempted, returned to pending with their attempt taken back
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
	p := &pass{w: w, ctx: ctx, group: w.groups[0], spare: w.groups[1], groupCtx: w.groupCtxs}
	if p.group == nil {
		p.group = make([]primary.Intent, 0, MaxGroup)
	}
	err := p.run()
	// A run claimed ahead (prepareNext) that the pass did not reach: its
	// claim is awaited, and its members stay delivering under their lease,
	// as after a crash. Every failure that the retry rules apply to has
	// already released them (retryRest); what is left is a stopping worker
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
	// The arrays are the worker's again; one a flush still held after a
	// failure is not among them (see awaitFlush).
	w.groups, w.groupCtxs = [2][]primary.Intent{p.group[:0], p.spare}, p.groupCtx[:0]
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
	w     *Worker
	ctx   context.Context
	res   PassResult
	group []primary.Intent // accepted, awaiting completion
	// groupCtx holds the run context (its claim span) of each member of
	// group, for the delivery lag's exemplars.
	groupCtx []context.Context
	// spare is the array of the last group completed, for the next one.
	spare   []primary.Intent
	nextDue time.Time
	halted  bool
	// accepted is set at the pass's first acceptance (see delivering).
	accepted bool
	// unsynced is set once a completion was applied; RunOnce syncs the
	// source at the end of the pass.
	unsynced bool
	// flushing is the completion flush in flight, if any (see flush).
	flushing *completionFlush
	// next is the run claimed while the one before it is delivered, if any
	// (see prepareNext).
	next *claimAhead
	// failure is the failure that halted the pass (fail), recorded as the
	// last failure of the members it charges.
	failure primary.Failure
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
	// not be rescanned by every pass; unless a redrive revived some since
	// they were seen (read before the scan, so a redrive during it is
	// seen by the next pass).
	if r := w.src.Revivals(); r != w.deadEndRevivals {
		w.deadEnd, w.deadEndRevivals = nil, r
	}
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
		w.halts.Clear()
	}
	return nil
}
