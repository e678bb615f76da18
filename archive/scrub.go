package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Scrub is one pass of the background scrub: a validated read of every
// record of the archive, one bounded page per Step, over a snapshot taken
// by NewScrub. It re-validates what Open trusts, the checkpointed prefix
// (checkpoint.go), and reads it from disk, so that Pebble verifies the
// checksum of every table block it has to load. At the end of the pass it
// checks that the records at or before the snapshot's checkpoint add up to
// the checkpoint, and that all of them add up to the snapshot's
// accounting.
//
// Corrupt content (a record that fails validation, a storage-engine
// corruption, totals that do not add up) makes Step return ErrCorrupt and
// the store unusable, exactly as if Open had found it: every later call
// returns ErrCorrupt (the outbox stops delivery with corrupt_content), and
// the checkpoint is dropped so that the next Open validates the whole
// archive and refuses it again.
//
// A Scrub is not safe for concurrent use. Close it when done; Store.Close
// ends it (Step then returns ErrClosed).
type Scrub struct {
	s       *Store
	r       *Reader
	after   Cursor
	acct    accounting // of the snapshot
	ck      checkpoint // of the snapshot
	ckKey   []byte     // recordKey(ck.key); nil: no checkpoint
	seen    accounting
	crossed bool // a record after the checkpoint's was seen (or there is none)
	done    bool
}

// ScrubProgress is what one Step did and where the pass stands.
type ScrubProgress struct {
	// Records and EncodedBytes were validated by this step.
	Records, EncodedBytes int64
	// Scanned is the records validated by the pass so far, of Total in its
	// snapshot.
	Scanned, Total int64
	// Complete is true once the pass validated every record and its totals.
	Complete bool
}

// NewScrub starts a scrub pass over a snapshot of the archive taken now.
// Its page reads are bounded by Options.ScrubReadTimeout, not by the
// transaction timeout: a slow read of cold blocks on a busy disk is no sign
// of a stuck engine, and a timeout fences the archive and halts delivery.
func (s *Store) NewScrub() (*Scrub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	sc := &Scrub{s: s, r: s.NewReader(), acct: s.acct, ck: s.ckpt, ckKey: s.ckptKey}
	sc.r.timeout = s.scrubTimeout
	sc.r.pageBytes = ScrubPageBytes
	sc.crossed = sc.ckKey == nil
	// The counters' series exist from the first pass on, so that
	// increase() sees its first records.
	s.scrubRecords.Add(context.Background(), 0, s.dbSet)
	s.scrubPasses.Add(context.Background(), 0, s.dbSet)
	return sc, nil
}

// Step validates the next page of the pass (at most MaxPageRecords records
// and ScrubPageBytes). After the pass is complete it does nothing.
func (sc *Scrub) Step(ctx context.Context) (ScrubProgress, error) {
	if sc.done {
		return sc.progress(0, 0), nil
	}
	p, err := sc.r.checkPage(ctx, sc.after)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			sc.s.corrupt(err)
		}
		return ScrubProgress{}, err
	}
	for _, rec := range p.Records {
		if !sc.crossed && bytes.Compare(recordKey(rec.Key), sc.ckKey) > 0 {
			if err := sc.checkPrefix(); err != nil {
				return ScrubProgress{}, err
			}
		}
		sc.seen.Records++
		sc.seen.EncodedBytes += rec.Charge
	}
	sc.after = p.Next
	if p.Next == nil {
		if !sc.crossed {
			if err := sc.checkPrefix(); err != nil {
				return ScrubProgress{}, err
			}
		}
		if sc.seen != sc.acct {
			return ScrubProgress{}, sc.fail(fmt.Errorf("%w: the scrub found %d records / %d bytes, the accounting says %d / %d",
				ErrCorrupt, sc.seen.Records, sc.seen.EncodedBytes, sc.acct.Records, sc.acct.EncodedBytes))
		}
		sc.done = true
		sc.s.scrubPasses.Add(ctx, 1, sc.s.dbSet)
	}
	sc.s.scrubRecords.Add(ctx, int64(len(p.Records)), sc.s.dbSet)
	pr := sc.progress(int64(len(p.Records)), p.EncodedBytes)
	ratio := 1.0
	if pr.Total > 0 {
		ratio = float64(pr.Scanned) / float64(pr.Total)
	}
	sc.s.scrubProgress.Record(ctx, ratio, sc.s.dbSet)
	return pr, nil
}

// checkPrefix compares the records seen so far, every one at or before the
// checkpoint's key, with the checkpoint.
func (sc *Scrub) checkPrefix() error {
	sc.crossed = true
	if sc.seen != sc.ck.acct {
		return sc.fail(fmt.Errorf("%w: the scrub found %d records / %d bytes up to the checkpoint, the checkpoint says %d / %d",
			ErrCorrupt, sc.seen.Records, sc.seen.EncodedBytes, sc.ck.acct.Records, sc.ck.acct.EncodedBytes))
	}
	return nil
}

func (sc *Scrub) fail(err error) error {
	sc.s.corrupt(err)
	return err
}

func (sc *Scrub) progress(records, bytes int64) ScrubProgress {
	return ScrubProgress{Records: records, EncodedBytes: bytes, Scanned: sc.seen.Records, Total: sc.acct.Records, Complete: sc.done}
}

// Close releases the pass's snapshot.
func (sc *Scrub) Close() error { return sc.r.Close() }

// corrupt is corruptLocked for a caller that does not hold s.mu.
func (s *Store) corrupt(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corruptLocked(err)
}
