package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

var errNoMarker = errors.New("archive: no format marker")

type meta struct {
	version uint16
	binding event.DatabaseID
	acct    accounting
	// ckpt is the validated-prefix checkpoint (zero: none); ckptErr is set
	// when its value is damaged. Neither fails readMeta: a checkpoint is
	// never trusted blindly (see Store.validate), and Inspect ignores it.
	ckpt    checkpoint
	ckptErr error
	// validated is when the whole archive was last validated (zero:
	// unknown; validation.go); validatedErr is set when its value is
	// damaged, which, like a damaged checkpoint, is never trusted.
	validated    time.Time
	validatedErr error
}

// readMeta reads and decodes the metadata values.
func (c *core) readMeta(ctx context.Context) (meta, error) {
	var fv, bv, av, cv, vv []byte
	err := guarded(ctx, c.st, c.timeout, "reading archive metadata", false, func() error {
		var err error
		if fv, err = get(c.db, keyFormat); err != nil {
			return err
		}
		if bv, err = get(c.db, keyBinding); err != nil {
			return err
		}
		if av, err = get(c.db, keyAccounting); err != nil {
			return err
		}
		if cv, err = get(c.db, keyCheckpoint); err != nil {
			return err
		}
		vv, err = get(c.db, keyValidated)
		return err
	})
	if err != nil {
		return meta{}, err
	}
	if fv == nil {
		return meta{}, errNoMarker
	}
	var m meta
	if m.version, err = decodeMarker(fv); err != nil {
		return meta{}, err
	}
	c.format = m.version
	if bv == nil || av == nil {
		return meta{}, fmt.Errorf("%w: archive metadata is incomplete", ErrCorrupt)
	}
	if m.binding, err = decodeBinding(bv); err != nil {
		return meta{}, err
	}
	if m.acct, err = decodeAccounting(av); err != nil {
		return meta{}, err
	}
	if cv != nil {
		m.ckpt, m.ckptErr = decodeCheckpoint(cv)
	}
	if vv != nil {
		m.validated, m.validatedErr = decodeValidated(vv)
	}
	return m, nil
}

func (s *Store) isEmpty(ctx context.Context) (bool, error) {
	var empty bool
	err := guarded(ctx, s.st, s.timeout, "reading the store", false, func() error {
		it, err := s.db.NewIter(nil)
		if err != nil {
			return err
		}
		empty = !it.First()
		return it.Close()
	})
	return empty, err
}

// checkMetaKeys verifies that no key exists outside the record range except
// the metadata keys of the archive's format (keyValidated only from format
// 2 on).
func (c *core) checkMetaKeys(ctx context.Context) error {
	var unknown bool
	err := guarded(ctx, c.st, c.timeout, "reading archive metadata", false, func() error {
		for _, bounds := range [][2][]byte{{nil, recordLower}, {recordUpper, nil}} {
			it, err := c.db.NewIter(&pebble.IterOptions{LowerBound: bounds[0], UpperBound: bounds[1]})
			if err != nil {
				return err
			}
			for ok := it.First(); ok; ok = it.Next() {
				k := it.Key()
				if !bytes.Equal(k, keyFormat) && !bytes.Equal(k, keyBinding) && !bytes.Equal(k, keyAccounting) &&
					!bytes.Equal(k, keyCheckpoint) && !(c.format >= 2 && bytes.Equal(k, keyValidated)) {
					unknown = true
				}
			}
			if err := it.Close(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if unknown {
		return fmt.Errorf("%w: unknown key outside the record range", ErrCorrupt)
	}
	return nil
}

// scanTotals is the result of a bounded validated scan.
type scanTotals struct {
	records, bytes int64
	pages          int
	complete       bool
	last           Cursor // after the last page read (nil: none read)
}

// scan reads at most maxPages pages (0: no bound) with a validating Reader,
// starting after the cursor after (nil: from the start), and calls onPage
// (when set) with every page it reads. The pages' records carry keys and
// charges, not events (Reader.checkPage): every caller only validates and
// counts.
func (c *core) scan(ctx context.Context, after Cursor, maxPages int, onPage func(Page) error) (scanTotals, error) {
	r := c.newReader()
	defer r.Close()
	return scanWith(ctx, r, after, maxPages, onPage)
}

// scanWith is scan over the snapshot of r.
func scanWith(ctx context.Context, r *Reader, after Cursor, maxPages int, onPage func(Page) error) (scanTotals, error) {
	var t scanTotals
	for maxPages <= 0 || t.pages < maxPages {
		p, err := r.checkPage(ctx, after)
		t.pages++
		if err != nil {
			return t, err
		}
		t.records += int64(len(p.Records))
		t.bytes += p.EncodedBytes
		if onPage != nil {
			if err := onPage(p); err != nil {
				return t, err
			}
		}
		if p.Next == nil {
			t.complete = true
			return t, nil
		}
		after, t.last = p.Next, p.Next
	}
	return t, nil
}
