package server

import (
	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/internal/process/membudget"
	"github.com/riffdb/riffdb/primary"
)

// memorySizes are the stores' own sizes that the memory budget is divided
// with (internal/process/membudget): the memtables each kind of store was tuned at,
// and the blocks the archives' cache holds per archive.
var memorySizes = membudget.Sizes{
	MaxPrimaryMemTable: primary.DefaultMemTableSize,
	MaxArchiveMemTable: archive.DefaultMemTableSize,
	ArchiveBlockBytes:  archive.BlockCacheBytes,
}

// divideMemory divides budget among primaries primary stores and archives
// archive stores with the stores' own sizes.
func divideMemory(budget int64, primaries, archives int) membudget.Split {
	return memorySizes.Divide(budget, primaries, archives)
}
