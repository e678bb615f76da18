// Package procs sets how many threads may run Go code at once (GOMAXPROCS)
// in a server whose stores block threads in fdatasync.
//
// A goroutine in a blocking system call keeps its P (the runtime's licence
// to run Go code) until the runtime's monitor takes it back, at the
// monitor's next tick: 20 µs at the earliest, up to 10 ms when the monitor
// found nothing to do for a while (golang/go#18236). Every Pebble store
// syncs its write-ahead log from a goroutine of its own, and a database has
// two stores that sync (its primary and its archive), each sync taking
// 0.2–5 ms on these disks. With GOMAXPROCS at the CPU count, syncing stores
// hold most of the Ps, and commits and deliveries wait for Ps while the CPUs
// are idle. On 2 cores, interleaved in one process, 8 Ps instead of 2 gave
// 1.6–2.4× the summed commits/s at 4, 16 and 32 databases and 1.5–1.7× the
// delivery at 16 and 32 (docs/benchmarks.md, "Many databases").
//
// So Set gives the process a P for each CPU and, on top of them, one for
// each store of a database that can sit in a sync (two), or two per
// database when that is more, at most four times as many as the CPUs: the
// syncing stores no longer take the CPUs' share of Ps, and the kernel, not
// the runtime's monitor, decides which runnable thread gets a CPU. On 2
// CPUs that is 4 Ps for one or two databases, 6 for three and 8 from four.
//
// Until 2026-12-05 one database kept the CPU count (two Ps per database,
// at least the CPUs): its drain delivered 0.91–0.96× as much with 4 Ps on 2
// CPUs as with 2 (three runs, 2026-12-02). Measured again with the soak's
// load, which leaves the CPUs about 60 % busy, 4 Ps gave a commit→archived
// p99 of 4.15 and 4.73 ms against 6.90 and 5.07 ms (two alternating pairs
// of 8-minute soaks), a fifth of the waits for a CPU over 0.92 ms, and 8 %
// less CPU per event; in the drain benchmark 1.13× the commits, 0.91× the
// CPU per event and 0.97× the delivery (six pairs, the delivery still
// 0.96–1.09× of a raw writer; docs/benchmarks.md, "The soak"). For a few
// hours that day every database count got the CPUs and two per database
// (6 Ps for two databases, 8 for three); ten alternating drains at each
// count measured that against 4 and 6: two databases delivered 0.98× as
// much (higher in 4 of 10) for 1.06× the commits, three 0.95× (higher in
// 3 of 10) for the same commits, so the extra Ps stop at the two of one
// database. An operator who sets GOMAXPROCS keeps that choice.
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
