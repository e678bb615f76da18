package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// gatedSource is a recordingSource whose second claim waits until release
// is closed, and which counts the claims that returned.
type gatedSource struct {
	*recordingSource
	release  chan struct{}
	mu       sync.Mutex
	started  int
	returned int
}

func (s *gatedSource) Claim(ctx context.Context, m []primary.Intent, lease time.Time) ([]primary.Intent, error) {
	s.mu.Lock()
	s.started++
	n := s.started
	s.mu.Unlock()
	if n == 2 {
		<-s.release
	}
	out, err := s.recordingSource.Claim(ctx, m, lease)
	s.mu.Lock()
	s.returned++
	s.mu.Unlock()
	return out, err
}

func (s *gatedSource) counts() (started, returned int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.returned
}

// waitFor polls cond for up to 10 s.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func gatedBundle(t *testing.T) (*bundle, *gatedSource) {
	t.Helper()
	b := setup(t, 1<<30, 0)
	g := &gatedSource{recordingSource: b.src, release: make(chan struct{})}
	w, err := outbox.New(outbox.Options{Alias: "default", Source: g, Destination: b.dst, Clock: b.clock,
		Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	return b, g
}

// TestNextRunIsClaimedWhileTheRunIsDelivered: the claim of the next run
// starts after the current run's first acceptance and runs while the rest of
// the run is delivered: the run's last acceptance happens while that claim
// is still held up. Its members are delivered only once it returned, and
// every event is delivered and completed once.
func TestNextRunIsClaimedWhileTheRunIsDelivered(t *testing.T) {
	b, g := gatedBundle(t)
	var hookErr error
	b.dst.acceptHook = func(n int, _ event.Key) error {
		started, returned := g.counts()
		switch {
		case n == 1 && started != 1:
			hookErr = fmt.Errorf("the next run was claimed (%d claims) before the run's first acceptance", started)
		case n == 16:
			// The run's last acceptance: the next claim must be under way,
			// and still held up (it has not returned).
			if !waitFor(func() bool { s, _ := g.counts(); return s == 2 }) {
				hookErr = errors.New("the next run's claim did not start while the run was delivered")
				close(g.release)
				return hookErr
			}
			if returned != 1 {
				hookErr = fmt.Errorf("%d claims returned before the gate opened", returned)
			}
			close(g.release)
		case n == 17 && returned < 2:
			hookErr = fmt.Errorf("a member of the next run was delivered before its claim returned (%d returned)", returned)
		}
		return nil
	}
	b.commit(t, 48)
	res := b.run(t)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if res.Claimed != 48 || res.Stored != 48 || res.Completed != 48 || b.pending(t) != 0 {
		t.Fatalf("pass %+v, pending %d", res, b.pending(t))
	}
	if !slices.Equal(b.src.claims, []int{16, 16, 16}) || !slices.Equal(b.src.completes, []int{16, 16, 16}) {
		t.Fatalf("claims %v, completions %v", b.src.claims, b.src.completes)
	}
	for _, in := range b.intents(t) {
		t.Fatalf("intent left: %+v", in)
	}
}

// TestFailedFirstAcceptanceClaimsNothingMore: the next run is claimed only
// once the archive has accepted a member of the current run, so an outage
// met by a run's first member spends attempts on that run alone.
func TestFailedFirstAcceptanceClaimsNothingMore(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.dst.acceptHook = func(n int, _ event.Key) error {
		if n == 1 {
			return fmt.Errorf("%w: the archive directory is missing", errUnavailable)
		}
		return nil
	}
	b.commit(t, 48)
	res := b.run(t)
	if !slices.Equal(b.src.claims, []int{16}) || res.Retried != 16 {
		t.Fatalf("claims %v, pass %+v: want the first run alone claimed and retried", b.src.claims, res)
	}
	if got := states(t, b); got[primary.IntentRetryScheduled] != 16 || got[primary.IntentPending] != 32 {
		t.Fatalf("intents by state %v", got)
	}
}

// TestFailureReleasesTheRunClaimedAhead: an acceptance that fails in the
// middle of a run retries the run's members not reached, as the sequential
// algorithm does (their claim is their attempt), and releases every member
// of the run claimed while it was delivered: never attempted, they are
// pending again with the attempt count they had, so a failure charges 12
// members here where it charged 28 before, the same 12 the sequential
// algorithm charges. None is left delivering until its lease passes, and
// none of the rest is claimed. After the outage each event has spent only
// the attempts of its own deliveries.
func TestFailureReleasesTheRunClaimedAhead(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.dst.acceptHook = func(n int, _ event.Key) error {
		if n == 5 {
			return fmt.Errorf("%w: i/o error", errUnavailable)
		}
		return nil
	}
	b.commit(t, 48)
	res := b.run(t)
	if !slices.Equal(b.src.claims, []int{16, 16}) || res.Stored != 4 || res.Completed != 4 || res.Retried != 12 || res.Released != 16 {
		t.Fatalf("claims %v, pass %+v: want 4 stored and completed, 12 retried, 16 released", b.src.claims, res)
	}
	if h := b.w.Health(); h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonDestinationUnavailable {
		t.Fatalf("health %+v", h)
	}
	// Attempts by event: 5..16 were claimed in the failed run (one attempt
	// each); 17..32, claimed ahead, and 33..48 were never attempted.
	for _, in := range b.intents(t) {
		want, state := uint32(0), primary.IntentPending
		if in.Event.Seq <= 16 {
			want, state = 1, primary.IntentRetryScheduled
		}
		if in.State != state || in.Attempts != want {
			t.Fatalf("event %s: %s with %d attempts, want %s with %d", in.Event, in.State, in.Attempts, state, want)
		}
	}
	// The archive is back: every event is delivered once more at most,
	// and no event of the run claimed ahead has spent more than the one
	// attempt that delivered it.
	b.clock.Advance(outbox.RetryDelay)
	b.dst.acceptHook = nil
	var attempts map[uint64]uint32
	b.src.onComplete = func(m []primary.Intent) {
		if attempts == nil {
			attempts = map[uint64]uint32{}
		}
		for _, in := range m {
			attempts[in.Event.Seq] = in.Attempts
		}
	}
	res = b.run(t)
	if res.Completed != 44 || b.pending(t) != 0 {
		t.Fatalf("after the outage: pass %+v, pending %d", res, b.pending(t))
	}
	for seq := uint64(5); seq <= 48; seq++ {
		want := uint32(1)
		if seq <= 16 {
			want = 2
		}
		if attempts[seq] != want {
			t.Fatalf("event %d completed after %d attempts, want %d", seq, attempts[seq], want)
		}
	}
}

// TestLoadFailureAheadLeavesTheRunDelivered: when the events of the run to
// claim ahead cannot be loaded, nothing is claimed ahead and the current run
// is delivered and completed as usual; the failure ends the pass where the
// sequential algorithm meets it, at the next run's own load, before any
// claim, so no member of either run spends an attempt it did not use.
func TestLoadFailureAheadLeavesTheRunDelivered(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.commit(t, 48)
	b.src.loadErr = func(call int) error {
		if call >= 2 {
			return errors.New("test: the history cannot be read")
		}
		return nil
	}
	res, err := b.w.RunOnce(context.Background())
	if err == nil {
		t.Fatalf("pass %+v ended without the load failure", res)
	}
	if !slices.Equal(b.src.claims, []int{16}) || res.Stored != 16 || res.Completed != 16 || res.Retried != 0 {
		t.Fatalf("claims %v, pass %+v, %v: want the first run claimed, delivered and completed", b.src.claims, res, err)
	}
	for _, in := range b.intents(t) {
		if in.State != primary.IntentPending || in.Attempts != 0 {
			t.Fatalf("event %s: %s with %d attempts, want pending without an attempt", in.Event, in.State, in.Attempts)
		}
	}
	// A failure of that one load only: the pass goes on and delivers
	// everything, each event with one attempt.
	b.src.loadErr = func(call int) error {
		if call == 2 { // the run claimed ahead's load
			return errors.New("test: the history cannot be read")
		}
		return nil
	}
	b.src.loads = 0
	res = b.run(t)
	if res.Completed != 32 || res.Claimed != 32 || b.src.loads != 3 || b.pending(t) != 0 {
		t.Fatalf("pass %+v, %d loads, pending %d: want the other 32 delivered, their second run loaded twice", res, b.src.loads, b.pending(t))
	}
}

// TestRunClaimedAheadFitsTheQuotaWithTheRunBeforeIt: the run claimed while
// another is delivered is checked against the quota together with that
// run's members not yet accepted, so a quota that holds 20 events claims 4
// ahead, not 16, and pauses with the rest unclaimed: no attempt is spent on
// an event that does not fit.
func TestRunClaimedAheadFitsTheQuotaWithTheRunBeforeIt(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.commit(t, 48)
	var ids []event.ID
	for _, in := range b.intents(t)[:20] {
		ids = append(ids, in.Event)
	}
	records, err := b.db.LoadEvents(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	var quota int64
	for _, r := range records {
		quota += charge(r)
	}
	b.dst.mu.Lock()
	b.dst.quota = quota
	b.dst.mu.Unlock()
	res := b.run(t)
	if !slices.Equal(b.src.claims, []int{16, 4}) || res.Stored != 20 || res.Completed != 20 || res.Retried != 0 {
		t.Fatalf("claims %v, pass %+v: want runs of 16 and 4, all 20 stored and completed", b.src.claims, res)
	}
	if h := b.w.Health(); h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonCapacityExhausted {
		t.Fatalf("health %+v", h)
	}
	for _, in := range b.intents(t) {
		if in.State != primary.IntentPending || in.Attempts != 0 {
			t.Fatalf("an event that does not fit: %+v, want pending without an attempt", in)
		}
	}
}

// TestStopWhileTheNextRunIsClaimed: a worker stopped in the middle of a run
// waits for the claim made ahead, completes what was accepted, and leaves
// the members not reached, of both runs, delivering under their lease, as
// after a crash; a restart's recovery returns them to pending, each claim
// counted.
func TestStopWhileTheNextRunIsClaimed(t *testing.T) {
	b, g := gatedBundle(t)
	close(g.release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.dst.acceptHook = func(n int, _ event.Key) error {
		if n == 5 {
			if !waitFor(func() bool { _, r := g.counts(); return r == 2 }) {
				return errors.New("the next run's claim did not return")
			}
			cancel()
		}
		return nil
	}
	b.commit(t, 48)
	res, err := b.w.RunOnce(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %+v, %v: want the cancellation", res, err)
	}
	if res.Claimed != 32 || res.Completed != 5 || res.Retried != 0 {
		t.Fatalf("pass %+v", res)
	}
	if got := states(t, b); got[primary.IntentDelivering] != 27 || got[primary.IntentPending] != 16 {
		t.Fatalf("intents by state %v: want 27 delivering, 16 pending", got)
	}
	if n, err := b.db.RecoverDeliveries(context.Background()); err != nil || n != 27 {
		t.Fatalf("recover = %d, %v", n, err)
	}
}

// TestRefusalFoundWhileClaimingAheadHaltsTheRun: the quota check of the run
// to claim ahead is a call to the destination like any other: a refusal it
// reports (here the custody audit's) claims nothing more and halts the run
// being delivered as a failed acceptance would: the member accepted is
// completed, the others are retried, and delivery pauses.
func TestRefusalFoundWhileClaimingAheadHaltsTheRun(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.dst.fitErr = func(call int) error {
		if call == 2 {
			return fmt.Errorf("%w: the archive directory's mode changed", errRefused)
		}
		return nil
	}
	b.commit(t, 48)
	res := b.run(t)
	if !slices.Equal(b.src.claims, []int{16}) || res.Stored != 1 || res.Completed != 1 || res.Retried != 15 {
		t.Fatalf("claims %v, pass %+v: want one run claimed, 1 stored and completed, 15 retried", b.src.claims, res)
	}
	if h := b.w.Health(); h.State != outbox.StatePaused || h.Reason != deliverytype.ReasonDestinationRefused {
		t.Fatalf("health %+v", h)
	}
	if got := states(t, b); got[primary.IntentRetryScheduled] != 15 || got[primary.IntentPending] != 32 || got[primary.IntentDelivering] != 0 {
		t.Fatalf("intents by state %v", got)
	}
}
