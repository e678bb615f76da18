// Package stall records when a Pebble store holds its writers back.
//
// Pebble stalls every write to a store while it cannot take more: all its
// memtables are full and the oldest is still being flushed ("memtable count
// limit reached"), or L0 holds too many sublevels or files for reads to stay
// cheap ("L0 file count limit exceeded"). A stall delays every commit of a
// primary, and every archive transaction, by as long as it lasts; Pebble's
// metrics do not count it, it only calls its EventListener's WriteStallBegin
// and WriteStallEnd. A Tracker turns those calls into what an operator can
// watch: how many stalls began and how long writes were held, an ongoing
// stall counted up to the moment it is read (riffdb.pebble.write_stalls and
// riffdb.pebble.write_stall.time, see telemetry.ObservePebble), and a warn
// line for every stall of LogAfter or longer, with its reason. Shorter stalls
// are only counted: under a heavy write load Pebble may stall briefly many
// times a second, and a line for each would flood the log; a stall that is
// logged lasted at least LogAfter, so those lines come at most once per
// LogAfter.
package stall

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
)

// LogAfter is the shortest stall a Tracker logs.
const LogAfter = time.Second

// Tracker records the write stalls of one store, across the Pebble
// instances that open it in turn (an archive reopened after a failure keeps
// its Tracker, so its counts do not restart). Its methods are safe for
// concurrent use; the zero value is not usable (New).
type Tracker struct {
	now   func() time.Time
	log   *zap.Logger
	store string

	mu      sync.Mutex
	stalled map[*instance]struct{} // instances holding writes back now
	count   int64                  // stalls begun
	total   time.Duration          // the time of the stalls that ended
}

// instance is the stall state of one Pebble instance. Pebble reports one
// stall at a time per instance (DB.maybeInduceWriteStall, under the DB's
// mutex); nesting is tolerated anyway. An instance abandoned while it
// stalled (a store fenced off and reopened) keeps counting as stalled: its
// writers are still held.
type instance struct {
	depth  int
	since  time.Time
	reason string
}

// New returns a Tracker of the store named store ("primary", "archive"),
// logging to log (nil: not logged) and reading the time from now (nil:
// time.Now).
func New(log *zap.Logger, store string, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Tracker{now: now, log: log, store: store, stalled: make(map[*instance]struct{})}
}

// Listen sets l's WriteStallBegin and WriteStallEnd to record the stalls of
// the Pebble instance opened with l.
func (t *Tracker) Listen(l *pebble.EventListener) {
	in := new(instance)
	l.WriteStallBegin = func(info pebble.WriteStallBeginInfo) { t.begin(in, info.Reason) }
	l.WriteStallEnd = func() { t.end(in) }
}

func (t *Tracker) begin(in *instance, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in.depth++
	if in.depth == 1 {
		t.count++
		in.since, in.reason = t.now(), reason
		t.stalled[in] = struct{}{}
	}
}

// end records that the instance released the writes it held. An end
// without a begin is ignored.
func (t *Tracker) end(in *instance) {
	t.mu.Lock()
	if in.depth == 0 {
		t.mu.Unlock()
		return
	}
	in.depth--
	if in.depth > 0 {
		t.mu.Unlock()
		return
	}
	delete(t.stalled, in)
	d := t.now().Sub(in.since)
	t.total += d
	reason := in.reason
	t.mu.Unlock()
	if d >= LogAfter {
		// Pebble calls its listener under its own mutex: the line is
		// written from another goroutine, so that a slow log output
		// never holds the store.
		go t.log.Warn("storage engine held writes back", zap.String("store", t.store),
			zap.String("reason", reason), zap.Duration("duration", d))
	}
}

// Stats returns the stalls begun so far and how long writes were held in
// all, the ongoing stalls included up to now.
func (t *Tracker) Stats() (stalls int64, held time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	held = t.total
	now := t.now()
	for in := range t.stalled {
		held += now.Sub(in.since)
	}
	return t.count, held
}
