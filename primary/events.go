package primary

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// LoadEvents returns the exact stored bytes of each event, in the order
// given, or ErrNotFound for the first one not stored. It reads them with one
// iterator: the members of a claim run are consecutive, so each seek lands
// next to the previous one.
func (db *DB) LoadEvents(ctx context.Context, ids []event.ID) ([][]byte, error) {
	done, err := db.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: []byte{nsCommit}, UpperBound: prefixEnd(nsCommit)})
	if err != nil {
		return nil, fmt.Errorf("primary: load events: %w", err)
	}
	out := make([][]byte, len(ids))
	// The keys share one array, and so do the copies of the values (each
	// capped at its own end): two allocations for a run, not two per event.
	keys := make([]byte, 0, len(ids)*eventKeyLen)
	var vals []byte
	for i, id := range ids {
		keys = appendEventKey(keys, id)
		k := keys[len(keys)-eventKeyLen:]
		if !seekGE(it, k) {
			if err := it.Close(); err != nil {
				return nil, fmt.Errorf("primary: load events: %w", err)
			}
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("primary: load events: %w", err)
		}
		if vals == nil {
			// Room for the run if its events are about this one's size.
			vals = make([]byte, 0, len(v)*(len(ids)-i)*5/4+len(v))
		}
		vals = append(vals, v...)
		out[i] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("primary: load events: %w", err)
	}
	return out, context.Cause(ctx)
}

// LoadEvent returns the exact stored bytes of an event (event.Stored.Encode
// form), or ErrNotFound.
func (db *DB) LoadEvent(ctx context.Context, id event.ID) ([]byte, error) {
	out, err := db.LoadEvents(ctx, []event.ID{id})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}
