package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
)

var errNoMarker = errors.New("archive: no format marker")

type meta struct {
	version uint16
	binding event.DatabaseID
	acct    accounting
}

// readMeta reads and decodes the three metadata values.
func (c *core) readMeta(ctx context.Context) (meta, error) {
	var fv, bv, av []byte
	err := guarded(ctx, c.st, c.timeout, "reading archive metadata", false, func() error {
		var err error
		if fv, err = get(c.db, keyFormat); err != nil {
			return err
		}
		if bv, err = get(c.db, keyBinding); err != nil {
			return err
		}
		av, err = get(c.db, keyAccounting)
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
	if bv == nil || av == nil {
		return meta{}, fmt.Errorf("%w: archive metadata is incomplete", ErrCorrupt)
	}
	if m.binding, err = decodeBinding(bv); err != nil {
		return meta{}, err
	}
	if m.acct, err = decodeAccounting(av); err != nil {
		return meta{}, err
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
// the three metadata keys.
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
				if !bytes.Equal(k, keyFormat) && !bytes.Equal(k, keyBinding) && !bytes.Equal(k, keyAccounting) {
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
// (when set) with every page it reads.
func (c *core) scan(ctx context.Context, after Cursor, maxPages int, onPage func(Page) error) (scanTotals, error) {
	r := c.newReader()
	defer r.Close()
	var t scanTotals
	for maxPages <= 0 || t.pages < maxPages {
		p, err := r.ReadPage(ctx, after)
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

// validate is the startup validation.
func (s *Store) validate(ctx context.Context) error {
	if err := s.checkMetaKeys(ctx); err != nil {
		return err
	}
	t, err := s.scan(ctx, nil, 0, nil)
	if err != nil {
		return err
	}
	if t.records != s.acct.Records || t.bytes != s.acct.EncodedBytes {
		return fmt.Errorf("%w: accounting says %d records / %d bytes, records hold %d / %d",
			ErrCorrupt, s.acct.Records, s.acct.EncodedBytes, t.records, t.bytes)
	}
	s.log.Info("archive validated", zap.Int64("records", t.records), zap.Int64("encoded_bytes", t.bytes), zap.Int("pages", t.pages))
	return nil
}
