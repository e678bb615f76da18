package primary

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// usage caches the reclaimable history bytes so HistoryUsage reads no store.
type usage struct {
	mu          sync.Mutex
	dirty       atomic.Bool
	reclaimable atomic.Int64
}

// HistoryUsage returns the bytes of retained history (history records and
// stored events, keys and values) and how many of them Prune could reclaim
// now. It is O(1) and reads no store.
func (db *DB) HistoryUsage() (retainedBytes, reclaimableBytes int64) {
	return int64(db.cumulativeBytes.Load() - db.prunedCum.Load()), db.usage.reclaimable.Load()
}

// refreshUsage recomputes the reclaimable bytes after a change of the
// sequence, the low-water mark or the pruned mark. Concurrent callers
// coalesce: one recomputes while the others return.
func (db *DB) refreshUsage() {
	db.usage.dirty.Store(true)
	for db.usage.dirty.Load() && db.usage.mu.TryLock() {
		for db.usage.dirty.Swap(false) {
			db.usage.reclaimable.Store(db.computeReclaimable())
		}
		db.usage.mu.Unlock()
	}
}

func (db *DB) computeReclaimable() int64 {
	limit := db.pruneLimit(db.lastApplied.Load(), db.idx.lowWater)
	first := db.first.Load()
	if limit <= first {
		return 0
	}
	v, err := db.get(historyKey(limit - 1))
	if err != nil {
		return 0
	}
	h, err := decodeHistory(v)
	if err != nil {
		return 0
	}
	return int64(h.Cum - db.prunedCum.Load())
}

// pruneLimit returns the first sequence that must be kept: the retention
// window's start, lowered to the undelivered low-water mark.
func (db *DB) pruneLimit(last uint64, lowWater func() (uint64, bool)) uint64 {
	r := db.opts.HistoryRetention
	if r == 0 || last < r {
		return 0
	}
	limit := last - r + 1
	if lw, ok := lowWater(); ok && lw < limit {
		limit = lw
	}
	return limit
}

// pruneChunk bounds the commits removed per synced batch.
const pruneChunk = 1024

// Prune removes history (records, stored events, idempotency keys) older
// than the newest HistoryRetention commits, but never at or above the
// undelivered low-water mark: the lowest sequence with any intent, dead
// letters included. The low-water mark is read from the store itself. It
// returns the number of commits removed.
func (db *DB) Prune(ctx context.Context) (pruned int, err error) {
	done, err := db.enterReady(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	db.pruneMu.Lock()
	defer db.pruneMu.Unlock()
	db.mu.Lock()
	last := db.last // every commit ≤ last is applied, so its intents are visible
	db.mu.Unlock()
	limit := db.pruneLimit(last, db.storeLowWater)
	defer db.refreshUsage()
	for first := db.first.Load(); first < limit; first = db.first.Load() {
		if err := context.Cause(ctx); err != nil {
			return pruned, err
		}
		end := min(limit, first+pruneChunk)
		n, err := db.pruneRange(first, end)
		pruned += n
		if err != nil {
			return pruned, err
		}
	}
	return pruned, nil
}

// storeLowWater seeks the first intent in the store.
func (db *DB) storeLowWater() (uint64, bool) {
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: []byte{nsIntent}, UpperBound: prefixEnd(nsIntent)})
	if err != nil {
		return 0, true // cannot tell: prune nothing
	}
	defer it.Close()
	if !it.First() {
		return 0, it.Error() != nil
	}
	id, err := decodeIntentKey(it.Key())
	if err != nil {
		return 0, true
	}
	return id.Seq, true
}

func (db *DB) pruneRange(first, end uint64) (int, error) {
	it, err := db.store.NewIter(&pebble.IterOptions{LowerBound: commitPrefix(first), UpperBound: commitPrefix(end)})
	if err != nil {
		return 0, err
	}
	var keys []string
	var cum, lastSeq uint64
	for ok := it.First(); ok; ok = it.Next() {
		if !isHistoryKey(it.Key()) {
			continue // an event of the commit
		}
		h, err := decodeHistory(it.Value())
		if err != nil {
			_ = it.Close()
			return 0, err
		}
		if h.IdemKey != "" {
			keys = append(keys, h.IdemKey)
		}
		cum, lastSeq = h.Cum, h.Seq
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	if lastSeq != end-1 {
		return 0, fmt.Errorf("%w: history record %d missing", ErrCorrupt, end-1)
	}
	b := db.store.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(commitPrefix(first), commitPrefix(end), nil) // history records and events
	for _, k := range keys {
		v, err := db.get(idemKey(k))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if rec, err := decodeIdem(v); err == nil && rec.Seq < end {
			_ = b.Delete(idemKey(k), nil)
		}
	}
	_ = b.Set(keyPruned, encodePruned(prunedMark{First: end, Cum: cum}), nil)
	err = db.guard(func() error {
		if err := b.Commit(pebble.Sync); err != nil {
			return db.writeFailed(err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	db.first.Store(end)
	db.prunedCum.Store(cum)
	return int(end - first), nil
}
