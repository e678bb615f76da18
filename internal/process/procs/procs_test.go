package procs

import (
	"runtime"
	"strings"
	"testing"
)

func TestFor(t *testing.T) {
	for _, c := range []struct{ cpus, dbs, want int }{
		{2, 0, 2},
		{2, 1, 4}, // one database: a P per CPU and one per syncing store
		{2, 2, 4},
		{2, 3, 6}, // two per database
		{2, 4, 8},
		{2, 32, 8}, // at most 4 × the CPUs
		{1, 1, 3},
		{1, 2, 4},
		{8, 1, 10},
		{8, 4, 10},
		{8, 6, 12},
		{8, 16, 32},
		{8, 32, 32},
	} {
		if got := For(c.cpus, c.dbs); got != c.want {
			t.Errorf("For(%d CPUs, %d databases) = %d, want %d", c.cpus, c.dbs, got, c.want)
		}
	}
}

// TestSetDerivesFromBase: Set applies For to the runtime's own choice at
// start, so a second call (another server in the same process) does not
// compound, and it says what chose the value.
func TestSetDerivesFromBase(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // Set treats an empty variable as unset
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, dbs := range []int{32, 1, 1, 4} {
		n, setting := Set(dbs)
		if want := For(Base(), dbs); n != want || runtime.GOMAXPROCS(0) != want {
			t.Errorf("Set(%d): returned %d, GOMAXPROCS %d, want %d", dbs, n, runtime.GOMAXPROCS(0), want)
		}
		if !strings.Contains(setting, "per database") {
			t.Errorf("Set(%d): setting %q", dbs, setting)
		}
	}
}

// TestOperatorChoiceIsKept: with GOMAXPROCS in the environment (which the
// runtime read at start), Set changes nothing and says so.
func TestOperatorChoiceIsKept(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Setenv("GOMAXPROCS", "3")
	n, setting := Set(32)
	if n != before || runtime.GOMAXPROCS(0) != before {
		t.Errorf("Set with GOMAXPROCS=3 in the environment: returned %d, GOMAXPROCS now %d, want %d unchanged", n, runtime.GOMAXPROCS(0), before)
	}
	if setting != "left to GOMAXPROCS" {
		t.Errorf("setting %q, want %q", setting, "left to GOMAXPROCS")
	}
}
