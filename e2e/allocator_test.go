package e2e_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/internal/cmalloc"
)

// allocatorSetting returns the c_allocator field of the server's "storage
// memory budget divided" log line.
func allocatorSetting(t *testing.T, p *proc) string {
	t.Helper()
	for _, s := range strings.Split(p.stderr.String(), "\n") {
		var l struct {
			Msg        string `json:"msg"`
			CAllocator string `json:"c_allocator"`
		}
		if json.Unmarshal([]byte(s), &l) == nil && l.Msg == "storage memory budget divided" {
			return l.CAllocator
		}
	}
	t.Fatalf("no memory budget line in the server's log:\n%s", p.stderr.String())
	return ""
}

// TestServerRunsOnOneMallocArena: the real binary sets glibc's malloc to one
// arena when it loads (internal/cmalloc) and says so in its startup log;
// with MALLOC_ARENA_MAX in its environment it keeps the operator's setting.
func TestServerRunsOnOneMallocArena(t *testing.T) {
	if cmalloc.Setting() != cmalloc.OneArena {
		t.Skipf("this test binary does not run on one glibc arena either (%s): no glibc, no cgo, or the environment sets the arenas", cmalloc.Setting())
	}
	if os.Getenv("MALLOC_ARENA_MAX") != "" || strings.Contains(os.Getenv("GLIBC_TUNABLES"), "arena_max") {
		t.Skip("the environment sets glibc's malloc arenas")
	}
	e := newEnv(t, envOpts{outbox: true})
	p := e.start()
	if got := allocatorSetting(t, p); got != cmalloc.OneArena {
		t.Errorf("c_allocator %q, want %q", got, cmalloc.OneArena)
	}
	p.stop()

	e.wrap = []string{"env", "MALLOC_ARENA_MAX=2"}
	p = e.start()
	if got := allocatorSetting(t, p); got != "malloc arenas left to MALLOC_ARENA_MAX" {
		t.Errorf("with MALLOC_ARENA_MAX=2: c_allocator %q", got)
	}
	p.stop()
}
