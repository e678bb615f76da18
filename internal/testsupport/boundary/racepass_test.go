package boundary_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/internal/testsupport/boundary"
)

// TestRaceSkipRunsNoGoroutines checks every Go file of the packages the
// Makefile's race pass leaves out (boundary.RaceSkipFile): their fast tier
// starts no goroutine and uses nothing that does, so the race detector
// would have nothing to report there. It reads the source tree; it never
// skips.
func TestRaceSkipRunsNoGoroutines(t *testing.T) {
	root := moduleRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	dirs, ok := boundary.RaceSkip(string(mk))
	if !ok || len(dirs) == 0 {
		t.Fatal("the Makefile has no RACE_SKIP list")
	}
	skip := map[string]bool{}
	for _, d := range dirs {
		skip[d] = true
	}
	for _, d := range dirs {
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(d), "*.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("RACE_SKIP names %s, which holds no Go file: remove it", d)
			continue
		}
		for _, p := range files {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			violations, err := boundary.RaceSkipFile(d+"/"+filepath.Base(p), src, skip)
			if err != nil {
				t.Errorf("%s: %v", p, err)
			}
			for _, v := range violations {
				t.Error(v)
			}
		}
	}
}

// TestRaceSkipFile shows what RaceSkipFile refuses and what it lets by.
func TestRaceSkipFile(t *testing.T) {
	skip := map[string]bool{"x": true, "y": true}
	check := func(src string) []string {
		t.Helper()
		v, err := boundary.RaceSkipFile("x/x_test.go", []byte(src), skip)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, src := range []string{
		"package x\nimport \"testing\"\nfunc TestA(t *testing.T) {\n\tgo func() {}()\n}\n",
		"package x\nfunc f() { go g() }\nfunc g() {}\n",
		"package x\nimport _ \"net/http/httptest\"\n",
		"package x\nimport _ \"github.com/cockroachdb/pebble/v2\"\n",
		"package x\nimport _ \"github.com/riffdb/riffdb/outbox\"\n",
	} {
		if v := check(src); len(v) != 1 || !strings.Contains(v[0], "RACE_SKIP") {
			t.Errorf("%q: got %q, want one violation naming RACE_SKIP", src, v)
		}
	}
	for _, src := range []string{
		"package x\nimport \"testing\"\nfunc TestLong(t *testing.T) {\n\tif testing.Short() { t.Skip() }\n\tgo func() {}()\n}\n",
		"package x\nimport (\n\t_ \"github.com/riffdb/riffdb/y\"\n\t_ \"os/exec\"\n)\n",
	} {
		if v := check(src); len(v) != 0 {
			t.Errorf("%q: got %q, want no violation", src, v)
		}
	}
	words, ok := boundary.RaceSkip("A = 1\nRACE_SKIP ?= a b \\\n\tc/d \\\n  e\nB = 2\n")
	if !ok || !slices.Equal(words, []string{"a", "b", "c/d", "e"}) {
		t.Errorf("RaceSkip = %q, %v; want a b c/d e", words, ok)
	}
}
