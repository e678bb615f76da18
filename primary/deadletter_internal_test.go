package primary

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
)

// commitN runs n two-event commands.
func commitN(t *testing.T, db *DB, n int) {
	t.Helper()
	for i := range n {
		if _, err := db.Execute(context.Background(), "two", json.RawMessage(fmt.Sprintf(`{"x":%d}`, i)), ""); err != nil {
			t.Fatal(err)
		}
	}
}

// intentsOf returns the undelivered intents of commit seq.
func intentsOf(t *testing.T, db *DB, seq uint64) []Intent {
	t.Helper()
	var out []Intent
	err := db.forEachIntent(intentKey(event.ID{Seq: seq}), intentKey(event.ID{Seq: seq + 1}), func(in Intent, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, in)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func deadLetterAll(t *testing.T, db *DB, ins []Intent) {
	t.Helper()
	for _, in := range ins {
		if _, err := db.DeadLetter(context.Background(), in, "attempts_exhausted", Failure{}); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(ins []Intent) []event.ID {
	out := make([]event.ID, len(ins))
	for i, in := range ins {
		out[i] = in.Event
	}
	return out
}

// TestScanJumpsOverDeadLettersToTheLiveFloor checks the scan floor with dead
// letters at the bottom of the index: a scan from the start, or from before
// the last of them, starts at the low-water mark (every dead letter is
// still returned); a scan after the last of them starts at the first commit
// with an intent that is not a dead letter, past the deletions of the
// commits delivered in between; the pages are what a full scan holds; and a
// reopened database rebuilds the same floors.
func TestScanJumpsOverDeadLettersToTheLiveFloor(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := openInternal(t, fs)
	commitN(t, db, 7)
	for seq := uint64(1); seq <= 3; seq++ {
		deadLetterAll(t, db, intentsOf(t, db, seq))
	}
	deliver(t, db, append(intentsOf(t, db, 4), intentsOf(t, db, 5)...))
	deadLetterAll(t, db, intentsOf(t, db, 7)[:1]) // commit 7: one dead letter, one live intent

	check := func(db *DB) {
		t.Helper()
		for _, c := range []struct {
			after *event.ID
			want  uint64
		}{
			{nil, 1},                       // from the start: every dead letter
			{&event.ID{Seq: 2, Pos: 1}, 1}, // before the last dead letter below the live floor
			{&event.ID{Seq: 3, Pos: 0}, 1}, // still before it
			{&event.ID{Seq: 3, Pos: 1}, 6}, // at it: the live floor, past commits 4-5's deletions
			{&event.ID{Seq: 5, Pos: 1}, 6}, // past it
			{&event.ID{Seq: 6, Pos: 1}, 6}, // the caller's bound is higher and wins below
		} {
			seq, ok := db.idx.floor(c.after)
			if !ok || seq != c.want {
				t.Fatalf("floor after %v = %d, %v; want %d", c.after, seq, ok, c.want)
			}
		}
		got, err := db.ScanIntents(ctx, &event.ID{Seq: 3, Pos: 1}, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := []event.ID{{Seq: 6, Pos: 0}, {Seq: 6, Pos: 1}, {Seq: 7, Pos: 0}, {Seq: 7, Pos: 1}}
		if fmt.Sprint(ids(got)) != fmt.Sprint(want) || got[2].State != IntentDeadLetter {
			t.Fatalf("scan after the dead letters: %v, want %v with 7.0 dead", ids(got), want)
		}
		all, err := db.ScanIntents(ctx, nil, 100)
		if err != nil || len(all) != 10 || all[0].Event != (event.ID{Seq: 1}) || all[5].State != IntentDeadLetter {
			t.Fatalf("scan from the start: %v (%v)", ids(all), err)
		}
		if lw, ok := db.idx.lowWater(); !ok || lw != 1 {
			t.Fatalf("low-water mark %d, %v: the dead letters no longer fence retention", lw, ok)
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openInternal(t, fs)
	defer db.Close()
	check(db)

	// Deliver commit 6 and 7's live intent: only dead letters remain, none
	// after the last of them.
	deliver(t, db, append(intentsOf(t, db, 6), intentsOf(t, db, 7)[1]))
	if seq, ok := db.idx.floor(&event.ID{Seq: 7, Pos: 0}); ok {
		t.Fatalf("floor %d after the last dead letter with nothing live", seq)
	}
	if seq, ok := db.idx.floor(&event.ID{Seq: 3, Pos: 1}); !ok || seq != 1 {
		t.Fatalf("floor after 3.1 = %d, %v; want the low-water mark: 7.0 is a dead letter after it", seq, ok)
	}
	if page, err := db.ScanIntents(ctx, &event.ID{Seq: 7, Pos: 0}, 100); err != nil || len(page) != 0 {
		t.Fatalf("scan after every intent: %v, %v", ids(page), err)
	}
}

// TestDeadLetterDoesNotPinTheIndexMemory checks that a dead letter at the
// bottom of the index does not keep an entry for every commit delivered
// after it: the list keeps the dead letters' commits and the live ones.
func TestDeadLetterDoesNotPinTheIndexMemory(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, vfs.NewMem())
	defer db.Close()
	commitN(t, db, 1)
	deadLetterAll(t, db, intentsOf(t, db, 1))
	const commits = 3000
	for i := range commits {
		commitN(t, db, 1)
		deliver(t, db, intentsOf(t, db, uint64(i+2)))
	}
	commitN(t, db, 1)
	db.idx.mu.Lock()
	n := len(db.idx.seqs)
	db.idx.mu.Unlock()
	if n > 1100 {
		t.Fatalf("the index holds %d entries for 1 dead commit, 1 live one and %d delivered", n, commits)
	}
	if seq, ok := db.idx.floor(&event.ID{Seq: 1, Pos: 1}); !ok || seq != commits+2 {
		t.Fatalf("live floor %d, %v; want %d", seq, ok, commits+2)
	}
	k, ok := db.scanFloor(append(intentKey(event.ID{Seq: 1, Pos: 1}), 0), &event.ID{Seq: 1, Pos: 1})
	if !ok || !bytes.Equal(k, intentKey(event.ID{Seq: commits + 2})) {
		t.Fatalf("scan floor %x, %v", k, ok)
	}
	if got, st := db.UndeliveredCount(); st != IndexReady || got != 4 {
		t.Fatalf("undelivered %d (%s), want 4", got, st)
	}
	page, err := db.ScanIntents(ctx, nil, 10)
	if err != nil || len(page) != 4 || page[2].Event.Seq != commits+2 {
		t.Fatalf("scan %v, %v", ids(page), err)
	}
}
