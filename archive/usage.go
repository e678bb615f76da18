package archive

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/pathless"
)

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

// Records returns the durable record count (a lock-free read, no I/O).
func (s *Store) Records() int64 { return s.records.Load() }

// Usage returns the durable accounting, the quota and the allocated bytes,
// without scanning records. It measures the store's files; Monitor.Usage
// serves the same values without any I/O.
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
		s.log.Warn("archive allocated bytes unavailable", zap.Error(pathless.Error(err)))
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

// AllocatedRefresh is how old the allocated bytes a Monitor serves may get
// before a read measures them again (in the background).
const AllocatedRefresh = time.Second

// Monitor serves what stats and metrics read from an archive — the last
// committed accounting, the allocated bytes and the storage engine's
// metrics — without ever waiting on the archive: a poll or scrape that
// arrives during an archive transaction, or while the archive is closed for
// repair, still gets the last values. The zero Monitor is ready to use. Pass
// one in Options.Monitor to every Open of the same archive (a destination
// reopens its store after an outage); the Monitor outlives those stores.
// Its methods are safe for concurrent use and never block on I/O.
type Monitor struct {
	opened atomic.Bool           // a store was opened with it at least once
	store  atomic.Pointer[Store] // the open store, nil while none is
	// acct is the last committed accounting and quota (acctSet: there is
	// one), under acctMu: held only to copy it, a lock costs a transaction
	// less than the Usage an atomic pointer would need for each.
	acctMu  sync.Mutex
	acct    Usage
	acctSet bool
	where   atomic.Pointer[usedAt] // the files the allocated bytes measure
	clock   atomic.Pointer[func() time.Time]

	alloc     atomic.Int64 // last measured allocated bytes; -1: unknown
	allocAt   atomic.Int64 // when they were measured (UnixNano)
	measuring atomic.Bool  // a background measurement is running

	metrics     atomic.Pointer[pebble.Metrics] // the last engine metrics
	wantMetrics atomic.Bool                    // a read found the writer busy

	// validated is the last full validation (UnixNano; 0: not known) and
	// interval the store's Options.FullValidationInterval (validation.go).
	validated, interval atomic.Int64
}

// LastFullValidation returns when the whole archive was last validated, as
// the last store opened with m recorded it, or false while that is not
// known. It never waits.
func (m *Monitor) LastFullValidation() (time.Time, bool) {
	ns := m.validated.Load()
	return time.Unix(0, ns), ns > 0
}

// validatedAt publishes the last full validation (zero: not known).
func (m *Monitor) validatedAt(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	m.validated.Store(ns)
}

// usedAt is where a store's allocated bytes are measured.
type usedAt struct {
	fs   vfs.FS
	real bool
	dir  string
	log  *zap.Logger
}

// Usage returns the last committed accounting, the quota and the allocated
// bytes, or false while no archive was ever opened with m. The allocated
// bytes are at most about AllocatedRefresh old (a read that finds them older
// starts a measurement in the background and returns the previous value);
// AllocatedBytes is -1 while the store's files cannot be measured (the
// archive directory is unavailable), never another negative value. Usage
// does no I/O and never waits.
func (m *Monitor) Usage() (Usage, bool) {
	u, ok := m.accounting()
	if !m.opened.Load() || !ok {
		return Usage{}, false
	}
	m.refreshAllocated()
	u.AllocatedBytes = m.alloc.Load()
	return u, true
}

// Metrics returns the storage engine's metrics of the open archive, or nil
// while none is open or the open one is unusable. When an archive
// transaction holds the store it returns the last metrics read and asks the
// writer to read them again when it finishes, so that a scrape never waits
// and never goes without values while the archive is open.
func (m *Monitor) Metrics() *pebble.Metrics {
	s := m.store.Load()
	if s == nil || s.usable() != nil {
		return nil
	}
	if mm := s.Metrics(); mm != nil {
		m.metrics.Store(mm)
		return mm
	}
	m.wantMetrics.Store(true)
	return m.metrics.Load()
}

func (m *Monitor) now() time.Time {
	if c := m.clock.Load(); c != nil {
		return (*c)()
	}
	return time.Now()
}

// allocSeed is an allocated-bytes measure that Open already has: the sum
// its custody audit took from the lstat of every store file, and when.
type allocSeed struct {
	bytes int64
	at    time.Time
}

// attach publishes a store that Open just opened and validated: its
// accounting, its engine metrics and its allocated bytes. With a seed (the
// custody audit's measure of an existing store), the allocated bytes are
// the seed's, as old as the audit: the first read after AllocatedRefresh
// measures them again in the background, as for any other measure. Without
// one (a new store, or a test filesystem) they are measured here, once, on
// the opening goroutine. The seed saves a second stat of every store file
// on the start's critical path.
func (m *Monitor) attach(ctx context.Context, s *Store, seed *allocSeed) {
	m.clock.Store(&s.clock)
	m.interval.Store(int64(s.fullInterval))
	m.validatedAt(s.validated)
	m.where.Store(&usedAt{fs: s.fs, real: s.realFS, dir: s.storeDir, log: s.log})
	m.committed(s, s.acct)
	m.readMetrics(ctx, s)
	if seed != nil {
		m.alloc.Store(seed.bytes)
		m.allocAt.Store(seed.at.UnixNano())
	} else {
		m.measure()
	}
	m.store.Store(s)
	m.opened.Store(true)
}

// detach stops serving engine metrics of a store being closed.
func (m *Monitor) detach(s *Store) { m.store.CompareAndSwap(s, nil) }

// committed publishes the accounting a transaction of s made durable.
func (m *Monitor) committed(s *Store, a accounting) {
	m.acctMu.Lock()
	m.acct = Usage{Records: a.Records, EncodedBytes: a.EncodedBytes, QuotaEncodedBytes: s.quota}
	m.acctSet = true
	m.acctMu.Unlock()
}

// accounting returns the last committed accounting and quota, and whether
// there is one.
func (m *Monitor) accounting() (Usage, bool) {
	m.acctMu.Lock()
	defer m.acctMu.Unlock()
	return m.acct, m.acctSet
}

// serveMetrics reads the engine metrics for a read that found the writer
// busy. The writer calls it holding s.mu, after its transaction.
func (m *Monitor) serveMetrics(ctx context.Context, s *Store) {
	if !m.wantMetrics.CompareAndSwap(true, false) || s.usable() != nil {
		return
	}
	m.readMetrics(ctx, s)
}

// readMetrics reads s's engine metrics (a guarded storage call) and
// publishes them. Its callers hold the store: Open, or a writer after its
// transaction.
func (m *Monitor) readMetrics(ctx context.Context, s *Store) {
	var mm *pebble.Metrics
	if guarded(ctx, s.st, s.timeout, "reading the engine metrics", false, func() error {
		mm = s.db.Metrics()
		return nil
	}) == nil {
		m.metrics.Store(mm)
	}
}

// refreshAllocated starts a background measurement when the last one is
// older than AllocatedRefresh and none is running.
func (m *Monitor) refreshAllocated() {
	if m.now().UnixNano()-m.allocAt.Load() < int64(AllocatedRefresh) || !m.measuring.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer m.measuring.Store(false)
		m.measure()
	}()
}

// measure measures the allocated bytes of the last store's files. A failure
// makes them unknown (-1) until a measurement succeeds; it is logged once.
func (m *Monitor) measure() {
	w := m.where.Load()
	if w == nil {
		return
	}
	n, err := storeAllocated(w.fs, w.real, w.dir)
	if err != nil {
		n = -1
		if m.alloc.Load() >= 0 {
			w.log.Warn("archive allocated bytes unavailable", zap.Error(pathless.Error(err)))
		}
	}
	m.alloc.Store(n)
	m.allocAt.Store(m.now().UnixNano())
}
