package primary_test

import (
	"context"
	"testing"
	"time"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// TestLookupDelivery follows one event from undelivered (each state) to
// delivered, and tells an event never committed apart as unknown.
func TestLookupDelivery(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	exec(t, db, "two", `{"x":1}`, "")
	in := allIntents(t, db)
	a, b := in[0], in[1]
	check := func(id event.ID, want primary.Whereabouts, state primary.IntentState) primary.Intent {
		t.Helper()
		got, w, err := db.LookupDelivery(ctx, id)
		if err != nil || w != want || (w == primary.EventUndelivered && got.State != state) {
			t.Fatalf("LookupDelivery(%s) = %+v, %v, %v; want %v %v", id, got, w, err, want, state)
		}
		return got
	}
	if got := check(a.Event, primary.EventUndelivered, primary.IntentPending); !sameIntent(got, a) {
		t.Fatalf("looked up %+v, scanned %+v", got, a)
	}
	lease := bu.clock.Now().Add(10 * time.Second)
	claimed, err := db.Claim(ctx, []primary.Intent{a, b}, lease)
	if err != nil {
		t.Fatal(err)
	}
	if got := check(a.Event, primary.EventUndelivered, primary.IntentDelivering); got.Attempts != 1 || !got.LeaseDeadline.Equal(lease) {
		t.Fatalf("delivering: %+v", got)
	}
	if _, err := db.DeadLetter(ctx, claimed[1], "attempts_exhausted", primary.Failure{}); err != nil {
		t.Fatal(err)
	}
	if got := check(b.Event, primary.EventUndelivered, primary.IntentDeadLetter); got.DeadReason != "attempts_exhausted" {
		t.Fatalf("dead letter: %+v", got)
	}
	if err := db.Complete(ctx, claimed[:1]); err != nil {
		t.Fatal(err)
	}
	check(a.Event, primary.EventDelivered, 0)
	check(event.ID{Seq: a.Event.Seq + 100}, primary.EventUnknown, 0)
	check(event.ID{Seq: a.Event.Seq, Pos: 7}, primary.EventUnknown, 0)
}
