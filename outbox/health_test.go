package outbox_test

import (
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
)

// TestHealthyOnceADeliverySucceeds: a starting worker (and one recovering
// from an outage) turns healthy as soon as the archive, validated by the
// probe, accepts an event, not when the pass ends: a first pass over a
// standing backlog must not report a working worker as degraded while it
// catches up.
func TestHealthyOnceADeliverySucceeds(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.commit(t, 40)
	seen := map[int]outbox.Health{}
	b.dst.acceptHook = func(n int, _ event.Key) error {
		seen[n] = b.w.Health() // before the n-th acceptance, mid-pass
		if n == 43 {
			return errUnavailable
		}
		return nil
	}
	if res := b.run(t); res.Completed != 40 {
		t.Fatalf("first pass %+v", res)
	}
	if h := seen[1]; h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonStarting {
		t.Errorf("health before the first acceptance %+v, want degraded/starting", h)
	}
	for _, n := range []int{2, 20, 40} {
		if h := seen[n]; h.State != outbox.StateHealthy {
			t.Errorf("health before acceptance %d of the first pass %+v, want healthy (an event was delivered)", n, h)
		}
	}

	// An outage: the third acceptance of the next pass fails.
	b.commit(t, 40)
	b.run(t)
	if h := b.w.Health(); h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonDestinationUnavailable {
		t.Fatalf("health after the outage %+v", h)
	}
	// Repaired: healthy again from the first acceptance of the next pass on.
	b.clock.Advance(outbox.RetryDelay)
	clear(seen)
	if res := b.run(t); res.Completed != 38 {
		t.Fatalf("pass after repair %+v", res)
	}
	if h := seen[44]; h.State != outbox.StateDegraded || h.Reason != deliverytype.ReasonDestinationUnavailable {
		t.Errorf("health before the first acceptance after repair %+v, want still degraded/destination_unavailable", h)
	}
	if h := seen[45]; h.State != outbox.StateHealthy {
		t.Errorf("health before the second acceptance after repair %+v, want healthy", h)
	}
}

// TestConflictKeepsHealthDegradedAfterADelivery: a delivery that succeeds
// after an identity conflict leaves health degraded/identity_conflict.
func TestConflictKeepsHealthDegradedAfterADelivery(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.commit(t, 5)
	key := event.Key{Database: b.db.Identity(), Incarnation: b.db.Incarnation(), Event: event.ID{Seq: 1}}
	b.dst.records[key] = []byte("different bytes")
	var last outbox.Health
	b.dst.acceptHook = func(int, event.Key) error { last = b.w.Health(); return nil }
	b.run(t)
	if last.State != outbox.StateDegraded || last.Reason != deliverytype.ReasonIdentityConflict {
		t.Fatalf("health during the pass after a conflict %+v", last)
	}
}
