//go:build linux && cgo

package cmalloc

/*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

// riff_arena_setting records what riff_limit_arenas did: 0 not glibc,
// 1 one arena, 2 left to MALLOC_ARENA_MAX, 3 left to GLIBC_TUNABLES.
static int riff_arena_setting;

// riff_limit_arenas runs when the binary is loaded, before the Go runtime
// starts a thread: glibc gives each thread its own arena at its first
// allocation, and M_ARENA_MAX set later does not take back the arenas of
// threads that already allocated (the Go runtime's threads each allocate as
// they start, in pthread_getattr_np).
__attribute__((constructor)) static void riff_limit_arenas(void) {
	if (getenv("MALLOC_ARENA_MAX") != NULL) { riff_arena_setting = 2; return; }
	const char *t = getenv("GLIBC_TUNABLES");
	if (t != NULL && strstr(t, "glibc.malloc.arena_max") != NULL) { riff_arena_setting = 3; return; }
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
	if (mallopt(M_ARENA_MAX, 1) == 1) riff_arena_setting = 1;
#endif
}

static int riff_get_arena_setting(void) { return riff_arena_setting; }

// riff_count_arenas counts the arenas glibc's malloc_info reports (one
// <heap nr="..."> element each), or returns -1.
static int riff_count_arenas(void) {
#ifdef __GLIBC__
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL) return -1;
	int rc = malloc_info(0, f);
	fclose(f);
	if (rc != 0) { free(buf); return -1; }
	int n = 0;
	for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) n++;
	free(buf);
	return n;
#else
	return -1;
#endif
}

// riff_stats fills out with mallinfo2's uordblks, fordblks and hblkhd, summed
// over the arenas, and returns 1, or returns 0 where glibc has no mallinfo2.
static int riff_stats(long long *out) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
	struct mallinfo2 m = mallinfo2();
	out[0] = (long long)m.uordblks;
	out[1] = (long long)m.fordblks;
	out[2] = (long long)m.hblkhd;
	return 1;
#else
	return 0;
#endif
}

// riff_hold mallocs n blocks of size bytes, touches them and returns them.
static void **riff_hold(int n, size_t size) {
	void **p = calloc((size_t)n, sizeof(void *));
	if (p == NULL) return NULL;
	for (int i = 0; i < n; i++) {
		p[i] = malloc(size);
		if (p[i] != NULL) memset(p[i], 1, size);
	}
	return p;
}

// riff_drop frees the blocks from, from+step, ... of riff_hold's n.
static void riff_drop(void **p, int n, int from, int step) {
	for (int i = from; i < n; i += step) { free(p[i]); p[i] = NULL; }
}

static void riff_drop_all(void **p, int n) {
	riff_drop(p, n, 0, 1);
	free(p);
}

*/
import "C"

import "unsafe"

// Setting says how the C allocator that Pebble's caches and memtables use
// was configured, for the startup log.
func Setting() string {
	switch C.riff_get_arena_setting() {
	case 1:
		return OneArena
	case 2:
		return "malloc arenas left to MALLOC_ARENA_MAX"
	case 3:
		return "malloc arenas left to GLIBC_TUNABLES"
	default:
		return "C allocator left as it is (not glibc)"
	}
}

// ReadStats returns what glibc's malloc holds, summed over its arenas
// (mallinfo2, which locks each arena while it counts its free chunks: about
// 0.1-0.4 ms with a 60 MiB heap), and false where that cannot be read.
func ReadStats() (Stats, bool) {
	var out [3]C.longlong
	if C.riff_stats(&out[0]) == 0 {
		return Stats{}, false
	}
	return Stats{HeapInUse: int64(out[0]), HeapFree: int64(out[1]), Mapped: int64(out[2])}, true
}

// arenas returns the number of glibc malloc arenas, or -1 where that cannot
// be read.
func arenas() int { return int(C.riff_count_arenas()) }

// blocks are C allocations held by a test.
type blocks struct {
	p *unsafe.Pointer
	n int
}

// hold mallocs n blocks of size bytes and touches them.
func hold(n, size int) blocks { return blocks{p: C.riff_hold(C.int(n), C.size_t(size)), n: n} }

// drop frees the blocks from, from+step, ...
func (b blocks) drop(from, step int) { C.riff_drop(b.p, C.int(b.n), C.int(from), C.int(step)) }

// dropAll frees every block still held, and the list.
func (b blocks) dropAll() { C.riff_drop_all(b.p, C.int(b.n)) }
