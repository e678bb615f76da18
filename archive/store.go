package archive

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/existence"
	"github.com/riffdb/riffdb/internal/walfill"
)

// Defaults applied to zero Options fields.
const (
	DefaultTxnTimeout   = 5 * time.Second
	DefaultMinFreeBytes = 64 << 20
)

// instrumentationName names the archive's tracer and meter.
const instrumentationName = "github.com/riffdb/riffdb/archive"

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
	// MinFreeBytes is the free-space guard: a write is refused with
	// ErrCapacity when the filesystem would keep less free space than this.
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
	// Clock returns the current time; nil means time.Now.
	Clock func() time.Time

	// Floor is a durable lower bound of the record count kept outside the
	// archive (the primary's record of completed deliveries; see the
	// anchors in floor.go). Open refuses an archive holding fewer records
	// with a *LostRecordsError, and refuses to create an archive at all
	// while Floor > 0: events were completed into one that is now gone.
	Floor int64
	// With CheckHistory, Incarnation and LastCommit are the primary's
	// history incarnation and last commit sequence: Open refuses with
	// ErrHistoryBehind an archive holding an event of that incarnation
	// beyond LastCommit.
	CheckHistory            bool
	Incarnation, LastCommit uint64
}

// Outcome is the result of a successful Accept.
type Outcome int

const (
	// Stored means the record and its charge were durably written.
	Stored Outcome = iota + 1
	// Duplicate means equal bytes were already archived under the key;
	// nothing was written.
	Duplicate
)

// String returns "stored" or "duplicate".
func (o Outcome) String() string {
	switch o {
	case Stored:
		return "stored"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Usage is a cheap snapshot of the archive's size, read without scanning.
type Usage struct {
	// Records and EncodedBytes are the durable accounting (Σ Charge).
	Records, EncodedBytes int64
	// QuotaEncodedBytes is the configured quota.
	QuotaEncodedBytes int64
	// AllocatedBytes is the physical space of the store's files, which is
	// not charged to the quota; -1 when it could not be measured.
	AllocatedBytes int64
}

// core is what a Store and an offline inspection share: an open Pebble
// database with its failure state and binding.
type core struct {
	db      *pebble.DB
	st      *engineState
	binding event.DatabaseID
	timeout time.Duration
	// progress, when set, is called after every page a scan examines.
	progress func(pages int, records int64)
}

// Store is an open archive. It is safe for concurrent use; writes are
// serialized by a single-writer mutex (the read phase, the quota check and
// the synced commit of one Accept happen under it).
type Store struct {
	core
	dir, storeDir string
	dbAttr        attribute.KeyValue // riffdb.database=<alias> on every metric and span
	// dbSet and resultSets are the metric attribute sets, built once
	// (building a set sorts and hashes it on every call otherwise).
	dbSet      metric.MeasurementOption
	resultSets map[string]metric.MeasurementOption // by result label
	fs         vfs.FS
	realFS     bool
	quota      int64
	minFree    int64
	log        *zap.Logger
	clock      func() time.Time

	tracer    trace.Tracer
	txnDur    metric.Float64Histogram
	accepted  metric.Int64Counter
	decisions metric.Int64Counter
	gauges    metric.Registration
	gaugeInit func() (metric.Registration, error)

	// inst is the filesystem of the open Pebble instance (fence.go);
	// abandoned is set once closeDB had to fence it off.
	inst      *instanceFS
	abandoned bool

	mu   sync.Mutex // the single writer; guards acct
	acct accounting

	records, encoded atomic.Int64 // mirrors of acct for lock-free Usage
	closed           atomic.Bool

	readersMu sync.Mutex
	readers   map[*Reader]struct{}
}

// Open opens the archive in dir (the configured, precreated directory),
// creating the store on first start.
//
// With Options.FS == nil it first runs the custody audit of dir. If dir is
// empty it creates dir/archive.pebble (0700) and writes the format marker,
// the binding and zero accounting in one synced batch. Otherwise it refuses
// a store whose Pebble format is outside [FormatMajorVersion,
// pebble.FormatNewest] or whose archive marker is absent or unknown
// (ErrIncompatibleFormat), or that is bound to another database
// (ErrBindingChanged). Finally it validates every record in bounded pages
// (decode, checksum, event hash, binding) and compares count and Σ charges
// with the durable accounting (ErrCorrupt on any difference).
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if opts.QuotaEncodedBytes <= 0 {
		return nil, fmt.Errorf("%w: quota must be positive", ErrInvalidArgument)
	}
	s := &Store{
		dir:     dir,
		quota:   opts.QuotaEncodedBytes,
		minFree: cmp.Or(opts.MinFreeBytes, DefaultMinFreeBytes),
		log:     opts.Logger,
		clock:   opts.Clock,
		readers: make(map[*Reader]struct{}),
	}
	s.timeout = cmp.Or(opts.TxnTimeout, DefaultTxnTimeout)
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.st = &engineState{log: s.log, clock: s.clock}
	if err := s.initTelemetry(opts); err != nil {
		return nil, err
	}

	var exists bool
	if opts.FS == nil {
		var err error
		if exists, err = Audit(dir); err != nil {
			return nil, mapError("custody audit", err)
		}
		s.fs, s.realFS = newCustodyFS(walfill.New(vfs.Default)), true
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
	if err := s.open(ctx, exists, opts); err != nil {
		return nil, err
	}
	if err := s.registerGauges(); err != nil {
		_ = s.closeDB()
		return nil, err
	}
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

func (s *Store) open(ctx context.Context, exists bool, opts Options) error {
	// Existence is riffdb's decision (internal/existence): a store directory
	// without the floor file that riffdb writes at creation is created
	// (again) only if it provably never held a committed write; any other
	// store must be opened as it is, and is refused before Pebble touches
	// it when Pebble's own markers are missing (Pebble would create a new
	// store and delete the old tables and logs as obsolete).
	create := !exists
	if exists {
		_, _, marked, err := readFloor(s.fs, s.storeDir)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return err
		}
		marked = marked || err != nil // a damaged floor file still marks a created store
		if !marked {
			if create, err = existence.NeverCommitted(s.fs, s.storeDir); err != nil {
				return mapError("reading the store directory", err)
			}
		}
		if create {
			names, err := s.fs.List(s.storeDir)
			if err != nil {
				return mapError("reading the store directory", err)
			}
			if len(names) > 0 {
				s.log.Warn("archive store creation was interrupted; creating it again")
				if err := existence.Reset(s.fs, s.storeDir); err != nil {
					return mapError("restarting the interrupted creation", err)
				}
			}
		} else {
			desc, err := pebble.Peek(s.storeDir, s.fs)
			if err != nil {
				return mapError("reading the storage engine format", err)
			}
			if !desc.Exists || desc.FormatMajorVersion == pebble.FormatDefault {
				return newError(ErrCorrupt, "the storage engine's markers are missing from an archive that was created before; "+
					"it is refused rather than created again (restore the missing file or the archive from a backup)", nil)
			}
			if desc.FormatMajorVersion < FormatMajorVersion || desc.FormatMajorVersion > pebble.FormatNewest {
				return fmt.Errorf("%w: storage engine format %d (supported %d..%d)",
					ErrIncompatibleFormat, desc.FormatMajorVersion, FormatMajorVersion, pebble.FormatNewest)
			}
		}
	}
	if create && opts.Floor > 0 {
		// Completed deliveries went into an archive that is gone: never
		// create a new one in its place.
		return &LostRecordsError{Missing: opts.Floor, Anchor: anchorPrimary}
	}
	if create {
		if err := s.fs.MkdirAll(s.storeDir, 0o700); err != nil {
			return mapError("creating the store", err)
		}
	}
	s.inst = newInstanceFS(s.fs)
	o := pebbleOptions(s.st, s.inst, s.realFS)
	o.ErrorIfNotExists = !create
	err := guarded(ctx, s.st, s.timeout, "opening the store", false, func() error {
		db, err := pebble.Open(s.storeDir, o)
		s.db = db
		return err
	})
	if err != nil {
		// A failed Open releases its lock, unless a fatal error ended it
		// midway (a write of its flush or manifest failed): then the lock
		// would stay held until the process exits. Fence and release.
		s.inst.abandon()
		return err
	}
	if err := s.initMeta(ctx, opts.Database, create); err != nil {
		_ = s.closeDB()
		return err
	}
	if err := s.validate(ctx); err != nil {
		_ = s.closeDB()
		return err
	}
	if err := s.checkAnchors(ctx, opts); err != nil {
		_ = s.closeDB()
		return err
	}
	return nil
}

// checkAnchors compares the validated accounting with the lower bounds kept
// outside the archive's log (floor.go), and writes the floor file when it is
// missing (a new archive, or one created before floor files existed).
func (s *Store) checkAnchors(ctx context.Context, opts Options) error {
	id, floor, ok, err := readFloor(s.fs, s.storeDir)
	if err != nil {
		return err
	}
	if ok {
		if id != s.binding {
			return newError(ErrCorrupt, "the archive's floor file names another database", nil)
		}
		if err := checkFloor(s.acct, floor.Records, anchorFloorFile); err != nil {
			return err
		}
	}
	if err := checkFloor(s.acct, opts.Floor, anchorPrimary); err != nil {
		return err
	}
	if opts.CheckHistory {
		if err := s.checkHistory(ctx, opts.Incarnation, opts.LastCommit); err != nil {
			return err
		}
	}
	if !ok {
		return writeFloor(s.fs, s.storeDir, s.binding, s.acct)
	}
	return nil
}

// initMeta reads (or, on a store without any key, writes) the format
// marker, binding and accounting.
func (s *Store) initMeta(ctx context.Context, database event.DatabaseID, create bool) error {
	m, err := s.readMeta(ctx)
	if errors.Is(err, errNoMarker) {
		empty, eerr := s.isEmpty(ctx)
		if eerr != nil {
			return eerr
		}
		if !empty {
			return newError(ErrIncompatibleFormat, "the store has no archive format marker", nil)
		}
		if !create {
			// The store held committed writes once (it was not fresh), so
			// its metadata was written: it lost everything.
			return newError(ErrCorrupt, "the archive's metadata is missing from an archive that was created before", nil)
		}
		b := s.db.NewBatch()
		_ = b.Set(keyFormat, encodeMarker(formatVersion), nil)
		_ = b.Set(keyBinding, encodeBinding(database), nil)
		_ = b.Set(keyAccounting, encodeAccounting(accounting{}), nil)
		if err := guarded(ctx, s.st, s.timeout, "creating the archive metadata", true, func() error {
			err := b.Commit(pebble.Sync)
			_ = b.Close()
			return err
		}); err != nil {
			return err
		}
		s.log.Info("archive created", zap.String("database_id", database.String()))
		m = meta{version: formatVersion, binding: database}
	} else if err != nil {
		return err
	}
	if m.binding != database {
		return fmt.Errorf("%w: archive is bound to database %s", ErrBindingChanged, m.binding)
	}
	s.binding = m.binding
	s.acct = m.acct
	s.records.Store(m.acct.Records)
	s.encoded.Store(m.acct.EncodedBytes)
	return nil
}

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

// get returns a copy of the value of key, or nil when it is absent.
func get(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out, closer.Close()
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
}

// scan reads at most maxPages pages (0: no bound) with a validating Reader.
func (c *core) scan(ctx context.Context, maxPages int) (scanTotals, error) {
	r := c.newReader()
	defer r.Close()
	var t scanTotals
	var after Cursor
	for maxPages <= 0 || t.pages < maxPages {
		p, err := r.ReadPage(ctx, after)
		t.pages++
		if err != nil {
			return t, err
		}
		t.records += int64(len(p.Records))
		t.bytes += p.EncodedBytes
		if c.progress != nil {
			c.progress(t.pages, t.records)
		}
		if p.Next == nil {
			t.complete = true
			return t, nil
		}
		after = p.Next
	}
	return t, nil
}

// validate is the startup validation.
func (s *Store) validate(ctx context.Context) error {
	if err := s.checkMetaKeys(ctx); err != nil {
		return err
	}
	t, err := s.scan(ctx, 0)
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

// usable returns the error every call must return once the store is closed
// or unusable.
func (s *Store) usable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.st.err()
}

// Unusable returns nil while the store works, or the error that made it
// unusable (wrapping ErrUnavailable or ErrCorrupt; ErrClosed once closed).
// An unusable store must be closed and opened again after repair.
func (s *Store) Unusable() error { return s.usable() }

// checkRecord verifies that record is a stored event for key under the
// binding.
func (s *Store) checkRecord(key event.Key, record []byte) error {
	if key.Database != s.binding {
		return fmt.Errorf("%w: key of database %s", ErrBindingChanged, key.Database)
	}
	st, err := event.DecodeStored(record)
	if err != nil || st.ID != key.Event {
		return fmt.Errorf("%w: event %s", ErrInvalidRecord, key.Event)
	}
	return nil
}

// Accept archives record (the exact stored-event bytes) under key in one
// archive transaction. Under the single-writer mutex it reads the key: equal
// bytes already archived → Duplicate, nothing written; different bytes →
// ErrConflict. A new record must fit the quota and the free-space guard
// (ErrCapacity); then the record and the updated accounting are committed in
// one batch with pebble.Sync, so both are durable together or not at all.
// The commit runs in its own goroutine bounded by TxnTimeout: a fatal
// storage error, a timeout, or ctx ending while the commit is in flight
// marks the store unusable (its outcome is unknown; a retry after reopening
// is a Duplicate or a Stored) and returns ErrUnavailable promptly. Accept
// blocks for at most about TxnTimeout per storage call.
func (s *Store) Accept(ctx context.Context, key event.Key, record []byte) (out Outcome, err error) {
	start := s.clock()
	ctx, span := s.tracer.Start(ctx, "riffdb.archive.txn", trace.WithAttributes(
		s.dbAttr,
		attribute.String("riffdb.event.id", key.Event.String()),
		attribute.Int64("riffdb.history.incarnation", int64(key.Incarnation)),
		attribute.Int("riffdb.event.bytes", len(record)),
	))
	defer func() {
		result := "stored"
		switch {
		case err == nil && out == Duplicate:
			result = "duplicate"
		case errors.Is(err, ErrConflict), errors.Is(err, ErrInvalidRecord):
			result = "refused"
		}
		if err == nil || result == "refused" {
			s.accepted.Add(ctx, 1, s.resultSets[result])
		}
		s.txnDur.Record(ctx, s.clock().Sub(start).Seconds(), s.dbSet)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, Classify(err).String())
			span.SetAttributes(attribute.String("error.type", Classify(err).String()))
		} else {
			span.SetAttributes(attribute.String("riffdb.archive.outcome", out.String()))
		}
		span.End()
	}()
	if err := s.usable(); err != nil {
		return 0, err
	}
	if err := s.checkRecord(key, record); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return 0, err
	}
	rk := recordKey(key)
	var (
		acct       = s.acct
		next       accounting
		outcome    Outcome
		committing atomic.Bool // read after a timeout: the call may still run
	)
	// One storage call: read the key, decide, and write.
	err = guardedTxn(ctx, s.st, s.timeout, "the archive transaction", new(atomic.Bool), func(writing *atomic.Bool) error {
		existing, err := get(s.db, rk)
		if err != nil {
			return mapError("reading the key", err)
		}
		if existing != nil {
			rec, _, err := decodeValue(key, existing)
			if err != nil {
				s.st.fail(err)
				return err
			}
			if bytes.Equal(rec, record) {
				outcome = Duplicate
				return nil
			}
			return fmt.Errorf("%w: event %s", ErrConflict, key.Event)
		}
		charge := Charge(key, record)
		if acct.EncodedBytes+charge > s.quota {
			return fmt.Errorf("%w: quota: %d of %d bytes used, record needs %d", ErrCapacity, acct.EncodedBytes, s.quota, charge)
		}
		if err := s.checkFreeSpace(charge); err != nil {
			return err
		}
		next = accounting{Records: acct.Records + 1, EncodedBytes: acct.EncodedBytes + charge}
		b := s.db.NewBatch()
		_ = b.Set(rk, encodeValue(key, record), nil)
		_ = b.Set(keyAccounting, encodeAccounting(next), nil)
		writing.Store(true)
		if err := ctx.Err(); err != nil {
			_ = b.Close()
			return fmt.Errorf("%w: the archive transaction was cancelled before writing: %w", ErrUnavailable, context.Cause(ctx))
		}
		committing.Store(true)
		err = b.Commit(pebble.Sync)
		_ = b.Close() // only after Commit returned: a Goexit leaves the batch to Pebble
		if err != nil {
			return mapError("committing the archive transaction", err)
		}
		outcome = Stored
		return nil
	})
	if err != nil {
		if committing.Load() && s.st.err() == nil {
			// Pebble failed the commit without a fatal: its outcome is not
			// reflected in acct, so stop trusting the in-memory accounting.
			s.st.fail(err)
		}
		return 0, err
	}
	if outcome == Duplicate {
		return Duplicate, nil
	}
	s.acct = next
	s.records.Store(next.Records)
	s.encoded.Store(next.EncodedBytes)
	return Stored, nil
}

// Metrics returns the storage engine's metrics, or nil when the store is
// closed, unusable, or busy with a transaction (a metrics scrape never waits
// for one). It does no I/O and is safe to call concurrently.
func (s *Store) Metrics() *pebble.Metrics {
	if !s.mu.TryLock() {
		return nil
	}
	defer s.mu.Unlock()
	if s.usable() != nil || s.db == nil {
		return nil
	}
	return s.db.Metrics()
}

// checkFreeSpace is the free-space guard: Pebble blocks forever on a full
// disk, so a write is refused while it would leave less than MinFreeBytes.
func (s *Store) checkFreeSpace(charge int64) error {
	if s.minFree < 0 {
		return nil
	}
	du, err := s.fs.GetDiskUsage(s.storeDir)
	if errors.Is(err, vfs.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return mapError("measuring free disk space", err)
	}
	if int64(du.AvailBytes) < s.minFree+charge {
		return fmt.Errorf("%w: free disk space below the %d-byte guard", ErrCapacity, s.minFree)
	}
	return nil
}

// Fit reports how many of the leading members (keys[i], records[i]) fit in
// the remaining quota together, in order. A key already archived charges 0,
// as does a repetition of a key earlier in the group: neither writes
// anything. Fit writes nothing.
func (s *Store) Fit(ctx context.Context, keys []event.Key, records [][]byte) (n int, err error) {
	ctx, span := s.tracer.Start(ctx, "riffdb.archive.quota.check", trace.WithAttributes(s.dbAttr, attribute.Int("riffdb.group.size", len(keys))))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, Classify(err).String())
			span.SetAttributes(attribute.String("error.type", Classify(err).String()))
		} else {
			result := "fits"
			if n < len(keys) {
				result = "does_not_fit"
			}
			s.decisions.Add(ctx, 1, s.resultSets[result])
			span.SetAttributes(attribute.Int("riffdb.group.fits", n))
		}
		span.End()
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

// Records returns the durable record count (a lock-free read, no I/O).
func (s *Store) Records() int64 { return s.records.Load() }

// Usage returns the durable accounting, the quota and the allocated bytes,
// without scanning records.
func (s *Store) Usage() Usage {
	return Usage{
		Records:           s.records.Load(),
		EncodedBytes:      s.encoded.Load(),
		QuotaEncodedBytes: s.quota,
		AllocatedBytes:    s.allocated(),
	}
}

func (s *Store) allocated() int64 {
	n, err := storeAllocated(s.fs, s.realFS, s.storeDir)
	if err != nil {
		s.log.Warn("archive allocated bytes unavailable", zap.Error(err))
		return -1
	}
	return n
}

// storeAllocated measures physical usage: allocated blocks on the real
// filesystem, Σ file sizes on a test filesystem.
func storeAllocated(fs vfs.FS, real bool, storeDir string) (int64, error) {
	if real {
		return allocatedBytes(storeDir)
	}
	names, err := fs.List(storeDir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		fi, err := fs.Stat(fs.PathJoin(storeDir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

// Audit re-runs the custody audit of the archive directory on the open
// store. It is a no-op on a non-default FS.
func (s *Store) Audit() error {
	if err := s.usable(); err != nil {
		return err
	}
	if !s.realFS {
		return nil
	}
	if _, err := Audit(s.dir); err != nil {
		return mapError("custody audit", err)
	}
	return nil
}

// Close closes open readers, unregisters the gauges and closes the store,
// releasing its lock even after a fatal storage error, so that a later Open
// of the same directory (after repair) works in the same process. Close
// waits for an Accept in progress. A second Close returns nil.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readersMu.Lock()
	readers := make([]*Reader, 0, len(s.readers))
	for r := range s.readers {
		readers = append(readers, r)
	}
	s.readersMu.Unlock()
	for _, r := range readers {
		_ = r.Close()
	}
	if s.gauges != nil {
		_ = s.gauges.Unregister()
	}
	err := s.closeDB()
	if err == nil && s.st.err() == nil && s.db != nil && !s.abandoned {
		// A clean close raises the floor to the accounting every accepted
		// record is durable under (floor.go). After a failure the floor
		// stays where it was: still a true lower bound.
		if ferr := writeFloor(s.fs, s.storeDir, s.binding, s.acct); ferr != nil {
			s.log.Warn("archive floor file not updated at close", zap.Error(ferr))
		}
	}
	return err
}

// closeDB closes Pebble in a guarded goroutine, ignoring a recorded failure
// (Close must still run then).
func (s *Store) closeDB() error {
	if s.db == nil {
		return nil
	}
	db := s.db
	if ferr := s.st.err(); ferr != nil && s.inst != nil {
		// A fatal engine error (or a timed-out call) made the store
		// unusable; its Close would likely wait forever behind the
		// goroutine that error ended (fence.go). Fence the instance first,
		// so nothing it still does can reach the disk, release its lock,
		// and let Close finish (or not) on its own.
		s.log.Warn("archive storage engine instance abandoned after a fatal error; it is fenced off", zap.Error(ferr))
		s.inst.abandon()
		s.abandoned = true
		go func() {
			defer func() { _ = recover() }()
			_ = db.Close()
		}()
		return ferr
	}
	st := &engineState{log: s.log, clock: s.clock}
	err := guarded(context.Background(), st, s.timeout, "closing the store", false, func() error {
		return db.Close()
	})
	if errors.Is(err, context.DeadlineExceeded) || st.err() != nil {
		// Close is stuck behind a goroutine that a fatal error ended (see
		// instanceFS): fence the instance and release its lock.
		s.log.Error("archive storage engine did not close after a fatal error; its instance is fenced off and abandoned")
		s.inst.abandon()
		s.abandoned = true
	}
	return err
}

func (s *Store) initTelemetry(opts Options) error {
	tp := opts.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	s.tracer = tp.Tracer(instrumentationName)
	s.dbAttr = attribute.String("riffdb.database", opts.Alias)
	m := mp.Meter(instrumentationName)
	var err error
	if s.txnDur, err = m.Float64Histogram("riffdb.archive.txn.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of archive transactions.")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.accepted, err = m.Int64Counter("riffdb.archive.accepted.events",
		metric.WithDescription("Events handled by archive acceptance, by result (stored, duplicate, refused).")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	if s.decisions, err = m.Int64Counter("riffdb.archive.quota.decisions",
		metric.WithDescription("Group quota checks, by result (fits, does_not_fit).")); err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	s.dbSet = metric.WithAttributeSet(attribute.NewSet(s.dbAttr))
	s.resultSets = make(map[string]metric.MeasurementOption)
	for _, result := range []string{"stored", "duplicate", "refused", "fits", "does_not_fit"} {
		s.resultSets[result] = metric.WithAttributeSet(attribute.NewSet(s.dbAttr, attribute.String("result", result)))
	}
	// Known label sets start at 0 so that increase() sees the first event.
	for _, result := range []string{"stored", "duplicate", "refused"} {
		s.accepted.Add(context.Background(), 0, s.resultSets[result])
	}
	for _, result := range []string{"fits", "does_not_fit"} {
		s.decisions.Add(context.Background(), 0, s.resultSets[result])
	}
	used, err := m.Int64ObservableGauge("riffdb.archive.quota.used", metric.WithUnit("By"),
		metric.WithDescription("Encoded bytes charged to the archive quota."))
	if err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	limit, err := m.Int64ObservableGauge("riffdb.archive.quota.limit", metric.WithUnit("By"),
		metric.WithDescription("Archive quota in encoded bytes."))
	if err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	s.gaugeInit = func() (metric.Registration, error) {
		return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(used, s.encoded.Load(), metric.WithAttributes(s.dbAttr))
			o.ObserveInt64(limit, s.quota, metric.WithAttributes(s.dbAttr))
			return nil
		}, used, limit)
	}
	return nil
}

func (s *Store) registerGauges() error {
	reg, err := s.gaugeInit()
	if err != nil {
		return fmt.Errorf("archive: telemetry: %w", err)
	}
	s.gauges = reg
	return nil
}

var _ io.Closer = (*Store)(nil)
