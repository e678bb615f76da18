package primary_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

func TestIntentTransitions(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	exec(t, db, "two", `{"x":1}`, "")
	in := allIntents(t, db)
	a, b := in[0], in[1]
	lease := bu.clock.Now().Add(10 * time.Second)

	claimed, err := db.Claim(ctx, []primary.Intent{a, b}, lease)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claimed {
		if c.State != primary.IntentDelivering || c.Attempts != 1 || !c.LeaseDeadline.Equal(lease) {
			t.Fatalf("claimed = %+v", c)
		}
	}
	// Stale prior state: every transition refuses it.
	if _, err := db.Claim(ctx, []primary.Intent{a}, lease); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("claim stale: %v", err)
	}
	if _, err := db.Renew(ctx, a, lease); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("renew pending: %v", err)
	}
	if _, err := db.Retry(ctx, a, lease, primary.Failure{}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("retry pending: %v", err)
	}
	if err := db.Complete(ctx, []primary.Intent{a}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("complete stale: %v", err)
	}
	if _, err := db.DeadLetter(ctx, a, "x", primary.Failure{}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("dead-letter stale: %v", err)
	}
	// Claim is all or nothing: one stale member refuses the whole group.
	if _, err := db.Claim(ctx, []primary.Intent{claimed[0], b}, lease); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("mixed claim: %v", err)
	}
	if got := allIntents(t, db); !sameIntent(got[0], claimed[0]) || !sameIntent(got[1], claimed[1]) {
		t.Fatalf("refused claim changed state: %+v", got)
	}
	// Renew keeps the attempt.
	lease2 := lease.Add(time.Minute)
	ra, err := db.Renew(ctx, claimed[0], lease2)
	if err != nil || ra.Attempts != 1 || !ra.LeaseDeadline.Equal(lease2) || ra.State != primary.IntentDelivering {
		t.Fatalf("renew = %+v, %v", ra, err)
	}
	// Retry → retry_scheduled; a delivering intent may be re-claimed (expired lease).
	at := bu.clock.Now().Add(time.Second)
	rt, err := db.Retry(ctx, ra, at, primary.Failure{})
	if err != nil || rt.State != primary.IntentRetryScheduled || !rt.NextAttempt.Equal(at) || !rt.LeaseDeadline.IsZero() || rt.Attempts != 1 {
		t.Fatalf("retry = %+v, %v", rt, err)
	}
	re, err := db.Claim(ctx, []primary.Intent{rt, claimed[1]}, lease2)
	if err != nil || re[0].Attempts != 2 || re[1].Attempts != 2 || !re[0].NextAttempt.IsZero() {
		t.Fatalf("re-claim = %+v, %v", re, err)
	}
	// Dead letter from delivering; dead letters cannot be claimed, retried or completed.
	dl, err := db.DeadLetter(ctx, re[0], "refused", primary.Failure{})
	if err != nil || dl.State != primary.IntentDeadLetter || dl.DeadReason != "refused" || dl.Attempts != 2 {
		t.Fatalf("dead letter = %+v, %v", dl, err)
	}
	if _, err := db.Claim(ctx, []primary.Intent{dl}, lease); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("claim dead letter: %v", err)
	}
	if err := db.Complete(ctx, []primary.Intent{dl}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("complete dead letter: %v", err)
	}
	if _, err := db.DeadLetter(ctx, dl, "again", primary.Failure{}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("dead-letter twice: %v", err)
	}
	// Complete is all or nothing and lowers the count.
	wantCount(t, db, 2)
	if err := db.Complete(ctx, []primary.Intent{re[1], re[1]}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("duplicate members: %v", err)
	}
	if err := db.Complete(ctx, []primary.Intent{re[1], dl}); !errors.Is(err, primary.ErrConflict) {
		t.Fatalf("mixed complete: %v", err)
	}
	wantCount(t, db, 2)
	if err := db.Complete(ctx, []primary.Intent{re[1]}); err != nil {
		t.Fatal(err)
	}
	wantCount(t, db, 1)
	got := allIntents(t, db)
	if len(got) != 1 || got[0].State != primary.IntentDeadLetter {
		t.Fatalf("remaining = %+v, want the dead letter", got)
	}
	// A pending intent can be dead-lettered directly (exhausted attempts).
	exec(t, db, "place_order", `{"order_id":"z","amount_cents":1}`, "")
	p := allIntents(t, db)[1]
	if _, err := db.DeadLetter(ctx, p, "exhausted", primary.Failure{}); err != nil {
		t.Fatal(err)
	}
	db2 := reopen(t, db, bu)
	wantCount(t, db2, 2)
}

func TestRecoverDeliveriesKeepsAttempts(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	exec(t, db, "two", `{"x":1}`, "")
	in := allIntents(t, db)
	lease := bu.clock.Now().Add(10 * time.Second)
	if _, err := db.Claim(ctx, in[:1], lease); err != nil {
		t.Fatal(err)
	}
	db2 := reopen(t, db, bu) // Open runs RecoverDeliveries
	got := allIntents(t, db2)
	if got[0].State != primary.IntentPending || got[0].Attempts != 1 || !got[0].LeaseDeadline.IsZero() {
		t.Fatalf("recovered = %+v, want pending with 1 attempt", got[0])
	}
	if got[1].State != primary.IntentPending || got[1].Attempts != 0 {
		t.Fatalf("untouched = %+v", got[1])
	}
	c, err := db2.Claim(ctx, got, lease)
	if err != nil {
		t.Fatal(err)
	}
	n, err := db2.RecoverDeliveries(ctx)
	if err != nil || n != 2 {
		t.Fatalf("RecoverDeliveries = %d, %v; want 2", n, err)
	}
	got = allIntents(t, db2)
	if got[0].Attempts != c[0].Attempts || got[1].Attempts != c[1].Attempts || got[0].State != primary.IntentPending {
		t.Fatalf("after recovery = %+v", got)
	}
	wantCount(t, db2, 2)
}

// syncGate blocks WAL syncs while armed and reports when one is waiting.
type syncGate struct {
	armed   atomic.Bool
	waiting chan struct{}
	release chan struct{}
}

func (g *syncGate) MaybeError(op errorfs.Op) error {
	if g.armed.Load() && strings.HasSuffix(op.Path, ".log") &&
		(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
		g.waiting <- struct{}{}
		<-g.release
	}
	return nil
}

// openRelease releases a syncGate once; registered as a cleanup after
// setup, it runs before the database is closed, so a failing test does not
// hang in Close waiting for the blocked commit.
func (g *syncGate) openRelease(t *testing.T) func() {
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(release)
	return release
}

func TestFrontierNeverPassesNonDurableCommit(t *testing.T) {
	gate := &syncGate{waiting: make(chan struct{}, 1), release: make(chan struct{})}
	db, _ := setup(t, func(o *primary.Options) { o.FS = errorfs.Wrap(vfs.NewMem(), gate) })
	release := gate.openRelease(t)
	exec(t, db, "place_order", `{"order_id":"a","amount_cents":1}`, "")
	<-db.Notify()
	gate.armed.Store(true)
	done := make(chan primary.Commit)
	go func() {
		c, err := db.Execute(context.Background(), "place_order", json.RawMessage(`{"order_id":"b","amount_cents":1}`), "")
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	<-gate.waiting // commit 2 is in the WAL but its fsync has not completed
	gate.armed.Store(false)
	// The committer records the sequence once Pebble's apply returns,
	// which does not wait for the fsync (that is blocked); it may trail the
	// start of the fsync by a moment.
	testutil.WaitFor(t, 10*time.Second, time.Millisecond, "commit 2 to be applied", func() bool {
		return db.LastCommitSequence() == 2
	})
	if db.Frontier() != 1 {
		t.Fatalf("frontier = %d passed a non-durable commit", db.Frontier())
	}
	if got := allIntents(t, db); len(got) != 1 {
		t.Fatalf("ScanIntents returned %d intents, want only the durable one", len(got))
	}
	// An idempotent retry of a non-durable commit waits for durability too.
	select {
	case <-db.Notify():
		t.Fatal("Notify signalled without a durable commit")
	case <-done:
		t.Fatal("Execute returned before its fsync completed")
	default:
	}
	release()
	c := <-done
	<-db.Notify()
	if c.Seq != 2 || db.Frontier() != 2 || len(allIntents(t, db)) != 2 {
		t.Fatalf("after sync: commit %+v frontier %d", c, db.Frontier())
	}
}

func TestReplayWaitsForDurability(t *testing.T) {
	gate := &syncGate{waiting: make(chan struct{}, 1), release: make(chan struct{})}
	db, _ := setup(t, func(o *primary.Options) { o.FS = errorfs.Wrap(vfs.NewMem(), gate) })
	release := gate.openRelease(t)
	gate.armed.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() { exec(t, db, "two", `{"x":1}`, "k") })
	<-gate.waiting
	gate.armed.Store(false)
	replayed := make(chan primary.Commit, 1)
	wg.Go(func() { replayed <- exec(t, db, "two", `{"x":1}`, "k") })
	// The first fsync is still blocked, so a replay cannot have been acknowledged.
	select {
	case c := <-replayed:
		t.Fatalf("replay %+v acknowledged before the original was durable", c)
	default:
	}
	release()
	wg.Wait()
	if c := <-replayed; !c.Replayed || c.Seq != 1 {
		t.Fatalf("replay = %+v", c)
	}
}

func TestWALFailureFailsDatabase(t *testing.T) {
	var fail atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.EIO
		}
		return nil
	})
	db, _ := setup(t, func(o *primary.Options) { o.FS = errorfs.Wrap(vfs.NewMem(), inj) })
	exec(t, db, "two", `{"x":1}`, "")
	fail.Store(true)
	_, err := db.Execute(context.Background(), "two", json.RawMessage(`{"x":2}`), "")
	if !errors.Is(err, primary.ErrFailed) {
		t.Fatalf("Execute on failing WAL = %v, want ErrFailed", err)
	}
	select {
	case <-db.Failed():
	default:
		t.Fatal("Failed() not closed")
	}
	if db.Err() == nil {
		t.Fatal("Err() = nil after failure")
	}
	if _, err := db.Execute(context.Background(), "two", json.RawMessage(`{"x":3}`), ""); !errors.Is(err, primary.ErrFailed) {
		t.Fatalf("later Execute = %v, want ErrFailed", err)
	}
	if _, err := db.Claim(context.Background(), []primary.Intent{{Event: event.ID{Seq: 1}}}, time.Time{}); !errors.Is(err, primary.ErrFailed) {
		t.Fatalf("Claim after failure = %v", err)
	}
	if db.Frontier() != 1 {
		t.Fatalf("frontier = %d, want 1", db.Frontier())
	}
	if _, st := db.UndeliveredCount(); st != primary.IndexDegraded {
		t.Fatalf("index state = %s after a failed write, want degraded", st)
	}
}

func TestIndexGateHoldsUnbuilt(t *testing.T) {
	gate := make(chan struct{})
	db, _ := setup(t, func(o *primary.Options) { o.IndexGate = gate })
	if n, st := db.UndeliveredCount(); st != primary.IndexUnbuilt || n != 0 {
		t.Fatalf("UndeliveredCount = %d, %s; want unbuilt", n, st)
	}
	close(gate)
	exec(t, db, "two", `{"x":1}`, "") // waits for the index
	wantCount(t, db, 2)
}

func TestClosed(t *testing.T) {
	db, _ := setup(t)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := db.Execute(context.Background(), "two", json.RawMessage(`{"x":1}`), ""); !errors.Is(err, primary.ErrClosed) {
		t.Fatalf("Execute after Close = %v", err)
	}
	if _, err := db.ScanIntents(context.Background(), nil, 1); !errors.Is(err, primary.ErrClosed) {
		t.Fatalf("ScanIntents after Close = %v", err)
	}
}

func (g *syncGate) String() string { return "syncGate" }

// TestCompleteDeferredIsDurableWithTheNextSyncedWrite: a deferred completion
// is applied at once (count and scans), lost by a crash before any synced
// write (its members come back delivering, then pending with the claim
// counted), and durable after Sync or after the next synced transition.
func TestCompleteDeferredIsDurableWithTheNextSyncedWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		after   func(t *testing.T, db *primary.DB, other primary.Intent)
		durable bool
	}{
		{"crash before any sync", func(*testing.T, *primary.DB, primary.Intent) {}, false},
		{"Sync", func(t *testing.T, db *primary.DB, _ primary.Intent) {
			if err := db.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"next claim", func(t *testing.T, db *primary.DB, other primary.Intent) {
			if _, err := db.Claim(ctx, []primary.Intent{other}, time.Unix(2_000_000_000, 0)); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			db, bu := setup(t, func(o *primary.Options) { o.FS = mem })
			exec(t, db, "two", `{"x":1}`, "")
			exec(t, db, "two", `{"x":2}`, "")
			all := allIntents(t, db)
			claimed, err := db.Claim(ctx, all[:2], bu.clock.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if err := db.CompleteDeferred(ctx, claimed); err != nil {
				t.Fatal(err)
			}
			if n, _ := db.UndeliveredCount(); n != 2 || len(allIntents(t, db)) != 2 {
				t.Fatalf("after CompleteDeferred: count %d, intents %d; want 2 and 2", n, len(allIntents(t, db)))
			}
			tc.after(t, db, all[2])
			clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			o := bu.opts
			o.FS = clone
			db2, err := primary.Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			got := allIntents(t, db2)
			n, _ := db2.UndeliveredCount()
			if n != uint64(len(got)) {
				t.Fatalf("count %d but %d intents after the crash", n, len(got))
			}
			if tc.durable {
				if len(got) != 2 || got[0].Event != all[2].Event {
					t.Fatalf("after the crash: %+v; want the completed members gone", got)
				}
				return
			}
			if len(got) != 4 || got[0].State != primary.IntentPending || got[0].Attempts != 1 {
				t.Fatalf("after the crash: %+v; want all four intents, the completed ones pending with their claim counted", got)
			}
		})
	}
}

// TestDuplicateMembersAtEveryListSize: a claim or a completion that lists
// an event twice is refused whole, at a claim run's size (looked for member
// by member) and beyond it (looked up in a map), wherever the repeat is.
func TestDuplicateMembersAtEveryListSize(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	for i := range 40 {
		exec(t, db, "place_order", fmt.Sprintf(`{"order_id":"o%d","amount_cents":1}`, i), "")
	}
	in := allIntents(t, db)
	lease := bu.clock.Now().Add(10 * time.Second)
	for _, n := range []int{2, 16, 17, 40} {
		for _, at := range []int{1, n - 1} {
			members := append([]primary.Intent(nil), in[:n]...)
			members[at] = members[at-1]
			if _, err := db.Claim(ctx, members, lease); !errors.Is(err, primary.ErrConflict) {
				t.Fatalf("claim of %d with a repeat at %d: %v, want ErrConflict", n, at, err)
			}
		}
	}
	if got := allIntents(t, db); !equalIntents(got, in) {
		t.Fatal("a refused claim changed an intent")
	}
	claimed, err := db.Claim(ctx, in, lease)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 16, 17, 40} {
		members := append([]primary.Intent(nil), claimed[:n]...)
		members[n-1] = members[0]
		if err := db.Complete(ctx, members); !errors.Is(err, primary.ErrConflict) {
			t.Fatalf("completion of %d with a repeat: %v, want ErrConflict", n, err)
		}
	}
	wantCount(t, db, uint64(len(in)))
	if err := db.Complete(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	wantCount(t, db, 0)
}

func equalIntents(a, b []primary.Intent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Event != b[i].Event || a[i].State != b[i].State || a[i].Attempts != b[i].Attempts {
			return false
		}
	}
	return true
}
