package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/process/cmalloc"
	"github.com/riffdb/riffdb/internal/process/gctune"
	"github.com/riffdb/riffdb/internal/process/procs"
)

// resourceLine is the server's "storage memory budget divided" log line:
// the process-wide settings it starts with.
type resourceLine struct {
	Msg            string `json:"msg"`
	CAllocator     string `json:"c_allocator"`
	GoMaxProcs     int    `json:"go_max_procs"`
	GoProcsSetting string `json:"go_max_procs_setting"`
	GoGCSetting    string `json:"go_gc_setting"`
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
// arena when it loads (internal/process/cmalloc) and says so in its startup log;
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

// TestServerSetsGoMaxProcs: the real binary runs with a P per CPU and two
// per database (internal/process/procs), says so in its startup log, and keeps an
// operator's GOMAXPROCS. It serves one database: from one database on, the
// server's choice differs from the runtime's.
func TestServerSetsGoMaxProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("the environment sets GOMAXPROCS")
	}
	e := newEnv(t, envOpts{})
	n := 1
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

// gogcPercent returns go_gc_gogc_percent from the server's /metrics (the
// Go collector's GOGC, read from the runtime), or -1 when it is absent.
func gogcPercent(t *testing.T, p *proc) float64 {
	t.Helper()
	return metricValue(scrape(t, p, false), "go_gc_gogc_percent ")
}

// TestServerTunesGOGC: the real binary sets GOGC from its live heap after
// each collection (internal/process/gctune) and says so in its startup log: a
// server that has only started keeps a few MiB live, so GOGC rises above
// Go's default of 100 (to gctune.MaxPercent under 6.4 MiB live). With GOGC
// in its environment it keeps the operator's setting.
func TestServerTunesGOGC(t *testing.T) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		t.Skipf("the environment sets GOGC=%s", v)
	}
	e := newEnv(t, envOpts{outbox: true})
	p := e.start()
	if got := resources(t, p).GoGCSetting; !strings.Contains(got, "by the live heap") {
		t.Errorf("go_gc_setting %q, want the tuning", got)
	}
	// The runtime collects a small heap soon after a start (its minimum
	// goal is 4 MiB); the tuning follows within gctune.PollEvery.
	waitFor(t, 30*time.Second, "GOGC above 100", func() bool { return gogcPercent(t, p) > gctune.MinPercent })
	if got := gogcPercent(t, p); got > gctune.MaxPercent {
		t.Errorf("go_gc_gogc_percent %v, above gctune.MaxPercent", got)
	}
	p.stop()

	e.wrap = []string{"env", "GOGC=150"}
	p = e.start()
	if got := resources(t, p).GoGCSetting; got != "left to GOGC=150" {
		t.Errorf("with GOGC=150: go_gc_setting %q", got)
	}
	time.Sleep(200 * time.Millisecond) // polls and collections, had the tuning run
	if got := gogcPercent(t, p); got != 150 {
		t.Errorf("with GOGC=150: go_gc_gogc_percent %v", got)
	}
	p.stop()
}
