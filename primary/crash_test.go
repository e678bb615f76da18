package primary_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"pgregory.net/rapid"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/crashfs"
	"github.com/riffdb/riffdb/primary"
)

// crashRun runs concurrent commits and intent transitions on a crashable
// MemFS and, at the k-th write operation, takes a CrashClone (the synced
// state at that instant, a power cut) together with what had been
// acknowledged by then. k == 0 only counts the write operations.
type crashRun struct {
	mu        sync.Mutex
	acked     map[uint64][][]byte // seq → exact bytes of its events
	completed map[event.ID]bool
	clone     *vfs.MemFS
	ackedAt   map[uint64][][]byte
	complAt   map[event.ID]bool
}

func runCrash(t *testing.T, k int64, seed uint64) (*crashRun, int64) {
	mem := crashfs.New()
	r := &crashRun{acked: map[uint64][][]byte{}, completed: map[event.ID]bool{}}
	var ops atomic.Int64
	// Crash points start once Open has returned: this test is about crashes
	// during commits and transitions. Crashes inside the first Open are
	// TestCrashDuringCreationReopens.
	var opened atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if opened.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && ops.Add(1) == k {
			r.mu.Lock()
			r.clone = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: int(seed % 2 * 50), RNG: rand.New(rand.NewPCG(seed, 1))})
			r.ackedAt = make(map[uint64][][]byte, len(r.acked))
			for s, b := range r.acked {
				r.ackedAt[s] = b
			}
			r.complAt = make(map[event.ID]bool, len(r.completed))
			for id := range r.completed {
				r.complAt[id] = true
			}
			r.mu.Unlock()
		}
		return nil
	})
	c := compile(t)
	opts := primary.Options{Path: "/db", Contract: c, FS: errorfs.Wrap(mem, inj)}
	db, err := primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	opened.Store(true)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 6 {
				cmd, in := "two", fmt.Sprintf(`{"x":%d}`, w*100+i)
				if i%3 == 0 {
					cmd = "place_order"
					in = fmt.Sprintf(`{"order_id":"%d","amount_cents":%d}`, w, i)
				}
				cm, err := db.Execute(ctx, cmd, json.RawMessage(in), "")
				if err != nil {
					t.Error(err)
					return
				}
				var evs [][]byte
				for _, id := range cm.Events {
					b, err := db.LoadEvent(ctx, id)
					if err != nil {
						t.Error(err)
						return
					}
					evs = append(evs, b)
				}
				r.mu.Lock()
				r.acked[cm.Seq] = evs
				r.mu.Unlock()
			}
		})
	}
	wg.Go(func() { // the worker: claim and complete what is visible
		var after *event.ID
		for range 12 {
			page, err := db.ScanIntents(ctx, after, 4)
			if err != nil {
				t.Error(err)
				return
			}
			if len(page) == 0 {
				<-db.Notify()
				continue
			}
			after = &page[len(page)-1].Event
			cl, err := db.Claim(ctx, page, time.Unix(100, 0))
			if err != nil {
				t.Error(err)
				return
			}
			if err := db.Complete(ctx, cl[:len(cl)/2+1]); err != nil {
				t.Error(err)
				return
			}
			r.mu.Lock()
			for _, in := range cl[:len(cl)/2+1] {
				r.completed[in.Event] = true
			}
			r.mu.Unlock()
		}
	})
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return r, ops.Load()
}

func TestCrashDuringCommitsAndTransitions(t *testing.T) {
	// The number of write operations varies between runs (group commit
	// coalesces concurrent commits differently): the crash points are
	// spread over the shortest of three reference runs, so that a loaded
	// machine's longer first run does not leave most of them unreached.
	_, total := runCrash(t, 0, 0)
	for range 2 {
		_, n := runCrash(t, 0, 0)
		total = min(total, n)
	}
	points, checked := 40, 0
	for i := 1; i <= points; i++ {
		k := int64(i) * total / int64(points+1)
		seed := uint64(i)
		r, _ := runCrash(t, k, seed)
		if r.clone == nil {
			continue // the run took a different number of operations
		}
		checkCrashState(t, k, r)
		checked++
	}
	if checked < points/2 {
		t.Fatalf("only %d of %d crash points were reached", checked, points)
	}
	t.Logf("%d crash points over %d write operations", checked, total)
}

func checkCrashState(t *testing.T, k int64, r *crashRun) {
	t.Helper()
	db, err := primary.Open(context.Background(), primary.Options{Path: "/db", Contract: compile(t), FS: r.clone})
	if err != nil {
		t.Fatalf("crash at op %d: reopen: %v", k, err)
	}
	defer db.Close()
	ctx := context.Background()
	last := db.LastCommitSequence()
	for seq, evs := range r.ackedAt {
		if seq > last {
			t.Fatalf("crash at op %d: acknowledged commit %d lost (last %d)", k, seq, last)
		}
		for pos, want := range evs {
			got, err := db.LoadEvent(ctx, event.ID{Seq: seq, Pos: uint32(pos)})
			if err != nil || string(got) != string(want) {
				t.Fatalf("crash at op %d: event %d.%d differs: %v", k, seq, pos, err)
			}
		}
	}
	for s := uint64(1); s <= last; s++ {
		if _, err := db.LoadEvent(ctx, event.ID{Seq: s}); err != nil {
			t.Fatalf("crash at op %d: gap at seq %d (last %d): %v", k, s, last, err)
		}
	}
	if db.Frontier() != last {
		t.Fatalf("crash at op %d: frontier %d != last %d after reopen", k, db.Frontier(), last)
	}
	intents := allIntents(t, db)
	n, st := db.UndeliveredCount()
	if st != primary.IndexReady || n != uint64(len(intents)) {
		t.Fatalf("crash at op %d: count %d (%s) != %d intents", k, n, st, len(intents))
	}
	for _, in := range intents {
		if r.complAt[in.Event] {
			t.Fatalf("crash at op %d: acknowledged completion of %s lost", k, in.Event)
		}
		if in.State == primary.IntentDelivering {
			t.Fatalf("crash at op %d: %s still delivering after recovery", k, in.Event)
		}
	}
}

// TestCountMatchesIndexProperty drives random commits and transitions and
// checks after every step (and across reopen) that the O(1) count equals the
// number of intents in the index.
func TestCountMatchesIndexProperty(t *testing.T) {
	c := compile(t)
	rapid.Check(t, func(rt *rapid.T) {
		fs := vfs.NewMem()
		opts := primary.Options{Path: "/db", Contract: c, FS: fs}
		db, err := primary.Open(context.Background(), opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		ctx := context.Background()
		now := time.Unix(1000, 0)
		pick := func(rt *rapid.T, want ...primary.IntentState) []primary.Intent {
			var out []primary.Intent
			for _, in := range allIntents(rt, db) {
				for _, s := range want {
					if in.State == s {
						out = append(out, in)
					}
				}
			}
			if len(out) == 0 {
				rt.Skip("no intent in the wanted state")
			}
			n := rapid.IntRange(1, min(len(out), 16)).Draw(rt, "n")
			return out[:n]
		}
		rt.Repeat(map[string]func(*rapid.T){
			"execute": func(rt *rapid.T) {
				cmd := rapid.SampledFrom([]string{"two", "bulk", "place_order"}).Draw(rt, "cmd")
				in := `{"x":1}`
				if cmd == "place_order" {
					in = `{"order_id":"o","amount_cents":2}`
				}
				if _, err := db.Execute(ctx, cmd, json.RawMessage(in), ""); err != nil {
					rt.Fatal(err)
				}
			},
			"claim": func(rt *rapid.T) {
				m := pick(rt, primary.IntentPending, primary.IntentRetryScheduled, primary.IntentDelivering)
				if _, err := db.Claim(ctx, m, now); err != nil {
					rt.Fatal(err)
				}
			},
			"complete": func(rt *rapid.T) {
				if err := db.Complete(ctx, pick(rt, primary.IntentDelivering)); err != nil {
					rt.Fatal(err)
				}
			},
			"retry": func(rt *rapid.T) {
				if _, err := db.Retry(ctx, pick(rt, primary.IntentDelivering)[0], now, primary.Failure{}); err != nil {
					rt.Fatal(err)
				}
			},
			"dead": func(rt *rapid.T) {
				if _, err := db.DeadLetter(ctx, pick(rt, primary.IntentPending, primary.IntentDelivering)[0], "x", primary.Failure{}); err != nil {
					rt.Fatal(err)
				}
			},
			"reopen": func(rt *rapid.T) {
				if err := db.Close(); err != nil {
					rt.Fatal(err)
				}
				if db, err = primary.Open(ctx, opts); err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				wantCount(rt, db, uint64(len(allIntents(rt, db))))
			},
		})
	})
}
