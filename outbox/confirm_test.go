package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// confirmingArchive is a memArchive that is an outbox.Confirmer: it records
// each Confirm with the number of completions made before it, and fails the
// ones fail says to.
type confirmingArchive struct {
	*memArchive
	src *recordingSource

	mu       sync.Mutex
	confirms []int // len(src.completes) at each Confirm
	fail     func(n int) error
}

func (a *confirmingArchive) Confirm(context.Context) error {
	a.src.mu.Lock()
	done := len(a.src.completes)
	a.src.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.confirms = append(a.confirms, done)
	if a.fail != nil {
		return a.fail(len(a.confirms))
	}
	return nil
}

func setupConfirming(t *testing.T, fail func(n int) error) (*bundle, *confirmingArchive) {
	t.Helper()
	b := setup(t, 1<<30, 0)
	c := &confirmingArchive{memArchive: b.dst, src: b.src, fail: fail}
	w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: c, Clock: b.clock,
		Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	return b, c
}

// states counts the intents by state.
func states(t *testing.T, b *bundle) map[primary.IntentState]int {
	t.Helper()
	out := map[primary.IntentState]int{}
	for _, in := range b.intents(t) {
		out[in.State]++
	}
	return out
}

// TestConfirmOncePerGroupBeforeItsCompletion: the destination confirms each
// group of acceptances once, before the group is completed, not once per
// acceptance.
func TestConfirmOncePerGroupBeforeItsCompletion(t *testing.T) {
	b, c := setupConfirming(t, nil)
	b.commit(t, 40)
	res := b.run(t)
	if res.Stored != 40 || res.Completed != 40 {
		t.Fatalf("pass %+v", res)
	}
	if !slices.Equal(b.src.completes, []int{16, 16, 8}) {
		t.Fatalf("completions %v", b.src.completes)
	}
	// Confirm k came before completion k.
	if !slices.Equal(c.confirms, []int{0, 1, 2}) {
		t.Fatalf("confirms made after %v completions, want one before each of the 3", c.confirms)
	}
}

// TestUnconfirmedGroupIsRetriedNotCompleted: a group the destination cannot
// confirm (its store directory was removed after the acceptances) is not
// completed; its members are retried, the run claimed while it was delivered
// (the last 8, never attempted) is released with no attempt spent, the pass
// claims nothing more, no member is left delivering, and after the repair
// every event is delivered again and completed.
func TestUnconfirmedGroupIsRetriedNotCompleted(t *testing.T) {
	b, c := setupConfirming(t, func(n int) error {
		if n == 2 {
			return fmt.Errorf("%w: the archive store directory disappeared", errUnavailable)
		}
		return nil
	})
	b.commit(t, 40)
	res := b.run(t)
	if !slices.Equal(b.src.completes, []int{16}) || res.Completed != 16 || res.Claimed != 40 || res.Retried != 16 || res.Released != 8 {
		t.Fatalf("completions %v, pass %+v: want the first group only completed, the second retried and the third run released", b.src.completes, res)
	}
	if h := b.w.Health(); h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonDestinationUnavailable {
		t.Fatalf("health %+v", h)
	}
	if got := states(t, b); got[primary.IntentRetryScheduled] != 16 || got[primary.IntentPending] != 8 || got[primary.IntentDelivering] != 0 {
		t.Fatalf("intents by state %v: want 16 retry scheduled, 8 pending, none delivering", got)
	}
	for _, in := range b.intents(t) {
		if in.State == primary.IntentPending && in.Attempts != 0 {
			t.Fatalf("released %+v, want no attempt spent", in)
		}
	}
	c.mu.Lock()
	c.fail = nil
	c.mu.Unlock()
	b.clock.Advance(outbox.RetryDelay)
	res = b.run(t)
	if res.Completed != 24 || res.Duplicates != 16 || res.Stored != 8 || b.pending(t) != 0 {
		t.Fatalf("after the repair: pass %+v, pending %d", res, b.pending(t))
	}
}

// TestUnconfirmedGroupInTheMiddleOfARun: a group bound reached in the middle
// of a run (the group began in the run before) that is not confirmed
// retries the group and the run's members not reached, and releases the run
// claimed while it was delivered (never attempted: no attempt spent), so
// none is left delivering until its lease ends.
func TestUnconfirmedGroupInTheMiddleOfARun(t *testing.T) {
	b, c := setupConfirming(t, func(int) error {
		return fmt.Errorf("%w: the archive store directory was replaced", errRefused)
	})
	fits := 0
	c.memArchive.fitHook = func(n int) int {
		if fits++; fits == 1 {
			return min(n, 6) // the first run is cut at 6 members
		}
		return n
	}
	b.commit(t, 40)
	res := b.run(t)
	// Run 1: 6 members; run 2: 16 claimed, the group reaches 16 at its
	// 10th; run 3: 16 claimed at run 2's first acceptance.
	if len(b.src.completes) != 0 || res.Completed != 0 || res.Claimed != 38 || res.Retried != 22 || res.Released != 16 {
		t.Fatalf("completions %v, pass %+v: want nothing completed, runs 1 and 2 (22) retried, run 3 (16) released", b.src.completes, res)
	}
	if h := b.w.Health(); h.State != outbox.StatePaused || h.Reason != deliverytype.ReasonDestinationRefused {
		t.Fatalf("health %+v", h)
	}
	if got := states(t, b); got[primary.IntentRetryScheduled] != 22 || got[primary.IntentPending] != 18 || got[primary.IntentDelivering] != 0 {
		t.Fatalf("intents by state %v: want 22 retry scheduled, 18 pending, none delivering", got)
	}
	for _, in := range b.intents(t) {
		if in.State == primary.IntentPending && in.Attempts != 0 {
			t.Fatalf("released %+v, want no attempt spent", in)
		}
	}
}

// TestUnconfirmedGroupBeforeAFailedAcceptance: when an acceptance fails,
// the group accepted before it is confirmed before it is completed; if that
// fails too, the group, the failed member and the rest of the run are all
// retried and nothing is completed, whatever the acceptance's failure (here
// an identity conflict, which would otherwise dead-letter the member and go
// on delivering the rest of the run).
func TestUnconfirmedGroupBeforeAFailedAcceptance(t *testing.T) {
	b, _ := setupConfirming(t, func(int) error {
		return fmt.Errorf("%w: the archive store directory disappeared", errUnavailable)
	})
	key := event.Key{Database: b.db.Identity(), Incarnation: b.db.Incarnation(), Event: event.ID{Seq: 5}}
	b.dst.records[key] = []byte("different bytes")
	b.commit(t, 10)
	res := b.run(t)
	if len(b.src.completes) != 0 || res.Retried != 10 || res.DeadLettered != 0 || res.Stored != 4 {
		t.Fatalf("completions %v, pass %+v: want 4 stored, nothing completed or dead-lettered, all 10 retried", b.src.completes, res)
	}
	if got := states(t, b); got[primary.IntentRetryScheduled] != 10 || got[primary.IntentDelivering] != 0 {
		t.Fatalf("intents by state %v", got)
	}
	if h := b.w.Health(); h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonDestinationUnavailable {
		t.Fatalf("health %+v", h)
	}
}
