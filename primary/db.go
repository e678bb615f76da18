package primary

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/hygiene/pathless"
	"github.com/riffdb/riffdb/internal/store/dirlock"
	"github.com/riffdb/riffdb/internal/store/goexit"
	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/primary/contract"

	"github.com/riffdb/riffdb/internal/process/clock"
)

// FormatMajorVersion is the Pebble format the primary store is created at and
// ratcheted to. It is pinned (never pebble.FormatNewest) so that a library
// upgrade cannot silently rewrite the store, and it is at least
// pebble.FormatWALSyncChunks so that a damaged WAL is detected instead of
// silently dropping acknowledged commits.
const FormatMajorVersion = pebble.FormatValueSeparation

// Options configures Open. The zero value of every field except Path and
// Contract selects a default.
type Options struct {
	Alias            string               // database alias, for telemetry labels and logs
	Path             string               // database directory; created 0700 if missing
	Contract         *contract.Contract   // compiled commands
	HistoryRetention uint64               // newest commits to keep; 0 keeps all
	FS               vfs.FS               // nil → vfs.Default; tests: vfs.NewMem / vfs.NewCrashableMem
	Logger           *zap.Logger          // nil → zap.NewNop()
	TracerProvider   trace.TracerProvider // nil → noop
	MeterProvider    metric.MeterProvider // nil → noop
	Clock            clock.Clock          // nil → clock.Real

	// Cache is a Pebble block cache shared with the process's other stores
	// (internal/process/membudget sizes it from the server's memory budget); nil
	// gives the store Pebble's default cache of its own. Open takes its own
	// reference, so the caller may Unref its reference once every store
	// sharing the cache is open.
	Cache *pebble.Cache
	// FileCache is a Pebble table cache shared with the process's other
	// stores, which bounds the table files they keep open together; nil
	// gives the store one of its own of Pebble's default MaxOpenFiles
	// (1,000). Open takes its own reference, as with Cache.
	FileCache *pebble.FileCache
	// MemTableSize is the size of each of the store's memtables; 0 means
	// DefaultMemTableSize. The store holds up to three (two to fill and
	// flush, one kept for reuse), and each WAL file holds about one
	// memtable of log (see internal/store/walfill).
	MemTableSize uint64
	// WALGroup counts the WAL files open in the stores that share it, so
	// that their logs are zero-filled only while few are open
	// (internal/store/walfill); a server gives its stores one. nil: the
	// process's.
	WALGroup *walfill.Group
	// WriteStalls records the store's write stalls (internal/store/stall); a
	// server gives each store one it also reports. nil: the store keeps
	// one of its own (DB.WriteStalls).
	WriteStalls *stall.Tracker
	// StorageFullWait bounds how long Open waits for a storage engine
	// that cannot write on a full filesystem; 0 means
	// DefaultStorageFullWait.
	StorageFullWait time.Duration

	// IndexGate, when non-nil, makes Open return as soon as the store is
	// open, with the undelivered index in state IndexUnbuilt; the count
	// verification and the recovery of interrupted deliveries run once the
	// channel is closed.
	// Until then every writing operation waits. It exists for tests of
	// callers that must observe the unbuilt state.
	IndexGate <-chan struct{}

	// pebbleOptions, when set (by this package's tests only), edits the
	// store's Pebble options before Open applies Pebble's filesystem
	// defaults.
	pebbleOptions func(*pebble.Options)
}

// DB is an open primary database. All methods are safe for concurrent use.
type DB struct {
	opts  Options
	log   *zap.Logger
	alias string
	clock func() time.Time
	store *pebble.DB
	lock  *pebble.Lock // the directory lock, taken before the store is opened
	// guards runs guard's calls on kept goroutines (goexit.Runner): a
	// write on a new goroutine grows its stack several times over, which
	// was about 4 % of a drain's CPU (claims and completions,
	// docs/benchmarks.md). Nil (a throwaway DB of decide): one goroutine
	// per call.
	guards *goexit.Runner
	// stalls records the store's write stalls (Options.WriteStalls).
	stalls *stall.Tracker
	// fresh is set when Open found a directory that provably never held a
	// committed write (see internal/store/existence): only then may it create
	// the identity.
	fresh bool
	id    event.DatabaseID
	// idString is id.String(), for span attributes.
	idString    string
	incarnation uint64
	tel         telemetry

	// life guards closed and the in-flight operation count.
	life    sync.RWMutex
	closed  bool
	ops     sync.WaitGroup
	opsDone func() // ops.Done, the method value made once (enter returns it)
	failed  atomic.Bool
	failErr atomic.Pointer[error]
	failCh  chan struct{}
	failOne sync.Once

	// ready is closed once the index has been verified and recovered.
	ready chan struct{}

	// The committer (committer.go) applies command commits in groups.
	commitQ    chan *commitReq
	syncQ      chan syncJob
	commitStop chan struct{}
	commitDone chan struct{}

	// mu is the commit critical section: sequence assignment, the durable
	// count, and entry into Pebble's commit pipeline happen under it, so
	// WAL order equals sequence order.
	mu           sync.Mutex
	last         uint64       // last assigned (and applied) commit sequence
	lastCum      uint64       // cumulative history bytes through last
	durableCount uint64       // value of the durable count key as last applied
	delivered    DeliveryMark // the delivery mark as last applied
	// enc and ik are applyGroup's buffers for the values it encodes and
	// the idempotency keys it looks up and writes: a batch's Set copies
	// them, so one buffer serves every group.
	enc, ik []byte
	// openedLast is the last commit sequence found by Open.
	openedLast uint64
	// lastApplied and cumulativeBytes are last and lastCum, readable
	// without mu.
	lastApplied     atomic.Uint64
	cumulativeBytes atomic.Uint64
	prunedCum       atomic.Uint64
	first           atomic.Uint64 // first retained history seq

	// casMu serialises intent read-compare-write transitions and layout changes (codec.go).
	casMu  sync.Mutex
	layout uint64

	idx      index
	frontier frontier
	usage    usage
	pruneMu  sync.Mutex
}

// DefaultMemTableSize is the primary's Pebble memtable size when
// Options.MemTableSize is 0, and the largest that internal/process/membudget gives it
// (Pebble's default is 4 MiB; CockroachDB runs 64 MiB). A commit's intent
// sorts in one ascending namespace apart from its commit-major event and
// history keys, so every flush overlaps the whole intent range below it and
// the L0 compaction that follows rewrites that range: with 8x fewer flushes,
// that rewriting falls 8x. Interleaved 64-client commits against bare Pebble
// with its default options went from 0.59-0.65x at 4 MiB to 0.71-0.80x at 16
// and 32 MiB (bare Pebble given only this larger memtable gets slower; given
// this and zero-filled WALs it gets faster, see docs/benchmarks.md). The cost
// is memory: up to three memtables of this size per database, two to fill
// and flush and one Pebble keeps to reuse (Pebble grows a new store's
// memtables up to it), and a longer WAL replay after a crash. A
// server hosting many databases divides its memory budget among them and
// gives each a smaller memtable (internal/process/membudget).
const DefaultMemTableSize = 32 << 20

// Open opens (creating if needed) the primary database at opts.Path. On first
// open it creates the database identity (a UUIDv7) and history incarnation 1.
// It verifies the durable undelivered count against the intents (the only
// full scan of the index) and, from that same scan, returns every delivering
// intent to pending as RecoverDeliveries would, before returning, unless
// opts.IndexGate defers both.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.Path == "" {
		return nil, errors.New("primary: database path is required")
	}
	if opts.Contract == nil {
		return nil, errors.New("primary: a compiled contract is required")
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = tracenoop.NewTracerProvider()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = metricnoop.NewMeterProvider()
	}
	opts.Clock = clock.Or(opts.Clock)
	db := &DB{
		opts:   opts,
		log:    opts.Logger,
		alias:  opts.Alias,
		clock:  opts.Clock.Now,
		failCh: make(chan struct{}),
		ready:  make(chan struct{}),
		guards: goexit.NewRunner(),
	}
	db.opsDone = db.ops.Done
	db.frontier.init()
	tel, err := newTelemetry(opts.TracerProvider, opts.MeterProvider, opts.Alias)
	if err != nil {
		return nil, err
	}
	db.tel = tel
	if err := opts.FS.MkdirAll(opts.Path, 0o700); err != nil {
		return nil, fmt.Errorf("primary: create database directory: %w", pathless.Error(err))
	}
	bglog := newStoreLog(db.log, opts.Clock)
	po := &pebble.Options{
		FS:                 walfill.NewIn(dirlock.FS(opts.FS), opts.WALGroup),
		FormatMajorVersion: FormatMajorVersion,
		MemTableSize:       cmp.Or(opts.MemTableSize, DefaultMemTableSize),
		Cache:              opts.Cache,
		FileCache:          opts.FileCache,
		// Obsolete WALs are deleted rather than kept for reuse: walfill
		// gives a new WAL the written space a recycled one would have,
		// without up to three idle memtable-sized files per store.
		Cleaner: walfill.Cleaner{},
		Logger:  storeLogger{pebbleLogger{db: db}, bglog},
		EventListener: &pebble.EventListener{
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				db.fail(fmt.Errorf("%w: data corruption detected: %w", ErrCorrupt, pathless.Error(info.Details)))
			},
		},
	}
	po.Experimental.SpanPolicyFunc = splitNamespaces
	// With the split, a flush's commit data overlaps no table, so the
	// sublevel trigger never takes it out of L0: sixteen flushed tables are
	// merged into the base level instead of Pebble's default of 500, into
	// tables of up to 32 MiB that later compactions move down unchanged.
	po.L0CompactionFileThreshold = 16
	for i := 1; i < len(po.TargetFileSizes); i++ {
		po.TargetFileSizes[i] = 32 << 20
	}
	bglog.listen(po.EventListener)
	db.stalls = opts.WriteStalls
	if db.stalls == nil {
		db.stalls = stall.New(db.log, "primary", opts.Clock.Now)
	}
	db.stalls.Listen(po.EventListener)
	if opts.pebbleOptions != nil {
		opts.pebbleOptions(po)
	}
	po.WithFSDefaults()
	opened, err := db.openBounded(ctx, opts.FS, opts.Path, po, cmp.Or(opts.StorageFullWait, DefaultStorageFullWait))
	if err != nil {
		return nil, err
	}
	db.lock, db.fresh, db.store = opened.lock, opened.fresh, opened.store
	if err := db.load(); err != nil {
		_ = db.closeStore()
		return nil, db.openFailed(err)
	}
	db.idString = db.id.String()
	var names []string
	for _, p := range opts.Contract.Commands() {
		names = append(names, p.Name)
	}
	db.prepareDurationAttrs(names)
	if err := db.checkFloor(opened.floor); err != nil {
		_ = db.closeStore()
		return nil, err
	}
	// The marker now says "created" with the history found; the manifest it
	// named is no longer the one to compare (Pebble's open moves on).
	if err := writeFloor(opts.FS, opts.Path, floorRecord{ID: db.id, Last: db.last}); err != nil {
		_ = db.closeStore()
		return nil, db.openFailed(fmt.Errorf("primary: write the creation marker: %w", pathless.Error(err)))
	}
	db.startCommitter()
	if opts.IndexGate != nil {
		db.ops.Add(1)
		go func() {
			defer db.ops.Done()
			select {
			case <-opts.IndexGate:
			case <-db.failCh:
				return
			}
			if err := db.buildIndex(context.WithoutCancel(ctx)); err != nil {
				db.log.Error("primary undelivered index build failed", zap.Error(err))
			}
		}()
		return db, nil
	}
	if err := db.buildIndex(ctx); err != nil {
		db.stopCommitter()
		_ = db.closeStore()
		return nil, err
	}
	return db, nil
}

// load reads or creates the identity and the durable counters.
func (db *DB) load() error {
	v, err := db.get(keyIdentity)
	switch {
	case errors.Is(err, pebble.ErrNotFound) && !db.fresh:
		// The directory held committed writes, so the identity was made
		// durable once: a store without it lost data and is refused.
		return fmt.Errorf("%w: the database identity is missing from a store that was created before", ErrCorrupt)
	case errors.Is(err, pebble.ErrNotFound):
		id, err := event.NewDatabaseID(db.clock())
		if err != nil {
			return err
		}
		b := db.store.NewBatch()
		defer b.Close()
		_ = b.Set(keyIdentity, id[:], nil)
		_ = b.Set(keyIncarnation, encodeU64(1), nil)
		_ = b.Set(keyLayout, encodeU64(layoutVersion), nil)
		_ = b.Set(keyCount, encodeU64(0), nil)
		_ = b.Set(keyPruned, encodePruned(prunedMark{First: 1}), nil)
		if err := db.guard(func() error { return b.Commit(pebble.Sync) }); err != nil {
			db.fail(err)
			return fmt.Errorf("primary: create identity: %w", err)
		}
		db.id, db.incarnation, db.layout = id, 1, layoutVersion
		db.delivered = DeliveryMark{Incarnation: 1}
		db.first.Store(1)
		db.log.Info("primary database created", zap.String("database_id", id.String()))
		return nil
	case err != nil:
		return fmt.Errorf("primary: read identity: %w", err)
	}
	if len(v) != 16 {
		return fmt.Errorf("%w: database identity", ErrCorrupt)
	}
	copy(db.id[:], v)
	if v, err = db.get(keyLayout); err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("primary: read key layout: %w", err)
	}
	if db.layout, _ = decodeU64(v); !knownLayout(db.layout) {
		return fmt.Errorf("%w: the store's key layout is not version %d or %d (a pre-release build created it, or a newer one changed it); it cannot be opened", ErrIncompatible, layoutVersion, layoutExtendedIntents)
	}
	if v, err = db.get(keyIncarnation); err != nil {
		return fmt.Errorf("primary: read incarnation: %w", err)
	}
	if db.incarnation, err = decodeU64(v); err != nil {
		return err
	}
	if v, err = db.get(keyCount); err != nil {
		return fmt.Errorf("primary: read undelivered count: %w", err)
	}
	if db.durableCount, err = decodeU64(v); err != nil {
		return err
	}
	if v, err = db.get(keyPruned); err != nil {
		return fmt.Errorf("primary: read pruned mark: %w", err)
	}
	pm, err := decodePruned(v)
	if err != nil {
		return err
	}
	db.first.Store(pm.First)
	db.prunedCum.Store(pm.Cum)
	db.lastCum = pm.Cum
	db.last = pm.First - 1
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: []byte{nsCommit}, UpperBound: prefixEnd(nsCommit)})
	if err != nil {
		return err
	}
	if it.Last() {
		// A commit's history record is its last key.
		if !isHistoryKey(it.Key()) {
			_ = it.Close()
			return fmt.Errorf("%w: the last commit has no history record", ErrCorrupt)
		}
		h, err := decodeHistory(it.Value())
		if err != nil {
			_ = it.Close()
			return err
		}
		db.last, db.lastCum = h.Seq, h.Cum
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("primary: read history: %w", err)
	}
	db.lastApplied.Store(db.last)
	db.cumulativeBytes.Store(db.lastCum)
	db.openedLast = db.last
	if err := db.loadDelivered(); err != nil {
		return err
	}
	// Everything replayed at Open is durable: Pebble flushes the replayed WAL
	// and syncs before Open returns.
	db.frontier.reset(db.last)
	return nil
}

// Close waits for in-flight operations and closes the store. It is
// idempotent; later calls return nil.
func (db *DB) Close() error {
	db.life.Lock()
	if db.closed {
		db.life.Unlock()
		return nil
	}
	db.closed = true
	db.life.Unlock()
	db.ops.Wait()
	db.stopCommitter()
	defer db.closeGuards()
	err := db.store.Close()
	if err == nil && !db.failed.Load() {
		// After a failure the marker keeps its older, still true, floor.
		err = db.writeCleanFloor()
	}
	if lerr := db.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("primary: close store: %w", err)
	}
	return nil
}

// closeStore closes the Pebble store, then releases the directory lock that
// Open took before it.
func (db *DB) closeStore() error {
	defer db.closeGuards()
	err := db.store.Close()
	return errors.Join(err, db.lock.Close())
}

// Identity returns the database identity.
func (db *DB) Identity() event.DatabaseID { return db.id }

// Incarnation returns the history incarnation.
func (db *DB) Incarnation() uint64 { return db.incarnation }

// LastCommitSequence returns the highest commit sequence assigned and applied
// (it may not be durable yet). It reads no store.
func (db *DB) LastCommitSequence() uint64 { return db.lastApplied.Load() }

// Metrics returns the store's Pebble metrics.
func (db *DB) Metrics() *pebble.Metrics { return db.store.Metrics() }

// WriteStalls returns the tracker of the store's write stalls.
func (db *DB) WriteStalls() *stall.Tracker { return db.stalls }
