package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/event"
)

// Page bounds of every validated read: startup validation, Inspect and
// Reader.ReadPage.
const (
	MaxPageRecords = 256
	MaxPageBytes   = 4 << 20
)

// ScrubPageBytes bounds the charges of a background scrub page, in place of
// MaxPageBytes: the scrub's rate is set in pages per second per archive, and
// at MaxPageBytes a page, 32 archives of 32 KiB events at the default 4 pages
// a second would read, check and hash up to 512 MiB a second between them
// (docs/benchmarks/2026-12-02-memory.md). A page of events of
// up to 1 KiB is the same under either bound (256 records).
const ScrubPageBytes = 256 << 10

// Record is one validated archived event.
type Record struct {
	// Key is the archive key.
	Key event.Key
	// Event is the decoded, hash-verified stored event.
	Event event.Stored
	// Charge is the record's quota charge (see Charge).
	Charge int64
}

// Page is one bounded page of records in key order.
type Page struct {
	// Records holds at most MaxPageRecords records whose charges sum to at
	// most MaxPageBytes, except that a page always holds at least one record
	// when any remains.
	Records []Record
	// Next resumes after the last record; nil when the scan is complete.
	Next Cursor
	// EncodedBytes is Σ Charge over Records.
	EncodedBytes int64
}

// Reader is a validated, resumable, paged reader over a consistent snapshot
// of the archive: records written after NewReader are not seen. Every record
// it returns has passed the value checksum, the stored-event decode and hash,
// and the binding check; a record that fails any of them is ErrCorrupt. A
// Reader is safe for concurrent use but reads one page at a time. Close it
// before closing the store (Store.Close closes open readers). A server gets
// one from Store.NewReader; an offline reconciliation campaign from
// OpenReader, which owns its read-only store and lock until Close.
type Reader struct {
	c     *core
	store *Store // nil for an inspection

	// ro, for a Reader from OpenReader, is the read-only store it owns:
	// Close closes it and releases its lock.
	ro *readOnly
	// onFetch, when set (tests), is called with the length of every value
	// fill fetches.
	onFetch func(n int)
	// timeout, when set, bounds a page read instead of the store's
	// transaction timeout (the background scrub's longer one).
	timeout time.Duration
	// pageBytes, when set, bounds a page's charges instead of MaxPageBytes
	// (the background scrub's ScrubPageBytes).
	pageBytes int64

	mu   sync.Mutex
	snap *pebble.Snapshot
	err  error
}

// NewReader returns a Reader over a snapshot taken now, which holds every
// record an Apply that returned before decided to store. If the store is
// closed or unusable, every ReadPage of the Reader returns that error.
func (s *Store) NewReader() *Reader {
	s.mu.Lock()
	err := s.settleLocked(context.Background())
	s.mu.Unlock()
	if err != nil {
		return &Reader{c: &s.core, err: err}
	}
	return s.newReader()
}

// newReader is NewReader without waiting for posted batches.
func (s *Store) newReader() *Reader {
	if err := s.usable(); err != nil {
		return &Reader{c: &s.core, err: err}
	}
	r := s.core.newReader()
	r.store = s
	s.readersMu.Lock()
	s.readers[r] = struct{}{}
	s.readersMu.Unlock()
	return r
}

func (c *core) newReader() *Reader {
	r := &Reader{c: c}
	if err := c.st.err(); err != nil {
		r.err = err
		return r
	}
	r.snap = c.db.NewSnapshot()
	return r
}

// Close releases the snapshot and, for a Reader from OpenReader, closes the
// store and releases its lock. Further ReadPage calls return ErrClosed.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ro != nil {
		defer func() { r.ro.close(); r.ro = nil }()
	}
	if r.store != nil {
		r.store.readersMu.Lock()
		delete(r.store.readers, r)
		r.store.readersMu.Unlock()
	}
	if r.snap == nil {
		if r.err == nil {
			r.err = ErrClosed
		}
		return nil
	}
	snap := r.snap
	r.snap, r.err = nil, ErrClosed
	return mapError("closing a reader", snap.Close())
}

// ReadPage returns the page of records after the cursor (nil: from the
// start): at most MaxPageRecords records and MaxPageBytes of charges, at
// least one record when any remains. Page.Next is nil at the end. A cursor
// that another archive issued, or a damaged one, is ErrInvalidCursor.
//
// The byte bound limits what is read, not only what is returned: a record
// whose value would take the page past MaxPageBytes is recognised by its
// length and its value is not fetched.
func (r *Reader) ReadPage(ctx context.Context, after Cursor) (Page, error) {
	return r.readPage(ctx, after, true)
}

// checkPage reads the page ReadPage would and validates every record of it
// alike, but leaves Record.Event empty: the payloads are checked where the
// engine holds them and not copied. For the scans that only validate and
// count (startup validation, checkpoints, inspect, the background scrub),
// which would otherwise allocate every payload they read only to drop it:
// up to MaxPageBytes a page, several pages a second per archive for the
// scrub.
func (r *Reader) checkPage(ctx context.Context, after Cursor) (Page, error) {
	return r.readPage(ctx, after, false)
}

// readPage is ReadPage; decode says whether the records' events are decoded
// into the page (true) or only validated.
func (r *Reader) readPage(ctx context.Context, after Cursor, decode bool) (Page, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return Page{}, r.err
	}
	if err := context.Cause(ctx); err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	k, ok, err := after.key(r.c.id)
	if err != nil {
		return Page{}, err
	}
	lower := recordLower
	if ok {
		lower = append(recordKey(k), 0) // the immediate successor of the cursor's key
	}
	var page Page
	var pageErr error
	err = guarded(ctx, r.c.st, cmp.Or(r.timeout, r.c.timeout), "reading a page", false, func() error {
		it, err := r.snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: recordUpper})
		if err != nil {
			return err
		}
		page, pageErr = r.fill(it, decode)
		return it.Close()
	})
	if pageErr != nil {
		// A storage-engine error met while filling the page (a table
		// block's checksum) is sanitized and classed like any other.
		err = mapError("reading a page", pageErr)
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			r.c.st.fail(err)
		}
		return Page{}, err
	}
	return page, nil
}

// fill reads one page from a positioned-at-nothing iterator, with each
// record's event decoded (decode) or only validated.
func (r *Reader) fill(it *pebble.Iterator, decode bool) (Page, error) {
	var p Page
	var last event.Key
	more := false
	maxBytes := cmp.Or(r.pageBytes, MaxPageBytes)
	for valid := it.First(); valid; valid = it.Next() {
		if len(p.Records) == MaxPageRecords {
			more = true
			break
		}
		raw := it.Key()
		if len(raw) != 1+event.KeyLen {
			return Page{}, fmt.Errorf("%w: record key of %d bytes", ErrCorrupt, len(raw))
		}
		k, err := event.DecodeKey(raw[1:])
		if err != nil {
			return Page{}, fmt.Errorf("%w: record key", ErrCorrupt)
		}
		if k.Database != r.c.binding {
			return Page{}, fmt.Errorf("%w: record %s belongs to database %s", ErrCorrupt, k.Event, k.Database)
		}
		lv := it.LazyValue()
		charge := int64(event.KeyLen + lv.Len())
		if len(p.Records) > 0 && p.EncodedBytes+charge > maxBytes {
			more = true
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return Page{}, err
		}
		if r.onFetch != nil {
			r.onFetch(len(v))
		}
		if int64(event.KeyLen+len(v)) != charge {
			return Page{}, fmt.Errorf("%w: record %s: value length differs from the length recorded for it", ErrCorrupt, k.Event)
		}
		rec := Record{Key: k, Charge: charge}
		if decode {
			_, rec.Event, err = decodeValue(k, v)
		} else {
			_, err = checkValue(k, v)
		}
		if err != nil {
			return Page{}, err
		}
		p.Records = append(p.Records, rec)
		p.EncodedBytes += charge
		last = k
	}
	if err := it.Error(); err != nil {
		return Page{}, err
	}
	if more {
		p.Next = newCursor(r.c.id, last)
	}
	return p, nil
}

// HighestIncarnation returns the highest history incarnation of which the
// archive holds a record, with one reverse seek of the reader's snapshot:
// records sort by database identity, incarnation and event identity. ok is
// false when the archive holds no record. The record found is not
// validated (its key is decoded and its binding checked, no more): this is
// a bound for a restore's new incarnation, not a verification.
func (r *Reader) HighestIncarnation(ctx context.Context) (incarnation uint64, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, false, r.err
	}
	if err := context.Cause(ctx); err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	err = guarded(ctx, r.c.st, r.c.timeout, "reading the last record", false, func() error {
		it, err := r.snap.NewIter(&pebble.IterOptions{LowerBound: recordLower, UpperBound: recordUpper})
		if err != nil {
			return err
		}
		if it.Last() {
			k, kerr := event.DecodeKey(it.Key()[1:])
			if kerr != nil || k.Database != r.c.binding {
				_ = it.Close()
				return newError(ErrCorrupt, "decoding the last archive key", nil)
			}
			incarnation, ok = k.Incarnation, true
		}
		return it.Close()
	})
	if err != nil {
		err = mapError("reading the last record", err)
		if errors.Is(err, ErrCorrupt) {
			r.c.st.fail(err)
		}
		return 0, false, err
	}
	return incarnation, ok, nil
}
