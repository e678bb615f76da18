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

static void riff_churn(size_t n) {
	void *p = malloc(n);
	if (p != NULL) memset(p, 1, n);
	free(p);
}
*/
import "C"

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

// arenas returns the number of glibc malloc arenas, or -1 where that cannot
// be read.
func arenas() int { return int(C.riff_count_arenas()) }

// churn mallocs, touches and frees n bytes with C's allocator on the calling
// thread.
func churn(n int) { C.riff_churn(C.size_t(n)) }
