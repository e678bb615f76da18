package primary

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
)

// TestRedriveRevivesDeadLettersBelowTheLiveFloor: dead letters at the
// bottom of the index, behind commits delivered since and behind the live
// floor the scans jump to, are pending again after a redrive with no
// attempt spent and one redrive counted; scans after the old dead letters
// reach them (the live floor moved back), the undelivered count is
// unchanged, and they can be delivered. The others stay dead letters, the
// floors are those of a freshly built index, and a reopened store agrees.
func TestRedriveRevivesDeadLettersBelowTheLiveFloor(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	db := openInternal(t, fs)
	commitN(t, db, 6)
	for seq := uint64(1); seq <= 3; seq++ {
		deadLetterAll(t, db, intentsOf(t, db, seq))
	}
	deliver(t, db, append(intentsOf(t, db, 4), intentsOf(t, db, 5)...))
	if seq, ok := db.idx.floor(&event.ID{Seq: 3, Pos: 1}); !ok || seq != 6 {
		t.Fatalf("live floor before the redrive %d, %v; want 6", seq, ok)
	}
	before := db.Revivals()

	revived := []event.ID{{Seq: 2, Pos: 1}, {Seq: 3, Pos: 0}}
	// Asked for in descending order: the floor is the lowest of them.
	got, refused, err := db.Redrive(ctx, []event.ID{revived[1], revived[0]}, "")
	if err != nil || len(refused) != 0 || len(got) != 2 {
		t.Fatalf("redrive: %v, refused %v, %v", got, refused, err)
	}
	for _, in := range got {
		if in.State != IntentPending || in.Attempts != 0 || in.Redrives != 1 || in.DeadReason != "" {
			t.Fatalf("redriven %+v, want pending, 0 attempts, 1 redrive", in)
		}
	}
	if db.Revivals() == before {
		t.Fatal("Revivals did not change")
	}
	check := func(db *DB) {
		t.Helper()
		// The scan after the last dead letter the worker had seen (3.1)
		// must now reach the revived ones: the floor is their commit.
		if seq, ok := db.idx.floor(&event.ID{Seq: 1, Pos: 1}); !ok || seq != 2 {
			t.Fatalf("floor after 1.1 = %d, %v; want 2 (the first revived commit)", seq, ok)
		}
		all, err := db.ScanIntents(ctx, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		var pending []event.ID
		for _, in := range all {
			if in.State == IntentPending {
				pending = append(pending, in.Event)
			}
		}
		want := append(append([]event.ID{}, revived...), event.ID{Seq: 6}, event.ID{Seq: 6, Pos: 1})
		if fmt.Sprint(pending) != fmt.Sprint(want) {
			t.Fatalf("pending after the redrive %v, want %v", pending, want)
		}
		if n, st := db.UndeliveredCount(); st != IndexReady || n != 8 {
			t.Fatalf("undelivered %d (%s), want 8: a redrive leaves the count alone", n, st)
		}
		if lw, ok := db.idx.lowWater(); !ok || lw != 1 {
			t.Fatalf("low-water mark %d, %v", lw, ok)
		}
	}
	check(db)
	// What the live index holds equals what a build from the store gives.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openInternal(t, fs)
	defer db.Close()
	check(db)
	if got := intentsOf(t, db, 2); got[1].Redrives != 1 || got[0].Redrives != 0 {
		t.Fatalf("after reopening: %+v", got)
	}
	if l := layoutOf(t, db); l != layoutExtendedIntents {
		t.Fatalf("key layout %d after a redrive, want %d", l, layoutExtendedIntents)
	}

	// Deliver the revived ones: the dead letters left are 1.0, 1.1, 2.0,
	// 3.1, and the live floor is commit 6 again once they are gone.
	var claim []Intent
	for _, in := range append(intentsOf(t, db, 2), intentsOf(t, db, 3)...) {
		if in.State == IntentPending {
			claim = append(claim, in)
		}
	}
	deliver(t, db, claim)
	if seq, ok := db.idx.floor(&event.ID{Seq: 3, Pos: 1}); !ok || seq != 6 {
		t.Fatalf("live floor after delivering the revived %d, %v; want 6", seq, ok)
	}
	if n, _ := db.UndeliveredCount(); n != 6 {
		t.Fatalf("undelivered %d, want 6", n)
	}
}

// TestRedriveRefusesWhatIsNotItsDeadLetter: a redrive leaves alone, and
// says why, an event without an intent (delivered, or never committed), an
// undelivered event that is not a dead letter, and a dead letter of
// another reason than the one asked; it refuses a request naming an event
// twice or more than MaxRedrive events, and changes nothing then.
func TestRedriveRefusesWhatIsNotItsDeadLetter(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, vfs.NewMem())
	defer db.Close()
	commitN(t, db, 3)
	deliver(t, db, intentsOf(t, db, 1))
	if _, err := db.DeadLetter(ctx, intentsOf(t, db, 2)[0], "identity_conflict", Failure{}); err != nil {
		t.Fatal(err)
	}
	deadLetterAll(t, db, intentsOf(t, db, 2)[1:])
	ask := []event.ID{{Seq: 1}, {Seq: 9}, {Seq: 3}, {Seq: 2}, {Seq: 2, Pos: 1}}
	got, refused, err := db.Redrive(ctx, ask, "attempts_exhausted")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Event != (event.ID{Seq: 2, Pos: 1}) || got[0].Reason != "attempts_exhausted" {
		t.Fatalf("redriven %+v, want only 2.1, an attempts_exhausted dead letter", got)
	}
	want := []RedriveRefusal{
		{Event: event.ID{Seq: 1}, Why: RedriveNotUndelivered},
		{Event: event.ID{Seq: 9}, Why: RedriveNotUndelivered},
		{Event: event.ID{Seq: 3}, Why: RedriveNotDeadLetter, State: IntentPending},
		{Event: event.ID{Seq: 2}, Why: RedriveOtherReason},
	}
	if fmt.Sprint(refused) != fmt.Sprint(want) {
		t.Fatalf("refused %v, want %v", refused, want)
	}
	// A second redrive of the same event finds it pending: never twice.
	if got, refused, err := db.Redrive(ctx, []event.ID{{Seq: 2, Pos: 1}}, ""); err != nil || len(got) != 0 ||
		len(refused) != 1 || refused[0].Why != RedriveNotDeadLetter {
		t.Fatalf("second redrive: %v, %v, %v", got, refused, err)
	}
	twice := []event.ID{{Seq: 2}, {Seq: 2}}
	if _, _, err := db.Redrive(ctx, twice, ""); !errors.Is(err, ErrRedriveRequest) {
		t.Fatalf("an event named twice: %v", err)
	}
	many := make([]event.ID, MaxRedrive+1)
	for i := range many {
		many[i] = event.ID{Seq: uint64(i + 1)}
	}
	if _, _, err := db.Redrive(ctx, many, ""); !errors.Is(err, ErrRedriveRequest) {
		t.Fatalf("%d events: %v", len(many), err)
	}
	if in := intentsOf(t, db, 2)[0]; in.State != IntentDeadLetter || in.DeadReason != "identity_conflict" {
		t.Fatalf("refused requests changed 2.0: %+v", in)
	}
}

// TestConcurrentRedrivesRedriveEachEventOnce: four redrives racing each
// other over the same dead letters never redrive an event twice: every
// dead letter is redriven by exactly one of them, once. (The worker racing
// them is e2e/TestRedrivesRaceTheWorkerAndSIGKILL.)
func TestConcurrentRedrivesRedriveEachEventOnce(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, vfs.NewMem())
	defer db.Close()
	commitN(t, db, 50)
	var all []event.ID
	for seq := uint64(1); seq <= 50; seq++ {
		in := intentsOf(t, db, seq)
		deadLetterAll(t, db, in)
		all = append(all, ids(in)...)
	}
	var mu sync.Mutex
	count := map[event.ID]int{}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			// Each redriver asks for every event, in its own order.
			order := append([]event.ID{}, all...)
			for i := range order {
				j := (i*7 + r*13) % len(order)
				order[i], order[j] = order[j], order[i]
			}
			for len(order) > 0 {
				n := min(len(order), 17)
				got, _, err := db.Redrive(ctx, order[:n], "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, in := range got {
					count[in.Event]++
				}
				mu.Unlock()
				order = order[n:]
			}
		})
	}
	wg.Wait()
	for _, id := range all {
		if count[id] != 1 {
			t.Fatalf("event %s redriven %d times", id, count[id])
		}
	}
	for seq := uint64(1); seq <= 50; seq++ {
		for _, in := range intentsOf(t, db, seq) {
			if in.State != IntentPending || in.Redrives != 1 {
				t.Fatalf("%+v, want pending with one redrive", in)
			}
		}
	}
}

// TestRedriveIsDurableWhenItReturns: a crash after Redrive returned keeps
// the events pending with their redrive counted, and the store at the
// redriven key layout.
func TestRedriveIsDurableWhenItReturns(t *testing.T) {
	mem := vfs.NewCrashableMem()
	db := openInternal(t, mem)
	commitN(t, db, 1)
	deadLetterAll(t, db, intentsOf(t, db, 1))
	if _, _, err := db.Redrive(context.Background(), ids(intentsOf(t, db, 1)), "attempts_exhausted"); err != nil {
		t.Fatal(err)
	}
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openInternal(t, clone)
	defer db.Close()
	for _, in := range intentsOf(t, db, 1) {
		if in.State != IntentPending || in.Redrives != 1 || in.Attempts != 0 {
			t.Fatalf("after the crash %+v, want pending with one redrive", in)
		}
	}
	if l := layoutOf(t, db); l != layoutExtendedIntents {
		t.Fatalf("key layout %d", l)
	}
}

// TestIntentCodecExtended: an intent that never failed and was never
// redriven keeps version 1 (the bytes every earlier build wrote and reads);
// one with a recorded failure or a redrive is version 2 and round-trips;
// version 2 with neither, with a code longer than MaxFailureCodeLen, or
// truncated is corrupt.
func TestIntentCodecExtended(t *testing.T) {
	id := event.ID{Seq: 4, Pos: 2}
	plain := Intent{Event: id, State: IntentPending, Attempts: 3, EncodedLen: 9}
	if v := encodeIntent(plain); v[0] != intentVersion {
		t.Fatalf("version %d for an intent never failed nor redriven", v[0])
	}
	failed := plain
	failed.LastFailure = Failure{At: time.Unix(1_800_000_000, 5), Class: "unavailable", Reason: "destination_unavailable"}
	redriven := plain
	redriven.Redrives = 7
	both := failed
	both.Redrives = 2
	for name, in := range map[string]Intent{"failed": failed, "redriven": redriven, "both": both} {
		v := encodeIntent(in)
		if v[0] != intentVersionExtended {
			t.Fatalf("%s: version %d", name, v[0])
		}
		got, err := decodeIntent(id, v)
		if err != nil || !sameState(got, in) {
			t.Fatalf("%s: decoded %+v, %v", name, got, err)
		}
	}
	v := encodeIntent(redriven)
	neither := append([]byte{}, v...)
	copy(neither[len(neither)-4-8-2:], make([]byte, 4)) // redrives 0, no failure
	long := encodeIntent(failed)
	long[len(long)-len("destination_unavailable")-1] = MaxFailureCodeLen + 1
	long = append(long, make([]byte, MaxFailureCodeLen+1-len("destination_unavailable"))...)
	for name, b := range map[string][]byte{"neither": neither, "truncated": v[:len(v)-2], "code too long": long} {
		if _, err := decodeIntent(id, b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestFailuresAreRecordedAndMoveTheLayout: Retry and DeadLetter record the
// failure given (codes only: anything else is "other"); a claim and a
// redrive keep it; a zero failure keeps the one recorded; the first
// failure recorded moves the store to the extended key layout.
func TestFailuresAreRecordedAndMoveTheLayout(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, vfs.NewMem())
	defer db.Close()
	commitN(t, db, 1)
	if l := layoutOf(t, db); l != layoutVersion {
		t.Fatalf("a new store's layout %d", l)
	}
	in := intentsOf(t, db, 1)[0]
	claimed, err := db.Claim(ctx, []Intent{in}, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0)
	r, err := db.Retry(ctx, claimed[0], at, Failure{At: at, Class: "unavailable", Reason: "/var/lib/riffdb: no such file"})
	if err != nil {
		t.Fatal(err)
	}
	want := Failure{At: at, Class: "unavailable", Reason: "other"}
	if r.LastFailure != want || intentsOf(t, db, 1)[0].LastFailure != want {
		t.Fatalf("recorded %+v, want %+v", r.LastFailure, want)
	}
	if l := layoutOf(t, db); l != layoutExtendedIntents {
		t.Fatalf("layout %d after the first recorded failure", l)
	}
	claimed, err = db.Claim(ctx, []Intent{r}, time.Now().Add(time.Minute))
	if err != nil || claimed[0].LastFailure != want {
		t.Fatalf("claimed %+v, %v: the claim dropped the last failure", claimed, err)
	}
	dead, err := db.DeadLetter(ctx, claimed[0], "attempts_exhausted", Failure{})
	if err != nil || dead.LastFailure != want {
		t.Fatalf("dead letter %+v, %v: a zero failure replaced the last one", dead, err)
	}
	got, _, err := db.Redrive(ctx, []event.ID{dead.Event}, "")
	if err != nil || got[0].LastFailure != want {
		t.Fatalf("redriven %+v, %v", got, err)
	}
}

// layoutOf reads the store's key layout.
func layoutOf(t *testing.T, db *DB) uint64 {
	t.Helper()
	v, closer, err := db.store.Get(keyLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	l, err := decodeU64(v)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
