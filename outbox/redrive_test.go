package outbox_test

import (
	"context"
	"testing"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// TestRedrivenDeadLettersAreDelivered: events that used every attempt are
// dead letters, which the passes then skip (they lead the index). Once an
// operator redrives them, the next pass scans them again and delivers each
// once, with a fresh attempt budget; the undelivered count returns to 0.
func TestRedrivenDeadLettersAreDelivered(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.commit(t, 3)
	b.dst.acceptHook = func(int, event.Key) error { return errUnavailable }
	for range outbox.MaxAttempts {
		b.run(t)
		b.clock.Advance(outbox.RetryDelay)
	}
	dead := b.intents(t)
	for _, in := range dead {
		f := in.LastFailure
		if in.State != primary.IntentDeadLetter || in.DeadReason != "attempts_exhausted" ||
			f.Class != "unavailable" || f.Reason != "destination_unavailable" || !f.At.Equal(b.clock.Now().Add(-outbox.RetryDelay)) {
			t.Fatalf("after %d attempts: %+v, want a dead letter whose last failure is the last attempt's", outbox.MaxAttempts, in)
		}
	}
	b.dst.acceptHook = nil
	b.run(t) // sees the leading dead letters: later passes skip them
	b.src.scanned = 0
	if res := b.run(t); res.Claimed != 0 || b.src.scanned != 0 {
		t.Fatalf("a pass over the skipped dead letters: %+v, scanned %d", res, b.src.scanned)
	}
	ids := make([]event.ID, len(dead))
	for i, in := range dead {
		ids[i] = in.Event
	}
	if got, refused, err := b.db.Redrive(context.Background(), ids, "attempts_exhausted"); err != nil || len(got) != 3 || len(refused) != 0 {
		t.Fatalf("redrive: %v, %v, %v", got, refused, err)
	}
	if res := b.run(t); res.Stored != 3 || res.Completed != 3 || res.DeadLettered != 0 {
		t.Fatalf("the pass after the redrive: %+v, want the 3 redriven events stored and completed", res)
	}
	if n := b.pending(t); n != 0 || b.dst.len() != 3 {
		t.Fatalf("undelivered %d, archived %d; want 0 and 3", n, b.dst.len())
	}
}

// TestRedrivenConflictIsADeadLetterAgain: a redriven identity conflict
// meets the same different bytes in the archive and is a dead letter again,
// for the same reason, with its redrive counted; nothing is stored over the
// archive's record.
func TestRedrivenConflictIsADeadLetterAgain(t *testing.T) {
	b := setup(t, 1<<30, 0)
	b.commit(t, 2)
	key := event.Key{Database: b.db.Identity(), Incarnation: b.db.Incarnation(), Event: event.ID{Seq: 2}}
	b.dst.records[key] = []byte("different bytes")
	if res := b.run(t); res.DeadLettered != 1 {
		t.Fatalf("pass %+v", res)
	}
	if _, _, err := b.db.Redrive(context.Background(), []event.ID{{Seq: 2}}, ""); err != nil {
		t.Fatal(err)
	}
	if res := b.run(t); res.DeadLettered != 1 || res.Stored != 0 {
		t.Fatalf("the pass after the redrive: %+v, want the conflict dead-lettered again", res)
	}
	ins := b.intents(t)
	if len(ins) != 1 || ins[0].State != primary.IntentDeadLetter || ins[0].DeadReason != "identity_conflict" ||
		ins[0].Redrives != 1 || ins[0].Attempts != 1 || ins[0].LastFailure.Class != "conflict" || ins[0].LastFailure.Reason != "identity_conflict" {
		t.Fatalf("intents %+v, want 2.0 a dead letter again (identity_conflict, 1 redrive, 1 attempt)", ins)
	}
	if string(b.dst.records[key]) != "different bytes" {
		t.Fatal("the archive's record was changed")
	}
}

// TestAShorterAttemptBudget: with Options.MaxAttempts lowered to 2, an
// event whose deliveries keep failing is dead-lettered after its second
// attempt, and a budget outside 1 to MaxAttempts is refused.
func TestAShorterAttemptBudget(t *testing.T) {
	b := setup(t, 1<<30, 0)
	w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: b.dst, Clock: b.clock, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	b.commit(t, 1)
	b.dst.acceptHook = func(int, event.Key) error { return errUnavailable }
	for range 2 {
		if res := b.run(t); res.Claimed != 1 {
			t.Fatalf("pass %+v", res)
		}
		b.clock.Advance(outbox.RetryDelay)
	}
	if ins := b.intents(t); len(ins) != 1 || ins[0].State != primary.IntentDeadLetter || ins[0].Attempts != 2 ||
		ins[0].DeadReason != "attempts_exhausted" {
		t.Fatalf("after 2 failed attempts with a budget of 2: %+v", ins)
	}
	for _, n := range []int{-1, outbox.MaxAttempts + 1} {
		if _, err := outbox.New(outbox.Options{Source: b.src, Destination: b.dst, MaxAttempts: n}); err == nil {
			t.Fatalf("a budget of %d was accepted", n)
		}
	}
}
