package primary_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

const testContract = `
[commands.place_order]
input = { order_id = "string", amount_cents = "int", note = "string?" }
emits = ["order_placed"]

[commands.two]
input = { x = "int" }
emits = ["first", "second"]

[commands.bulk]
input = { x = "int" }
emits = ["e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09", "e10", "e11", "e12", "e13", "e14", "e15", "e16"]
`

func compile(tb testing.TB) *contract.Contract {
	tb.Helper()
	c, err := contract.Compile([]byte(testContract))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// fakeClock is an injected clock that tests advance explicitly.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After implements clock.Clock; the primary never waits on its clock.
func (c *fakeClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// tb is the part of testing.TB that helpers need; *rapid.T has it too.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type bundle struct {
	fs    vfs.FS
	clock *fakeClock
	opts  primary.Options
}

func setup(t *testing.T, mod ...func(*primary.Options)) (*primary.DB, *bundle) {
	t.Helper()
	bu := &bundle{fs: vfs.NewMem(), clock: newClock()}
	bu.opts = primary.Options{
		Path:     "/db",
		Contract: compile(t),
		FS:       bu.fs,
		Logger:   zaptest.NewLogger(t),
		Clock:    bu.clock,
	}
	for _, m := range mod {
		m(&bu.opts)
	}
	db, err := primary.Open(context.Background(), bu.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, bu
}

func reopen(t *testing.T, db *primary.DB, bu *bundle) *primary.DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := primary.Open(context.Background(), bu.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db2.Close() })
	return db2
}

func exec(t tb, db *primary.DB, cmd, input, key string) primary.Commit {
	t.Helper()
	c, err := db.Execute(context.Background(), cmd, json.RawMessage(input), key)
	if err != nil {
		t.Fatalf("execute %s: %v", cmd, err)
	}
	return c
}

func allIntents(t tb, db *primary.DB) []primary.Intent {
	t.Helper()
	var out []primary.Intent
	var after *event.ID
	for {
		page, err := db.ScanIntents(context.Background(), after, 100)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < 100 {
			return out
		}
		after = &page[len(page)-1].Event
	}
}

func wantCount(t tb, db *primary.DB, want uint64) {
	t.Helper()
	n, st := db.UndeliveredCount()
	if st != primary.IndexReady || n != want {
		t.Fatalf("UndeliveredCount = %d, %s; want %d, ready", n, st, want)
	}
}

func TestOpenCreatesIdentityOnce(t *testing.T) {
	db, bu := setup(t)
	id := db.Identity()
	if id == (event.DatabaseID{}) || id[6]>>4 != 7 {
		t.Fatalf("identity %s is not a UUIDv7", id)
	}
	if db.Incarnation() != 1 {
		t.Fatalf("incarnation = %d, want 1", db.Incarnation())
	}
	db2 := reopen(t, db, bu)
	if db2.Identity() != id || db2.Incarnation() != 1 {
		t.Fatalf("identity changed across reopen: %s/%d, want %s/1", db2.Identity(), db2.Incarnation(), id)
	}
	st, err := bu.fs.Stat("/db")
	if err != nil || !st.IsDir() {
		t.Fatalf("database directory not created: %v", err)
	}
}

func TestCommitExactBytesAndIntents(t *testing.T) {
	db, bu := setup(t)
	c := exec(t, db, "two", `{ "x" : 7 }`, "")
	if c.Seq != 1 || c.Replayed || len(c.Events) != 2 || c.Events[0] != (event.ID{Seq: 1}) || c.Events[1] != (event.ID{Seq: 1, Pos: 1}) {
		t.Fatalf("commit = %+v", c)
	}
	plan, _ := bu.opts.Contract.Command("two")
	drafts, err := plan.Events(json.RawMessage(`{"x":7}`))
	if err != nil {
		t.Fatal(err)
	}
	intents := allIntents(t, db)
	if len(intents) != 2 {
		t.Fatalf("got %d intents, want 2", len(intents))
	}
	for i, d := range drafts {
		want, err := event.NewStored(c.Events[i], d.Type, d.Payload)
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.LoadEvent(context.Background(), c.Events[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want.Encode()) {
			t.Fatalf("event %d bytes differ:\n got %x\nwant %x", i, got, want.Encode())
		}
		in := intents[i]
		if in.Event != c.Events[i] || in.State != primary.IntentPending || in.Attempts != 0 ||
			in.EncodedLen != len(want.Encode()) || !in.CommittedAt.Equal(bu.clock.Now()) ||
			!in.NextAttempt.IsZero() || !in.LeaseDeadline.IsZero() {
			t.Fatalf("intent %d = %+v", i, in)
		}
	}
	wantCount(t, db, 2)
	if db.LastCommitSequence() != 1 || db.Frontier() != 1 {
		t.Fatalf("last=%d frontier=%d, want 1, 1", db.LastCommitSequence(), db.Frontier())
	}
	select {
	case <-db.Notify():
	default:
		t.Fatal("Notify not signalled after the frontier advanced")
	}
	if _, err := db.LoadEvent(context.Background(), event.ID{Seq: 9}); !errors.Is(err, primary.ErrNotFound) {
		t.Fatalf("LoadEvent(missing) = %v, want ErrNotFound", err)
	}
	// Everything survives a reopen unchanged.
	db2 := reopen(t, db, bu)
	wantCount(t, db2, 2)
	if db2.LastCommitSequence() != 1 || db2.Frontier() != 1 {
		t.Fatalf("after reopen last=%d frontier=%d", db2.LastCommitSequence(), db2.Frontier())
	}
	if got := allIntents(t, db2); len(got) != 2 || got[0] != intents[0] && !sameIntent(got[0], intents[0]) {
		t.Fatalf("intents after reopen = %+v", got)
	}
}

func sameIntent(a, b primary.Intent) bool {
	return a.Event == b.Event && a.State == b.State && a.Attempts == b.Attempts &&
		a.NextAttempt.Equal(b.NextAttempt) && a.LeaseDeadline.Equal(b.LeaseDeadline) &&
		a.CommittedAt.Equal(b.CommittedAt) && a.TraceParent == b.TraceParent &&
		a.EncodedLen == b.EncodedLen && a.DeadReason == b.DeadReason
}

func TestInvalidCommandsCommitNothing(t *testing.T) {
	db, _ := setup(t)
	ctx := context.Background()
	cases := []struct {
		cmd, input string
		want       error
	}{
		{"nope", `{"x":1}`, primary.ErrUnknownCommand},
		{"two", `{"x":"one"}`, primary.ErrInvalidInput},
		{"two", `{"x":1,"y":2}`, primary.ErrInvalidInput},
		{"two", `{}`, primary.ErrInvalidInput},
		{"two", `not json`, primary.ErrInvalidInput},
	}
	for _, c := range cases {
		_, err := db.Execute(ctx, c.cmd, json.RawMessage(c.input), "k")
		if !errors.Is(err, c.want) {
			t.Errorf("Execute(%s, %s) = %v, want %v", c.cmd, c.input, err, c.want)
		}
	}
	if _, err := db.Execute(ctx, "two", json.RawMessage(`{"x":"one"}`), ""); !errors.Is(err, contract.ErrInvalidInput) {
		t.Errorf("ErrInvalidInput does not wrap contract.ErrInvalidInput: %v", err)
	}
	if db.LastCommitSequence() != 0 || len(allIntents(t, db)) != 0 {
		t.Fatalf("a refused command committed something")
	}
	wantCount(t, db, 0)
	// The key "k" was not consumed by the refused attempts.
	if c := exec(t, db, "two", `{"x":1}`, "k"); c.Seq != 1 || c.Replayed {
		t.Fatalf("commit = %+v", c)
	}
}

func TestIdempotency(t *testing.T) {
	db, bu := setup(t)
	first := exec(t, db, "place_order", `{"order_id":"a","amount_cents":5}`, "key-1")
	again := exec(t, db, "place_order", `{ "amount_cents": 5, "order_id": "a" }`, "key-1")
	if !again.Replayed || again.Seq != first.Seq || len(again.Events) != 1 || again.Events[0] != first.Events[0] {
		t.Fatalf("retry = %+v, want replay of %+v", again, first)
	}
	ctx := context.Background()
	if _, err := db.Execute(ctx, "place_order", json.RawMessage(`{"order_id":"a","amount_cents":6}`), "key-1"); !errors.Is(err, primary.ErrIdempotencyConflict) {
		t.Fatalf("different input: %v, want ErrIdempotencyConflict", err)
	}
	if _, err := db.Execute(ctx, "two", json.RawMessage(`{"x":1}`), "key-1"); !errors.Is(err, primary.ErrIdempotencyConflict) {
		t.Fatalf("different command: %v, want ErrIdempotencyConflict", err)
	}
	if db.LastCommitSequence() != 1 {
		t.Fatalf("last = %d, want 1", db.LastCommitSequence())
	}
	wantCount(t, db, 1)
	db2 := reopen(t, db, bu)
	if c := exec(t, db2, "place_order", `{"order_id":"a","amount_cents":5}`, "key-1"); !c.Replayed || c.Seq != 1 {
		t.Fatalf("replay after reopen = %+v", c)
	}
}

func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	db, _ := setup(t)
	const n = 32
	var wg sync.WaitGroup
	res := make([]primary.Commit, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = db.Execute(context.Background(), "two", json.RawMessage(`{"x":3}`), "dup")
		})
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res[i].Seq != 1 {
			t.Fatalf("duplicate got seq %d", res[i].Seq)
		}
		if !res[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d executions committed, want exactly 1", fresh)
	}
	wantCount(t, db, 2)
}

func TestNoSequenceGapsUnderConcurrency(t *testing.T) {
	db, bu := setup(t)
	const workers, per = 64, 8
	var mu sync.Mutex
	var seqs []uint64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				c, err := db.Execute(context.Background(), "place_order",
					json.RawMessage(fmt.Sprintf(`{"order_id":"%d-%d","amount_cents":1}`, w, i)), "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seqs = append(seqs, c.Seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("sequence %d at position %d: gap or duplicate", s, i)
		}
	}
	if db.Frontier() != workers*per || db.LastCommitSequence() != workers*per {
		t.Fatalf("frontier=%d last=%d, want %d", db.Frontier(), db.LastCommitSequence(), workers*per)
	}
	db2 := reopen(t, db, bu)
	wantCount(t, db2, workers*per)
	for s := uint64(1); s <= workers*per; s++ {
		if _, err := db2.LoadEvent(context.Background(), event.ID{Seq: s}); err != nil {
			t.Fatalf("seq %d after reopen: %v", s, err)
		}
	}
}

// TestLoadEventsMatchesLoadEvent: the batch read returns each event's exact
// bytes in the order asked (also out of key order and across commits), each
// a slice of its own, and refuses a missing event.
func TestLoadEventsMatchesLoadEvent(t *testing.T) {
	db, _ := setup(t)
	ctx := context.Background()
	var ids []event.ID
	for i := range 3 {
		ids = append(ids, exec(t, db, "two", fmt.Sprintf(`{"x":%d}`, i), "").Events...)
	}
	ask := []event.ID{ids[1], ids[0], ids[5], ids[2], ids[2]}
	got, err := db.LoadEvents(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ask {
		want, err := db.LoadEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[i], want) {
			t.Fatalf("LoadEvents[%d] (%s) = %x, want %x", i, id, got[i], want)
		}
	}
	// Each is a slice of its own: appending to one leaves the next alone.
	next := bytes.Clone(got[1])
	_ = append(got[0], 0xff)
	if !bytes.Equal(got[1], next) {
		t.Fatal("appending to one loaded event changed the next")
	}
	if _, err := db.LoadEvents(ctx, []event.ID{ids[0], {Seq: 3, Pos: 7}}); !errors.Is(err, primary.ErrNotFound) {
		t.Fatalf("LoadEvents with a missing event = %v, want ErrNotFound", err)
	}
}

// TestLargeCommitsShareNoOversizedGroup: concurrent commits of about 300 KB
// each (groups are bounded to about 1 MiB of events, the commit that would
// cross the bound starting the next group) all commit, gap-free, with their
// exact bytes.
func TestLargeCommitsShareNoOversizedGroup(t *testing.T) {
	db, bu := setup(t)
	note := strings.Repeat("n", 300<<10)
	const workers, per = 12, 2
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				in := fmt.Sprintf(`{"order_id":"%d-%d","amount_cents":1,"note":%q}`, w, i, note)
				if _, err := db.Execute(context.Background(), "place_order", json.RawMessage(in), ""); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	db = reopen(t, db, bu)
	if db.LastCommitSequence() != workers*per {
		t.Fatalf("last sequence %d, want %d", db.LastCommitSequence(), workers*per)
	}
	for s := uint64(1); s <= workers*per; s++ {
		b, err := db.LoadEvent(context.Background(), event.ID{Seq: s})
		if err != nil {
			t.Fatalf("seq %d: %v", s, err)
		}
		st, err := event.DecodeStored(b)
		if err != nil || !strings.Contains(string(st.Payload), note) {
			t.Fatalf("seq %d: payload of %d bytes, %v", s, len(st.Payload), err)
		}
	}
}
