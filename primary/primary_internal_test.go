package primary

import (
	"bytes"
	"context"
	"encoding/json"
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
