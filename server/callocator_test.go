package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/internal/process/cmalloc"
)

// TestCAllocatorMemoryIsExported: /metrics carries the C allocator's memory
// by state, and what is in use in its heap includes the block caches'
// blocks.
func TestCAllocatorMemoryIsExported(t *testing.T) {
	if _, ok := cmalloc.ReadStats(); !ok {
		t.Skipf("the C allocator's statistics cannot be read here: %s", cmalloc.Setting())
	}
	s, _ := startDev(t, nil)
	got := map[string]float64{}
	var cache float64
	for _, l := range strings.Split(scrapeMetrics(t, s), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		switch {
		case strings.HasPrefix(l, "riffdb_c_allocator_memory_bytes{"):
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			for _, st := range []string{"heap_in_use", "heap_free", "mapped"} {
				if strings.Contains(l, `riffdb_c_allocator_state="`+st+`"`) {
					got[st] = v
				}
			}
		case strings.HasPrefix(l, "riffdb_pebble_block_cache_size_bytes{") && strings.Contains(l, `riffdb_store="primary"`):
			cache = v
		}
	}
	if len(got) != 3 {
		t.Fatalf("riffdb_c_allocator_memory_bytes has the states %v, want heap_in_use, heap_free and mapped", got)
	}
	if got["heap_in_use"] <= 0 || got["heap_free"] < 0 || got["mapped"] < 0 {
		t.Fatalf("C allocator memory %v", got)
	}
	if got["heap_in_use"] < cache {
		t.Fatalf("C heap in use %v is below the primaries' block cache %v, whose blocks it holds", got["heap_in_use"], cache)
	}
}
