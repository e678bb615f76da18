package primary_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// runAllocs bounds the allocations of the primary's share of one claim run
// of 16 (TestRunAllocations). The code before docs/benchmarks.md's
// "Allocations a delivered event no longer makes" made 110 per run in this
// test; it makes 28 since.
const runAllocs = 32

// TestRunAllocations: what the outbox worker asks of the primary for one
// run of 16 events (load their bytes, claim them, complete them) allocates
// at most runAllocs times, Pebble's allocations included.
func TestRunAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	db, bu := setup(t)
	ctx := context.Background()
	const run, runs = 16, 20
	for i := range (runs + 2) * run { // the warm-up, and AllocsPerRun runs once more than runs
		exec(t, db, "place_order", fmt.Sprintf(`{"order_id":"o-%06d","amount_cents":125}`, i), "")
	}
	in := allIntents(t, db)
	lease := bu.clock.Now().Add(time.Minute)
	n := 0
	oneRun := func() {
		members := in[n : n+run]
		n += run
		ids := make([]event.ID, len(members))
		for i, m := range members {
			ids[i] = m.Event
		}
		if _, err := db.LoadEvents(ctx, ids); err != nil {
			t.Fatal(err)
		}
		claimed, err := db.Claim(ctx, members, lease)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.CompleteDeferred(ctx, claimed); err != nil {
			t.Fatal(err)
		}
	}
	oneRun()
	allocs := testing.AllocsPerRun(runs, oneRun)
	if allocs > runAllocs {
		t.Fatalf("a run of %d allocates %.0f times, want at most %d", run, allocs, runAllocs)
	}
	t.Logf("%.1f allocations per run of %d", allocs, run)
}
