package primary

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// Whereabouts is where one event's delivery stands (LookupDelivery).
type Whereabouts uint8

// Whereabouts of an event.
const (
	// EventUnknown: no such event is stored, or its history was reclaimed.
	EventUnknown Whereabouts = iota
	// EventUndelivered: the event has an intent in the undelivered index.
	EventUndelivered
	// EventDelivered: the event is stored and has no intent. An intent
	// leaves the index only by completion, which the outbox worker asks
	// for once the archive holds the event under this database, its
	// history incarnation and the event's id.
	EventDelivered
)

// LookupDelivery reads where event id's delivery stands: its intent when it
// is undelivered, or whether it was delivered or is unknown. It reads one
// intent key and, when there is none, one event key: it never scans. The
// event's bytes are not returned.
func (db *DB) LookupDelivery(ctx context.Context, id event.ID) (Intent, Whereabouts, error) {
	done, err := db.enterReady(ctx)
	if err != nil {
		return Intent{}, EventUnknown, err
	}
	defer done()
	// The intent first: a completion between the two reads removes the
	// intent and keeps the event (delivered); a commit writes both in one
	// batch, so no event is seen without the intent it had.
	v, err := db.get(intentKey(id))
	switch {
	case err == nil:
		in, err := decodeIntent(id, v)
		if err != nil {
			return Intent{}, EventUnknown, err
		}
		return in, EventUndelivered, nil
	case !errors.Is(err, pebble.ErrNotFound):
		return Intent{}, EventUnknown, fmt.Errorf("primary: read intent: %w", err)
	}
	if _, err := db.get(eventKey(id)); err != nil {
		if errors.Is(err, pebble.ErrNotFound) {
			return Intent{}, EventUnknown, context.Cause(ctx)
		}
		return Intent{}, EventUnknown, fmt.Errorf("primary: read event: %w", err)
	}
	return Intent{}, EventDelivered, context.Cause(ctx)
}

// get reads the value of key k, a copy of it (pebble.ErrNotFound when
// there is none).
func (db *DB) get(k []byte) ([]byte, error) {
	v, closer, err := db.store.Get(k)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	return out, closer.Close()
}
