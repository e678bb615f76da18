package primary

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// DefaultScanLimit is used by ScanIntents when limit is not positive.
const DefaultScanLimit = 500

// ScanIntents returns up to limit undelivered intents, in event-id order,
// strictly after `after` (nil: from the start), of events at or below the
// publication frontier. Every state is included.
func (db *DB) ScanIntents(ctx context.Context, after *event.ID, limit int) ([]Intent, error) {
	done, err := db.enterReady(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if limit <= 0 {
		limit = DefaultScanLimit
	}
	lower := []byte{nsIntent}
	if after != nil {
		lower = append(intentKey(*after), 0)
	}
	lower, ok := db.scanFloor(lower, after)
	if !ok {
		return nil, context.Cause(ctx)
	}
	upper := intentKey(event.ID{Seq: db.Frontier() + 1})
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	room := 0
	if IndexState(db.idx.state.Load()) == IndexReady {
		// No more intents than the index holds can follow lower: room for
		// them at once, instead of growing a page of 500 from one.
		room = int(min(uint64(limit), db.idx.count.Load()))
	}
	out, bad, err := db.readIntents(lower, upper, limit, room)
	if bad != nil {
		return nil, bad
	}
	if err != nil {
		return nil, fmt.Errorf("primary: scan intents: %w", err)
	}
	return out, context.Cause(ctx)
}

// scanFloor raises a scan's lower bound to the index's floor for a scan
// strictly after `after`: the undelivered low-water mark, or, when after is
// at or past every dead letter below it, the first commit with an intent
// that is not a dead letter. Every intent below the floor has been deleted
// or is a dead letter the caller has passed, and an iterator steps over each
// deletion still held in the memtable or not yet compacted away (a queue on
// an LSM). Without the low-water mark, a pass after 8,192 deliveries spent
// 1.5 ms scanning for one new intent, and commit→archived latency at half
// the drain rate was 2-4x higher. Without the live floor, dead letters at
// the bottom of the index pinned the low-water mark, and every pass of the
// worker (which scans after the last of them) stepped over the deletion of
// every event delivered since: with 100,000 dead letters, the trickle's
// commit→archived lag was 1.7x (p50) and 3x (p99) higher (bench
// BenchmarkDeadLetters). The index is exact only while ready; otherwise the
// bound is left alone. ok is false when the ready index holds no intent
// after `after`.
func (db *DB) scanFloor(lower []byte, after *event.ID) (_ []byte, ok bool) {
	if IndexState(db.idx.state.Load()) != IndexReady {
		return lower, true
	}
	seq, ok := db.idx.floor(after)
	if !ok {
		return nil, false
	}
	if k := intentKey(event.ID{Seq: seq}); bytes.Compare(k, lower) > 0 {
		return k, true
	}
	return lower, true
}

func decodeIntentKV(k, v []byte) (Intent, error) {
	id, err := decodeIntentKey(k)
	if err != nil {
		return Intent{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return decodeIntent(id, v)
}

// scanAll is ScanIntents without the frontier bound.
func (db *DB) scanAll(after *event.ID, limit int) ([]Intent, error) {
	lower := []byte{nsIntent}
	if after != nil {
		lower = append(intentKey(*after), 0)
	}
	out, bad, err := db.readIntents(lower, prefixEnd(nsIntent), limit, 0)
	if bad != nil {
		return nil, bad
	}
	return out, err
}

// scanIndex is the only full scan of the intents (buildIndex's): it counts
// every intent, adds each commit's intents that decode (and how many of them
// are dead letters) to the in-memory index and returns the delivering ones.
// corrupt reports an intent that does not decode (counted, but not added).
func (db *DB) scanIndex() (counted uint64, delivering []Intent, corrupt bool, err error) {
	var cur seqCount
	err = db.forEachIntent([]byte{nsIntent}, prefixEnd(nsIntent), func(in Intent, err error) bool {
		counted++
		if err != nil {
			corrupt = true
			return true
		}
		if in.Event.Seq != cur.seq {
			db.idx.addEntry(cur)
			cur = seqCount{seq: in.Event.Seq}
		}
		cur.n++
		switch in.State {
		case IntentDelivering:
			delivering = append(delivering, in)
		case IntentDeadLetter:
			cur.dead++
			cur.lastDead = max(cur.lastDead, in.Event.Pos)
		}
		return true
	})
	if err != nil {
		return 0, nil, false, fmt.Errorf("primary: count intents: %w", err)
	}
	db.idx.addEntry(cur)
	return counted, delivering, corrupt, nil
}

// readIntents returns up to limit intents stored in [lower, upper), in
// event-id order, with room for at least room of them made at once. It
// stops at the first intent that does not decode and returns that error as
// bad; err is the iterator's own (opening or closing).
func (db *DB) readIntents(lower, upper []byte, limit, room int) (out []Intent, bad, err error) {
	if room > 0 {
		out = make([]Intent, 0, room)
	}
	err = db.forEachIntent(lower, upper, func(in Intent, err error) bool {
		if err != nil {
			bad = err
			return false
		}
		out = append(out, in)
		return len(out) < limit
	})
	if bad != nil {
		return nil, bad, nil
	}
	return out, nil, err
}

// forEachIntent is the one iterator over intents: it calls fn with every
// intent stored in [lower, upper), in event-id order, until fn returns
// false. fn receives the decoded intent or the error that decoding its key
// or value met, and decides whether to go on. It returns the error of
// opening or closing the iterator.
func (db *DB) forEachIntent(lower, upper []byte, fn func(Intent, error) bool) error {
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if !fn(decodeIntentKV(it.Key(), it.Value())) {
			break
		}
	}
	return it.Close()
}
