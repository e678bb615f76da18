// Package membudget divides one process's memory budget among the Pebble
// stores of every database it hosts: a block cache shared by the primary
// stores, one shared by the archive stores, and a memtable size for each
// primary and each archive store.
//
// # The split
//
// A store holds up to two memtables of its size at once (the one being
// written and the one being flushed; Pebble stops writes beyond that,
// MemTableStopWritesThreshold = 2), and its memtable memory is touched as it
// fills, so under sustained load it is resident. The block cache is shared
// and holds what reads bring in, up to its size. So:
//
//   - Three quarters of the budget are offered to memtables, shared by
//     weight: a primary counts 3, an archive 1. The primary is the store
//     whose flushes rewrite a range (every flush overlaps the intents below
//     it), so larger memtables buy it throughput (primary.DefaultMemTableSize
//     explains the measurement); an archive only appends. Each store's share
//     covers its two memtables.
//   - Each memtable is then clamped: at most MaxPrimaryMemTable or
//     MaxArchiveMemTable (the sizes the stores were tuned at; more bought
//     nothing measurable), at least MinMemTable (Pebble starts every store's
//     first memtable at 256 KiB anyway), and rounded down to a multiple of
//     64 KiB.
//   - The block cache gets the rest of the budget: the budget less the
//     memtables' worst case (two per store), and never less than a quarter
//     of it. With few databases the memtables reach their maximum and the
//     cache gets most of the budget; with many, memtables shrink and the
//     cache keeps its quarter.
//   - The cache is two: one shared by the primaries and one shared by the
//     archives, which holds archive.BlockCacheBytes (4 MiB) of blocks per
//     archive and never more than an eighth of the cache. An archive's
//     scans (the background scrub above all) read each block once per
//     pass, and a cache that held the whole archive would have the scrub
//     validate cached blocks instead of the disk (archive.BlockCacheBytes
//     says why). Pebble counts the memtables of the stores that use a
//     cache inside it (memTablesReserved), so the archives' cache is made
//     larger by their memtables; without that, 4 MiB for one archive with
//     2 MiB memtables would hold no block. The rest of the cache goes to
//     the primaries, which read what commands and delivery come back to,
//     and which the archives' scans, in a cache of their own, cannot push
//     out. (Until 2026-12-03 the archives had an eighth of the cache,
//     55.5 MiB at one database: the scrub filled it in the first minutes
//     of every soak, and each compaction's eviction and refill of it left
//     free space in the C heap; docs/benchmarks.md, "One memory budget".)
//
// The budget bounds the storage engines' memory. It does not bound the Go
// heap (requests in flight, the undelivered index, telemetry), which comes
// on top. Only at the smallest budgets with the most databases can the
// memtable floor push the engines past the budget; Divide reports the
// worst case in Split.EngineBytes.
package membudget

import (
	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/primary"
)

const (
	// MaxPrimaryMemTable is the largest memtable a primary store is given.
	MaxPrimaryMemTable = primary.DefaultMemTableSize
	// MaxArchiveMemTable is the largest memtable an archive store is given.
	MaxArchiveMemTable = archive.DefaultMemTableSize
	// MinMemTable is the smallest memtable any store is given.
	MinMemTable = 256 << 10
	// memTablesPerStore is how many memtables of its size a store can hold
	// at once (Pebble's MemTableStopWritesThreshold default).
	memTablesPerStore = 2
	// memTablesReserved is how many memtables of its size a store reserves
	// in its block cache: Pebble takes a reservation in the cache for the
	// memory of every memtable it allocates (db.go, newMemTable) and keeps
	// it for the one it holds for reuse (memTableRecycle), so a busy store
	// reserves up to its two memtables and a third. The reservation shrinks
	// what the cache holds of blocks by as much.
	memTablesReserved = 3
	// primaryWeight and archiveWeight share the memtable part of the
	// budget between the two kinds of store.
	primaryWeight, archiveWeight = 3, 1
	// granule is what memtable sizes are rounded down to.
	granule = 64 << 10
	// archiveCacheDivisor bounds the archives' cache to a part of the cache.
	archiveCacheDivisor = 8
)

// Split is one budget's division.
type Split struct {
	// Budget is the budget divided.
	Budget int64
	// CacheBytes is the block caches' part of the budget: PrimaryCacheBytes
	// for the cache the primary stores share, ArchiveBlockBytes of blocks
	// for the one the archive stores share (0 without archives).
	CacheBytes, PrimaryCacheBytes, ArchiveBlockBytes int64
	// ArchiveCacheBytes is the size of the archives' Pebble cache:
	// ArchiveBlockBytes and the reservation Pebble takes in it for the
	// archives' memtables (memTablesReserved per archive).
	ArchiveCacheBytes int64
	// PrimaryMemTable and ArchiveMemTable are the memtable sizes of each
	// primary and each archive store.
	PrimaryMemTable, ArchiveMemTable uint64
	// EngineBytes is the engines' worst case: the cache plus two memtables
	// per store.
	EngineBytes int64
}

// Divide splits budget (bytes, > 0) among primaries primary stores and
// archives archive stores (a database without an outbox has no archive).
func Divide(budget int64, primaries, archives int) Split {
	s := Split{Budget: budget, PrimaryMemTable: MaxPrimaryMemTable, ArchiveMemTable: MaxArchiveMemTable}
	if units := int64(primaryWeight*primaries + archiveWeight*archives); units > 0 {
		unit := budget * 3 / 4 / units / memTablesPerStore
		s.PrimaryMemTable = clamp(unit*primaryWeight, MaxPrimaryMemTable)
		s.ArchiveMemTable = clamp(unit*archiveWeight, MaxArchiveMemTable)
	}
	memtables := memTablesPerStore * (int64(primaries)*int64(s.PrimaryMemTable) + int64(archives)*int64(s.ArchiveMemTable))
	s.CacheBytes = max(budget-memtables, budget/4)
	if archives > 0 {
		s.ArchiveBlockBytes = min(int64(archives)*archive.BlockCacheBytes, s.CacheBytes/archiveCacheDivisor)
		s.ArchiveCacheBytes = s.ArchiveBlockBytes + memTablesReserved*int64(archives)*int64(s.ArchiveMemTable)
	}
	s.PrimaryCacheBytes = s.CacheBytes - s.ArchiveBlockBytes
	s.EngineBytes = s.CacheBytes + memtables
	return s
}

// clamp bounds a memtable size to [MinMemTable, hi] and rounds it down to
// the granule.
func clamp(size int64, hi uint64) uint64 {
	return max(MinMemTable, min(uint64(size), hi)/granule*granule)
}
