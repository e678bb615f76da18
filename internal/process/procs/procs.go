package procs

import (
	"fmt"
	"os"
	"runtime"
)

// base is GOMAXPROCS as the runtime chose it when the process started: the
// CPU count, or the cgroup's CPU limit, or the GOMAXPROCS environment
// variable. Set derives from it, so calling Set again (a test that opens
// several servers) does not compound.
var base = runtime.GOMAXPROCS(0)

// Base returns GOMAXPROCS as the runtime chose it when the process started.
func Base() int { return base }

// For returns the GOMAXPROCS Set chooses for a server of databases
// databases on cpus CPUs: cpus and two more (none without a database), or
// two per database when that is more, at most 4 × cpus.
func For(cpus, databases int) int {
	return min(max(cpus+min(2, 2*databases), 2*databases), 4*cpus)
}

// Set sets GOMAXPROCS for a server of databases databases, unless the
// GOMAXPROCS environment variable is set, and returns the value in force and
// what chose it, for the startup log. Setting it turns off the runtime's
// own updates after a change of the cgroup's CPU limit; a restart picks up
// the new limit.
func Set(databases int) (int, string) {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		return runtime.GOMAXPROCS(0), "left to GOMAXPROCS"
	}
	n := For(base, databases)
	runtime.GOMAXPROCS(n)
	return n, fmt.Sprintf("the %d CPUs and 2, or 2 per database when more, at most 4 × the CPUs", base)
}
