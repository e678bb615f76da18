package primary

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// Redrive: an operator's second chance for dead letters.
//
// The outbox worker never retries a dead letter (DESIGN §3): it stays
// undelivered and fences retention. Once an operator has repaired the cause
// (an archive that failed for longer than the attempt budget), Redrive puts
// dead letters back to pending with a fresh attempt budget, so that the
// worker delivers them like any other event. Each event counts its redrives
// (Intent.Redrives). An identity conflict redriven meets the same archive
// record and becomes a dead letter again on its next attempt.
//
// Each redriven event is a compare-and-set on its dead-letter state, decided
// under casMu with the write, as every transition is: a redrive racing the
// worker or another redrive sees the state the other left, and an event is
// redriven once. The batch is one synced primary transaction.

// MaxRedrive bounds the events of one Redrive (one primary transaction).
const MaxRedrive = 1000

// ErrRedriveRequest is returned for a redrive of more than MaxRedrive
// events or of one event twice.
var ErrRedriveRequest = errors.New("primary: invalid redrive request")

// Why a redrive left an event as it was (RedriveRefusal.Why).
const (
	// RedriveNotUndelivered: the event has no intent: it was delivered,
	// never existed, or its history was reclaimed.
	RedriveNotUndelivered = "not_undelivered"
	// RedriveNotDeadLetter: the event is undelivered but not a dead letter
	// (RedriveRefusal.State says what it is), for example because a
	// concurrent redrive won.
	RedriveNotDeadLetter = "not_dead_letter"
	// RedriveOtherReason: the event is a dead letter for another reason
	// than the one the redrive asked for.
	RedriveOtherReason = "other_reason"
)

// Redriven is an event a redrive returned to pending: its new state, and
// the reason it had been a dead letter for.
type Redriven struct {
	Intent
	Reason string
}

// RedriveRefusal is an event a redrive left as it was, and why.
type RedriveRefusal struct {
	Event event.ID
	Why   string
	// State is the event's state when Why is RedriveNotDeadLetter.
	State IntentState
}

// Redrive moves every dead letter among ids (of reason, when reason is not
// empty) back to pending with no attempt spent and one more redrive, in one
// synced batch, and wakes the outbox worker. It returns the new states of
// the events it redrove (with the reason each had been a dead letter for)
// and, for the others, why not. At most MaxRedrive
// ids; an id given twice is refused as ErrRedriveRequest.
func (db *DB) Redrive(ctx context.Context, ids []event.ID, reason string) ([]Redriven, []RedriveRefusal, error) {
	if len(ids) > MaxRedrive {
		return nil, nil, fmt.Errorf("%w: at most %d events per redrive", ErrRedriveRequest, MaxRedrive)
	}
	seen := make(map[event.ID]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			return nil, nil, fmt.Errorf("%w: event %s given twice", ErrRedriveRequest, id)
		}
		seen[id] = struct{}{}
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	done, err := db.enterReady(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	var redriven []Redriven
	var refused []RedriveRefusal
	err = db.guard(func() error {
		var err error
		redriven, refused, err = db.casRedrive(ids, reason)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if len(redriven) > 0 {
		db.idx.revivals.Add(1)
		select {
		case db.frontier.notify <- struct{}{}:
		default:
		}
	}
	return redriven, refused, nil
}

// Revivals counts the redrives that moved at least one dead letter back to
// pending. The outbox worker, which skips the leading dead letters of the
// index, starts its next scan from the beginning when it changed.
func (db *DB) Revivals() uint64 { return db.idx.revivals.Load() }

// casRedrive is Redrive's compare-and-set: under casMu it reads each
// event's intent, decides, and writes the redriven ones (and, at the first
// redrive of the store, its new key layout) in one synced batch. It runs
// inside guard.
func (db *DB) casRedrive(ids []event.ID, reason string) ([]Redriven, []RedriveRefusal, error) {
	db.casMu.Lock()
	casLocked := true
	defer func() {
		if casLocked {
			db.casMu.Unlock()
		}
	}()
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: []byte{nsIntent}, UpperBound: prefixEnd(nsIntent)})
	if err != nil {
		return nil, nil, fmt.Errorf("primary: read intents: %w", err)
	}
	defer it.Close()
	b := db.store.NewBatch()
	defer b.Close()
	var redriven []Redriven
	var refused []RedriveRefusal
	for _, id := range ids {
		k := intentKey(id)
		if !seekGE(it, k) {
			if err := it.Error(); err != nil {
				return nil, nil, fmt.Errorf("primary: read intent: %w", err)
			}
			refused = append(refused, RedriveRefusal{Event: id, Why: RedriveNotUndelivered})
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, fmt.Errorf("primary: read intent: %w", err)
		}
		in, err := decodeIntent(id, v)
		if err != nil {
			db.idx.degrade()
			return nil, nil, err
		}
		switch {
		case in.State != IntentDeadLetter:
			refused = append(refused, RedriveRefusal{Event: id, Why: RedriveNotDeadLetter, State: in.State})
			continue
		case reason != "" && in.DeadReason != reason:
			refused = append(refused, RedriveRefusal{Event: id, Why: RedriveOtherReason})
			continue
		}
		was := in.DeadReason
		in.State, in.Attempts, in.DeadReason = IntentPending, 0, ""
		in.NextAttempt, in.LeaseDeadline = time.Time{}, time.Time{}
		if in.Redrives < math.MaxUint32 {
			in.Redrives++
		}
		_ = b.Set(k, encodeIntent(in), nil)
		redriven = append(redriven, Redriven{Intent: in, Reason: was})
	}
	if len(redriven) == 0 {
		return nil, refused, nil
	}
	if db.layout != layoutExtendedIntents {
		_ = b.Set(keyLayout, encodeU64(layoutExtendedIntents), nil)
	}
	if err := db.applyLocked(b, pebble.Sync); err != nil {
		return nil, nil, db.writeFailed(err)
	}
	db.layout = layoutExtendedIntents
	revived := make([]event.ID, len(redriven))
	for i, in := range redriven {
		revived[i] = in.Event
	}
	db.idx.revive(revived)
	casLocked = false
	db.casMu.Unlock()
	if err := db.awaitSync(b, pebble.Sync); err != nil {
		return nil, nil, err
	}
	return redriven, refused, nil
}
