package archive

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// checkRecord verifies that record is a stored event for key under the
// binding.
func (s *Store) checkRecord(key event.Key, record []byte) error {
	if key.Database != s.binding {
		return fmt.Errorf("%w: key of database %s", ErrBindingChanged, key.Database)
	}
	id, err := event.VerifyStored(record)
	if err != nil || id != key.Event {
		return fmt.Errorf("%w: event %s", ErrInvalidRecord, key.Event)
	}
	return nil
}

// Accept archives record (the exact stored-event bytes) under key in one
// archive transaction. Under the single-writer mutex it reads the key (a key
// beyond the greatest in the store cannot be there, and is not read): equal
// bytes already archived → Duplicate, nothing written; different bytes →
// ErrConflict. A new record must fit the quota and the free-space guard
// (ErrCapacity); then the record and the updated accounting are committed in
// one batch with pebble.Sync, so both are durable together or not at all.
// The commit runs in its own goroutine bounded by TxnTimeout: a fatal
// storage error, a timeout, or ctx ending while the commit is in flight
// marks the store unusable (its outcome is unknown; a retry after reopening
// is a Duplicate or a Stored) and returns ErrUnavailable promptly.
// Accept blocks for at most about TxnTimeout per storage call.
func (s *Store) Accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	return s.accept(ctx, key, record, false)
}

// Apply is Accept without waiting for durability: a new record's batch
// (the record and the updated accounting, synced like Accept's) is
// applied, which makes it visible and queues it on the write-ahead log,
// and Apply returns; Durable waits for it. Everything else is Accept's:
// the same decision in order under the single-writer mutex (the accounting
// and the quota move at once, so the next transaction is decided on them),
// the same outcomes, the same bound on each storage call. Pebble then
// syncs the batches applied while one sync was running with one write and
// one fdatasync, each still a synced transaction of its own (group commit).
//
// A Stored outcome from Apply means that the record will be durable unless
// a sync fails or the process stops before Durable returns: nothing may
// rely on it (complete the event on the primary, raise a delivery mark)
// before Durable returned nil. Its transaction span and its duration and
// acceptance metrics are recorded when Durable returns, so they cover the
// transaction until it was durable, as Accept's do. A Duplicate is decided
// against what was applied, durable or not: it is as durable as the
// transactions applied before it, which Durable waits for too.
func (s *Store) Apply(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	return s.accept(ctx, key, record, true)
}

// appliedTxn is a transaction Apply applied whose durability Durable has
// not awaited yet: its batch, and what its span and metrics still need.
type appliedTxn struct {
	b     *pebble.Batch
	ctx   context.Context
	span  trace.Span
	start time.Time
	// key and size are the record's, for its span's attributes.
	key  event.Key
	size int
	// post is the batch's apply when Apply posted it (postApply): nil when
	// it was applied before Apply returned.
	post *postedApply
}

// accept is Accept, or Apply when noWait.
func (s *Store) accept(ctx context.Context, key event.Key, record []byte, noWait bool) (out deliverytype.Outcome, err error) {
	start := s.clock()
	var applied *pebble.Batch // set when noWait applied a batch: its span ends in Durable
	// The span gets its attributes when it ends (endTxnSpan).
	ctx, span := s.tracer.Start(ctx, SpanTxn)
	defer func() {
		if applied != nil {
			return // Durable records it (Apply)
		}
		result := "stored"
		switch {
		case err == nil && out == deliverytype.Duplicate:
			result = "duplicate"
		case errors.Is(err, ErrConflict), errors.Is(err, ErrInvalidRecord):
			result = "refused"
		}
		if err == nil || result == "refused" {
			s.accepted.Add(ctx, 1, s.resultSets[result]...)
		}
		s.txnDur.Record(ctx, s.clock().Sub(start).Seconds(), s.dbRecord...)
		s.endTxnSpan(span, key, len(record), err, out)
	}()
	if err := s.usable(); err != nil {
		return 0, err
	}
	if err := s.checkRecord(key, record); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.mon.serveMetrics(ctx, s) // a scrape that found the store busy
	if err := s.usable(); err != nil {
		return 0, err
	}
	if s.txns == nil {
		s.txns = newTxnCalls(s.st)
	}
	rk := recordKey(key)
	acct := s.acct
	// What the transaction's goroutine decides, in one allocation (each
	// variable the closure below shares would be one of its own).
	t := new(struct {
		phase      txnPhase
		next       accounting
		charge     int64
		nextCk     checkpoint
		below      bool // the record sorts before the checkpoint's: it joins the validated prefix
		outcome    deliverytype.Outcome
		batch      *pebble.Batch // applied without waiting for its sync (noWait)
		post       *postedApply  // batch's apply, posted (postApply): &posted
		posted     postedApply
		committing atomic.Bool // read after a timeout: the call may still run
	})
	// A key beyond the greatest in the store cannot be in it: the lookup
	// is needed only for a key at or below it (a replay, or an event that
	// waited for a retry while later ones were delivered). Delivery goes
	// through the undelivered index in event order, so most keys are new
	// and the greatest, and the lookup was about 8 % of the CPU of a
	// 32-database delivery (docs/benchmarks/2026-12-01-multidb.md).
	lookup := bytes.Compare(rk, s.last) <= 0
	var c int64 // the record's charge and the time, on the posting path: computed once
	var now time.Time
	post := false
	if noWait && !lookup {
		c, now = Charge(key, record), s.guardNow()
		post = s.freeSpaceKnown(c, now)
	}
	if post {
		// Nothing to read: the transaction is decided here and its batch
		// posted (postApply).
		if err = s.postApply(ctx, key, rk, record, c, now, acct, &t.next, &t.charge, &t.posted); err == nil {
			t.post = &t.posted
			t.batch, t.outcome = t.post.b, deliverytype.Stored
		}
	} else {
		// One storage call: read the key, decide, and write.
		err = guardedTxn(ctx, s.st, s.timeout, "the archive transaction", &t.phase, s.txns, func() error {
			var existing []byte
			if lookup {
				var err error
				if existing, err = get(s.db, rk); err != nil {
					return mapError("reading the key", err)
				}
			}
			if existing != nil {
				rec, err := checkValue(key, existing)
				if err != nil {
					s.st.fail(err)
					return err
				}
				if bytes.Equal(rec, record) {
					t.outcome = deliverytype.Duplicate
					return nil
				}
				return fmt.Errorf("%w: event %s", ErrConflict, key.Event)
			}
			b, err := s.newRecordBatch(key, rk, record, Charge(key, record), s.guardNow(), acct, &t.next, &t.charge)
			if err != nil {
				return err
			}
			if s.ckptKey != nil && bytes.Compare(rk, s.ckptKey) < 0 {
				// Keep the checkpoint's totals those of every record at or
				// before its key (checkpoint.go), in the same atomic batch.
				t.below = true
				t.nextCk = checkpoint{key: s.ckpt.key, acct: accounting{
					Records: s.ckpt.acct.Records + 1, EncodedBytes: s.ckpt.acct.EncodedBytes + t.charge}}
				_ = b.Set(keyCheckpoint, encodeCheckpoint(t.nextCk), nil)
			}
			if ctx.Err() != nil || !t.phase.beginWrite() {
				_ = b.Close()
				return fmt.Errorf("%w: the archive transaction was cancelled before writing: %w", ErrUnavailable, context.Cause(ctx))
			}
			t.committing.Store(true)
			if noWait {
				// The batch stays open until Durable awaited its sync
				// (Pebble: no Close before SyncWait).
				if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
					return mapError("applying the archive transaction", err)
				}
				t.batch = b
				t.outcome = deliverytype.Stored
				return nil
			}
			err = b.Commit(pebble.Sync)
			_ = b.Close() // only after Commit returned: a Goexit leaves the batch to Pebble
			if err != nil {
				return mapError("committing the archive transaction", err)
			}
			t.outcome = deliverytype.Stored
			return nil
		})
	}
	if err != nil {
		if t.committing.Load() && s.st.err() == nil {
			// Pebble failed the commit without a fatal: its outcome is not
			// reflected in acct, so stop trusting the in-memory accounting.
			s.st.fail(err)
		}
		return 0, err
	}
	if t.outcome == deliverytype.Duplicate {
		return deliverytype.Duplicate, nil
	}
	s.acct = t.next
	if t.batch != nil {
		applied = t.batch
		s.applied = append(s.applied, appliedTxn{b: t.batch, ctx: ctx, span: span, start: start, key: key, size: len(record), post: t.post})
	}
	if !lookup {
		s.last = rk
	}
	s.records.Store(t.next.Records)
	s.encoded.Store(t.next.EncodedBytes)
	if t.below {
		s.setCheckpoint(t.nextCk)
	}
	if s.adv != nil {
		s.adv.accepted = append(s.adv.accepted, acceptedRecord{key: rk, charge: t.charge})
	}
	s.mon.committed(s, t.next)
	return deliverytype.Stored, nil
}

// Durable waits until every transaction Apply applied is durable, and
// records their spans and metrics. It returns nil when there is none. A
// failed or timed-out sync marks the store unusable (ErrUnavailable), as a
// failed Accept does: the outcome of every transaction applied since the
// last Durable is then unknown, and its events must be delivered again
// after the store is reopened (a Duplicate where the record is there, a
// Stored where it was lost). Like Accept, it blocks for at most about
// TxnTimeout.
func (s *Store) Durable(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durableLocked(ctx)
}

// durableLocked is Durable; the caller holds s.mu.
func (s *Store) durableLocked(ctx context.Context) error {
	txns := s.applied
	if len(txns) == 0 {
		return nil
	}
	s.applied = nil
	s.posted = 0
	err := s.st.err()
	if err == nil {
		// Every batch's sync is awaited, in order: the last one's
		// covers the ones before it, whose waits then return at once. The
		// call runs after every posted apply (txnCalls keeps the order),
		// so their outcomes are known by then.
		err = guardedTxn(ctx, s.st, s.timeout, "waiting for the archive transactions to be durable", nil, s.txns, func() error {
			for _, t := range txns {
				if p := t.post; p != nil && (!p.returned || p.err != nil) {
					return cmp.Or(p.err, newError(ErrUnavailable, "applying the archive transaction ended without returning", errEnded))
				}
				if err := t.b.SyncWait(); err != nil {
					return mapError("syncing the archive transactions", err)
				}
			}
			return nil
		})
		if err != nil && s.st.err() == nil {
			s.st.fail(err)
		}
	}
	now := s.clock()
	for _, t := range txns {
		if err == nil {
			_ = t.b.Close()
		}
		s.txnDur.Record(t.ctx, now.Sub(t.start).Seconds(), s.dbRecord...)
		s.endTxnSpan(t.span, t.key, t.size, err, deliverytype.Stored)
	}
	if err == nil {
		// One addition for the group, not one per event: the SDK's cost
		// is per call (the attribute set's lookup, the exemplar's offer),
		// not per unit. Its exemplar is the last transaction's.
		s.accepted.Add(txns[len(txns)-1].ctx, int64(len(txns)), s.resultSets["stored"]...)
		// The call returned, so nothing reads txns any more: its array
		// serves the next group (after a timeout the call may still run).
		clear(txns)
		s.applied = txns[:0]
	}
	return err
}

// postApply decides a transaction that needs no storage call (a new
// record whose key sorts after every key in the store, with the free-space
// guard's measurement still fresh), builds its batch, and posts the batch
// to the store's transaction goroutine, which applies it after the calls
// handed to it before and before the ones handed to it later (txnCalls),
// instead of waiting for the apply. The caller goes on with the next
// event while the batch is applied: the worker's own work per event and
// Pebble's apply overlap, on two cores about a quarter of a drained event's
// time (docs/benchmarks.md). What Apply promises is unchanged: its outcome
// is decided in order on the accounting, and nothing may rely on it until
// Durable returned nil; Durable's call runs after the apply and fails, and
// marks the store unusable, when the apply failed. The posted apply is
// written into p, the caller's (one allocation with its transaction's
// state). The caller holds s.mu; s.txns is made.
func (s *Store) postApply(ctx context.Context, key event.Key, rk, record []byte, c int64, now time.Time,
	acct accounting, next *accounting, charge *int64, p *postedApply) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: the archive transaction was cancelled before writing: %w", ErrUnavailable, context.Cause(ctx))
	}
	b, err := s.newRecordBatch(key, rk, record, c, now, acct, next, charge)
	if err != nil {
		return err
	}
	*p = postedApply{db: s.db, b: b}
	if !s.txns.post(p, s.timeout) {
		_ = b.Close()
		return lineStuck(s.st, "the archive transaction", s.timeout)
	}
	s.posted++
	return nil
}

// newRecordBatch decides a new record, whose charge is c (Charge), on
// acct at the time now: it must fit the quota and the free-space guard. It
// returns the batch of the record and the accounting that counts it, and
// sets next and charge.
func (s *Store) newRecordBatch(key event.Key, rk, record []byte, c int64, now time.Time,
	acct accounting, next *accounting, charge *int64) (*pebble.Batch, error) {
	if acct.EncodedBytes+c > s.quota {
		return nil, fmt.Errorf("%w: quota: %d of %d bytes used, record needs %d", ErrCapacity, acct.EncodedBytes, s.quota, c)
	}
	if err := s.checkFreeSpaceAt(c, now); err != nil {
		return nil, err
	}
	*next, *charge = accounting{Records: acct.Records + 1, EncodedBytes: acct.EncodedBytes + c}, c
	b := s.db.NewBatch()
	setRecord(b, rk, record)
	setAccounting(b, *next)
	return b, nil
}

// settleLocked waits until every batch posted since the last wait was
// applied (postApply), bounded like a transaction: a snapshot taken
// afterwards holds every record the accounting counts. The caller holds
// s.mu.
func (s *Store) settleLocked(ctx context.Context) error {
	if s.posted == 0 {
		return nil
	}
	err := guardedTxn(ctx, s.st, s.timeout, "applying the archive transactions", nil, s.txns, func() error { return nil })
	if err == nil {
		err = s.st.err()
	}
	if err == nil {
		s.posted = 0
	}
	return err
}

// setRecord adds to b the record under rk (recordKey: prefixRecord and the
// canonical key's bytes), encoded into the batch itself rather than into a
// value of its own that the batch then copies.
func setRecord(b *pebble.Batch, rk, record []byte) {
	op := b.SetDeferred(len(rk), encodedValueLen(len(record)))
	copy(op.Key, rk)
	appendValue(op.Value[:0], rk[1:], record)
	_ = op.Finish() // fails only for an indexed batch
}

// setAccounting is setRecord for the accounting.
func setAccounting(b *pebble.Batch, a accounting) {
	op := b.SetDeferred(len(keyAccounting), accountingLen)
	copy(op.Key, keyAccounting)
	appendAccounting(op.Value[:0], a)
	_ = op.Finish()
}
