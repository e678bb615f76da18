package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/store/dirlock"
	"github.com/riffdb/riffdb/internal/store/existence"
	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/internal/store/walfill"

	"github.com/riffdb/riffdb/internal/process/clock"
)

// Defaults applied to zero Options fields.
const (
	DefaultTxnTimeout = 5 * time.Second
	// DefaultScrubReadTimeout bounds one page read of the background
	// scrub. It is longer than DefaultTxnTimeout: a page read of the
	// scrub (up to 4 MiB of cold blocks, off the delivery path) that is
	// slow on a busy disk is no sign of a stuck engine, and timing out
	// fences the whole archive and halts delivery.
	DefaultScrubReadTimeout = time.Minute
	DefaultMinFreeBytes     = 64 << 20
	// DefaultMemTableSize is the memtable size of an archive whose
	// Options.MemTableSize is 0.
	DefaultMemTableSize = 2 << 20
	// BlockCacheBytes is the block cache an archive store needs (a
	// process's archives share one of this per archive,
	// internal/process/membudget). The reads of an archive that come back to the
	// same blocks are the duplicate checks of replayed and retried events
	// (a new event's key is beyond the greatest stored one and is not
	// looked up): a table's top-level index, one index partition and one
	// data block, 4 KiB each. Its scans, the background scrub, the
	// checkpoint's validation and readers, go through each block once per
	// pass and gain nothing from a cache smaller than the archive. (The
	// scrub does not depend on the cache's size to see the disk: it reads
	// every table from its file besides, scrub_tables.go.)
	BlockCacheBytes = 4 << 20
)

// Options configure Open. Zero values mean defaults, except
// QuotaEncodedBytes, which must be positive.
type Options struct {
	// Alias is the database alias, put on every metric and span as
	// riffdb.database so that the archives of several databases stay apart.
	Alias string
	// Database is the binding: a new archive is bound to it, an existing one
	// must be bound to it (ErrBindingChanged otherwise).
	Database event.DatabaseID
	// QuotaEncodedBytes bounds Σ Charge over all records. It must be > 0.
	QuotaEncodedBytes int64
	// TxnTimeout bounds every archive transaction and every storage-engine
	// call; 0 means DefaultTxnTimeout.
	TxnTimeout time.Duration
	// ScrubReadTimeout bounds one page read of the background scrub
	// (Store.NewScrub); 0 means DefaultScrubReadTimeout.
	ScrubReadTimeout time.Duration
	// MinFreeBytes is the free-space guard: a write is refused with
	// ErrCapacity when the filesystem would keep less free space than this.
	// Space taken by anything else is seen within 100 ms (checkFreeSpace).
	// 0 means DefaultMinFreeBytes; a negative value disables the guard.
	MinFreeBytes int64
	// FS is the filesystem. nil means the real filesystem with the custody
	// audit before opening and custody checks on every file Pebble opens;
	// tests pass vfs.NewMem, vfs.NewCrashableMem or an errorfs wrapper, for
	// which custody checks are skipped.
	FS vfs.FS
	// Logger receives the archive's logs; nil means zap.NewNop().
	Logger *zap.Logger
	// TracerProvider provides the archive's tracer; nil means no-op.
	TracerProvider trace.TracerProvider
	// MeterProvider provides the archive's meter; nil means no-op.
	MeterProvider metric.MeterProvider
	// Clock is the archive's clock; nil means clock.Real.
	Clock clock.Clock
	// FullValidationInterval bounds how long Open trusts the validated
	// prefix: when the whole archive was last validated (by Open or by a
	// complete scrub pass) longer ago than this, or when that is not known,
	// Open validates every record, not only those beyond the checkpoint
	// (validation.go). 0 sets no bound.
	FullValidationInterval time.Duration

	// Floor is a durable lower bound of the record count kept outside the
	// archive (the primary's record of completed deliveries; see the
	// anchors in floor.go). Open refuses an archive holding fewer records
	// with a *LostRecordsError, and refuses to create an archive at all
	// while Floor > 0: events were completed into one that is now gone.
	Floor int64
	// With CheckHistory, Incarnation and LastCommit are the primary's
	// history incarnation and last commit sequence: Open refuses an
	// archive holding an event of that incarnation beyond LastCommit (a
	// stop, reason history_behind_archive; floor.go).
	CheckHistory            bool
	Incarnation, LastCommit uint64

	// Monitor, when set, serves the store's accounting, allocated bytes and
	// engine metrics to stats and metrics without waiting on the store
	// (see Monitor). nil: the store has a Monitor of its own.
	Monitor *Monitor

	// Cache is a block cache shared with other stores of the process (the
	// caller keeps its own reference and releases it after every store
	// using it is closed). nil: the store has Pebble's default cache of
	// its own.
	Cache *pebble.Cache
	// FileCache is a table cache shared with other stores of the process,
	// which bounds the table files they keep open together (the caller
	// keeps its own reference, as with Cache). nil: the store has a table
	// cache of its own of MaxOpenFiles.
	FileCache *pebble.FileCache
	// MemTableSize is the size of each memtable; 0 means
	// DefaultMemTableSize. Each WAL file is preallocated to about 1.1× it.
	MemTableSize uint64
	// WALGroup counts the WAL files open in the stores that share it, so
	// that their logs are zero-filled only while few are open
	// (internal/store/walfill); a server gives its stores one. nil: the
	// process's.
	WALGroup *walfill.Group
	// WriteStalls records the store's write stalls (internal/store/stall); a
	// server gives each archive one it reports, kept across reopens. nil:
	// stalls are not recorded.
	WriteStalls *stall.Tracker
}

// Open opens the archive in dir (the configured, precreated directory),
// creating the store on first start.
//
// With Options.FS == nil it first runs the custody audit of dir. It takes
// the store's lock before it decides anything (ErrBusy while another holds
// it). If dir is empty it creates dir/archive.pebble (0700) and writes the
// format marker, the binding and zero accounting in one synced batch.
// Otherwise it judges the store on a read-only view, which writes nothing,
// and opens it read-write only if it passes every check below, so that a
// refused archive is left exactly as it was found (decide.go). It refuses
// a store whose Pebble format is outside [FormatMajorVersion,
// pebble.FormatNewest] or whose archive marker is absent or unknown
// (ErrIncompatibleFormat), or that is bound to another database
// (ErrBindingChanged). Finally it validates in bounded pages (decode,
// checksum, event hash, binding) the records beyond the validated-prefix
// checkpoint, and checks that the checkpoint's totals and theirs add up to
// the durable accounting (ErrCorrupt on a record that fails); without a
// checkpoint that holds, it validates every record against the accounting
// and writes one (see "What validates the archive covers" in the package
// documentation).
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if opts.QuotaEncodedBytes <= 0 {
		return nil, fmt.Errorf("%w: quota must be positive", ErrInvalidArgument)
	}
	s := &Store{
		dir:     dir,
		quota:   opts.QuotaEncodedBytes,
		minFree: cmp.Or(opts.MinFreeBytes, DefaultMinFreeBytes),
		log:     opts.Logger,
		clock:   clock.Or(opts.Clock).Now,
		readers: make(map[*Reader]struct{}),
		mon:     opts.Monitor,

		fullInterval: opts.FullValidationInterval,
	}
	if s.mon == nil {
		s.mon = new(Monitor)
	}
	s.timeout = cmp.Or(opts.TxnTimeout, DefaultTxnTimeout)
	s.scrubTimeout = cmp.Or(opts.ScrubReadTimeout, DefaultScrubReadTimeout)
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.st = &engineState{log: s.log, clock: s.clock}
	if err := s.initTelemetry(opts); err != nil {
		return nil, err
	}

	var exists bool
	var seed *allocSeed
	if opts.FS == nil {
		a, err := audit(dir)
		if err != nil {
			return nil, mapError("custody audit", err)
		}
		if exists = a.exists; exists {
			seed = &allocSeed{bytes: a.allocated, at: s.clock()}
		}
		// dirlock: LOCK is never truncated, and the lock table is the one
		// read-only opens (OpenReader, Inspect) consult in this process.
		s.fs, s.realFS = newCustodyFS(walfill.NewIn(dirlock.FS(vfs.Default), opts.WALGroup)), true
	} else {
		var err error
		s.fs = opts.FS
		if exists, err = dirHoldsStore(s.fs, dir); err != nil {
			return nil, err
		}
	}
	s.storeDir = s.fs.PathJoin(dir, StoreDirName)

	if !exists && opts.Floor > 0 {
		return nil, &LostRecordsError{Missing: opts.Floor, Anchor: anchorPrimary}
	}
	release := func() {}
	if exists && s.realFS {
		// Watch the store's entries while the engine opens it (prearm).
		release = prearmOpen(s.fs, dir)
	}
	created, err := s.open(ctx, exists, opts)
	if err != nil {
		release()
		return nil, err
	}
	if created {
		// The audit measured the files of an interrupted creation, which
		// the open removed.
		seed = nil
	}
	// With a caller's Monitor, the quota gauges are the Monitor's
	// (ObserveQuota), which outlive this store; otherwise the store's own.
	if opts.Monitor == nil {
		if err := s.registerGauges(); err != nil {
			_ = s.closeDB()
			s.unlock()
			return nil, err
		}
	}
	s.mon.attach(ctx, s, seed)
	// Every check passed: the store was opened read-write only now (an
	// operator reading the log can tell a refusal at open from damage
	// found later, by the scrub or a read, in a store already in use).
	s.log.Info("archive opened for writing", zap.Int64("records", s.acct.Records), zap.Bool("created", created))
	return s, nil
}

// dirHoldsStore is the existence check for a non-default FS (the custody
// audit does it for the real filesystem).
func dirHoldsStore(fs vfs.FS, dir string) (bool, error) {
	names, err := fs.List(dir)
	if err != nil {
		return false, newError(ErrUnavailable, "archive directory is missing or unreadable", err)
	}
	switch {
	case len(names) == 0:
		return false, nil
	case len(names) == 1 && names[0] == StoreDirName:
		return true, nil
	}
	return false, newError(ErrRefused, "archive directory holds entries other than the store", nil)
}

// open opens the store, creating it (again) when it is new, and reports
// whether it created it.
//
// It takes the store's lock first and holds it across every decision, as
// the primary does (primary/create.go): a second process can neither race
// the creation nor have its store reset under it (ErrBusy). An existing
// store is then judged on a read-only view (decide.go), which writes
// nothing, and opened read-write only when every check that could refuse it
// passed: a refused archive is left exactly as it was found.
func (s *Store) open(ctx context.Context, exists bool, opts Options) (_ bool, err error) {
	// Existence is riffdb's decision (internal/store/existence): a store directory
	// without the floor file that riffdb writes at creation is created
	// (again) only if it provably never held a committed write; any other
	// store must be opened as it is, and is refused before Pebble touches
	// it when Pebble's own markers are missing (Pebble would create a new
	// store and delete the old tables and logs as obsolete).
	create := !exists
	if exists && opts.Floor > 0 {
		// Refused before the lock, which would create a missing LOCK: a
		// store refused is left as found. (Under the lock it is asked
		// again, before anything is reset.)
		fresh, err := s.fresh()
		if err != nil {
			return false, err
		}
		if fresh {
			return false, &LostRecordsError{Missing: opts.Floor, Anchor: anchorPrimary}
		}
	}
	if create {
		if err := s.fs.MkdirAll(s.storeDir, 0o700); err != nil {
			return false, mapError("creating the store", err)
		}
	}
	if err := s.lockStore(); err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			s.unlock()
		}
	}()
	if exists {
		if create, err = s.neverCommitted(); err != nil {
			return false, err
		}
	}
	if create && opts.Floor > 0 {
		// Completed deliveries went into an archive that is gone: never
		// create a new one in its place (nor clear what is left of it).
		return false, &LostRecordsError{Missing: opts.Floor, Anchor: anchorPrimary}
	}
	var plan openPlan
	if exists && !create {
		if plan, err = s.decide(ctx, opts); err != nil {
			return false, err
		}
	}
	if create && exists {
		names, err := s.fs.List(s.storeDir)
		if err != nil {
			return false, mapError("reading the store directory", err)
		}
		if len(names) > 1 || (len(names) == 1 && names[0] != lockFileName) {
			s.log.Warn("archive store creation was interrupted; creating it again")
			if err := existence.Reset(s.fs, s.storeDir, lockFileName); err != nil {
				return false, mapError("restarting the interrupted creation", err)
			}
		}
	}
	o := pebbleOptions(s.st, s.inst, s.realFS, engineTuning{cache: opts.Cache, fileCache: opts.FileCache, memTableSize: opts.MemTableSize, stalls: opts.WriteStalls})
	o.ErrorIfNotExists, o.Lock = !create, s.lock
	if err := s.openEngine(ctx, o, "opening the store"); err != nil {
		return false, err
	}
	if err := s.settle(ctx, opts, create, plan); err != nil {
		_ = s.closeDB()
		return false, err
	}
	return create, nil
}

// checkAnchors compares the validated accounting with the lower bounds kept
// outside the archive's log (floor.go). It writes nothing; missing is true
// when the floor file is missing and is to be written: a new archive, or one
// whose floor file was lost (or that was created before floor files
// existed). The second is logged when it is written (settle): the archive
// itself passed validation and the primary's anchor, so nothing is lost,
// but an operator should know that a file of the store went missing.
func (s *Store) checkAnchors(ctx context.Context, opts Options) (missing bool, err error) {
	id, floor, ok, err := readFloor(s.fs, s.storeDir)
	if err != nil {
		return false, err
	}
	if ok {
		if id != s.binding {
			return false, newError(ErrCorrupt, "the archive's floor file names another database", nil)
		}
		if err := checkFloor(s.acct, floor.Records, anchorFloorFile); err != nil {
			return false, err
		}
	}
	if err := checkFloor(s.acct, opts.Floor, anchorPrimary); err != nil {
		return false, err
	}
	if opts.CheckHistory {
		if err := s.checkHistory(ctx, opts.Incarnation, opts.LastCommit); err != nil {
			return false, err
		}
	}
	return !ok, nil
}

// instance returns the store instance of the real filesystem
// (storeInstance), nothing on a test filesystem.
func (s *Store) instance() ([]byte, error) {
	if !s.realFS {
		return nil, nil
	}
	b, err := storeInstance(s.storeDir)
	return b, mapError("identifying the store", err)
}

// initMeta reads (or, on a store without any key, writes) the format
// marker, binding and accounting, and returns the metadata read.
func (s *Store) initMeta(ctx context.Context, database event.DatabaseID, create bool) (meta, error) {
	m, err := s.readMeta(ctx)
	if errors.Is(err, errNoMarker) {
		empty, eerr := s.isEmpty(ctx)
		if eerr != nil {
			return meta{}, eerr
		}
		if !empty {
			return meta{}, newError(ErrIncompatibleFormat, "the store has no archive format marker", nil)
		}
		if !create {
			// The store held committed writes once (it was not fresh), so
			// its metadata was written: it lost everything.
			return meta{}, newError(ErrCorrupt, "the archive's metadata is missing from an archive that was created before", nil)
		}
		b := s.db.NewBatch()
		_ = b.Set(keyFormat, encodeMarker(formatVersion), nil)
		_ = b.Set(keyBinding, encodeBinding(database), nil)
		_ = b.Set(keyAccounting, encodeAccounting(accounting{}), nil)
		created := s.clock() // an archive without records is validated whole
		_ = b.Set(keyValidated, encodeValidated(created), nil)
		if err := guarded(ctx, s.st, s.timeout, "creating the archive metadata", true, func() error {
			err := b.Commit(pebble.Sync)
			_ = b.Close()
			return err
		}); err != nil {
			return meta{}, err
		}
		s.log.Info("archive created", zap.String("database_id", database.String()))
		m = meta{version: formatVersion, binding: database, validated: created}
		s.format = formatVersion
	} else if err != nil {
		return meta{}, err
	}
	if m.binding != database {
		return meta{}, fmt.Errorf("%w: archive is bound to database %s", ErrBindingChanged, m.binding)
	}
	s.binding = m.binding
	instance, err := s.instance()
	if err != nil {
		return meta{}, err
	}
	s.id = makeArchiveID(m.binding, instance)
	s.acct = m.acct
	s.records.Store(m.acct.Records)
	s.encoded.Store(m.acct.EncodedBytes)
	return m, nil
}
