package primary_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

func TestPruneRespectsLowWaterMark(t *testing.T) {
	db, bu := setup(t, func(o *primary.Options) { o.HistoryRetention = 2 })
	ctx := context.Background()
	for range 6 {
		exec(t, db, "place_order", `{"order_id":"a","amount_cents":1}`, "")
	}
	in := allIntents(t, db) // seq 1..6, one event each
	lease := bu.clock.Now().Add(time.Minute)
	cl, err := db.Claim(ctx, in[:4], lease)
	if err != nil {
		t.Fatal(err)
	}
	// Seq 1 and 3 delivered; seq 2 dead-lettered; seq 4 still delivering.
	if err := db.Complete(ctx, []primary.Intent{cl[0], cl[2]}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeadLetter(ctx, cl[1], "refused", primary.Failure{}); err != nil {
		t.Fatal(err)
	}
	retained, reclaimable := db.HistoryUsage()
	if retained <= 0 || reclaimable <= 0 || reclaimable >= retained {
		t.Fatalf("usage = %d, %d; want 0 < reclaimable (seq 1) < retained", retained, reclaimable)
	}
	n, err := db.Prune(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1 (the dead letter at seq 2 fences the rest)", n, err)
	}
	r2, rec2 := db.HistoryUsage()
	if r2 != retained-reclaimable || rec2 != 0 {
		t.Fatalf("usage after prune = %d, %d; want %d, 0", r2, rec2, retained-reclaimable)
	}
	if _, err := db.LoadEvent(ctx, event.ID{Seq: 1}); !errors.Is(err, primary.ErrNotFound) {
		t.Fatalf("seq 1 after prune: %v", err)
	}
	for s := uint64(2); s <= 6; s++ {
		if _, err := db.LoadEvent(ctx, event.ID{Seq: s}); err != nil {
			t.Fatalf("seq %d pruned at/above the low-water mark: %v", s, err)
		}
	}
	if n, err := db.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("second Prune = %d, %v", n, err)
	}
	// The pruned state survives a reopen.
	db2 := reopen(t, db, bu)
	r3, rec3 := db2.HistoryUsage()
	if r3 != r2 || rec3 != 0 {
		t.Fatalf("usage after reopen = %d, %d; want %d, 0", r3, rec3, r2)
	}
	if db2.LastCommitSequence() != 6 {
		t.Fatalf("last = %d", db2.LastCommitSequence())
	}
	if c := exec(t, db2, "place_order", `{"order_id":"a","amount_cents":1}`, ""); c.Seq != 7 {
		t.Fatalf("next seq = %d, want 7", c.Seq)
	}
}

func TestPruneKeepsAllWithoutRetention(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	exec(t, db, "place_order", `{"order_id":"a","amount_cents":1}`, "")
	c, err := db.Claim(ctx, allIntents(t, db), bu.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("Prune = %d, %v with retention 0", n, err)
	}
	if _, rec := db.HistoryUsage(); rec != 0 {
		t.Fatalf("reclaimable = %d with retention 0", rec)
	}
}

func TestPruneRemovesIdempotencyKeysAndFullyDeliveredHistory(t *testing.T) {
	db, bu := setup(t, func(o *primary.Options) { o.HistoryRetention = 1 })
	ctx := context.Background()
	exec(t, db, "place_order", `{"order_id":"a","amount_cents":1}`, "k1")
	exec(t, db, "place_order", `{"order_id":"b","amount_cents":1}`, "k2")
	c, err := db.Claim(ctx, allIntents(t, db), bu.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Prune(ctx); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	// k1's history is gone, so the key is free again; k2 still replays.
	if got := exec(t, db, "place_order", `{"order_id":"b","amount_cents":1}`, "k2"); !got.Replayed {
		t.Fatalf("k2 = %+v, want replay", got)
	}
	if got := exec(t, db, "place_order", `{"order_id":"z","amount_cents":1}`, "k1"); got.Replayed || got.Seq != 3 {
		t.Fatalf("k1 after prune = %+v, want a new commit 3", got)
	}
}
