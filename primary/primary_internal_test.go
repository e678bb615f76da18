package primary

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary/contract"
)

func openInternal(t *testing.T, fs vfs.FS) *DB {
	t.Helper()
	c, err := contract.Compile([]byte("[commands.two]\ninput = { x = \"int\" }\nemits = [\"a\", \"b\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(context.Background(), Options{Path: "/db", Contract: c, FS: fs, Logger: zaptest.NewLogger(t), HistoryRetention: 1})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestStatsReadNoStore closes the underlying Pebble store: any store access
// would then panic ("pebble: closed"), so the stats readers provably touch
// only in-memory state.
func TestStatsReadNoStore(t *testing.T) {
	db := openInternal(t, vfs.NewMem())
	for i := range 3 {
		if _, err := db.Execute(context.Background(), "two", json.RawMessage(`{"x":1}`), ""); err != nil {
			t.Fatal(i, err)
		}
	}
	if err := db.store.Close(); err != nil {
		t.Fatal(err)
	}
	n, st := db.UndeliveredCount()
	retained, reclaimable := db.HistoryUsage()
	if n != 6 || st != IndexReady || db.Frontier() != 3 || db.LastCommitSequence() != 3 || retained <= 0 || reclaimable != 0 {
		t.Fatalf("count=%d %s frontier=%d last=%d usage=%d/%d", n, st, db.Frontier(), db.LastCommitSequence(), retained, reclaimable)
	}
}

func TestCountMismatchDegrades(t *testing.T) {
	fs := vfs.NewMem()
	db := openInternal(t, fs)
	if _, err := db.Execute(context.Background(), "two", json.RawMessage(`{"x":1}`), ""); err != nil {
		t.Fatal(err)
	}
	if err := db.store.Set(keyCount, encodeU64(5), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openInternal(t, fs)
	defer db.Close()
	if n, st := db.UndeliveredCount(); st != IndexDegraded || n != 0 {
		t.Fatalf("UndeliveredCount = %d, %s; want degraded", n, st)
	}
	// Commits still work; the count stays unavailable.
	if _, err := db.Execute(context.Background(), "two", json.RawMessage(`{"x":1}`), ""); err != nil {
		t.Fatal(err)
	}
	if _, st := db.UndeliveredCount(); st != IndexDegraded {
		t.Fatalf("state = %s, want degraded", st)
	}
}

func TestIntentCodecRoundTrip(t *testing.T) {
	in := Intent{Event: event.ID{Seq: 9, Pos: 3}, State: IntentDelivering, Attempts: 4,
		NextAttempt: time.Unix(5, 6), LeaseDeadline: time.Unix(7, 8), CommittedAt: time.Unix(9, 10),
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", EncodedLen: 77, DeadReason: "r"}
	got, err := decodeIntent(in.Event, encodeIntent(in))
	if err != nil || !sameState(got, in) || got.TraceParent != in.TraceParent || got.EncodedLen != 77 || !got.CommittedAt.Equal(in.CommittedAt) {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
}

func FuzzDecodeIntent(f *testing.F) {
	f.Add(encodeIntent(Intent{State: IntentPending, CommittedAt: time.Unix(1, 0), EncodedLen: 10}))
	f.Add(encodeIntent(Intent{State: IntentDeadLetter, Attempts: 32, DeadReason: "refused", TraceParent: "tp"}))
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id := event.ID{Seq: 1}
		in, err := decodeIntent(id, b)
		if err != nil {
			return
		}
		if re := encodeIntent(in); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, re)
		}
	})
}

func FuzzDecodeHistory(f *testing.F) {
	f.Add(encodeHistory(historyRecord{Seq: 1, CommittedAt: time.Unix(1, 0), Cum: 100, PlanID: "p", IdemKey: "k", Events: 2}))
	f.Add(encodeHistory(historyRecord{Seq: 1 << 40, PlanID: "abc"}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHistory(b)
		if err != nil {
			return
		}
		if re := encodeHistory(h); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, re)
		}
	})
}

func FuzzDecodeSmallRecords(f *testing.F) {
	f.Add(encodeIdem(idemRecord{Seq: 3, Events: 2}))
	f.Add(encodePruned(prunedMark{First: 4, Cum: 9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeIdem(b); err == nil && !bytes.Equal(encodeIdem(r), b) {
			t.Fatal("idempotency record does not round-trip")
		}
		if p, err := decodePruned(b); err == nil && !bytes.Equal(encodePruned(p), b) {
			t.Fatal("pruned mark does not round-trip")
		}
		if id, err := decodeIntentKey(b); err == nil && !bytes.Equal(intentKey(id), b) {
			t.Fatal("intent key does not round-trip")
		}
	})
}

// TestGroupAppliesIdempotencyWithinTheGroup hands the committer's group
// function one group that uses a key twice with the same input and once
// with another: the first commits, the second replays it, the third is a
// conflict, and only the two fresh commits take sequences.
func TestGroupAppliesIdempotencyWithinTheGroup(t *testing.T) {
	db := openInternal(t, vfs.NewMem())
	defer db.Close()
	plan, _ := db.opts.Contract.Command("two")
	mk := func(key, in string) *commitReq {
		drafts, err := plan.Events(json.RawMessage(in))
		if err != nil {
			t.Fatal(err)
		}
		return &commitReq{plan: plan, drafts: drafts, hash: inputHash(plan.ID, drafts[0].Payload), key: key}
	}
	group := []*commitReq{mk("a", `{"x":1}`), mk("a", `{"x":1}`), mk("a", `{"x":2}`), mk("", `{"x":3}`)}
	job, err := db.applyGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	if err := job.b.SyncWait(); err != nil {
		t.Fatal(err)
	}
	_ = job.b.Close()
	if c := group[0].c; group[0].err != nil || c.Seq != 1 || c.Replayed {
		t.Fatalf("first = %+v, %v; want fresh seq 1", c, group[0].err)
	}
	if c := group[1].c; group[1].err != nil || c.Seq != 1 || !c.Replayed {
		t.Fatalf("same key and input = %+v, %v; want a replay of seq 1", c, group[1].err)
	}
	if !errors.Is(group[2].err, ErrIdempotencyConflict) {
		t.Fatalf("same key, other input: err = %v, want ErrIdempotencyConflict", group[2].err)
	}
	if c := group[3].c; group[3].err != nil || c.Seq != 2 {
		t.Fatalf("unkeyed = %+v, %v; want seq 2", c, group[3].err)
	}
	if job.last != 2 || db.LastCommitSequence() != 2 {
		t.Fatalf("group last = %d, last commit = %d; want 2", job.last, db.LastCommitSequence())
	}
	if n, _ := db.UndeliveredCount(); n != 4 {
		t.Fatalf("undelivered = %d, want 4 (two commits of two events)", n)
	}
}

// TestKeyLayoutPutsNewCommitsLast checks the ordering the layout relies on:
// every key of a commit sorts after every commit key written before it, a
// commit's history record is its last key, and the intent, idempotency and
// meta namespaces come after all commit data.
func TestKeyLayoutPutsNewCommitsLast(t *testing.T) {
	keysOf := func(seq uint64, events uint32) [][]byte {
		var ks [][]byte
		for p := range events {
			ks = append(ks, eventKey(event.ID{Seq: seq, Pos: p}))
		}
		return append(ks, historyKey(seq))
	}
	var prev [][]byte
	for _, seq := range []uint64{1, 2, 255, 256, 65536, 1 << 40} {
		ks := keysOf(seq, 300)
		for i := 1; i < len(ks); i++ {
			if bytes.Compare(ks[i-1], ks[i]) >= 0 {
				t.Fatalf("seq %d: key %x does not sort before %x", seq, ks[i-1], ks[i])
			}
		}
		if !isHistoryKey(ks[len(ks)-1]) || isHistoryKey(ks[0]) {
			t.Fatalf("seq %d: history key not recognised", seq)
		}
		for _, p := range prev {
			if bytes.Compare(p, ks[0]) >= 0 {
				t.Fatalf("key %x of an earlier commit sorts after %x of commit %d", p, ks[0], seq)
			}
		}
		prev = ks
	}
	top := historyKey(^uint64(0))
	for _, k := range [][]byte{intentKey(event.ID{Seq: 1}), idemKey(""), keyIdentity, keyIncarnation, keyLayout, keyCount, keyPruned} {
		if bytes.Compare(top, k) >= 0 {
			t.Fatalf("key %q sorts among the commit data", k)
		}
	}
	if !(nsIntent < nsIdem && nsIdem < nsMeta) {
		t.Fatal("namespaces out of order")
	}
}

// TestOpenRefusesAnotherKeyLayout: a store without the layout marker (made
// by a pre-release build) or with a version this build does not read (an
// older one, or one after layoutExtendedIntents) is not opened.
func TestOpenRefusesAnotherKeyLayout(t *testing.T) {
	for name, edit := range map[string]func(*pebble.DB) error{
		"missing": func(s *pebble.DB) error { return s.Delete(keyLayout, pebble.Sync) },
		"older":   func(s *pebble.DB) error { return s.Set(keyLayout, encodeU64(1), pebble.Sync) },
		"newer":   func(s *pebble.DB) error { return s.Set(keyLayout, encodeU64(layoutExtendedIntents+1), pebble.Sync) },
	} {
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewMem()
			db := openInternal(t, fs)
			if err := edit(db.store); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			c, _ := contract.Compile([]byte("[commands.two]\ninput = { x = \"int\" }\nemits = [\"a\", \"b\"]\n"))
			_, err := Open(context.Background(), Options{Path: "/db", Contract: c, FS: fs})
			if !errors.Is(err, ErrIncompatible) {
				t.Fatalf("Open = %v, want ErrIncompatible", err)
			}
		})
	}
}

// TestFillGroupBounds: a group takes what is waiting, at most maxGroup
// commits and, past its first commit, no commit that would take its events
// over maxGroupBytes; that commit starts the next group.
func TestFillGroupBounds(t *testing.T) {
	q := make(chan *commitReq, 2*maxGroup)
	sizes := func(g []*commitReq) (n int) {
		for _, r := range g {
			n += r.size
		}
		return n
	}
	// Many small commits: the count bound.
	for range maxGroup + 10 {
		q <- &commitReq{size: 10}
	}
	g, carry := fillGroup([]*commitReq{<-q}, q)
	if len(g) != maxGroup || carry != nil || len(q) != 10 {
		t.Fatalf("group of %d (carry %v), %d left; want %d, none, 10", len(g), carry != nil, len(q), maxGroup)
	}
	for len(q) > 0 {
		<-q
	}
	// Large commits: the byte bound, with the crossing commit carried.
	big := maxGroupBytes / 3
	for range 5 {
		q <- &commitReq{size: big}
	}
	g, carry = fillGroup([]*commitReq{<-q}, q)
	if len(g) != 3 || sizes(g) > maxGroupBytes || carry == nil || len(q) != 1 {
		t.Fatalf("group of %d (%d bytes), carry %v, %d left; want 3, a carry, 1 left", len(g), sizes(g), carry != nil, len(q))
	}
	// A single commit over the bound forms a group alone.
	q <- &commitReq{size: 10}
	g, carry = fillGroup([]*commitReq{{size: 2 * maxGroupBytes}}, q)
	if len(g) != 1 || carry != nil || len(q) != 2 {
		t.Fatalf("oversized first commit: group of %d, carry %v, %d left", len(g), carry != nil, len(q))
	}
	// Nothing waiting: the group is the first commit.
	for len(q) > 0 {
		<-q
	}
	if g, carry = fillGroup([]*commitReq{{size: 1}}, q); len(g) != 1 || carry != nil {
		t.Fatalf("empty queue: group of %d, carry %v", len(g), carry != nil)
	}
}

// TestScanStartsAtTheLowWaterMark checks the scan's lower bound: at the
// lowest sequence with an undelivered intent (dead letters included) while
// the index is ready, nothing to scan when no intent is undelivered, and
// the caller's bound when the index is degraded; the pages themselves are
// unchanged.
func TestScanStartsAtTheLowWaterMark(t *testing.T) {
	ctx := context.Background()
	db := openInternal(t, vfs.NewMem())
	defer db.Close()
	for range 10 {
		if _, err := db.Execute(ctx, "two", json.RawMessage(`{"x":1}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	all, err := db.ScanIntents(ctx, nil, 100)
	if err != nil || len(all) != 20 {
		t.Fatalf("%d intents, %v", len(all), err)
	}
	floor := func() []byte {
		t.Helper()
		k, ok := db.scanFloor([]byte{nsIntent}, nil)
		if !ok {
			t.Fatal("no floor while intents are undelivered")
		}
		return k
	}
	if !bytes.Equal(floor(), intentKey(event.ID{Seq: 1})) {
		t.Fatal("with nothing delivered the floor is not the first commit")
	}
	// Deliver commits 1-3 and the first event of commit 4; dead-letter
	// commit 5's events.
	deliver(t, db, all[:7])
	if !bytes.Equal(floor(), intentKey(event.ID{Seq: 4})) {
		t.Fatalf("floor %x, want commit 4's", floor())
	}
	// The caller's bound wins when it is higher.
	after := append(intentKey(event.ID{Seq: 6, Pos: 1}), 0)
	if k, _ := db.scanFloor(after, &event.ID{Seq: 6, Pos: 1}); !bytes.Equal(k, after) {
		t.Fatal("the floor lowered the caller's bound")
	}
	page, err := db.ScanIntents(ctx, nil, 100)
	if err != nil || len(page) != 13 || page[0].Event != (event.ID{Seq: 4, Pos: 1}) {
		t.Fatalf("scan after deliveries: %d intents from %v, %v", len(page), page[0].Event, err)
	}
	dead := page[1:3] // commit 5
	for _, in := range dead {
		c, err := db.Claim(ctx, []Intent{in}, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.DeadLetter(ctx, c[0], "attempts_exhausted", Failure{}); err != nil {
			t.Fatal(err)
		}
	}
	deliver(t, db, page[:1])
	if !bytes.Equal(floor(), intentKey(event.ID{Seq: 5})) {
		t.Fatalf("floor %x, want the dead letters' commit 5", floor())
	}
	// Nothing undelivered: nothing to scan.
	db2 := openInternal(t, vfs.NewMem())
	defer db2.Close()
	if _, err := db2.Execute(ctx, "two", json.RawMessage(`{"x":1}`), ""); err != nil {
		t.Fatal(err)
	}
	both, err := db2.ScanIntents(ctx, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, db2, both)
	if _, ok := db2.scanFloor([]byte{nsIntent}, nil); ok {
		t.Fatal("a floor with no undelivered intent")
	}
	if page, err := db2.ScanIntents(ctx, nil, 100); err != nil || len(page) != 0 {
		t.Fatalf("scan with nothing undelivered: %d intents, %v", len(page), err)
	}
	// A degraded index leaves the bound alone.
	db.idx.degrade()
	if k, ok := db.scanFloor([]byte{nsIntent}, nil); !ok || !bytes.Equal(k, []byte{nsIntent}) {
		t.Fatal("a degraded index moved the scan's bound")
	}
}

// deliver claims and completes members, as a worker does after archiving them.
func deliver(t *testing.T, db *DB, members []Intent) {
	t.Helper()
	claimed, err := db.Claim(context.Background(), members, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(context.Background(), claimed); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeIntentLike: the intent read back is the stored one whatever
// the expected state says; only its strings' memory is the expected
// state's where the bytes are equal.
func TestDecodeIntentLike(t *testing.T) {
	id := event.ID{Seq: 3, Pos: 1}
	stored := Intent{Event: id, State: IntentDelivering, Attempts: 2, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		DeadReason: "", Redrives: 1, LastFailure: Failure{At: time.Unix(5, 0), Class: "timeout", Reason: "archive slow"}}
	v := encodeIntent(stored)
	want, err := decodeIntent(id, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, like := range []Intent{stored, {}, {TraceParent: "other", LastFailure: Failure{Class: "x", Reason: "y"}}} {
		got, err := decodeIntentLike(id, v, &like)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeIntentLike(like %+v) = %+v, want %+v", like, got, want)
		}
	}
}
