package primary

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// Claim moves every member, in one synced batch, from its exact given prior
// state (pending, retry_scheduled or delivering) to delivering with one more
// attempt and the given lease deadline. It is all or nothing: ErrConflict if
// any stored state differs from the given one.
func (db *DB) Claim(ctx context.Context, members []Intent, lease time.Time) ([]Intent, error) {
	return db.rewrite(ctx, members, func(in Intent) (Intent, bool) {
		if in.State == IntentDeadLetter {
			return in, false
		}
		in.State = IntentDelivering
		in.Attempts++
		in.LeaseDeadline = lease
		in.NextAttempt = time.Time{}
		return in, true
	}, pebble.Sync)
}

// Release returns claimed members that were never attempted to pending and
// takes back the attempt their claim counted, in one synced batch, so that a
// member is charged only for its own delivery (or for a crash while it was
// claimed). The outbox worker releases the members of a run it claimed
// ahead of delivery when the run before it fails. Each member must be stored
// in its exact given delivering state with at least one attempt. All or
// nothing: ErrConflict if any stored state differs. Crash-safe: before the
// batch is durable the members stay delivering, and a restart returns them to
// pending with the claim counted, as for any claimed member a crash
// interrupts; after it they are pending with the attempt count they had
// before the claim.
func (db *DB) Release(ctx context.Context, members []Intent) ([]Intent, error) {
	return db.rewrite(ctx, members, func(in Intent) (Intent, bool) {
		if in.State != IntentDelivering || in.Attempts == 0 {
			return in, false
		}
		in.State = IntentPending
		in.Attempts--
		in.LeaseDeadline = time.Time{}
		in.NextAttempt = time.Time{}
		return in, true
	}, pebble.Sync)
}

// Renew extends the lease of a delivering intent without spending an attempt.
func (db *DB) Renew(ctx context.Context, in Intent, lease time.Time) (Intent, error) {
	return db.one(ctx, in, func(in Intent) (Intent, bool) {
		if in.State != IntentDelivering {
			return in, false
		}
		in.LeaseDeadline = lease
		return in, true
	})
}

// Retry moves a delivering intent to retry_scheduled, due at `at`, and
// records failure (unless zero) as its last failure.
func (db *DB) Retry(ctx context.Context, in Intent, at time.Time, failure Failure) (Intent, error) {
	return db.one(ctx, in, func(in Intent) (Intent, bool) {
		if in.State != IntentDelivering {
			return in, false
		}
		in = withFailure(in, failure)
		in.State = IntentRetryScheduled
		in.NextAttempt = at
		in.LeaseDeadline = time.Time{}
		return in, true
	})
}

// DeadLetter moves an intent in any non-dead state to dead_letter and
// records failure (unless zero) as its last failure. Dead letters stay
// undelivered (counted, and fencing retention) until an operator redrives
// them (redrive.go).
func (db *DB) DeadLetter(ctx context.Context, in Intent, reason string, failure Failure) (Intent, error) {
	if len(reason) > MaxDeadReasonLen {
		reason = reason[:MaxDeadReasonLen]
	}
	return db.one(ctx, in, func(in Intent) (Intent, bool) {
		if in.State == IntentDeadLetter {
			return in, false
		}
		in = withFailure(in, failure)
		in.State = IntentDeadLetter
		in.DeadReason = reason
		in.LeaseDeadline = time.Time{}
		in.NextAttempt = time.Time{}
		return in, true
	})
}

// Complete removes every member, in one synced batch, each CAS from the
// exact given delivering state, and lowers the undelivered count by their
// number. All or nothing: ErrConflict if any stored state differs. The
// outbox worker completes with CompleteDeferred or CompleteArchived instead,
// sharing one fsync among completion groups; Complete is the synced form.
func (db *DB) Complete(ctx context.Context, members []Intent) error {
	return db.remove(ctx, members, pebble.Sync, 0)
}

// CompleteDeferred is Complete without waiting for the fsync: it returns
// once the removal is applied (counted, and invisible to scans). The removal
// becomes durable with the next synced write to this database (a claim, a
// renewal, a retry, a dead letter, a command commit) or Sync: all of them go
// through the same write-ahead log, in order. A crash before then leaves the
// members delivering, so startup recovery returns them to pending and they
// are delivered again (the archive accepts equal bytes once); the
// undelivered count stays equal to the index, as both are in one batch.
func (db *DB) CompleteDeferred(ctx context.Context, members []Intent) error {
	return db.remove(ctx, members, pebble.NoSync, 0)
}

// Sync makes every write applied so far durable (one fsync of the
// write-ahead log), for example the removals of CompleteDeferred.
func (db *DB) Sync(ctx context.Context) error {
	done, err := db.enter()
	if err != nil {
		return err
	}
	defer done()
	return db.guard(func() error {
		if err := db.store.LogData(nil, pebble.Sync); err != nil {
			return db.writeFailed(err)
		}
		return nil
	})
}

func (db *DB) one(ctx context.Context, in Intent, next func(Intent) (Intent, bool)) (Intent, error) {
	out, err := db.rewrite(ctx, []Intent{in}, next, pebble.Sync)
	if err != nil {
		return Intent{}, err
	}
	return out[0], nil
}

// rewrite replaces every member's state with next(stored) after checking
// that its stored state equals the given one, in one batch written with
// opts: with pebble.Sync it returns once the batch is durable, with
// pebble.NoSync once it is applied. It returns the new states.
func (db *DB) rewrite(ctx context.Context, members []Intent, next func(Intent) (Intent, bool), opts *pebble.WriteOptions) ([]Intent, error) {
	if len(members) == 0 {
		return nil, nil
	}
	done, err := db.enterReady(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var out []Intent
	err = db.guard(func() error {
		var err error
		out, err = db.casRewrite(members, next, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// remove completes the members: after checking that each is stored in its
// exact given delivering state, it deletes their intents, lowers the durable
// undelivered count by their number and counts them in the delivery mark,
// raising its archive floor to archiveFloor (0 leaves it), all in one batch
// written with opts: with pebble.Sync it returns once the batch is durable,
// with pebble.NoSync once it is applied.
func (db *DB) remove(ctx context.Context, members []Intent, opts *pebble.WriteOptions, archiveFloor uint64) error {
	if len(members) == 0 {
		return nil
	}
	done, err := db.enterReady(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := db.guard(func() error { return db.casRemove(members, opts, archiveFloor) }); err != nil {
		return err
	}
	db.refreshUsage()
	return nil
}

func completable(in Intent) (Intent, bool) { return in, in.State == IntentDelivering }

// casRewrite is rewrite's compare-and-set: it takes casMu, checks the
// members and writes their new states. It runs inside guard.
func (db *DB) casRewrite(members []Intent, next func(Intent) (Intent, bool), opts *pebble.WriteOptions) ([]Intent, error) {
	db.casMu.Lock()
	casLocked := true
	defer func() {
		if casLocked {
			db.casMu.Unlock()
		}
	}()
	out, keys, err := db.compareLocked(members, next, true)
	if err != nil {
		return nil, err
	}
	b := db.store.NewBatch()
	defer b.Close()
	upgrade := false
	var v []byte // one array for every member's value: the batch copies each
	for i, k := range keys {
		v = appendIntent(v[:0], out[i])
		upgrade = upgrade || v[0] != intentVersion
		_ = b.Set(k, v, nil)
	}
	if upgrade = upgrade && db.layout != layoutExtendedIntents; upgrade {
		_ = b.Set(keyLayout, encodeU64(layoutExtendedIntents), nil)
	}
	if err := db.applyLocked(b, opts); err != nil {
		return nil, db.writeFailed(err)
	}
	if upgrade {
		db.layout = layoutExtendedIntents
	}
	// The index learns of new dead letters once they are applied (and so
	// visible to scans), never before: its live floor may lag, never lead.
	var dead []event.ID
	for i, in := range out {
		if in.State == IntentDeadLetter && members[i].State != IntentDeadLetter {
			dead = append(dead, in.Event)
		}
	}
	db.idx.markDead(dead)
	casLocked = false
	db.casMu.Unlock()
	if err := db.awaitSync(b, opts); err != nil {
		return nil, err
	}
	return out, nil
}

// casRemove is remove's compare-and-delete: it takes casMu, checks the
// members, and deletes them with the count and the delivery mark. It runs
// inside guard.
func (db *DB) casRemove(members []Intent, opts *pebble.WriteOptions, archiveFloor uint64) error {
	db.casMu.Lock()
	casLocked := true
	defer func() {
		if casLocked {
			db.casMu.Unlock()
		}
	}()
	_, keys, err := db.compareLocked(members, completable, false)
	if err != nil {
		return err
	}
	b := db.store.NewBatch()
	defer b.Close()
	ids := make([]event.ID, len(members))
	for i, k := range keys {
		ids[i] = members[i].Event
		_ = b.Delete(k, nil)
	}
	db.mu.Lock()
	count := db.durableCount - uint64(len(members))
	_ = b.Set(keyCount, encodeU64(count), nil)
	// Every removal is a completion (delivered members leave the index
	// only that way): count it in the delivery mark.
	mark := db.delivered
	mark.Completed += uint64(len(members))
	mark.ArchiveFloor = max(mark.ArchiveFloor, archiveFloor)
	_ = b.Set(keyDelivered, encodeDelivered(mark), nil)
	if err := db.applyLocked(b, opts); err != nil {
		db.mu.Unlock()
		return db.writeFailed(err)
	}
	db.durableCount = count
	db.delivered = mark
	db.idx.count.Store(count)
	db.idx.remove(ids)
	db.mu.Unlock()
	casLocked = false
	db.casMu.Unlock()
	return db.awaitSync(b, opts)
}

// compareLocked reads every member's stored state, checks that it equals
// the given one and that next accepts it, and returns the members' keys
// with next's results (only if results: a completion has no use for them).
// The caller holds casMu.
func (db *DB) compareLocked(members []Intent, next func(Intent) (Intent, bool), results bool) ([]Intent, [][]byte, error) {
	var seen map[event.ID]struct{}
	if len(members) > smallSet {
		seen = make(map[event.ID]struct{}, len(members))
	}
	var out []Intent
	if results {
		out = make([]Intent, len(members))
	}
	keys := make([][]byte, len(members))
	// The keys share one array (the batch copies what it is given).
	keyBuf := make([]byte, 0, len(members)*intentKeyLen)
	// One iterator reads every member's stored state: the members of a run
	// or a completion group are consecutive intents, so each seek lands next
	// to the previous one.
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: []byte{nsIntent}, UpperBound: prefixEnd(nsIntent)})
	if err != nil {
		return nil, nil, fmt.Errorf("primary: read intents: %w", err)
	}
	defer it.Close()
	for i, m := range members {
		if givenBefore(members, i, seen) {
			return nil, nil, fmt.Errorf("%w: event %s given twice", ErrConflict, m.Event)
		}
		keyBuf = appendIntentKey(keyBuf, m.Event)
		k := keyBuf[len(keyBuf)-intentKeyLen:]
		if !seekGE(it, k) {
			if err := it.Error(); err != nil {
				return nil, nil, fmt.Errorf("primary: read intent: %w", err)
			}
			return nil, nil, fmt.Errorf("%w: event %s has no intent", ErrConflict, m.Event)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, fmt.Errorf("primary: read intent: %w", err)
		}
		stored, err := decodeIntentLike(m.Event, v, &m)
		if err != nil {
			db.idx.degrade()
			return nil, nil, err
		}
		if !sameState(stored, m) {
			return nil, nil, fmt.Errorf("%w: event %s is %s", ErrConflict, m.Event, stored.State)
		}
		n, ok := next(stored)
		if !ok {
			return nil, nil, fmt.Errorf("%w: event %s cannot leave %s that way", ErrConflict, m.Event, stored.State)
		}
		if results {
			out[i] = n
		}
		keys[i] = k
	}
	return out, keys, nil
}

// smallSet is the most members compareLocked checks for duplicates without
// a map: a claim run or a completion group (at most 16) is compared member
// by member, which costs less than making the map.
const smallSet = 16

// givenBefore reports whether members[i]'s event is among members[:i]. seen
// is nil for a small set (searched directly); otherwise it holds the events
// of members[:i], and members[i]'s is added to it.
func givenBefore(members []Intent, i int, seen map[event.ID]struct{}) bool {
	id := members[i].Event
	if seen == nil {
		for _, m := range members[:i] {
			if m.Event == id {
				return true
			}
		}
		return false
	}
	if _, dup := seen[id]; dup {
		return true
	}
	seen[id] = struct{}{}
	return false
}

// applyLocked enters b into the store while the caller holds casMu. With
// pebble.Sync it returns once b is in the write-ahead log and applied,
// without waiting for the fsync (awaitSync waits for it after casMu is
// released, so the next transition's fsync can join this one); with
// pebble.NoSync it applies b without one.
func (db *DB) applyLocked(b *pebble.Batch, opts *pebble.WriteOptions) error {
	if opts.GetSync() {
		return db.store.ApplyNoSyncWait(b, pebble.Sync)
	}
	return db.store.Apply(b, pebble.NoSync)
}

// awaitSync waits until b, applied by applyLocked with opts, is durable: at
// once for pebble.NoSync.
func (db *DB) awaitSync(b *pebble.Batch, opts *pebble.WriteOptions) error {
	if !opts.GetSync() {
		return nil
	}
	if err := b.SyncWait(); err != nil {
		return db.writeFailed(err)
	}
	return nil
}

// RecoverDeliveries returns every delivering intent to pending, keeping its
// attempt count (the interrupted claim counts as an attempt), in synced
// batches, and returns how many intents it moved. Open does not call it:
// Open recovers the delivering intents that its count-verifying scan found,
// with the same transition. RecoverDeliveries is for recovering again later
// (tests use it to simulate a restart's recovery).
func (db *DB) RecoverDeliveries(ctx context.Context) (int, error) {
	done, err := db.enterReady(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	var stuck []Intent
	var after *event.ID
	for {
		page, err := db.scanAll(after, 4096)
		if err != nil {
			return 0, err
		}
		for _, in := range page {
			if in.State == IntentDelivering {
				stuck = append(stuck, in)
			}
		}
		if len(page) < 4096 {
			break
		}
		after = &page[len(page)-1].Event
	}
	return db.recover(ctx, stuck)
}

// toPending returns a delivering intent to pending.
func toPending(in Intent) (Intent, bool) {
	if in.State != IntentDelivering {
		return in, false
	}
	in.State = IntentPending
	in.LeaseDeadline = time.Time{}
	return in, true
}

// recover moves the given delivering intents to pending in synced batches.
// buildIndex runs it before the index is ready, so it does not wait for it.
func (db *DB) recover(ctx context.Context, stuck []Intent) (int, error) {
	moved := 0
	for len(stuck) > 0 {
		n := min(len(stuck), 256)
		err := db.guard(func() error {
			_, err := db.casRewrite(stuck[:n], toPending, pebble.Sync)
			return err
		})
		if err != nil {
			return moved, err
		}
		moved += n
		stuck = stuck[n:]
		if err := context.Cause(ctx); err != nil {
			return moved, err
		}
	}
	return moved, nil
}
