package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// archiveDestination adapts an *archive.Store to outbox.Destination. It opens
// the archive lazily (custody audit and startup validation run inside
// archive.Open, off the server's start-up path), classifies every archive
// error into the worker's classes, and closes an archive that became
// unavailable so that the next probe reopens it once the fault is repaired —
// without a restart and without touching the primary.
type archiveDestination struct {
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
	_ outbox.Destination = (*archiveDestination)(nil)
	_ outbox.Watched     = (*archiveDestination)(nil)
	_ outbox.Confirmer   = (*archiveDestination)(nil)
)

// newArchiveDestination returns the destination of the archive in dir. Its
// background scrub runs at config.DefaultScrubPagesPerSecond until
// setScrubRate says otherwise.
func newArchiveDestination(dir string, opts archive.Options) *archiveDestination {
	return &archiveDestination{dir: dir, opts: opts, failed: make(chan struct{}),
		scrubRate: config.DefaultScrubPagesPerSecond}
}

// setScrubRate sets the background scrub's rate in pages per second
// (config.Outbox.ScrubPagesPerSecond; 0 disables it). Call it before the
// first open.
func (d *archiveDestination) setScrubRate(pagesPerSecond int) { d.scrubRate = max(pagesPerSecond, 0) }

// Failed implements outbox.Watched.
func (d *archiveDestination) Failed() <-chan struct{} { return d.failed }

// failedErr returns the failure the background goroutine found, or nil.
func (d *archiveDestination) failedErr() error {
	if p := d.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records a stop-class failure found between the worker's calls.
func (d *archiveDestination) fail(err error) {
	d.failOnce.Do(func() {
		cerr := d.classify(err, false)
		d.failure.Store(&cerr)
		close(d.failed)
	})
}

// checkpointPoll is how often the background goroutine asks the open store
// whether a checkpoint is due when no scrub paces it.
const checkpointPoll = time.Second

// checkpointRetry is how long the background goroutine waits after a
// Checkpoint failed for a reason that does not stop delivery.
const checkpointRetry = time.Minute

// startBackground starts the goroutine that advances the store's
// checkpoint while it delivers and, with a scrub rate, scrubs it: one page
// per 1/rate seconds, a pass after another, each over its own snapshot. It
// never takes d.mu, so it never holds up a delivery; pages are read
// concurrently with Accept, which the archive allows. A stop-class error
// (corrupt content) stops delivery exactly as Open's validation would: the
// store is unusable, every later call returns the failure, and the worker
// is woken to report it. Callers hold d.mu.
func (d *archiveDestination) startBackground(s *archive.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go d.background(ctx, s, done)
	d.bgStop = func() {
		cancel()
		<-done
	}
}

// stopBackground ends the background goroutine. Callers hold d.mu.
func (d *archiveDestination) stopBackground() {
	if d.bgStop != nil {
		d.bgStop()
		d.bgStop = nil
	}
}

func (d *archiveDestination) background(ctx context.Context, s *archive.Store, done chan struct{}) {
	defer close(done)
	interval := checkpointPoll
	if d.scrubRate > 0 {
		interval = time.Second / time.Duration(d.scrubRate)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var sc *archive.Scrub
	defer func() {
		if sc != nil {
			_ = sc.Close()
		}
	}()
	stopped := func(err error) bool {
		if ctx.Err() != nil || archive.Classify(err) != archive.ClassStop {
			return false
		}
		d.fail(err)
		return true
	}
	var retryCheckpoint time.Time // after a failed Checkpoint, not before
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.CheckpointDue() && !time.Now().Before(retryCheckpoint) {
			if err := s.Checkpoint(ctx); err != nil {
				if stopped(err) {
					return
				}
				// An I/O error, say: the worker's own calls meet it too.
				// Validating up to CheckpointRecords again at every
				// tick would only burn CPU; try again in a minute.
				retryCheckpoint = time.Now().Add(checkpointRetry)
				if d.opts.Logger != nil && ctx.Err() == nil {
					d.opts.Logger.Warn("archive checkpoint not advanced; retrying in a minute", zap.Error(err))
				}
			}
		}
		if d.scrubRate == 0 {
			continue
		}
		if sc == nil {
			var err error
			if sc, err = s.NewScrub(); err != nil {
				sc = nil
				if stopped(err) {
					return
				}
				continue
			}
		}
		p, err := sc.Step(ctx)
		if err != nil {
			// Anything but corrupt content (the store closing, an I/O
			// error the worker's own calls will meet) ends the pass; the
			// next tick starts another.
			_ = sc.Close()
			sc = nil
			if stopped(err) {
				return
			}
			continue
		}
		if d.onScrubStep != nil {
			d.onScrubStep(p)
		}
		if p.Complete {
			_ = sc.Close()
			sc = nil
		}
	}
}

// anchoredTo makes every open of the archive check the primary's anchors
// (see openOptions) and returns the worker's source, whose completions
// record the archive's durable record count. Call it before the first open.
func (d *archiveDestination) anchoredTo(db *primary.DB) anchoredSource {
	d.anchor = db
	return anchoredSource{DB: db, dest: d}
}

// anchorSource is what the archive's anchors need from the primary.
// *primary.DB implements it.
type anchorSource interface {
	Incarnation() uint64
	Delivered() primary.DeliveryMark
	OpenedLastSequence() uint64
	LastCommitSequence() uint64
}

// openOptions returns the archive options of the next open, with the
// primary's anchors: its durable archive floor, and its history bound. The
// first open of this process compares the archive with the history found
// when the primary opened (before any new command could reuse a lost
// sequence); a reopen after an outage with the history as it is now, which
// bounds every event delivered since.
func (d *archiveDestination) openOptions() archive.Options {
	o := d.opts
	if d.anchor == nil {
		return o
	}
	o.Floor = int64(d.anchor.Delivered().ArchiveFloor)
	o.Incarnation, o.CheckHistory = d.anchor.Incarnation(), true
	o.LastCommit = d.anchor.OpenedLastSequence()
	if d.opened {
		o.LastCommit = d.anchor.LastCommitSequence()
	}
	return o
}

// records returns a durable lower bound of the archive's record count: the
// open store's count, or the last one seen (records are never deleted, so
// any count once durable stays a lower bound). It never waits.
func (d *archiveDestination) records() uint64 { return uint64(d.recordsSeen.Load()) }

// seen raises recordsSeen to the store's durable record count. Callers hold
// d.mu.
func (d *archiveDestination) seen(s *archive.Store) {
	d.raiseSeen(s.Records()) // not Usage: that also measures the store's files
}

// raiseSeen raises recordsSeen to n.
func (d *archiveDestination) raiseSeen(n int64) {
	for {
		cur := d.recordsSeen.Load()
		if n <= cur || d.recordsSeen.CompareAndSwap(cur, n) {
			return
		}
	}
}

// anchoredSource is the worker's source: the primary, whose completions
// also record the archive's durable record count in the delivery mark.
type anchoredSource struct {
	*primary.DB
	dest *archiveDestination
}

// CompleteDeferred implements outbox.Source. The count is read after every
// member was accepted and confirmed (a completion follows its group's
// Confirm, which raised the count to cover them).
func (s anchoredSource) CompleteDeferred(ctx context.Context, members []primary.Intent) error {
	return s.DB.CompleteArchived(ctx, members, s.dest.records())
}

// get returns the open store, opening it if needed. Callers hold d.mu.
func (d *archiveDestination) get(ctx context.Context) (*archive.Store, error) {
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
		return nil, d.classify(err, true)
	}
	if d.opts.FS == nil {
		fi, err := os.Lstat(filepath.Join(d.dir, archive.StoreDirName))
		if err != nil {
			_ = s.Close()
			return nil, d.classify(err, true)
		}
		d.storeInfo = fi
	}
	d.store, d.opened = s, true
	d.seen(s)
	d.startBackground(s)
	return s, nil
}

// stillThere reports whether the store directory is still the one whose
// identity is info. A store whose directory was removed or replaced keeps
// accepting writes into unlinked files, so an acceptance is trusted only
// when the directory is unchanged after it became durable (Confirm).
func (d *archiveDestination) stillThere(info os.FileInfo) error {
	fi, err := os.Lstat(filepath.Join(d.dir, archive.StoreDirName))
	if err != nil {
		return fmt.Errorf("%w: the archive store directory disappeared", outbox.ErrUnavailable)
	}
	if !os.SameFile(fi, info) {
		return fmt.Errorf("%w: the archive store directory was replaced", outbox.ErrRefused)
	}
	return nil
}

// Confirm implements outbox.Confirmer: the acceptances since the last
// Confirm are trusted only if the store directory that took them is still
// the one at the archive's path now, after all of them became durable. The
// worker calls it once per completion group (up to outbox.MaxGroup
// acceptances) instead of after each acceptance: its lstat walks the whole
// path, and was the largest single item of the worker's CPU per event with
// four databases (docs/benchmarks.md).
func (d *archiveDestination) Confirm(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	info, mixed, n := d.unconfirmed, d.mixed, d.unconfirmedRecords
	d.unconfirmed, d.mixed, d.unconfirmedRecords = nil, false, 0
	if info == nil {
		return nil
	}
	err := d.stillThere(info)
	if err == nil && mixed {
		err = fmt.Errorf("%w: the archive store directory was replaced", outbox.ErrRefused)
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
func (d *archiveDestination) drop() {
	d.stopBackground()
	if d.store != nil {
		_ = d.store.Close()
		d.store = nil
	}
}

func (d *archiveDestination) after(err error) error {
	if err == nil {
		return nil
	}
	cerr := d.classify(err, false)
	// A store a fatal engine error made unusable (a WAL write or sync that
	// failed, with ENOSPC as much as EIO) must be reopened once the fault
	// is repaired, whatever the class: a full disk freed in place resumes
	// delivery without a restart. A full quota leaves the store usable.
	if errors.Is(cerr, outbox.ErrUnavailable) || errors.Is(cerr, outbox.ErrRefused) ||
		(d.store != nil && d.store.Unusable() != nil) {
		d.drop()
	}
	return cerr
}

// Probe implements outbox.Destination.
func (d *archiveDestination) Probe(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.get(ctx)
	if err != nil {
		return err
	}
	return d.after(s.Audit())
}

// Fit implements outbox.Destination.
func (d *archiveDestination) Fit(ctx context.Context, keys []event.Key, records [][]byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.get(ctx)
	if err != nil {
		return 0, err
	}
	// Audit custody once per claim run (tens of microseconds): a chmod, a
	// hard link or an extra entry made while the store is open is caught
	// before the next claim, not only when the worker is already unhealthy.
	if err := s.Audit(); err != nil {
		return 0, d.after(err)
	}
	n, err := s.Fit(ctx, keys, records)
	return n, d.after(err)
}

// Accept implements outbox.Destination.
func (d *archiveDestination) Accept(ctx context.Context, key event.Key, record []byte) (outbox.Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := d.get(ctx)
	if err != nil {
		return 0, err
	}
	o, err := s.Accept(ctx, key, record)
	if err != nil {
		return 0, d.after(err)
	}
	if d.opts.FS != nil {
		// A test's filesystem: no directory identity to confirm.
		d.seen(s)
	} else { // to be confirmed (Confirm)
		if d.unconfirmed == nil {
			d.unconfirmed = d.storeInfo
		} else if !os.SameFile(d.unconfirmed, d.storeInfo) {
			d.mixed = true
		}
		d.unconfirmedRecords = max(d.unconfirmedRecords, s.Records())
	}
	if o == archive.Duplicate {
		return outbox.Duplicate, nil
	}
	return outbox.Stored, nil
}

// Close closes the archive if it is open.
func (d *archiveDestination) Close() error {
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

func (d *archiveDestination) classify(err error, opening bool) error {
	switch archive.Classify(err) {
	case archive.ClassConflict:
		return fmt.Errorf("%w: %w", outbox.ErrConflict, err)
	case archive.ClassCapacity:
		return fmt.Errorf("%w: %w", outbox.ErrCapacity, err)
	case archive.ClassRefused:
		return fmt.Errorf("%w: %w", outbox.ErrRefused, err)
	case archive.ClassStop:
		switch {
		case errors.Is(err, archive.ErrLostRecords):
			return fmt.Errorf("%w: %w", outbox.ErrArchiveLost, err)
		case errors.Is(err, archive.ErrHistoryBehind):
			return fmt.Errorf("%w: %w", outbox.ErrHistoryBehind, err)
		case errors.Is(err, archive.ErrBindingChanged):
			return fmt.Errorf("%w: %w", outbox.ErrBindingChanged, err)
		case errors.Is(err, archive.ErrIncompatibleFormat):
			return fmt.Errorf("%w: %w", outbox.ErrIncompatibleFormat, err)
		default:
			return fmt.Errorf("%w: %w", outbox.ErrCorrupt, err)
		}
	}
	if opening && !d.opened {
		return fmt.Errorf("%w: %w", outbox.ErrStartupValidation, err)
	}
	return fmt.Errorf("%w: %w", outbox.ErrUnavailable, err)
}
