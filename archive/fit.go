package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/attribute"

	"github.com/riffdb/riffdb/event"
)

// freeSpaceKnown reports whether checkFreeSpaceAt(charge, now) can decide
// without measuring the free space (a storage call). now is guardNow's.
func (s *Store) freeSpaceKnown(charge int64, now time.Time) bool {
	return s.minFree < 0 || s.free.unsupported || !s.free.stale(now, s.minFree+charge)
}

// guardNow is the time the free-space guard decides at: the clock, read
// only when the guard is on and the filesystem measures free space (the
// zero time otherwise, which the guard then does not read). A transaction
// reads it once for freeSpaceKnown and checkFreeSpaceAt.
func (s *Store) guardNow() time.Time {
	if s.minFree < 0 || s.free.unsupported {
		return time.Time{}
	}
	return s.clock()
}

// checkFreeSpace is the free-space guard: Pebble blocks forever on a full
// disk, so a write of charge bytes is refused while it would leave less than
// MinFreeBytes available.
//
// A statfs per archive transaction is a measurable part of its CPU, so the
// guard measures once per freeSpaceMaxAge (100 ms) while space is plentiful. A
// write is admitted without measuring only when the last measurement is
// younger than freeSpaceMaxAge and that measurement, less every charge the
// guard admitted since (Fit's included, so the estimate errs low), still
// holds at least 2 × (MinFreeBytes + charge). Otherwise the guard measures
// again and decides on that fresh value alone, exactly as one statfs per
// call would: a refusal always rests on a fresh measurement, and near the
// guard every write is checked against one. Space taken by anything else
// (other stores, Pebble's flushes and compactions, other processes) is
// therefore seen within freeSpaceMaxAge, and is missed in that window only
// if it exceeds the MinFreeBytes + charge of headroom the doubling leaves.
// Callers hold s.mu (or are Open).
func (s *Store) checkFreeSpace(charge int64) error { return s.checkFreeSpaceAt(charge, s.guardNow()) }

// checkFreeSpaceAt is checkFreeSpace at the time now (guardNow's, read by
// the caller).
func (s *Store) checkFreeSpaceAt(charge int64, now time.Time) error {
	g := &s.free
	if s.minFree < 0 || g.unsupported {
		return nil
	}
	need := s.minFree + charge
	if g.stale(now, need) {
		du, err := s.fs.GetDiskUsage(s.storeDir)
		if errors.Is(err, vfs.ErrUnsupported) {
			g.unsupported = true
			return nil
		}
		if err != nil {
			*g = freeSpace{}
			return mapError("measuring free disk space", err)
		}
		*g = freeSpace{at: now, avail: int64(min(du.AvailBytes, math.MaxInt64))}
	}
	if g.avail-g.charged < need {
		return fmt.Errorf("%w: free disk space below the %d-byte guard", ErrCapacity, s.minFree)
	}
	g.charged += charge
	return nil
}

// Fit reports how many of the leading members (keys[i], records[i]) fit in
// the remaining quota together, in order. A key already archived charges 0,
// as does a repetition of a key earlier in the group: neither writes
// anything. Fit writes nothing.
func (s *Store) Fit(ctx context.Context, keys []event.Key, records [][]byte) (n int, err error) {
	// The span gets its attributes when it ends (endSpan), if it records.
	ctx, span := s.tracer.Start(ctx, SpanQuotaCheck)
	start := s.clock()
	defer func() {
		s.checkDur.Record(ctx, s.clock().Sub(start).Seconds(), s.dbRecord...)
		if err == nil {
			result := "fits"
			if n < len(keys) {
				result = "does_not_fit"
			}
			s.decisions.Add(ctx, 1, s.resultSets[result]...)
		}
		var attrs []attribute.KeyValue
		if span.IsRecording() {
			attrs = quotaCheckAttrs(s.dbAttr, len(keys))
		}
		endSpan(span, attrs, err, attribute.Int("riffdb.group.fits", n))
	}()
	if len(keys) != len(records) {
		return 0, fmt.Errorf("%w: %d keys but %d records", ErrInvalidArgument, len(keys), len(records))
	}
	if err := s.usable(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// When every member fits the quota and the free-space guard even if
	// none is archived yet (the common case), which ones are archived
	// cannot change the answer: skip the reads.
	var all int64
	for i, k := range keys {
		all += Charge(k, records[i])
	}
	if s.acct.EncodedBytes+all <= s.quota && s.checkFreeSpace(all) == nil {
		return len(keys), nil
	}
	// Otherwise one storage call reads every key: a run's keys are
	// consecutive, so the monotonic seeks of one iterator cost little more
	// than one seek.
	exists := make([]bool, len(keys))
	if err := s.settleLocked(ctx); err != nil {
		return 0, err
	}
	if err := guarded(ctx, s.st, s.timeout, "reading the keys", false, func() error {
		return s.present(keys, exists)
	}); err != nil {
		return 0, err
	}
	used := s.acct.EncodedBytes
	seen := make(map[event.Key]struct{}, len(keys))
	for i, k := range keys {
		charge := Charge(k, records[i])
		if _, dup := seen[k]; dup || exists[i] {
			charge = 0
		}
		if used+charge > s.quota {
			n = i
			break
		}
		used += charge
		seen[k] = struct{}{}
		n = i + 1
	}
	// The free-space guard applies to the group too: a run that the disk
	// cannot hold does not fit, so a full filesystem pauses delivery before
	// any attempt is spent, like a full quota.
	if n > 0 {
		if err := s.checkFreeSpace(used - s.acct.EncodedBytes); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// present sets exists[i] when keys[i] holds a record.
func (s *Store) present(keys []event.Key, exists []bool) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRecord}, UpperBound: []byte{prefixRecord + 1}})
	if err != nil {
		return err
	}
	for i, k := range keys {
		rk := recordKey(k)
		exists[i] = it.SeekGE(rk) && bytes.Equal(it.Key(), rk)
	}
	return it.Close()
}
