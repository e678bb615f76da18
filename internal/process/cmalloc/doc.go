// Package cmalloc bounds the memory the C allocator keeps after Pebble frees
// it.
//
// Pebble allocates its block caches' blocks and its memtables with C's
// calloc when the binary is built with cgo (the default wherever a C
// compiler is installed), and frees them with C's free. glibc's malloc gives
// each thread that allocates its own arena, up to eight per core, and a block
// freed into an arena stays resident there for that arena's later
// allocations. Go runs its cgo calls on whichever thread is free, so the
// cache's churn (a block read in on one thread, evicted on another) spreads
// over every arena and each keeps its own free space: measured with a 56 MiB
// cache filled by a scanning reader and 2 MiB memtables, glibc's free but
// resident memory grew from 52 MiB to over 100 MiB in two minutes on top of
// the 61 MiB in use, and RSS with it, while Pebble's own accounting did not
// move. With one arena the same run held 4 MiB free and RSS stayed flat
// (docs/benchmarks/2026-12-01-soak.md).
//
// So a process that imports this package asks glibc, before any store is
// opened, for one arena (mallopt M_ARENA_MAX = 1). Pebble's C allocations are
// blocks read on a cache miss, after a read from the disk, and memtables a
// few times a minute: 0.1 % of the CPU samples of a 4-database delivery
// benchmark with one arena or with eight, so one arena's lock is not on the
// delivery path (docs/benchmarks/2026-12-02-memory.md); the Go heap, where
// everything else lives, is not affected. An operator who sets
// MALLOC_ARENA_MAX or a glibc.malloc.arena_max tunable (GLIBC_TUNABLES)
// keeps that choice. Without cgo, or with a C library other than glibc, Pebble
// uses the Go heap or this package does nothing; Setting says which.
//
// ReadStats says what glibc's malloc holds (mallinfo2): in use and free in
// its heap, and mapped on its own, which the server exports as
// riffdb_c_allocator_memory_bytes.
package cmalloc

// OneArena is Setting's answer when the process runs on one glibc arena.
const OneArena = "one glibc malloc arena"

// Stats is what the C allocator holds (glibc's mallinfo2, over every arena).
type Stats struct {
	// HeapInUse is the bytes of the arenas' chunks in use: Pebble's cache
	// blocks with their metadata, the cache's entries and maps, and any
	// other small C allocation.
	HeapInUse int64
	// HeapFree is the bytes of the arenas' free chunks: space a freed
	// block left that no allocation has reused yet. It stays resident
	// until it is reused (riffdb never calls malloc_trim: what it could
	// return is measured in docs/benchmarks/2026-12-01-soak.md), except the
	// top of the heap beyond glibc's trim threshold, which free returns.
	HeapFree int64
	// Mapped is the bytes of the chunks glibc mapped on their own, above
	// its mmap threshold: Pebble's memtables.
	Mapped int64
}
