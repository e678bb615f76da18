package archive

import (
	"bytes"
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
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
)

// core is what a Store and an offline inspection share: an open Pebble
// database with its failure state and binding.
type core struct {
	db      *pebble.DB
	st      *engineState
	binding event.DatabaseID
	// id identifies the archive instance for its cursors (makeArchiveID).
	id      archiveID
	timeout time.Duration
	// format is the archive format read from the marker (readMeta), raised
	// to formatVersion once a write of Open or the scrub upgraded it.
	format uint16
}

// Store is an open archive. It is safe for concurrent use; writes are
// serialized by a single-writer mutex (the read phase, the quota check and
// the synced commit of one Accept happen under it).
type Store struct {
	core
	dir, storeDir string
	// scrubTimeout bounds one page read of the background scrub
	// (Options.ScrubReadTimeout).
	scrubTimeout time.Duration
	dbAttr       attribute.KeyValue // riffdb.database=<alias> on every metric and span
	// dbSet and resultSets are the metric attribute sets, built once
	// (building a set sorts and hashes it on every call otherwise).
	// resultSets and dbRecord are kept as the option slices Add and Record
	// take: passing one option alone makes a slice of it on every call,
	// and these are recorded for every transaction.
	dbSet      metric.MeasurementOption
	dbRecord   []metric.RecordOption
	resultSets map[string][]metric.AddOption // by result label
	fs         vfs.FS
	realFS     bool
	quota      int64
	minFree    int64
	log        *zap.Logger
	clock      func() time.Time

	tracer    trace.Tracer
	txnDur    metric.Float64Histogram
	checkDur  metric.Float64Histogram // riffdb.archive.quota.check.duration
	accepted  metric.Int64Counter
	decisions metric.Int64Counter
	gauges    metric.Registration
	// The background scrub's instruments (scrub.go).
	scrubRecords  metric.Int64Counter
	scrubPasses   metric.Int64Counter
	scrubProgress metric.Float64Gauge
	gaugeInit     func() (metric.Registration, error)

	// inst is the filesystem of the open Pebble instance (fence.go);
	// abandoned is set once closeDB had to fence it off.
	inst      *instanceFS
	abandoned bool
	// lock is the store's directory lock, taken through inst before Open
	// decides anything and held by every Pebble instance of the store
	// (Options.Lock) until Close has written the floor file (decide.go).
	lock *pebble.Lock

	// fullInterval is Options.FullValidationInterval.
	fullInterval time.Duration

	mu   sync.Mutex // the single writer; guards acct, free, ckpt, ckptKey, adv, last, txns and validated
	acct accounting
	// validated is when the whole archive was last validated, as stored
	// (zero: not known; validation.go).
	validated time.Time
	// free is the free-space guard's last measurement (checkFreeSpace).
	free freeSpace
	// ckpt is the durable validated-prefix checkpoint (checkpoint.go) and
	// ckptKey its record's Pebble key (nil: none); adv collects what
	// Accept stores while a Checkpoint validates a snapshot.
	ckpt    checkpoint
	ckptKey []byte
	adv     *advance
	// last is the greatest record key in the store (nil: none), read at
	// Open and raised by every Accept that stores a record: a key beyond it
	// cannot be in the store, so Accept does not look it up (accept.go).
	last []byte
	// txns is what Accept's transactions share from one to the next
	// (txnCalls); made by the first Accept, closed by Close.
	txns *txnCalls
	// applied holds the transactions Apply applied since the last
	// Durable, in order.
	applied []appliedTxn
	// posted counts the batches posted to txns (postApply) since a call
	// last waited for them (Durable, settleLocked).
	posted int
	// ckptMu serializes Checkpoint calls (Close's final one included).
	ckptMu sync.Mutex
	// ckptRecords and ckptBytes mirror ckpt.acct for CheckpointDue.
	ckptRecords, ckptBytes atomic.Int64
	// shut is set, under mu, once Close closed the storage engine.
	shut bool
	// testCheckpointSnapshot, when set (tests), runs in Checkpoint after
	// its snapshot was taken, before it validates it.
	testCheckpointSnapshot func()

	records, encoded atomic.Int64 // mirrors of acct for lock-free Usage
	closed           atomic.Bool
	mon              *Monitor // publishes acct and the engine metrics (usage.go)

	readersMu sync.Mutex
	readers   map[*Reader]struct{}
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

// Audit re-runs the custody audit of the archive directory on the open
// store. It is a no-op on a non-default FS.
func (s *Store) Audit() error {
	if err := s.usable(); err != nil {
		return err
	}
	if !s.realFS {
		return nil
	}
	exists, err := auditOpen(s.fs, s.dir)
	if err == nil && !exists {
		// The outbox directory is in order but the open store's directory
		// is gone: writes would land in unlinked files.
		err = fmt.Errorf("the open store's directory is gone: %w", os.ErrNotExist)
	}
	return mapError("custody audit", err)
}

// DirectoryHeld reports whether the store's directory is, right now, still
// the one fi identifies, at the archive's path, as far as the custody audit's
// watches can tell without a storage call: the path and the directories on
// it are watched, no event that could change what the path resolves to came
// since they were (the mount table included), and none of the archive or
// store directory's own. One poll, where an lstat walks the whole path.
// False means that the watches cannot tell (not armed yet, something on the
// path changed, a test's or another platform's filesystem): the caller then
// checks the path itself.
func (s *Store) DirectoryHeld(fi os.FileInfo) bool {
	if !s.realFS || s.usable() != nil {
		return false
	}
	return directoryHeld(s.fs, s.dir, fi)
}

// Close closes open readers, unregisters the gauges and closes the store,
// releasing its lock even after a fatal storage error, so that a later Open
// of the same directory (after repair) works in the same process. Close
// waits for an Accept in progress. A second Close returns nil.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Transactions applied and not yet awaited are awaited first: a
	// failed sync leaves the store failed, and the floor where it was.
	if err := s.Durable(context.Background()); err != nil {
		s.log.Warn("archive transactions not durable at close", zap.Error(err))
	}
	// A clean close advances the checkpoint over everything accepted since
	// the last one (at most about CheckpointRecords while the server calls
	// Checkpoint), so the next Open validates nothing but the continuity.
	if s.st.err() == nil {
		if err := s.checkpoint(context.Background(), true); err != nil {
			s.log.Warn("archive checkpoint not advanced at close", zap.Error(err))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mon.detach(s)
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
	s.shut = true
	if s.txns != nil {
		s.txns.close()
	}
	if err == nil && s.st.err() == nil && s.db != nil && !s.abandoned {
		// A clean close raises the floor to the accounting every accepted
		// record is durable under (floor.go). After a failure the floor
		// stays where it was: still a true lower bound.
		if ferr := writeFloor(s.fs, s.storeDir, s.binding, s.acct); ferr != nil {
			s.log.Warn("archive floor file not updated at close", zap.Error(ferr))
		}
	}
	// The floor file is written under the lock: no other open can read
	// the store in between.
	s.unlock()
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

var _ io.Closer = (*Store)(nil)
