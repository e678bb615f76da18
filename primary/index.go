package primary

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/riffdb/riffdb/event"
)

// IndexState is the availability of the undelivered count.
type IndexState uint8

// Index states.
const (
	// IndexUnbuilt: Open has not yet verified the count and recovered deliveries.
	IndexUnbuilt IndexState = iota
	// IndexReady: the count mirrors the durable count and is trustworthy.
	IndexReady
	// IndexDegraded: the count could not be verified or an intent write
	// failed; it is unavailable until the next successful Open.
	IndexDegraded
)

// String returns unbuilt, ready or degraded.
func (s IndexState) String() string {
	switch s {
	case IndexUnbuilt:
		return "unbuilt"
	case IndexReady:
		return "ready"
	case IndexDegraded:
		return "degraded"
	}
	return "unknown"
}

// seqCount is the number of undelivered intents of one commit, and how many
// of them are dead letters.
type seqCount struct {
	seq  uint64
	n    uint32 // undelivered intents, dead letters included
	dead uint32 // dead letters among them
	// lastDead is the highest position of the commit's dead letters
	// (meaningful when dead > 0).
	lastDead uint32
}

// index is the in-memory mirror of the undelivered index: the durable count
// and, per commit sequence, how many intents remain and how many of them are
// dead letters. The per-sequence list gives the undelivered low-water mark
// (dead letters included: they fence retention) and the live floor (the
// first commit with an intent that is not a dead letter) without reading
// the store.
//
// Only an operator's redrive (redrive.go) takes an intent out of
// dead_letter, and only delivering intents are completed, so a commit whose
// remaining intents are all dead letters stays so until a redrive: the
// entries before live are frozen, and revive moves the live floor back.
// Scans jump from the dead letters straight to the live floor (scanFloor)
// instead of stepping over the deletions of every intent delivered since (a
// queue on an LSM), and the frozen prefix keeps only its entries that hold
// dead letters, so a dead letter at the bottom of the index does not pin
// the list's memory.
type index struct {
	state atomic.Uint32
	count atomic.Uint64

	mu   sync.Mutex
	seqs []seqCount // ascending seq
	head int        // first entry with n > 0
	live int        // first entry with n > dead (head ≤ live)
	// deadSeqs counts the entries in [head, live) that hold dead letters
	// (the others there are empty).
	deadSeqs int
	// deadTop is the highest dead letter before seqs[live], when hasDeadTop.
	deadTop    event.ID
	hasDeadTop bool
	// revivals counts the redrives that revived a dead letter (DB.Revivals).
	revivals atomic.Uint64
}

func (x *index) degrade() { x.state.Store(uint32(IndexDegraded)) }

// setReady moves an unbuilt index to ready; a degraded index stays degraded.
func (x *index) setReady() { x.state.CompareAndSwap(uint32(IndexUnbuilt), uint32(IndexReady)) }

// add records the n intents of a new commit seq, above every sequence
// recorded so far.
func (x *index) add(seq uint64, n uint32) {
	x.addEntry(seqCount{seq: seq, n: n})
}

// addEntry records a commit's undelivered intents, dead letters included
// (buildIndex adds each commit it counted this way). Entries are added in
// ascending seq order, each commit once.
func (x *index) addEntry(e seqCount) {
	if e.n == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seqs = append(x.seqs, e)
	x.advance()
}

// find returns the entry of seq at or after the live floor, or nil. Only
// those entries change: the ones before are frozen (until revive).
func (x *index) find(seq uint64) *seqCount {
	live := x.seqs[x.live:]
	i := sort.Search(len(live), func(i int) bool { return live[i].seq >= seq })
	if i < len(live) && live[i].seq == seq {
		return &live[i]
	}
	return nil
}

// remove records that the intents of ids are gone. They were delivering,
// never dead letters.
func (x *index) remove(ids []event.ID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		if e := x.find(id.Seq); e != nil && e.n > e.dead {
			e.n--
		}
	}
	x.advance()
}

// markDead records that the intents of ids became dead letters.
func (x *index) markDead(ids []event.ID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		if e := x.find(id.Seq); e != nil && e.dead < e.n {
			if e.dead == 0 || id.Pos > e.lastDead {
				e.lastDead = id.Pos
			}
			e.dead++
		}
	}
	x.advance()
}

// revive records that the intents of ids, dead letters, are pending again
// (a redrive, redrive.go). A revived commit before the live floor becomes
// the live floor: scans must reach it again. The entries between it and the
// old floor are then behind the floor again, and advance walks over them
// once more, recounting the dead letters before the floor; deadTop stays an
// upper bound (a commit's lastDead may now name a revived intent), which
// only makes a scan start lower, never skip an intent.
func (x *index) revive(ids []event.ID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	low := x.live // the lowest revived entry before the live floor, if any
	for _, id := range ids {
		rest := x.seqs[x.head:]
		i := sort.Search(len(rest), func(i int) bool { return rest[i].seq >= id.Seq })
		if i == len(rest) || rest[i].seq != id.Seq || rest[i].dead == 0 {
			continue
		}
		rest[i].dead--
		low = min(low, x.head+i)
	}
	if low < x.live {
		// One recount of the entries before the new floor, whatever the
		// order and number of ids.
		x.live = low
		x.deadSeqs, x.hasDeadTop = 0, false
		for _, e := range x.seqs[x.head:low] {
			if e.n > 0 {
				x.deadSeqs++
				x.deadTop, x.hasDeadTop = event.ID{Seq: e.seq, Pos: e.lastDead}, true
			}
		}
	}
	x.advance()
}

// advance moves head and live past the entries that no longer hold what
// they point at, and compacts the list once most of it is droppable.
func (x *index) advance() {
	for x.head < len(x.seqs) && x.seqs[x.head].n == 0 {
		x.head++
	}
	if x.live < x.head {
		x.live = x.head
	}
	for x.live < len(x.seqs) && x.seqs[x.live].n == x.seqs[x.live].dead {
		if e := x.seqs[x.live]; e.n > 0 {
			x.deadTop, x.hasDeadTop = event.ID{Seq: e.seq, Pos: e.lastDead}, true
			x.deadSeqs++
		}
		x.live++
	}
	// Every entry before head, and every empty one in [head, live), can go.
	if drop := x.live - x.deadSeqs; drop > 1024 && drop*2 > len(x.seqs) {
		kept := make([]seqCount, 0, x.deadSeqs+len(x.seqs)-x.live)
		for _, e := range x.seqs[x.head:x.live] {
			if e.n > 0 {
				kept = append(kept, e)
			}
		}
		x.seqs = append(kept, x.seqs[x.live:]...)
		x.head, x.live = 0, x.deadSeqs
	}
}

// lowWater returns the lowest sequence with any undelivered intent.
func (x *index) lowWater() (uint64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.head < len(x.seqs) {
		return x.seqs[x.head].seq, true
	}
	return 0, false
}

// floor returns the lowest sequence a scan strictly after `after` (nil:
// from the start) must read from: the low-water mark, or the live floor
// when after is at or past every dead letter below it (every intent below
// the live floor is such a dead letter, so none lies between after and the
// live floor). ok is false when no intent lies after `after`.
func (x *index) floor(after *event.ID) (seq uint64, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.head == len(x.seqs) {
		return 0, false
	}
	if after == nil || x.hasDeadTop && after.Compare(x.deadTop) < 0 {
		return x.seqs[x.head].seq, true
	}
	if x.live == len(x.seqs) {
		return 0, false // only dead letters, none after `after`
	}
	return x.seqs[x.live].seq, true
}

// UndeliveredCount returns the number of undelivered intents (pending,
// retry scheduled, delivering and dead letters) and the index state. The
// count is meaningful only when the state is IndexReady. It is O(1) and reads
// no store.
func (db *DB) UndeliveredCount() (n uint64, state IndexState) {
	st := IndexState(db.idx.state.Load())
	if st != IndexReady {
		return 0, st
	}
	return db.idx.count.Load(), st
}

// buildIndex verifies the durable count by counting intents (the only full
// scan of the index), rebuilds the in-memory low-water list, recovers
// interrupted deliveries and marks the index ready.
func (db *DB) buildIndex(ctx context.Context) error {
	counted, stuck, corrupt, err := db.scanIndex()
	if err != nil {
		return err
	}
	db.idx.count.Store(db.durableCount)
	if corrupt || counted != db.durableCount {
		db.idx.degrade()
		db.log.Error("primary undelivered count does not match the index; count unavailable",
			zap.Uint64("stored_count", db.durableCount), zap.Uint64("intents", counted), zap.Bool("corrupt_intent", corrupt))
	}
	moved, err := db.recover(ctx, stuck)
	if err != nil {
		db.idx.degrade()
		return fmt.Errorf("primary: recover deliveries: %w", err)
	}
	if moved > 0 {
		db.log.Info("primary recovered interrupted deliveries", zap.Int("intents", moved))
	}
	db.idx.setReady()
	close(db.ready)
	db.refreshUsage()
	return nil
}
