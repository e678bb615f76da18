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
// So Set gives the process one P per store that can sit in a sync, two per
// database, never fewer than the CPUs and at most four times as many: the
// syncing stores no longer take the CPUs' share of Ps, and the kernel, not
// the runtime's monitor, decides which runnable thread gets a CPU. One
// database keeps the CPU count: with 4 Ps on 2 CPUs its delivery was
// 0.91–0.96× of that with 2 (interleaved, three runs; why is not
// established). At two databases, 4 Ps against 2 gave 1.43×, 1.18× and
// 1.22× the summed commits/s but 0.98×, 0.95× and 0.89× the delivery: the
// formula favours commands there. An operator who sets GOMAXPROCS keeps that
// choice.
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
// databases on cpus CPUs: two per database, at least cpus, at most
// 4 × cpus.
func For(cpus, databases int) int {
	return max(cpus, min(2*databases, 4*cpus))
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
	return n, fmt.Sprintf("2 per database, at least the %d CPUs, at most 4 × as many", base)
}
