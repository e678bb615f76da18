// Package membudget divides one process's memory budget among the Pebble
// stores of every database it hosts: a block cache shared by the primary
// stores, one shared by the archive stores, and a memtable size for each
// primary and each archive store.
//
// # The split
//
// A store holds up to three memtables of its size at once: the one being
// written, the one being flushed (Pebble stops writes beyond those two,
// MemTableStopWritesThreshold = 2), and an obsolete one Pebble keeps to
// reuse its memory at the next rotation (memTableRecycle). Its memtable
// memory is touched as it fills, so under sustained load all three are
// resident. The block cache is shared and holds what reads bring in, up to
// its size. So:
//
//   - Three quarters of the budget are offered to memtables, shared by
//     weight: a primary counts 3, an archive 1. The primary is the store
//     whose flushes rewrite a range (every flush overlaps the intents below
//     it), so larger memtables buy it throughput (primary.DefaultMemTableSize
//     explains the measurement); an archive only appends. Each store's share
//     covers its three memtables.
//   - Each memtable is then clamped: at most Sizes.MaxPrimaryMemTable or
//     Sizes.MaxArchiveMemTable (the sizes the stores were tuned at; more bought
//     nothing measurable), at least MinMemTable (Pebble starts every store's
//     first memtable at 256 KiB anyway), and rounded down to a multiple of
//     64 KiB.
//   - Blocks get the rest of the budget: the budget less the memtables'
//     worst case (three per store), and never less than a quarter of it.
//     With few databases the memtables reach their maximum and blocks get
//     most of the budget; with many, memtables shrink and blocks keep their
//     quarter.
//   - The blocks are held in two caches: one shared by the primaries and
//     one shared by the archives, which holds archive.BlockCacheBytes
//     (4 MiB) of blocks per archive and never more than an eighth of the
//     blocks. An archive's scans (the background scrub above all) read each
//     block once per pass and gain nothing from a larger cache
//     (archive.BlockCacheBytes says why). The rest goes to the primaries,
//     which read what commands and delivery come back to, and which the
//     archives' scans, in a cache of their own, cannot push out.
//   - Pebble counts the memtables of the stores that use a cache inside it:
//     it reserves each memtable's size in the cache when it allocates it
//     and keeps the reservation while it holds it for reuse (db.go,
//     newMemTable; Cache.Reserve). So each Pebble cache is made as large as
//     its blocks and three memtables per store that shares it
//     (Split.PrimaryCacheBytes, Split.ArchiveCacheBytes); the reservation
//     stands for memory the memtables use, outside the cache, so the
//     engines' memory stays the budget. (Until 2026-12-03 the primaries'
//     cache was its blocks alone: from four databases on, under sustained
//     load, their memtables' reservation took all of it and it held no
//     block; docs/benchmarks.md, "One memory budget".)
//
// The budget bounds the storage engines' memory. It does not bound the Go
// heap (requests in flight, the undelivered index, telemetry), which comes
// on top. Only at the smallest budgets with the most databases can the
// memtable floor push the engines past the budget; Divide reports the
// worst case in Split.EngineBytes.
//
// The package depends on no store: the stores' own sizes come in as Sizes.
package membudget

const (
	// MinMemTable is the smallest memtable any store is given.
	MinMemTable = 256 << 10
	// memTablesPerStore is how many memtables of its size a store can hold
	// at once, and reserve in its block cache: the two Pebble's
	// MemTableStopWritesThreshold default lets it fill and flush, and the
	// one it keeps for reuse (memTableRecycle). Pebble takes a reservation
	// in the cache for the memory of every memtable it allocates (db.go,
	// newMemTable) and keeps it while it holds the memtable for reuse.
	memTablesPerStore = 3
	// primaryWeight and archiveWeight share the memtable part of the
	// budget between the two kinds of store.
	primaryWeight, archiveWeight = 3, 1
	// granule is what memtable sizes are rounded down to.
	granule = 64 << 10
	// archiveCacheDivisor bounds the archives' blocks to a part of the
	// blocks.
	archiveCacheDivisor = 8
)

// Split is one budget's division.
type Split struct {
	// Budget is the budget divided.
	Budget int64
	// BlockBytes is the part of the budget that holds blocks:
	// PrimaryBlockBytes in the cache the primary stores share and
	// ArchiveBlockBytes in the one the archive stores share (0 without
	// archives).
	BlockBytes, PrimaryBlockBytes, ArchiveBlockBytes int64
	// PrimaryCacheBytes and ArchiveCacheBytes are the sizes of the two
	// Pebble caches: their blocks and the reservation Pebble takes in each
	// for the memtables of the stores that share it (memTablesPerStore per
	// store).
	PrimaryCacheBytes, ArchiveCacheBytes int64
	// PrimaryMemTable and ArchiveMemTable are the memtable sizes of each
	// primary and each archive store.
	PrimaryMemTable, ArchiveMemTable uint64
	// EngineBytes is the engines' worst case: the blocks and three
	// memtables per store.
	EngineBytes int64
}

// Sizes are the stores' own sizes that a division respects. The stores
// define them (primary.DefaultMemTableSize, archive.DefaultMemTableSize,
// archive.BlockCacheBytes); the server passes them in, so that this package
// depends on no store.
type Sizes struct {
	// MaxPrimaryMemTable and MaxArchiveMemTable are the largest memtables a
	// primary and an archive store are given (at least MinMemTable).
	MaxPrimaryMemTable, MaxArchiveMemTable uint64
	// ArchiveBlockBytes is the blocks the archives' cache holds per archive,
	// within an eighth of all blocks.
	ArchiveBlockBytes int64
}

// Divide splits budget (bytes, > 0) among primaries primary stores and
// archives archive stores (a database without an outbox has no archive).
func (z Sizes) Divide(budget int64, primaries, archives int) Split {
	s := Split{Budget: budget, PrimaryMemTable: z.MaxPrimaryMemTable, ArchiveMemTable: z.MaxArchiveMemTable}
	if units := int64(primaryWeight*primaries + archiveWeight*archives); units > 0 {
		unit := budget * 3 / 4 / units / memTablesPerStore
		s.PrimaryMemTable = clamp(unit*primaryWeight, z.MaxPrimaryMemTable)
		s.ArchiveMemTable = clamp(unit*archiveWeight, z.MaxArchiveMemTable)
	}
	primaryMemTables := memTablesPerStore * int64(primaries) * int64(s.PrimaryMemTable)
	archiveMemTables := memTablesPerStore * int64(archives) * int64(s.ArchiveMemTable)
	s.BlockBytes = max(budget-primaryMemTables-archiveMemTables, budget/4)
	if archives > 0 {
		s.ArchiveBlockBytes = min(int64(archives)*z.ArchiveBlockBytes, s.BlockBytes/archiveCacheDivisor)
		s.ArchiveCacheBytes = s.ArchiveBlockBytes + archiveMemTables
	}
	s.PrimaryBlockBytes = s.BlockBytes - s.ArchiveBlockBytes
	s.PrimaryCacheBytes = s.PrimaryBlockBytes + primaryMemTables
	s.EngineBytes = s.BlockBytes + primaryMemTables + archiveMemTables
	return s
}

// clamp bounds a memtable size to [MinMemTable, hi] and rounds it down to
// the granule.
func clamp(size int64, hi uint64) uint64 {
	return max(MinMemTable, min(uint64(size), hi)/granule*granule)
}
