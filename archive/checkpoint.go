package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
)

// The validated-prefix checkpoint.
//
// A record, once stored, is never changed and never deleted. So a prefix of
// the archive in key order that was validated once (every value's
// checksum, decode, event hash and binding) stays valid for as long as the
// storage engine returns the bytes it stored, which Pebble's own checksums
// (every WAL chunk, every table block, verified on every read from disk)
// and the background scrub (scrub.go) watch over. The checkpoint is one
// metadata value, 'm' "checkpoint": the key K of the last record of the
// validated prefix, and the count and Σ charges of every record at or
// before K. It lives inside the store, written in synced batches, so it is
// exactly as durable and as crash-atomic as the records and the accounting
// it describes (the archive directory holds nothing but archive.pebble).
//
// Continuity. Every record sorts either at or before K (counted in the
// checkpoint) or after K (the suffix). The single writer keeps it so: an
// Accept that stores a record sorting before K (a retried event older than
// records already archived) adds the record to the checkpoint in the same
// batch as the record and the accounting. At Open, the suffix is validated
// in bounded pages, and the checkpoint's totals plus the suffix's must equal
// the durable accounting; K itself must be a record that validates. Any
// disagreement, or a damaged checkpoint value, is never trusted: Open falls
// back to validating the whole archive against the accounting, exactly as
// it did before checkpoints existed, and writes a fresh checkpoint when
// that passes.
//
// Advancing. The checkpoint moves forward only over records that were just
// validated: at the end of Open's validation, at every Checkpoint (the
// server calls it once CheckpointDue, while it delivers), and at a clean
// Close. A crash therefore leaves at most what was accepted since the last
// Checkpoint for the next Open to validate; a clean Close leaves nothing.
// Each advance is one synced batch that replaces the old value: a crash
// keeps either the old checkpoint, still true because records are never
// deleted, or the new one.
//
// What a start costs then: the custody audit and Pebble's open (its
// consistency check stats every table; table statistics, which would open
// every table, are off), the metadata keys, one record read for K, the
// records after K, and the history anchor's one reverse seek. Only the
// audit (one lstat per file, which also measures the allocated bytes the
// Monitor serves first) and Pebble's open (the consistency check's stat
// of every table, and reading and rewriting the MANIFEST, which lists
// every table) grow with the archive: with its files, not its records.

// CheckpointRecords and CheckpointBytes bound what a store accepts beyond its
// checkpoint before CheckpointDue reports that a Checkpoint is due: the
// most that the next Open validates after a crash, besides the records in
// flight (about 0.1 s of validation at either bound).
const (
	CheckpointRecords = 65536
	CheckpointBytes   = 64 << 20
)

// advance is what Accept stored while a Checkpoint validated its snapshot.
type advance struct{ accepted []acceptedRecord }

type acceptedRecord struct {
	key    []byte // Pebble key
	charge int64
}

// setCheckpoint records c as the store's durable checkpoint. Callers hold
// s.mu (or are Open).
func (s *Store) setCheckpoint(c checkpoint) {
	s.ckpt, s.ckptKey = c, nil
	if c.acct.Records > 0 {
		s.ckptKey = recordKey(c.key)
	}
	s.ckptRecords.Store(c.acct.Records)
	s.ckptBytes.Store(c.acct.EncodedBytes)
}

// CheckpointDue reports whether the store accepted at least
// CheckpointRecords records or CheckpointBytes bytes beyond its checkpoint.
// It never waits.
func (s *Store) CheckpointDue() bool {
	return s.records.Load()-s.ckptRecords.Load() >= CheckpointRecords ||
		s.encoded.Load()-s.ckptBytes.Load() >= CheckpointBytes
}

// validate is Open's validation: the metadata keys, then the records beyond
// the checkpoint and the continuity of the checkpoint with the durable
// accounting, or, without a checkpoint that holds, every record (see the
// comment at the top of this file). It writes nothing: it runs on Open's
// read-only view of the store (decide.go), and returns the checkpoint that
// the read-write open then records (ckptPlan.apply).
func (s *Store) validate(ctx context.Context, m meta) (ckptPlan, error) {
	if err := s.checkMetaKeys(ctx); err != nil {
		return ckptPlan{}, err
	}
	if m.validatedErr == nil && !m.validated.IsZero() {
		s.setValidated(m.validated)
	}
	switch {
	case m.ckptErr != nil:
		s.log.Warn("archive checkpoint is damaged; validating the whole archive")
	case s.fullValidationDue(m):
	case m.ckpt.acct.Records > 0:
		plan, ok, err := s.validateFrom(ctx, m.ckpt)
		if err != nil || ok {
			return plan, err
		}
	}
	return s.validateAll(ctx)
}

// ckptPlan is what validate found for the checkpoint: c, to be written
// (write) or, already durable, only recorded (set), and for a validation of
// every record the time it began (validated, written with c); the zero plan
// records nothing (an empty archive).
type ckptPlan struct {
	c          checkpoint
	write, set bool
	validated  time.Time
}

// apply records the plan's checkpoint on the read-write store.
func (p ckptPlan) apply(ctx context.Context, s *Store) error {
	switch {
	case p.write:
		c := p.c
		return s.writeMeta(ctx, &c, p.validated)
	case p.set:
		s.setCheckpoint(p.c)
	}
	return nil
}

// validateFrom validates the records after the checkpoint ck and its
// continuity with the accounting. ok is false when the checkpoint does not
// hold (the caller then validates everything); a record that fails
// validation is ErrCorrupt.
func (s *Store) validateFrom(ctx context.Context, ck checkpoint) (plan ckptPlan, ok bool, err error) {
	if ck.key.Database != s.binding || ck.acct.Records > s.acct.Records || ck.acct.EncodedBytes > s.acct.EncodedBytes {
		s.log.Warn("archive checkpoint exceeds the accounting or names another database; validating the whole archive")
		return plan, false, nil
	}
	var v []byte
	if err := guarded(ctx, s.st, s.timeout, "reading the checkpoint's record", false, func() error {
		var err error
		v, err = get(s.db, recordKey(ck.key))
		return err
	}); err != nil {
		return plan, false, err
	}
	if v == nil {
		s.log.Warn("archive checkpoint names a record that does not exist; validating the whole archive")
		return plan, false, nil
	}
	if _, err := checkValue(ck.key, v); err != nil {
		return plan, false, err
	}
	last := ck.key
	t, err := s.scan(ctx, newCursor(s.id, ck.key), 0, func(p Page) error {
		if n := len(p.Records); n > 0 {
			last = p.Records[n-1].Key
		}
		return nil
	})
	if err != nil {
		return plan, false, err
	}
	if ck.acct.Records+t.records != s.acct.Records || ck.acct.EncodedBytes+t.bytes != s.acct.EncodedBytes {
		s.log.Warn("archive checkpoint and records beyond it do not add up to the accounting; validating the whole archive",
			zap.Int64("checkpoint_records", ck.acct.Records), zap.Int64("records_beyond", t.records), zap.Int64("records", s.acct.Records))
		return plan, false, nil
	}
	s.log.Info("archive validated beyond its checkpoint", zap.Int64("records", s.acct.Records),
		zap.Int64("checkpoint_records", ck.acct.Records), zap.Int64("validated_records", t.records), zap.Int("pages", t.pages))
	if t.records == 0 {
		return ckptPlan{c: ck, set: true}, true, nil
	}
	return ckptPlan{c: checkpoint{key: last, acct: s.acct}, write: true}, true, nil
}

// validateAll validates every record, compares count and Σ charges with the
// durable accounting, and plans the checkpoint at the last record and the
// time it began as the last full validation (validation.go).
func (s *Store) validateAll(ctx context.Context) (ckptPlan, error) {
	began := s.clock()
	var last event.Key
	t, err := s.scan(ctx, nil, 0, func(p Page) error {
		if n := len(p.Records); n > 0 {
			last = p.Records[n-1].Key
		}
		return nil
	})
	if err != nil {
		return ckptPlan{}, err
	}
	if t.records != s.acct.Records || t.bytes != s.acct.EncodedBytes {
		return ckptPlan{}, fmt.Errorf("%w: accounting says %d records / %d bytes, records hold %d / %d",
			ErrCorrupt, s.acct.Records, s.acct.EncodedBytes, t.records, t.bytes)
	}
	s.log.Info("archive validated", zap.Int64("records", t.records), zap.Int64("encoded_bytes", t.bytes), zap.Int("pages", t.pages))
	if t.records == 0 {
		// Nothing to vouch for: a new archive records its creation as
		// its first full validation (initMeta).
		return ckptPlan{}, nil
	}
	return ckptPlan{c: checkpoint{key: last, acct: s.acct}, write: true, validated: began}, nil
}

// writeCheckpoint durably replaces the checkpoint with c (writeMeta).
// Callers hold s.mu (or are Open).
func (s *Store) writeCheckpoint(ctx context.Context, c checkpoint) error {
	return s.writeMeta(ctx, &c, time.Time{})
}

// Checkpoint advances the checkpoint over what the store accepted since the
// last one: it validates every record beyond the checkpoint in bounded pages
// over a snapshot, checks that the checkpoint's totals and those records add
// up to the snapshot's accounting, and writes the new checkpoint in one
// synced batch. Accept is not held up: the single-writer lock is taken only
// to take the snapshot and to write. It returns nil at once when nothing was
// accepted beyond the checkpoint. A record that fails validation, or totals
// that do not add up, are ErrCorrupt: the store is then unusable, and its
// checkpoint is dropped so that the next Open validates the whole archive.
func (s *Store) Checkpoint(ctx context.Context) error {
	if err := s.usable(); err != nil {
		return err
	}
	return s.checkpoint(ctx, false)
}

// checkpoint is Checkpoint; final is Close's, which runs once the store is
// marked closed.
func (s *Store) checkpoint(ctx context.Context, final bool) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	s.mu.Lock()
	if err := s.st.err(); err != nil || (s.closed.Load() && !final) {
		s.mu.Unlock()
		return cmpErr(err, ErrClosed)
	}
	// The snapshot must hold every record the accounting counts.
	if err := s.settleLocked(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.acct == s.ckpt.acct {
		s.mu.Unlock()
		return nil
	}
	r := s.core.newReader()
	acct, ck := s.acct, s.ckpt
	s.adv = new(advance)
	s.mu.Unlock()
	defer r.Close()
	if s.testCheckpointSnapshot != nil {
		s.testCheckpointSnapshot()
	}

	var after Cursor
	if ck.acct.Records > 0 {
		after = newCursor(s.id, ck.key)
	}
	last := ck.key
	t, err := scanWith(ctx, r, after, 0, func(p Page) error {
		if n := len(p.Records); n > 0 {
			last = p.Records[n-1].Key
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	adv := s.adv
	s.adv = nil
	if err == nil && (ck.acct.Records+t.records != acct.Records || ck.acct.EncodedBytes+t.bytes != acct.EncodedBytes) {
		err = fmt.Errorf("%w: the checkpoint (%d records) and the %d records beyond it do not add up to the accounting (%d records)",
			ErrCorrupt, ck.acct.Records, t.records, acct.Records)
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			s.corruptLocked(err)
		}
		return err
	}
	// Records stored while the snapshot was validated that sort at or
	// before its last record belong to the new prefix (they were verified
	// by Accept before it wrote them, like every record).
	next := checkpoint{key: last, acct: acct}
	lastKey := recordKey(last)
	for _, a := range adv.accepted {
		if bytes.Compare(a.key, lastKey) <= 0 {
			next.acct.Records++
			next.acct.EncodedBytes += a.charge
		}
	}
	// As scrubbed: a cancellation ends the call before the write, never
	// during it.
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.writeCheckpoint(context.WithoutCancel(ctx), next)
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// corruptLocked handles corrupt content found by a Checkpoint or the scrub:
// it marks the store unusable with err and drops the checkpoint, so that
// the next Open validates every record instead of trusting a prefix that
// holds the damage. Callers hold s.mu.
func (s *Store) corruptLocked(err error) {
	s.st.fail(err)
	s.log.Error("archive content is corrupt; delivery stops, and the next start validates the whole archive", zap.Error(err))
	if s.shut || s.db == nil || s.ckptKey == nil {
		return
	}
	// The store is unusable now, so the write goes through a guard of its
	// own. If it fails, the checkpoint stays; the corrupt record is then
	// found again by the next scrub.
	st := &engineState{log: s.log, clock: s.clock}
	werr := guarded(context.Background(), st, s.timeout, "dropping the checkpoint", true, func() error {
		b := s.db.NewBatch()
		_ = b.Delete(keyCheckpoint, nil)
		err := b.Commit(pebble.Sync)
		_ = b.Close()
		return err
	})
	if werr != nil {
		s.log.Error("archive checkpoint could not be dropped after corrupt content was found", zap.Error(werr))
		return
	}
	s.setCheckpoint(checkpoint{})
}
