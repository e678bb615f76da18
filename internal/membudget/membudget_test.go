package membudget_test

import (
	"testing"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/membudget"
)

const mib = 1 << 20

func TestDivideDefaultBudget(t *testing.T) {
	for _, c := range []struct {
		dbs              int
		primary, archive uint64
		cache            int64
	}{
		// One database: both memtables at their maximum, the cache gets the rest.
		{1, 32 * mib, 2 * mib, 512*mib - 2*(32+2)*mib},
		{4, 32 * mib, 2 * mib, 512*mib - 4*2*(32+2)*mib},
		{16, 9 * mib, 2 * mib, 512*mib - 16*2*(9+2)*mib},
		// 32 databases: 384 MiB of memtables by weight 3:1, the cache its quarter.
		{32, 4*mib + mib/2, mib + mib/2, 128 * mib},
	} {
		s := membudget.Divide(config.DefaultMemoryBudgetBytes, c.dbs, c.dbs)
		if s.PrimaryMemTable != c.primary || s.ArchiveMemTable != c.archive || s.CacheBytes != c.cache {
			t.Errorf("%d databases: primary %d, archive %d, cache %d; want %d, %d, %d",
				c.dbs, s.PrimaryMemTable, s.ArchiveMemTable, s.CacheBytes, c.primary, c.archive, c.cache)
		}
		if s.EngineBytes > s.Budget || s.Budget != config.DefaultMemoryBudgetBytes {
			t.Errorf("%d databases: the engines may use %d bytes of a %d budget", c.dbs, s.EngineBytes, s.Budget)
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
				s := membudget.Divide(b, n, archives)
				for _, m := range []struct {
					size, max uint64
				}{{s.PrimaryMemTable, membudget.MaxPrimaryMemTable}, {s.ArchiveMemTable, membudget.MaxArchiveMemTable}} {
					if m.size < membudget.MinMemTable || m.size > m.max || m.size%(64<<10) != 0 {
						t.Fatalf("budget %d, %d+%d stores: memtable %d outside [%d, %d] or not a multiple of 64 KiB", b, n, archives, m.size, membudget.MinMemTable, m.max)
					}
				}
				memtables := 2 * (int64(n)*int64(s.PrimaryMemTable) + int64(archives)*int64(s.ArchiveMemTable))
				if s.CacheBytes < b/4 || s.EngineBytes != s.CacheBytes+memtables {
					t.Fatalf("budget %d, %d+%d stores: cache %d, engines %d, memtables %d", b, n, archives, s.CacheBytes, s.EngineBytes, memtables)
				}
				floored := s.PrimaryMemTable == membudget.MinMemTable || s.ArchiveMemTable == membudget.MinMemTable
				if s.EngineBytes > b && !floored {
					t.Fatalf("budget %d, %d+%d stores: the engines may use %d, over the budget without a floored memtable", b, n, archives, s.EngineBytes)
				}
				// Over budget only by the floor, and never by much: at the
				// smallest budget and the most stores, a few MiB.
				if s.EngineBytes > b+b/8 {
					t.Fatalf("budget %d, %d+%d stores: the engines may use %d", b, n, archives, s.EngineBytes)
				}
			}
			s := membudget.Divide(b, n, n)
			if n > 1 && (s.PrimaryMemTable > prev.PrimaryMemTable || s.ArchiveMemTable > prev.ArchiveMemTable) {
				t.Fatalf("budget %d: %d databases get larger memtables than %d", b, n, n-1)
			}
			prev = s
		}
	}
}

func TestDivideWithoutArchivesGivesPrimariesTheShare(t *testing.T) {
	with, without := membudget.Divide(config.DefaultMemoryBudgetBytes, 32, 32), membudget.Divide(config.DefaultMemoryBudgetBytes, 32, 0)
	if without.PrimaryMemTable <= with.PrimaryMemTable {
		t.Fatalf("primaries without archives get %d, with archives %d", without.PrimaryMemTable, with.PrimaryMemTable)
	}
}

// The archives' reads that would profit from a cache are few (the package
// comment): at one database their cache holds 4 MiB of blocks, not an
// eighth of the cache (55.5 MiB with the default budget), and the eighth
// still bounds it where many archives share a small cache. Their Pebble
// cache is larger by the reservation Pebble takes in it for three
// memtables per archive; without it the 4 MiB would hold no block.
func TestDivideGivesTheArchivesASmallCache(t *testing.T) {
	for _, c := range []struct {
		budget          int64
		databases       int
		archiveBlocks   int64
		archiveMemTable uint64
		primaryCacheMin int64
	}{
		{config.DefaultMemoryBudgetBytes, 1, 4 << 20, 2 << 20, 440 << 20},
		{config.DefaultMemoryBudgetBytes, 4, 16 << 20, 2 << 20, 224 << 20},
		{config.DefaultMemoryBudgetBytes, 32, 16 << 20, 1536 << 10, 112 << 20},
		{64 << 20, 4, 2 << 20, 1536 << 10, 14 << 20},
	} {
		s := membudget.Divide(c.budget, c.databases, c.databases)
		reserved := 3 * int64(c.databases) * int64(c.archiveMemTable)
		if s.ArchiveBlockBytes != c.archiveBlocks || s.ArchiveMemTable != c.archiveMemTable ||
			s.ArchiveCacheBytes != c.archiveBlocks+reserved || s.PrimaryCacheBytes < c.primaryCacheMin {
			t.Errorf("budget %d MiB, %d databases: archive blocks %d in a cache of %d (memtable %d), primary cache %d; want %d blocks and 3 memtables of %d, primary cache at least %d",
				c.budget>>20, c.databases, s.ArchiveBlockBytes, s.ArchiveCacheBytes, s.ArchiveMemTable, s.PrimaryCacheBytes, c.archiveBlocks, c.archiveMemTable, c.primaryCacheMin)
		}
	}
}

func TestDivideKeepsTheArchivesCacheApart(t *testing.T) {
	for _, n := range []int{1, 4, 16, 32} {
		s := membudget.Divide(config.DefaultMemoryBudgetBytes, n, n)
		if want := min(int64(n)*archive.BlockCacheBytes, s.CacheBytes/8); s.ArchiveBlockBytes != want || s.PrimaryCacheBytes+s.ArchiveBlockBytes != s.CacheBytes {
			t.Errorf("%d databases: primary cache %d, archive blocks %d, cache %d", n, s.PrimaryCacheBytes, s.ArchiveBlockBytes, s.CacheBytes)
		}
		if without := membudget.Divide(config.DefaultMemoryBudgetBytes, n, 0); without.ArchiveCacheBytes != 0 || without.ArchiveBlockBytes != 0 || without.PrimaryCacheBytes != without.CacheBytes {
			t.Errorf("%d databases without archives: primary cache %d, archive cache %d, cache %d", n, without.PrimaryCacheBytes, without.ArchiveCacheBytes, without.CacheBytes)
		}
	}
}
