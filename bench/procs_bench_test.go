package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/riffdb/riffdb/bench"
	"github.com/riffdb/riffdb/internal/process/procs"
)

// BenchmarkMultiDBProcs measures what the server's GOMAXPROCS
// (internal/process/procs: the CPUs and two, or two per database when more, at
// most 4 × the CPUs) does against the runtime's default (the CPUs), for N = 4, 16 and 32
// databases in one server process, interleaved in time in the same process
// (runtime.GOMAXPROCS is switched at the start of every slice), so that the
// disk's drifts fall on both alike:
//
//   - delivery: each database holds 4 × multiDBEvents(N) preloaded events;
//     while they drain, slices of deliverySlice alternate between the two
//     settings (three rounds), each counting the events the archives
//     stored (riffdb_archive_accepted_events_total) over its slice.
//   - commits: once everything is delivered, commandClients clients per
//     database send one-event commands, in slices of commitSlice/3 alternating
//     between the settings (three rounds); delivery runs meanwhile.
//
// It reports each rate and procs_vs_default.
func BenchmarkMultiDBProcs(b *testing.B) {
	for _, n := range []int{4, 16, 32} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchMultiDBProcs(b, n) })
	}
}

// deliverySlice is one slice of BenchmarkMultiDBProcs's delivery phase.
const deliverySlice = 500 * time.Millisecond

func benchMultiDBProcs(b *testing.B, n int) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	def, tuned := procs.Base(), procs.For(procs.Base(), n)
	// Four times: on a disk where a sync costs 0.2 ms, twice drained four
	// databases before the sixth slice ended.
	perDB := 4 * multiDBEvents(n)
	var delivered, commits [2]bench.Rate
	for b.Loop() {
		b.StopTimer()
		in := newMultiInstall(b, n)
		in.preload(b, perDB)
		s := in.open(b)
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := waitArchivesOpen(in, time.Minute); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		stored := func(procs int) bench.Workload {
			return bench.Workload{Name: fmt.Sprint(procs), Run: func(d time.Duration) (int, error) {
				runtime.GOMAXPROCS(procs)
				before, err := counterSum(s, "riffdb_archive_accepted_events_total", `result="stored"`)
				if err != nil {
					return 0, err
				}
				time.Sleep(d)
				after, err := counterSum(s, "riffdb_archive_accepted_events_total", `result="stored"`)
				return int(after - before), err
			}}
		}
		rates, err := bench.Interleave(3, deliverySlice, []bench.Workload{stored(def), stored(tuned)})
		if err != nil {
			b.Fatal(err)
		}
		if total, err := counterSum(s, "riffdb_archive_accepted_events_total", `result="stored"`); err != nil {
			b.Fatal(err)
		} else if int(total) >= n*perDB {
			b.Fatalf("the backlog of %d events drained before the last slice ended: make it longer", n*perDB)
		}
		for i := range rates {
			delivered[i].Ops += rates[i].Ops
			delivered[i].Elapsed += rates[i].Elapsed
		}
		if err := waitAllDelivered(s, in.token, 2*pollEvery, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		load := func(procs int) bench.Workload {
			return bench.Workload{Name: fmt.Sprint(procs), Run: func(d time.Duration) (int, error) {
				runtime.GOMAXPROCS(procs)
				return in.commandLoad(s, commandClients, 0, d)
			}}
		}
		if rates, err = bench.Interleave(3, commitSlice/3, []bench.Workload{load(def), load(tuned)}); err != nil {
			b.Fatal(err)
		}
		for i := range rates {
			commits[i].Ops += rates[i].Ops
			commits[i].Elapsed += rates[i].Elapsed
		}
		b.StopTimer()
		stop(b, s)
		b.StartTimer()
	}
	b.ReportMetric(float64(def), "default_procs")
	b.ReportMetric(float64(tuned), "procs")
	b.ReportMetric(delivered[0].PerSecond(), "default_delivered_events/s")
	b.ReportMetric(delivered[1].PerSecond(), "procs_delivered_events/s")
	b.ReportMetric(delivered[1].PerSecond()/delivered[0].PerSecond(), "delivered_procs_vs_default")
	b.ReportMetric(commits[0].PerSecond(), "default_commits/s")
	b.ReportMetric(commits[1].PerSecond(), "procs_commits/s")
	b.ReportMetric(commits[1].PerSecond()/commits[0].PerSecond(), "commits_procs_vs_default")
}
