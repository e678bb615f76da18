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

// seqCount is the number of undelivered intents of one commit.
type seqCount struct {
	seq uint64
	n   uint32
}

// index is the in-memory mirror of the undelivered index: the durable count
// and, per commit sequence, how many intents remain. The per-sequence list
// gives the undelivered low-water mark without reading the store.
type index struct {
	state atomic.Uint32
	count atomic.Uint64

	mu   sync.Mutex
	seqs []seqCount // ascending seq; entries with n == 0 are dropped from the front
	head int
}

func (x *index) degrade() { x.state.Store(uint32(IndexDegraded)) }

// setReady moves an unbuilt index to ready; a degraded index stays degraded.
func (x *index) setReady() { x.state.CompareAndSwap(uint32(IndexUnbuilt), uint32(IndexReady)) }

// add records n intents for seq. Callers add in ascending seq order.
func (x *index) add(seq uint64, n uint32) {
	if n == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if l := len(x.seqs); l > x.head && x.seqs[l-1].seq == seq {
		x.seqs[l-1].n += n
		return
	}
	x.seqs = append(x.seqs, seqCount{seq: seq, n: n})
}

// remove records that the intents of ids are gone.
func (x *index) remove(ids []event.ID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	live := x.seqs[x.head:]
	for _, id := range ids {
		i := sort.Search(len(live), func(i int) bool { return live[i].seq >= id.Seq })
		if i < len(live) && live[i].seq == id.Seq && live[i].n > 0 {
			live[i].n--
		}
	}
	for x.head < len(x.seqs) && x.seqs[x.head].n == 0 {
		x.head++
	}
	if x.head > 1024 && x.head*2 > len(x.seqs) {
		x.seqs = append([]seqCount(nil), x.seqs[x.head:]...)
		x.head = 0
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
