package outbox

import (
	"context"
	"time"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// The most a crash costs with claim-ahead. A claim is synced, and each
// completion group is applied without its own fsync, made durable by the
// next synced write applied after it (every claim awaits the completion in
// flight first: claimAndDeliver, prepareNext). After the last claim that
// returned, up to MaxGroup-1 accepted members were still in the open group
// when it started, up to MaxRun-1 members of the run being delivered were
// accepted after it started, and its own run (up to MaxRun) was accepted
// before the next claim returned: that many members may be accepted into
// the archive and not durably completed, and a restart delivers them again,
// as duplicates (46; without claim-ahead the middle term is absent: 31).
// At the same time up to MaxRun-1 members of the run being delivered and a
// whole run claimed ahead may be claimed and not yet delivered: the restart
// returns them to pending with that claim counted as an attempt (31; 16
// without claim-ahead). TestCrashReplayBound measures both on a model of
// the write-ahead log and reaches them.
const (
	MaxCrashReplay  = MaxGroup - 1 + MaxRun - 1 + MaxRun
	MaxCrashCharged = MaxRun - 1 + MaxRun
)

// claimAhead is a claim run claimed while the run before it is delivered
// (see pass.prepareNext): its claim transaction runs in a goroutine of its
// own from startClaimAhead on, and the pass takes the result (wait) when it
// reaches the run, or when it ends without reaching it (dropNext).
type claimAhead struct {
	run     []primary.Intent
	keys    []event.Key
	records [][]byte
	done    chan claimResult
}

// startClaimAhead starts the claim of run (with its events' keys and
// records) under a lease until lease.
func (w *Worker) startClaimAhead(ctx context.Context, run []primary.Intent, keys []event.Key, records [][]byte, lease time.Time) *claimAhead {
	c := &claimAhead{run: run, keys: keys, records: records, done: make(chan claimResult, 1)}
	w.helpers.Go(func() error {
		ctx, claimed, err := w.claim(ctx, c.run, lease)
		c.done <- claimResult{ctx: ctx, claimed: claimed, err: err}
		return nil
	})
	return c
}

// wait returns the claim's result.
func (c *claimAhead) wait() claimResult { return <-c.done }

// claimResult is the result of a claim run's claim: the run's context
// (carrying its claim span) and the members claimed.
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
// attempts, whose events cannot be loaded, or that does not fit the quota,
// is left to page, which handles it as before. A failure of the current run
// releases the next run's members (retryRest): they were never attempted,
// and keep the attempt count they had; a stopping worker leaves them
// delivering under their lease, as it leaves the current run's (see pass).
func (p *pass) prepareNext(pendingKeys []event.Key, pendingRecords [][]byte, after []primary.Intent) (destErr, err error) {
	if len(after) == 0 {
		return nil, nil
	}
	now := p.now()
	if !p.due(after[0], now) || p.exhausted(after[0]) {
		return nil, nil
	}
	run := p.form(after, now)
	keys, records, err := p.load(run)
	if err != nil {
		// Nothing is claimed ahead: the current run is delivered as
		// usual, and page loads this run again when it reaches it, as
		// the sequential algorithm would (a persistent failure then ends
		// the pass there, after the current run was completed).
		return nil, nil
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
	p.next = p.w.startClaimAhead(p.ctx, run[:n], keys[:n], records[:n], now.Add(Lease))
	return nil, nil
}

// awaitClaim waits for the next run's claim and returns its run context and
// claimed members, or handles its failure as claimAndDeliver would.
func (p *pass) awaitClaim(nx *claimAhead) (context.Context, []primary.Intent, error) {
	r := p.receive(nx)
	if r.err != nil {
		return nil, nil, p.claimFailed(r.err)
	}
	return r.ctx, r.claimed, nil
}

// receive waits for nx's claim and counts the members it claimed.
func (p *pass) receive(nx *claimAhead) claimResult {
	r := nx.wait()
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
