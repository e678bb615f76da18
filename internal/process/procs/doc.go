// Package procs sets how many threads may run Go code at once (GOMAXPROCS)
// in a server whose stores block threads in fdatasync.
//
// A goroutine in a blocking system call keeps its P (the runtime's licence
// to run Go code) until the runtime's monitor takes it back, 20 µs to 10 ms
// later (golang/go#18236). Each database has two stores that sync their
// write-ahead logs from goroutines of their own, 0.2–5 ms a sync on these
// disks, so with GOMAXPROCS at the CPU count the syncing stores hold most of
// the Ps and commits and deliveries wait for a P while the CPUs are idle.
//
// The policy (For): a P for each CPU and two more (one per store of a
// database that can sit in a sync), or two per database when that is more,
// at most four times the CPUs. On 2 CPUs that is 4 Ps for one or two
// databases, 6 for three and 8 from four. The extra Ps stop at one
// database's two: more bought nothing measurable. An operator who sets
// GOMAXPROCS keeps that choice.
//
// The measurements behind it (8 Ps against 2 at 4, 16 and 32 databases;
// 4 Ps against 2 for one database under the soak's load; the extra Ps per
// database tried and dropped) are in
// docs/benchmarks/2026-12-05-gomaxprocs.md.
package procs
