package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// Scrub is one pass of the background scrub: a validated read of every
// record of the archive, one bounded page per Step, over a snapshot taken
// by NewScrub, and a read of every table file of the store's version at
// that moment straight from the disk, bypassing the block cache, that
// verifies the checksum of each of its blocks (scrub_tables.go). It
// re-validates what Open trusts, the checkpointed prefix (checkpoint.go).
// At the end of the pass it checks that the records at or before the
// snapshot's checkpoint add up to the checkpoint, and that all of them add
// up to the snapshot's accounting; a complete pass then records the time
// its snapshot was taken as the archive's last full validation
// (validation.go).
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
	tables  *tableScrub
	began   time.Time // when the snapshot was taken
	after   Cursor
	acct    accounting // of the snapshot
	ck      checkpoint // of the snapshot
	ckKey   []byte     // recordKey(ck.key); nil: no checkpoint
	seen    accounting
	crossed bool // a record after the checkpoint's was seen (or there is none)
	records bool // every record of the snapshot was validated
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
	// The pass's snapshot must hold every record its accounting counts.
	if err := s.settleLocked(context.Background()); err != nil {
		return nil, err
	}
	tables, err := s.newTableScrub(context.Background())
	if err != nil {
		return nil, err
	}
	sc := &Scrub{s: s, r: s.newReader(), tables: tables, began: s.clock(), acct: s.acct, ck: s.ckpt, ckKey: s.ckptKey}
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
// and ScrubPageBytes) and verifies the next ScrubPageBytes of table blocks
// on the disk. After the pass is complete it does nothing.
func (sc *Scrub) Step(ctx context.Context) (ScrubProgress, error) {
	if sc.done {
		return sc.progress(0, 0), nil
	}
	if err := sc.s.usable(); err != nil {
		return ScrubProgress{}, err
	}
	var p Page
	if !sc.records {
		var err error
		if p, err = sc.recordPage(ctx); err != nil {
			return ScrubProgress{}, err
		}
	}
	if err := sc.tables.step(ctx, ScrubPageBytes); err != nil {
		return ScrubProgress{}, err
	}
	if sc.records && sc.tables.done {
		if err := sc.s.scrubbed(ctx, sc.began); err != nil {
			return ScrubProgress{}, err
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

// recordPage validates the next page of records and, after the last one,
// checks the pass's totals.
func (sc *Scrub) recordPage(ctx context.Context) (Page, error) {
	p, err := sc.r.checkPage(ctx, sc.after)
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			sc.s.corrupt(err)
		}
		return Page{}, err
	}
	for _, rec := range p.Records {
		if !sc.crossed && bytes.Compare(recordKey(rec.Key), sc.ckKey) > 0 {
			if err := sc.checkPrefix(); err != nil {
				return Page{}, err
			}
		}
		sc.seen.Records++
		sc.seen.EncodedBytes += rec.Charge
	}
	sc.after = p.Next
	if p.Next == nil {
		if !sc.crossed {
			if err := sc.checkPrefix(); err != nil {
				return Page{}, err
			}
		}
		if sc.seen != sc.acct {
			return Page{}, sc.fail(fmt.Errorf("%w: the scrub found %d records / %d bytes, the accounting says %d / %d",
				ErrCorrupt, sc.seen.Records, sc.seen.EncodedBytes, sc.acct.Records, sc.acct.EncodedBytes))
		}
		sc.records = true
	}
	return p, nil
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

// Close releases the pass's snapshot and the table it was reading.
func (sc *Scrub) Close() error {
	sc.tables.close()
	return sc.r.Close()
}

// corrupt is corruptLocked for a caller that does not hold s.mu.
func (s *Store) corrupt(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corruptLocked(err)
}
