package delivery

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// Destination is the worker's destination: one database's archive (an
// *archive.Store) as an outbox.Destination. It opens the archive lazily
// (custody audit and startup validation run inside archive.Open, off the
// server's start-up path), hands the worker every archive error marked with
// its delivery class (mark), and closes an archive that became unavailable
// so that the next probe reopens it once the fault is repaired — without a
// restart and without touching the primary.
type Destination struct {
	dir  string
	opts archive.Options
	// anchor is the primary whose delivery mark and history bound every
	// open of the archive (archive/floor.go); nil in tests without one.
	anchor anchorSource
	// recordsSeen is the highest record count an open store reported
	// durable (see records).
	recordsSeen atomic.Int64

	mu        sync.Mutex
	store     *archive.Store
	storeInfo os.FileInfo // identity of the store directory when opened
	opened    bool        // the archive has been opened and validated at least once
	// unconfirmed is the identity of the store directory that took the
	// acceptances since the last Confirm (nil: none), and mixed is set if
	// some of them went into another one (a store reopened on a replaced
	// directory).
	unconfirmed os.FileInfo
	mixed       bool
	// unconfirmedRecords is the record count the store reported after the
	// last of those acceptances: it raises recordsSeen only once Confirm
	// found them at the archive's path, since recordsSeen becomes the
	// delivery mark's archive floor at the next completion, and a count
	// from a directory moved away would make the archive at the path look
	// as if it lost records.
	unconfirmedRecords int64
	// undurable is why acceptances applied by a store that was closed
	// since (drop) are not known durable: the next Confirm returns it.
	undurable error

	// scrubRate is the background scrub's pages per second (0: no scrub).
	scrubRate int
	// bgStop ends the background goroutine of the open store (see
	// background) and waits for it; nil while none runs. Under mu.
	bgStop func()
	// failure is the classified error the background goroutine found
	// (corrupt content): every later call returns it, and failed is
	// closed (outbox.Watched) so that an idle worker stops on it.
	failure  atomic.Pointer[error]
	failed   chan struct{}
	failOnce sync.Once
	// onScrubStep, when set (tests), is called after each scrub step.
	onScrubStep func(archive.ScrubProgress)
}

var (
	_ outbox.Destination = (*Destination)(nil)
	_ outbox.Watched     = (*Destination)(nil)
)

// Connect returns the worker's source and destination for the primary db
// and its archive in dir, opened with opts: every open of the archive checks
// the primary's anchors (its delivery mark and its history), and every
// completion records the archive's durable record count in the primary's
// delivery mark. The background scrub reads scrubPagesPerSecond pages a
// second (0: no scrub). Nothing is opened until the worker's first call.
func Connect(db *primary.DB, dir string, opts archive.Options, scrubPagesPerSecond int) (outbox.Source, *Destination) {
	d := newDestination(dir, opts)
	d.setScrubRate(scrubPagesPerSecond)
	return d.anchoredTo(db), d
}

// ScrubRate returns the background scrub's rate in pages per second (0: no
// scrub).
func (d *Destination) ScrubRate() int { return d.scrubRate }

// newDestination returns the destination of the archive in dir. Its
// background scrub runs at config.DefaultScrubPagesPerSecond until
// setScrubRate says otherwise.
func newDestination(dir string, opts archive.Options) *Destination {
	return &Destination{dir: dir, opts: opts, failed: make(chan struct{}),
		scrubRate: config.DefaultScrubPagesPerSecond}
}

// setScrubRate sets the background scrub's rate in pages per second
// (config.Outbox.ScrubPagesPerSecond; 0 disables it). Call it before the
// first open.
func (d *Destination) setScrubRate(pagesPerSecond int) { d.scrubRate = max(pagesPerSecond, 0) }

// Failed implements outbox.Watched.
func (d *Destination) Failed() <-chan struct{} { return d.failed }

// failedErr returns the failure the background goroutine found, or nil.
func (d *Destination) failedErr() error {
	if p := d.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records a stop-class failure found between the worker's calls.
func (d *Destination) fail(err error) {
	d.failOnce.Do(func() {
		cerr := d.mark(err, false)
		d.failure.Store(&cerr)
		close(d.failed)
	})
}

// get returns the open store, opening it if needed. Callers hold d.mu.
func (d *Destination) get(ctx context.Context) (*archive.Store, error) {
	if err := d.failedErr(); err != nil {
		// The store is unusable: close it (its Close reports that failure
		// again) and answer every call with the failure until a restart.
		d.drop()
		return nil, err
	}
	if d.store != nil {
		return d.store, nil
	}
	s, err := archive.Open(ctx, d.dir, d.openOptions())
	if err != nil {
		return nil, d.mark(err, true)
	}
	if d.opts.FS == nil {
		fi, err := os.Lstat(filepath.Join(d.dir, archive.StoreDirName))
		if err != nil {
			_ = s.Close()
			return nil, d.mark(err, true)
		}
		d.storeInfo = fi
	}
	d.store, d.opened = s, true
	d.seen(s)
	d.startBackground(s)
	return s, nil
}

// The failures of Confirm: a store directory that is no longer the one that
// took the acceptances.
var (
	errDirectoryGone = deliverytype.New("delivery: the archive store directory disappeared",
		deliverytype.Unavailable, deliverytype.ReasonNone)
	errDirectoryReplaced = deliverytype.New("delivery: the archive store directory was replaced",
		deliverytype.Refused, deliverytype.ReasonNone)
)

// stillThere reports whether the store directory is still the one whose
// identity is info. A store whose directory was removed or replaced keeps
// accepting writes into unlinked files, so an acceptance is trusted only
// when the directory is unchanged after it became durable (Confirm). The
// open store's custody watches answer with one poll while nothing on the
// path changed (archive.Store.DirectoryHeld); otherwise an lstat of the path
// decides.
func (d *Destination) stillThere(info os.FileInfo) error {
	if d.store != nil && d.store.DirectoryHeld(info) {
		return nil
	}
	fi, err := os.Lstat(filepath.Join(d.dir, archive.StoreDirName))
	if err != nil {
		return errDirectoryGone
	}
	if !os.SameFile(fi, info) {
		return errDirectoryReplaced
	}
	return nil
}

// Confirm implements outbox.Destination: it waits until the transactions
// applied since the last Confirm are durable (archive.Store.Durable; a
// store closed since, drop, awaited them as it closed), and they are then
// trusted only if the store directory that took them is still the one at
// the archive's path now. The worker calls it once per completion group
// (up to outbox.MaxGroup acceptances) instead of after each acceptance: its
// lstat walks the whole path, and was the largest single item of the
// worker's CPU per event with four databases (docs/benchmarks.md).
func (d *Destination) Confirm(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	info, mixed, n := d.unconfirmed, d.mixed, d.unconfirmedRecords
	d.unconfirmed, d.mixed, d.unconfirmedRecords = nil, false, 0
	if err := d.undurable; err != nil {
		// The store that applied them was closed before they were
		// known durable.
		d.undurable = nil
		return err
	}
	if d.store != nil {
		if err := d.store.Durable(ctx); err != nil {
			return d.after(err)
		}
	}
	if d.opts.FS != nil {
		d.raiseSeen(n)
		return nil
	}
	if info == nil {
		return nil
	}
	err := d.stillThere(info)
	if err == nil && mixed {
		err = errDirectoryReplaced
	}
	if err != nil {
		d.drop()
		return err
	}
	d.raiseSeen(n)
	return nil
}

// drop closes the store after an unavailability, so that it is reopened
// (custody audit and validation included) on the next call.
func (d *Destination) drop() {
	d.stopBackground()
	if d.store != nil {
		// Acceptances applied and not yet confirmed: unless they are
		// durable now, the next Confirm must fail, so that their events
		// are delivered again.
		if err := d.store.Durable(context.Background()); err != nil && d.undurable == nil {
			d.undurable = d.mark(err, false)
		}
		_ = d.store.Close()
		d.store = nil
	}
}

func (d *Destination) after(err error) error {
	if err == nil {
		return nil
	}
	cerr := d.mark(err, false)
	// A store a fatal engine error made unusable (a WAL write or sync that
	// failed, with ENOSPC as much as EIO) must be reopened once the fault
	// is repaired, whatever the class: a full disk freed in place resumes
	// delivery without a restart. A full quota leaves the store usable.
	if c := deliverytype.ClassOf(cerr); c == deliverytype.Unavailable || c == deliverytype.Refused ||
		(d.store != nil && d.store.Unusable() != nil) {
		d.drop()
	}
	return cerr
}

// Probe implements outbox.Destination.
func (d *Destination) Probe(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.get(ctx)
	if err != nil {
		return err
	}
	return d.after(s.Audit())
}

// Fit implements outbox.Destination. A check that fails before it reaches
// the store (the archive cannot be opened, or its custody audit refuses it)
// still has its riffdb.archive.quota.check span, with the error; so has an
// acceptance that fails that way its riffdb.archive.txn span (Accept).
func (d *Destination) Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.get(ctx)
	if err != nil {
		archive.RecordFailedQuotaCheck(ctx, d.opts.TracerProvider, d.opts.Alias, len(keys), err)
		return 0, err
	}
	// Audit custody once per claim run (tens of microseconds): a chmod, a
	// hard link or an extra entry made while the store is open is caught
	// before the next claim, not only when the worker is already unhealthy.
	if err := s.Audit(); err != nil {
		err = d.after(err)
		archive.RecordFailedQuotaCheck(ctx, d.opts.TracerProvider, d.opts.Alias, len(keys), err)
		return 0, err
	}
	n, err := s.Fit(ctx, keys, records)
	return n, d.after(err)
}

// Accept implements outbox.Destination.
func (d *Destination) Accept(ctx context.Context, key event.Key, record []byte) (deliverytype.Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.get(ctx)
	if err != nil {
		archive.RecordFailedTxn(ctx, d.opts.TracerProvider, d.opts.Alias, key, record, err)
		return 0, err
	}
	// Applied, not awaited: Confirm waits for it to be durable, with the
	// rest of the group (archive.Store.Apply), before the worker completes
	// anything.
	o, err := s.Apply(ctx, key, record)
	if err != nil {
		return 0, d.after(err)
	}
	d.unconfirmedRecords = max(d.unconfirmedRecords, s.Records())
	if d.opts.FS == nil { // a test's filesystem has no directory identity to confirm
		if d.unconfirmed == nil {
			d.unconfirmed = d.storeInfo
		} else if !os.SameFile(d.unconfirmed, d.storeInfo) {
			d.mixed = true
		}
	}
	return o, nil
}

// Hold takes the destination's lock, as a call of the worker in flight (an
// archive transaction) holds it, until release is called. It is for tests
// of what must never wait on the archive: stats and scrapes.
func (d *Destination) Hold() (release func()) {
	d.mu.Lock()
	return d.mu.Unlock
}

// Close closes the archive if it is open.
func (d *Destination) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopBackground()
	if d.store == nil {
		return nil
	}
	err := d.store.Close()
	d.store = nil
	if d.failedErr() != nil {
		return nil // the failure that made the store unusable, already reported
	}
	return err
}

// mark returns err marked for the worker: with the class archive.ClassOf
// gives it, and, when the archive could not be opened and validated for the
// first time for a reason that is neither a stop, a refusal nor a full
// disk, as a failed startup validation (health degraded, retried).
func (d *Destination) mark(err error, opening bool) error {
	err = archive.Marked(err)
	if opening && !d.opened && deliverytype.ClassOf(err) == deliverytype.Unavailable {
		return deliverytype.Mark(err, deliverytype.Unavailable, deliverytype.ReasonStartupValidationFailed)
	}
	return err
}
