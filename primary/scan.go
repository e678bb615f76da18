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
	lower, ok := db.scanFloor(lower)
	if !ok {
		return nil, context.Cause(ctx)
	}
	upper := intentKey(event.ID{Seq: db.Frontier() + 1})
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	out, bad, err := db.readIntents(lower, upper, limit)
	if bad != nil {
		return nil, bad
	}
	if err != nil {
		return nil, fmt.Errorf("primary: scan intents: %w", err)
	}
	return out, context.Cause(ctx)
}

// scanFloor raises a scan's lower bound to the undelivered low-water mark:
// every intent below it has been deleted, and an iterator steps over each
// deletion still held in the memtable or not yet compacted away (a queue on
// an LSM). Without it, a pass after 8,192 deliveries spent 1.5 ms scanning
// for one new intent, and commit→archived latency at half the drain rate
// was 2-4x higher. The in-memory list is exact only while the index is
// ready; otherwise the bound is left alone. ok is false when the ready
// index holds no undelivered intent at all.
func (db *DB) scanFloor(lower []byte) (_ []byte, ok bool) {
	if IndexState(db.idx.state.Load()) != IndexReady {
		return lower, true
	}
	lw, ok := db.idx.lowWater()
	if !ok {
		return nil, false
	}
	if k := intentKey(event.ID{Seq: lw}); bytes.Compare(k, lower) > 0 {
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
	out, bad, err := db.readIntents(lower, prefixEnd(nsIntent), limit)
	if bad != nil {
		return nil, bad
	}
	return out, err
}

// scanIndex is the only full scan of the intents (buildIndex's): it counts
// every intent, adds each one that decodes to the in-memory low-water list
// and returns the delivering ones. corrupt reports an intent that does not
// decode (counted, but not added).
func (db *DB) scanIndex() (counted uint64, delivering []Intent, corrupt bool, err error) {
	err = db.forEachIntent([]byte{nsIntent}, prefixEnd(nsIntent), func(in Intent, err error) bool {
		counted++
		if err != nil {
			corrupt = true
			return true
		}
		db.idx.add(in.Event.Seq, 1)
		if in.State == IntentDelivering {
			delivering = append(delivering, in)
		}
		return true
	})
	if err != nil {
		return 0, nil, false, fmt.Errorf("primary: count intents: %w", err)
	}
	return counted, delivering, corrupt, nil
}

// readIntents returns up to limit intents stored in [lower, upper), in
// event-id order. It stops at the first intent that does not decode and
// returns that error as bad; err is the iterator's own (opening or closing).
func (db *DB) readIntents(lower, upper []byte, limit int) (out []Intent, bad, err error) {
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
