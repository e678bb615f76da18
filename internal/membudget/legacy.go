package membudget

import (
	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/primary"
)

// Divide is Sizes.Divide with the stores' own sizes. It is the last import
// of a store by an internal package, kept only until server/server.go calls
// divideMemory (server/membudget.go) instead; then this file and its entries
// in internal/boundary's InternalImports go.
func Divide(budget int64, primaries, archives int) Split {
	return Sizes{
		MaxPrimaryMemTable: primary.DefaultMemTableSize,
		MaxArchiveMemTable: archive.DefaultMemTableSize,
		ArchiveBlockBytes:  archive.BlockCacheBytes,
	}.Divide(budget, primaries, archives)
}
