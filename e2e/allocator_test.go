package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/internal/cmalloc"
	"github.com/riffdb/riffdb/internal/procs"
)

// resourceLine is the server's "storage memory budget divided" log line:
// the process-wide settings it starts with.
type resourceLine struct {
	Msg            string `json:"msg"`
	CAllocator     string `json:"c_allocator"`
	GoMaxProcs     int    `json:"go_max_procs"`
	GoProcsSetting string `json:"go_max_procs_setting"`
}

// resources returns the server's resource line from its log.
func resources(t *testing.T, p *proc) resourceLine {
	t.Helper()
	for _, s := range strings.Split(p.stderr.String(), "\n") {
		var l resourceLine
		if json.Unmarshal([]byte(s), &l) == nil && l.Msg == "storage memory budget divided" {
			return l
		}
	}
	t.Fatalf("no memory budget line in the server's log:\n%s", p.stderr.String())
	return resourceLine{}
}

// allocatorSetting returns the c_allocator field of the resource line.
func allocatorSetting(t *testing.T, p *proc) string {
	t.Helper()
	return resources(t, p).CAllocator
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

// TestServerSetsGoMaxProcs: the real binary runs with two Ps per database,
// at least the CPUs (internal/procs), says so in its startup log, and keeps
// an operator's GOMAXPROCS. It serves one more database than half the CPUs,
// the fewest for which the server's choice differs from the runtime's.
func TestServerSetsGoMaxProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("the environment sets GOMAXPROCS")
	}
	e := newEnv(t, envOpts{})
	n := procs.Base()/2 + 1
	cfg := fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
credential_path = %q
`, filepath.Join(e.root, "credentials"))
	for i := range n {
		cfg += fmt.Sprintf(`
[databases.db%02d]
path = %q
contract = %q
`, i, filepath.Join(e.root, fmt.Sprintf("db%02d", i)), filepath.Join(e.root, "contract.toml"))
	}
	must(t, os.WriteFile(e.config, []byte(cfg), 0o600))
	p := e.start()
	got := resources(t, p)
	p.stop()
	if want := procs.For(procs.Base(), n); want == procs.Base() || got.GoMaxProcs != want || !strings.Contains(got.GoProcsSetting, "per database") {
		t.Errorf("go_max_procs %d (%q), want %d for %d databases on %d CPUs", got.GoMaxProcs, got.GoProcsSetting, want, n, procs.Base())
	}

	e.wrap = []string{"env", "GOMAXPROCS=3"}
	p = e.start()
	got = resources(t, p)
	p.stop()
	if got.GoMaxProcs != 3 || got.GoProcsSetting != "left to GOMAXPROCS" {
		t.Errorf("with GOMAXPROCS=3: go_max_procs %d (%q)", got.GoMaxProcs, got.GoProcsSetting)
	}
}
