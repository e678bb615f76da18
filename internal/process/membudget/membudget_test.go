package membudget_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/process/membudget"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

const mib = 1 << 20

// sizes are the stores' own sizes, as the server passes them.
var sizes = membudget.Sizes{
	MaxPrimaryMemTable: primary.DefaultMemTableSize,
	MaxArchiveMemTable: archive.DefaultMemTableSize,
	ArchiveBlockBytes:  archive.BlockCacheBytes,
}

func TestDivideDefaultBudget(t *testing.T) {
	for _, c := range []struct {
		dbs              int
		primary, archive uint64
		blocks           int64
	}{
		// One database: both memtables at their maximum, blocks get the rest.
		{1, 32 * mib, 2 * mib, 512*mib - 3*(32+2)*mib},
		// Four: 384 MiB offered to memtables by weight 3:1, three per store.
		{4, 24 * mib, 2 * mib, 512*mib - 4*3*(24+2)*mib},
		{16, 6 * mib, 2 * mib, 128 * mib},
		// 32 databases: 384 MiB of memtables, blocks their quarter.
		{32, 3 * mib, mib, 128 * mib},
	} {
		s := sizes.Divide(config.DefaultMemoryBudgetBytes, c.dbs, c.dbs)
		if s.PrimaryMemTable != c.primary || s.ArchiveMemTable != c.archive || s.BlockBytes != c.blocks {
			t.Errorf("%d databases: primary %d, archive %d, blocks %d; want %d, %d, %d",
				c.dbs, s.PrimaryMemTable, s.ArchiveMemTable, s.BlockBytes, c.primary, c.archive, c.blocks)
		}
		if s.EngineBytes != s.Budget || s.Budget != config.DefaultMemoryBudgetBytes {
			t.Errorf("%d databases: the engines may use %d bytes of a %d budget, not all of the default", c.dbs, s.EngineBytes, s.Budget)
		}
	}
}

// TestDivideBounds checks the split's invariants over the whole range of
// budgets the configuration accepts and every database count.
func TestDivideBounds(t *testing.T) {
	budgets := []int64{config.MinMemoryBudgetBytes, 100 * mib, config.DefaultMemoryBudgetBytes, 3 << 30, 100 << 30, config.MaxMemoryBudgetBytes}
	for _, b := range budgets {
		var prev membudget.Split
		for n := 0; n <= config.MaxDatabases; n++ {
			for _, archives := range []int{0, n} {
				s := sizes.Divide(b, n, archives)
				for _, m := range []struct {
					size, max uint64
				}{{s.PrimaryMemTable, sizes.MaxPrimaryMemTable}, {s.ArchiveMemTable, sizes.MaxArchiveMemTable}} {
					if m.size < membudget.MinMemTable || m.size > m.max || m.size%(64<<10) != 0 {
						t.Fatalf("budget %d, %d+%d stores: memtable %d outside [%d, %d] or not a multiple of 64 KiB", b, n, archives, m.size, membudget.MinMemTable, m.max)
					}
				}
				primaries, archiveTables := 3*int64(n)*int64(s.PrimaryMemTable), 3*int64(archives)*int64(s.ArchiveMemTable)
				if s.BlockBytes < b/4 || s.EngineBytes != s.BlockBytes+primaries+archiveTables {
					t.Fatalf("budget %d, %d+%d stores: blocks %d, engines %d, memtables %d", b, n, archives, s.BlockBytes, s.EngineBytes, primaries+archiveTables)
				}
				// Each Pebble cache holds its blocks beside the reservation
				// of three memtables per store that shares it.
				if s.PrimaryCacheBytes != s.PrimaryBlockBytes+primaries || s.ArchiveCacheBytes != s.ArchiveBlockBytes+archiveTables ||
					s.PrimaryBlockBytes+s.ArchiveBlockBytes != s.BlockBytes || s.PrimaryBlockBytes <= 0 {
					t.Fatalf("budget %d, %d+%d stores: %+v", b, n, archives, s)
				}
				floored := s.PrimaryMemTable == membudget.MinMemTable || s.ArchiveMemTable == membudget.MinMemTable
				if s.EngineBytes > b && !floored {
					t.Fatalf("budget %d, %d+%d stores: the engines may use %d, over the budget without a floored memtable", b, n, archives, s.EngineBytes)
				}
				// Over budget only by the floor, and never by much: at the
				// smallest budget (64 MiB) and the most stores (32 with
				// archives), three memtables of 384 and 256 KiB per database
				// are 60 MiB beside the blocks' quarter, 76 MiB in all.
				if s.EngineBytes > b+b/4 {
					t.Fatalf("budget %d, %d+%d stores: the engines may use %d", b, n, archives, s.EngineBytes)
				}
			}
			s := sizes.Divide(b, n, n)
			if n > 1 && (s.PrimaryMemTable > prev.PrimaryMemTable || s.ArchiveMemTable > prev.ArchiveMemTable) {
				t.Fatalf("budget %d: %d databases get larger memtables than %d", b, n, n-1)
			}
			prev = s
		}
	}
}

func TestDivideWithoutArchivesGivesPrimariesTheShare(t *testing.T) {
	with, without := sizes.Divide(config.DefaultMemoryBudgetBytes, 32, 32), sizes.Divide(config.DefaultMemoryBudgetBytes, 32, 0)
	if without.PrimaryMemTable <= with.PrimaryMemTable {
		t.Fatalf("primaries without archives get %d, with archives %d", without.PrimaryMemTable, with.PrimaryMemTable)
	}
}

// The archives' reads that would profit from a cache are few (the package
// comment): at one database their cache holds 4 MiB of blocks, not an
// eighth of the blocks (55.5 MiB with the default budget), and the eighth
// still bounds it where many archives share a small cache. Their Pebble
// cache is larger by the reservation Pebble takes in it for three
// memtables per archive; without it the 4 MiB would hold no block.
func TestDivideGivesTheArchivesASmallCache(t *testing.T) {
	for _, c := range []struct {
		budget           int64
		databases        int
		archiveBlocks    int64
		archiveMemTable  uint64
		primaryBlocksMin int64
	}{
		{config.DefaultMemoryBudgetBytes, 1, 4 << 20, 2 << 20, 406 << 20},
		{config.DefaultMemoryBudgetBytes, 4, 16 << 20, 2 << 20, 184 << 20},
		{config.DefaultMemoryBudgetBytes, 32, 16 << 20, 1 << 20, 112 << 20},
		{64 << 20, 4, 2 << 20, 1 << 20, 14 << 20},
	} {
		s := sizes.Divide(c.budget, c.databases, c.databases)
		reserved := 3 * int64(c.databases) * int64(c.archiveMemTable)
		if s.ArchiveBlockBytes != c.archiveBlocks || s.ArchiveMemTable != c.archiveMemTable ||
			s.ArchiveCacheBytes != c.archiveBlocks+reserved || s.PrimaryBlockBytes < c.primaryBlocksMin {
			t.Errorf("budget %d MiB, %d databases: archive blocks %d in a cache of %d (memtable %d), primary blocks %d; want %d blocks and 3 memtables of %d, primary blocks at least %d",
				c.budget>>20, c.databases, s.ArchiveBlockBytes, s.ArchiveCacheBytes, s.ArchiveMemTable, s.PrimaryBlockBytes, c.archiveBlocks, c.archiveMemTable, c.primaryBlocksMin)
		}
	}
}

func TestDivideKeepsTheArchivesCacheApart(t *testing.T) {
	for _, n := range []int{1, 4, 16, 32} {
		s := sizes.Divide(config.DefaultMemoryBudgetBytes, n, n)
		if want := min(int64(n)*sizes.ArchiveBlockBytes, s.BlockBytes/8); s.ArchiveBlockBytes != want || s.PrimaryBlockBytes+s.ArchiveBlockBytes != s.BlockBytes {
			t.Errorf("%d databases: primary blocks %d, archive blocks %d, blocks %d", n, s.PrimaryBlockBytes, s.ArchiveBlockBytes, s.BlockBytes)
		}
		if without := sizes.Divide(config.DefaultMemoryBudgetBytes, n, 0); without.ArchiveCacheBytes != 0 || without.ArchiveBlockBytes != 0 || without.PrimaryBlockBytes != without.BlockBytes {
			t.Errorf("%d databases without archives: primary blocks %d, archive cache %d, blocks %d", n, without.PrimaryBlockBytes, without.ArchiveCacheBytes, without.BlockBytes)
		}
	}
}

// TestPrimaryCacheHoldsBlocksUnderLoad opens four Pebble stores as the
// split sizes four primaries (a 64 MiB budget), sharing one cache, and
// fills each with several memtables of writes, so that every store holds
// its memtables' reservation in the cache (Pebble reserves each memtable
// it allocates there, the one it keeps for reuse included). Reading the
// stores' tables back must then leave blocks in the cache: the split's
// blocks are blocks, not room the memtables already took.
func TestPrimaryCacheHoldsBlocksUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a load on four stores sized by the budget, seconds under the race detector")
	}
	const databases = 4
	s := sizes.Divide(config.MinMemoryBudgetBytes, databases, databases)
	c := pebble.NewCache(s.PrimaryCacheBytes)
	defer c.Unref()
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 32<<10)
	var dbs []*pebble.DB
	defer func() {
		for _, db := range dbs {
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	var reserved int64
	for i := range databases {
		db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Cache: c, MemTableSize: s.PrimaryMemTable, Logger: testutil.QuietPebbleLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
		// Pebble grows a new store's memtables from 256 KiB up to its
		// size; six memtables of writes take it there and flush it.
		for k := 0; k < 6*int(s.PrimaryMemTable)/len(value); k++ {
			for j := range value {
				value[j] = byte(rng.Uint32())
			}
			if err := db.Set(fmt.Appendf(nil, "%d/%08d", i, k), value, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		m := db.Metrics()
		reserved += int64(m.MemTable.Size + m.MemTable.ZombieSize)
	}
	if reserved < 2*databases*int64(s.PrimaryMemTable) {
		t.Fatalf("the stores reserve %d bytes of memtables in the cache; the test wants at least two memtables of %d each", reserved, s.PrimaryMemTable)
	}
	for _, db := range dbs {
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for it.First(); it.Valid(); it.Next() {
			_ = it.Value()
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	blocks := s.PrimaryBlockBytes
	if got := c.Metrics().Size; got < blocks/2 {
		t.Fatalf("after reading %d stores' tables the primaries' cache of %d bytes holds %d bytes of blocks (memtables reserve %d); the split gives them %d",
			databases, s.PrimaryCacheBytes, got, reserved, blocks)
	}
}
