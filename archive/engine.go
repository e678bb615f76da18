package archive

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/hygiene/ratelog"
	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/store/goexit"
	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/internal/store/walfill"
)

// engineState records why the storage engine became unusable. Pebble's
// logger, its event listener and the guarded calls all report into it; once
// set, every later call on the store returns the recorded error without
// touching Pebble.
type engineState struct {
	log   *zap.Logger
	clock func() time.Time

	mu      sync.Mutex
	failure error

	bgOnce sync.Once
	bg     *ratelog.Logger // background errors, see backgroundLog
}

func (e *engineState) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failure
}

// fail records the first failure; a later corruption report replaces an
// earlier unavailability, because corruption needs an operator.
func (e *engineState) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failure == nil || (errors.Is(err, ErrCorrupt) && !errors.Is(e.failure, ErrCorrupt)) {
		e.failure = err
	}
}

// backgroundLog returns the rate-limited logger of Pebble's background
// errors. A full disk or a process out of file descriptors makes Pebble
// retry a failing flush in a tight loop: each distinct error is logged at
// most once per interval (1 s, backing off to 30 s while it repeats) with
// the count of reports in between, without paths and without the stack
// that zap.Error adds for Pebble's errors; a successful flush or
// compaction logs that it cleared (see pebbleOptions).
func (e *engineState) backgroundLog() *ratelog.Logger {
	e.bgOnce.Do(func() {
		e.bg = ratelog.New(e.log, clock.Func(e.clock), "archive storage engine background error", ratelog.Options{})
	})
	return e.bg
}

func (e *engineState) backgroundError(err error) { e.backgroundLog().Error(err) }

// backgroundSucceeded is the FlushEnd and CompactionEnd handler: a job
// that succeeded clears the background errors reported before it.
func (e *engineState) backgroundSucceeded(err error) {
	if err == nil {
		e.backgroundLog().Clear()
	}
}

func (e *engineState) dataCorruption(info pebble.DataCorruptionInfo) {
	e.fail(newError(ErrCorrupt, "storage engine reported corrupt data", info.Details))
	e.log.Error("archive storage engine reported corrupt data", zap.String("error", ratelog.Clean(info.Details)))
}

// pebbleLogger is the Pebble logger of an archive. Its Fatalf never returns
// and never exits the process: it records the fatal error, marks the store
// unusable and ends the calling goroutine with runtime.Goexit. Pebble calls
// Fatalf in the committing goroutine on WAL write/sync errors, which is why
// every Pebble call of the archive runs in its own goroutine (see guarded).
type pebbleLogger struct{ st *engineState }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.st.log.Debug("archive storage engine", zap.String("message", ratelog.CleanText(fmt.Sprintf(format, args...))))
}

// Errorf logs through the background-error logger, classed by format, so
// that an error Pebble repeats is rate-limited like a background error.
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.st.backgroundLog().Report(format, ratelog.CleanText(fmt.Sprintf(format, args...)))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	var cause error
	for _, a := range args {
		if err, ok := a.(error); ok {
			cause = err
			break
		}
	}
	msg := fmt.Sprintf(format, args...)
	if cause == nil {
		cause = errors.New(msg)
	}
	sentinel := ErrUnavailable
	if isPebbleCorruption(cause) {
		sentinel = ErrCorrupt
	}
	l.st.fail(newError(sentinel, "storage engine fatal error", cause))
	l.st.log.Error("archive storage engine fatal error; archive marked unusable", zap.String("message", ratelog.CleanText(msg)))
	runtime.Goexit()
}

// errEnded is the cause recorded for a guarded call whose goroutine ended
// without returning by Goexit (from Fatalf).
var errEnded = errors.New("archive: storage engine call ended without returning")

// guarded runs fn, a call into Pebble, in its own goroutine and waits at most
// timeout for it. If the goroutine ends without returning (Pebble's Fatalf,
// a panic) or the timeout passes, the store is marked unusable and the
// recorded error is returned promptly; the process keeps running. A mutating
// call abandoned because ctx ended also marks the store unusable, because its
// outcome is then unknown; a read waits for its result or the timeout.
func guarded(ctx context.Context, st *engineState, timeout time.Duration, op string, mutating bool, fn func() error) error {
	var phase *txnPhase
	if mutating {
		phase = new(txnPhase)
		phase.v.Store(phaseWriting)
	}
	return guardedTxn(ctx, st, timeout, op, phase, nil, fn)
}

// txnPhase is the phase of a guarded transaction, shared by guardedTxn and
// its fn: reading, until fn claims the write (beginWrite) or guardedTxn
// takes a cancellation first (abort). Exactly one of the two wins, so a call
// cancelled while reading is never abandoned as if it were writing, and a
// write never starts once the cancellation was taken.
type txnPhase struct{ v atomic.Int32 }

const (
	phaseReading int32 = iota
	phaseWriting
	phaseAborted
)

// beginWrite moves the call from reading to writing. false means the call
// was aborted: fn must return without writing.
func (p *txnPhase) beginWrite() bool { return p.v.CompareAndSwap(phaseReading, phaseWriting) }

// abort moves the call from reading to aborted; false means it is writing.
func (p *txnPhase) abort() bool { return p.v.CompareAndSwap(phaseReading, phaseAborted) }

// guardedTxn is guarded for a call that reads and then, possibly, writes:
// one goroutine for the whole transaction instead of one per step (each
// handoff between goroutines costs about as much as a tenth of an fsync on
// a small VM). fn, given phase by its caller, calls phase.beginWrite before
// its first write and returns without writing when it fails. ctx ending
// while fn is still reading aborts the phase and waits for fn; ctx ending
// once fn is writing abandons the call (and marks the store unusable, the
// write's outcome being unknown).
// A nil phase means a read-only call. fn runs with what on keeps for a
// caller that runs one call at a time (Accept, under the store's mutex), or
// on a goroutine, timer and channel of its own when on is nil.
func guardedTxn(ctx context.Context, st *engineState, timeout time.Duration, op string, phase *txnPhase, on *txnCalls, fn func() error) error {
	if err := st.err(); err != nil {
		return err
	}
	var done <-chan goexit.Outcome
	var timer *time.Timer
	if on == nil {
		done, timer = goexit.Go(fn), time.NewTimer(timeout)
	} else {
		done, timer = on.done, on.timer
		// Since Go 1.23 a Reset timer never delivers a value of its earlier
		// setting, so one timer serves its owner's calls one after another.
		timer.Reset(timeout)
		// The call waits in line behind the writes posted before it
		// (postApply); a line that does not move is a stuck engine.
		select {
		case on.work <- txnJob{fn: fn, done: on.done}:
		case <-timer.C:
			return lineStuck(st, op, timeout)
		}
	}
	defer timer.Stop()
	var ctxDone <-chan struct{}
	if phase != nil {
		ctxDone = ctx.Done()
	}
	for {
		select {
		case o := <-done:
			if !o.Returned {
				cause := errEnded
				if o.Panic != nil {
					cause = fmt.Errorf("storage engine panic: %v", o.Panic)
				}
				st.fail(newError(ErrUnavailable, op+" ended without returning", cause))
				return st.err()
			}
			return mapError(op, o.Err)
		case <-timer.C:
			on.gaveUp()
			err := fmt.Errorf("%w: %s timed out after %s: %w", ErrUnavailable, op, timeout, context.DeadlineExceeded)
			st.fail(err)
			st.log.Error("archive storage engine call timed out; archive marked unusable", zap.String("op", op))
			return err
		case <-ctxDone:
			if phase.abort() {
				// Still reading: nothing can be half-written, and fn's
				// beginWrite now fails, so it returns without writing.
				// Wait for its result or the timeout.
				ctxDone = nil
				continue
			}
			on.gaveUp()
			err := fmt.Errorf("%w: %s abandoned: %w", ErrUnavailable, op, context.Cause(ctx))
			st.fail(err)
			return err
		}
	}
}

// txnCalls is what the transactions of a caller that runs them one at a
// time (the store's single writer, under its mutex) share: one goroutine
// that runs them in the order they were handed over, the timer that bounds
// each, and the channel each result comes back on.
//
// The goroutine is kept (no new goroutine, and no stack growth, per event:
// a Pebble commit grows a fresh goroutine's stack from its first size
// several times over, about 5 % of a delivery's CPU, docs/benchmarks/
// 2026-12-01-multidb.md). Keeping to the order is what lets Apply hand a
// new record's batch over without waiting for it (postApply): the batches
// reach Pebble in the order they were decided in, each carrying the
// accounting that counts it, and every call handed over later (a lookup,
// Durable's wait, a fence) runs only once they were applied. A call that
// ends its goroutine without returning (Pebble's Fatalf, a panic) has the
// next one started, which serves the rest of the line.
type txnCalls struct {
	st    *engineState
	work  chan txnJob
	stop  chan struct{}
	once  sync.Once
	timer *time.Timer
	done  chan goexit.Outcome
}

// txnJob is one call of a txnCalls: fn, awaited on done, or a posted
// write, which nobody awaits.
type txnJob struct {
	fn   func() error
	done chan goexit.Outcome
	post *postedApply
}

// txnLine is how many calls may wait for a txnCalls' goroutine: more than
// the transactions the outbox posts between two waits for durability (a
// completion group of 16).
const txnLine = 64

func newTxnCalls(st *engineState) *txnCalls {
	c := &txnCalls{st: st, work: make(chan txnJob, txnLine), stop: make(chan struct{}),
		timer: time.NewTimer(time.Hour), done: make(chan goexit.Outcome, 1)}
	c.timer.Stop()
	go c.serve()
	return c
}

// serve runs the calls in order until close. A call that did not return
// ends this goroutine (after a panic, recovered, on purpose: the next
// goroutine starts from a fresh stack); the deferred function starts the
// next one.
func (c *txnCalls) serve() {
	stopped := false
	defer func() {
		if !stopped {
			go c.serve()
		}
	}()
	for {
		select {
		case j := <-c.work:
			if j.post != nil {
				if !j.post.run(c.st) {
					return
				}
				continue
			}
			if !goexit.Call(j.fn, j.done) {
				return
			}
		case <-c.stop:
			stopped = true
			return
		}
	}
}

// postedApply is a new record's batch that Apply handed to the store's
// transaction goroutine without waiting for it (postApply).
type postedApply struct {
	db *pebble.DB
	b  *pebble.Batch
	// returned and err are set on the transaction goroutine once the apply
	// returned; Durable's call, which runs on it later, reads them.
	returned bool
	err      error
}

// run applies the batch (its sync is awaited by Durable). A failed apply
// marks the store unusable: the accounting in memory already counts the
// record. run returns false after a panic (recovered: the store is marked
// unusable); after runtime.Goexit (Pebble's Fatalf, which marked it) it
// does not return.
func (p *postedApply) run(st *engineState) (ok bool) {
	defer func() {
		if ok {
			return
		}
		cause := errEnded
		if r := recover(); r != nil {
			cause = fmt.Errorf("storage engine panic: %v", r)
		}
		st.fail(newError(ErrUnavailable, "applying the archive transaction ended without returning", cause))
	}()
	if err := p.db.ApplyNoSyncWait(p.b, pebble.Sync); err != nil {
		p.err = mapError("applying the archive transaction", err)
		st.fail(p.err)
	}
	p.returned = true
	return true
}

// post hands p to the goroutine without waiting for it to run, waiting at
// most timeout for room in the line; it reports false when there was none
// by then. The caller owns c's timer (it holds the store's mutex).
func (c *txnCalls) post(p *postedApply, timeout time.Duration) bool {
	j := txnJob{post: p}
	select {
	case c.work <- j:
		return true
	default:
	}
	c.timer.Reset(timeout)
	defer c.timer.Stop()
	select {
	case c.work <- j:
		return true
	case <-c.timer.C:
		return false
	}
}

// lineStuck marks the store unusable, and says so, after the call op
// waited timeout for room in the line of calls (txnCalls): a line that does
// not move is a stuck engine.
func lineStuck(st *engineState, op string, timeout time.Duration) error {
	err := fmt.Errorf("%w: %s timed out after %s waiting for the transactions before it: %w", ErrUnavailable, op, timeout, context.DeadlineExceeded)
	st.fail(err)
	st.log.Error("archive storage engine call timed out; archive marked unusable", zap.String("op", op))
	return err
}

// close ends the goroutine once it is idle (or once its call ends); calls
// still in line are not run.
func (c *txnCalls) close() { c.once.Do(func() { close(c.stop) }) }

// gaveUp is called when guardedTxn stopped waiting for a call that may
// still send its result: the next call gets a new channel.
// A nil c has nothing to replace.
func (c *txnCalls) gaveUp() {
	if c != nil {
		c.done = make(chan goexit.Outcome, 1)
	}
}

// engineTuning is the memory and table files an archive's Pebble uses: a
// shared block cache (nil: Pebble's default cache of its own), a shared
// table cache (nil: one of its own of MaxOpenFiles) and the memtable size
// (0: DefaultMemTableSize); and where its write stalls are recorded (nil:
// nowhere).
type engineTuning struct {
	cache        *pebble.Cache
	fileCache    *pebble.FileCache
	memTableSize uint64
	stalls       *stall.Tracker
}

// pebbleOptions returns the archive's Pebble options.
func pebbleOptions(st *engineState, fs vfs.FS, fsDefaults bool, tune engineTuning) *pebble.Options {
	o := &pebble.Options{
		FS:                 fs,
		FormatMajorVersion: FormatMajorVersion,
		Cache:              tune.cache,
		FileCache:          tune.fileCache,
		MemTableSize:       cmp.Or(tune.memTableSize, DefaultMemTableSize), // each WAL file is preallocated to ~1.1x this
		MaxOpenFiles:       256,
		// Table statistics only guide the compaction of deletion
		// tombstones, and an archive deletes no record: collecting them
		// would open every table in the background after every start,
		// work that grows with the archive and competes with the first
		// deliveries (see checkpoint.go for what a start costs).
		DisableTableStats: true,
		// Obsolete WALs are deleted, not kept for reuse: Pebble recycles
		// up to three at the size they reached, idle disk per archive that
		// the zero-fill of internal/store/walfill makes unnecessary.
		Cleaner: walfill.Cleaner{},
		Logger:  pebbleLogger{st: st},
		EventListener: &pebble.EventListener{
			DataCorruption:  st.dataCorruption,
			BackgroundError: st.backgroundError,
			FlushEnd:        func(i pebble.FlushInfo) { st.backgroundSucceeded(i.Err) },
			CompactionEnd:   func(i pebble.CompactionInfo) { st.backgroundSucceeded(i.Err) },
			DiskSlow: func(i pebble.DiskSlowInfo) {
				st.log.Warn("archive disk slow", zap.Duration("duration", i.Duration))
			},
			LowDiskSpace: func(i pebble.LowDiskSpaceInfo) {
				st.log.Warn("archive low disk space", zap.Uint64("avail_bytes", i.AvailBytes))
			},
		},
	}
	if tune.stalls != nil {
		tune.stalls.Listen(o.EventListener)
	}
	o.Experimental.SpanPolicyFunc = splitMetaFromRecords
	// With the split, a flush's records overlap no table, so L0 grows by
	// one sublevel-free table per flush and Pebble's sublevel trigger never
	// fires: it would wait for its default of 500 files (measured: 491 L0
	// tables, 891 MB, after 1,000,000 records of 1 KiB). Sixteen flushed
	// tables are merged into the base level instead, into tables of up to
	// 32 MiB that later compactions move down unchanged; each record is
	// then written three times in all (WAL, flush, merge), and a 10 GB
	// archive has about 330 table files, which bounds what a start, the
	// custody audit and its watches cost per file.
	o.L0CompactionFileThreshold = 16
	for i := 1; i < len(o.TargetFileSizes); i++ {
		o.TargetFileSizes[i] = 32 << 20
	}
	if fsDefaults {
		o.WithFSDefaults()
	}
	return o
}

// splitMetaFromRecords ends every table Pebble writes, by flush or by
// compaction, at the first record key, so that no table holds both the
// metadata keys and records. The accounting key, rewritten by every stored
// record, sorts before all records; a table spanning it and the newest
// records overlaps every older record in the level below, and each L0
// compaction would rewrite the whole archive (measured before this split:
// 327 MB written into L6 for 22 MB of records, 300,000 records). Split, a
// flush's records overlap nothing below them and only the small metadata
// tables are rewritten. The policy itself is Pebble's default.
func splitMetaFromRecords(start []byte) (pebble.SpanPolicy, []byte, error) {
	if bytes.Compare(start, recordLower) < 0 {
		return pebble.SpanPolicy{}, recordLower, nil
	}
	return pebble.SpanPolicy{}, nil, nil
}
