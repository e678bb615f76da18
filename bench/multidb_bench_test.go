package bench_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/internal/process/procs"
	"github.com/riffdb/riffdb/server"
)

// multiDBEvents is how many preloaded events each database drains in
// BenchmarkMultiDB at n databases: about three seconds of delivery at the
// rate n raw writers reach on these machines, so that the fixed cost of
// starting n workers (opening and validating n archives) is a small part
// of every drain. RIFFDB_BENCH_EVENTS sets it for every n (a longer drain
// to profile on fast storage, where three seconds of the disk's rate are
// a fraction of a second).
func multiDBEvents(n int) int {
	if v, err := strconv.Atoi(os.Getenv("RIFFDB_BENCH_EVENTS")); err == nil && v > 0 {
		return v
	}
	switch {
	case n <= 1:
		return 16384
	case n <= 4:
		return 8192
	case n <= 16:
		return 4096
	default:
		return 3072
	}
}

// rawSlice is how long the raw writers run before and after each drain.
const rawSlice = time.Second

// BenchmarkMultiDB measures N databases in one server process (server.New:
// N primaries, N archives and N outbox workers sharing one memory budget,
// every store on the same disk), for N = 1, 4, 16 and 32 (or the counts in
// RIFFDB_BENCH_DATABASES, databaseCounts):
//
//   - delivery: each database holds multiDBEvents(N) preloaded events; the
//     aggregate rate is N × that over the time from Start until /v1/stats
//     reports nothing pending anywhere. The baseline is N parallel raw
//     append+fdatasync writers (one file each, in the same directory),
//     run for a second right before and a second right after the drain:
//     delivered_vs_raw is the ratio the target holds at ≥ 0.8.
//   - the engine's limit: N bare Pebble stores (barePebble: the archive's
//     WAL handling, one goroutine per store committing one synced
//     archive-sized Set at a time, as delivery commits one event at a
//     time) for a second before the server opens and a second after it
//     stopped: pebble_vs_raw is how much of N raw writers one synced
//     commit at a time per store reaches on its own, delivered_vs_pebble
//     how much of that riffdb's delivery keeps.
//   - the spec's limit: N bare primaries and N bare archives running only
//     the synced steps the spec sets per run of 16 events (specChains: a
//     synced claim, made while the run before is delivered, then 16 synced
//     archive commits one after another, then an unsynced completion),
//     before and after the server, as above:
//     spec_chain_vs_raw is how much of N raw writers a worker keeping to
//     the spec could reach with no work of its own, delivered_vs_spec_chain
//     how much of that riffdb's delivery keeps; spec_chain_cpu_us/event is
//     its CPU time per event, next to cpu_us/event.
//   - commits: commandClients clients per database send one-event commands
//     over HTTP for commitSlice; commits/s is summed over the databases
//     (delivery runs meanwhile, as in production). *_cpu_util is the
//     process's CPU time (server and load generator alike) over wall time
//     × cores, *_machine_cpu_util the whole machine's (other processes
//     included, from /proc/stat): near 1 the CPU is the limit. cpu_us/event
//     and cpu_us/commit are the process's CPU time per delivered event and
//     per commit (the commit's includes its delivery and the load
//     generator), so cores / cpu_us is the rate at which the CPU alone
//     would stop it.
//   - disk: after everything is delivered, each database's directories
//     (primary and archive) are measured with st_blocks, next to the data
//     the database accounts for in /v1/stats (retained history bytes plus
//     archive encoded bytes).
func BenchmarkMultiDB(b *testing.B) {
	for _, n := range databaseCounts(b) {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchMultiDB(b, n) })
	}
}

// commandClients is the number of HTTP clients per database in the commit
// measurement, and commitSlice how long they run.
const (
	commandClients = 8
	commitSlice    = 3 * time.Second
)

func benchMultiDB(b *testing.B, n int) {
	// The whole benchmark, baselines included, runs with the GOMAXPROCS
	// the server sets for n databases (server.New sets it again): the raw
	// writers' and bare stores' goroutines block in fdatasync like the
	// stores' do, and get the same Ps.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	goProcs, _ := procs.Set(n)
	perDB := multiDBEvents(n)
	var rawOps, bareOps, chainOps, delivered, commits int
	var rawTime, bareTime, chainTime, drainTime, commitTime time.Duration
	var drainCPU, commitCPU, chainCPU cpuMeter
	var primarySyncs, archiveSyncs float64
	var usage diskUsage
	var data int64
	for b.Loop() {
		b.StopTimer()
		in := newMultiInstall(b, n)
		in.preload(b, perDB)
		ops, el := rawWriters(b, in.root, n, rawSlice)
		rawOps, rawTime = rawOps+ops, rawTime+el
		ops, el = barePebble(b, in.root, n, rawSlice)
		bareOps, bareTime = bareOps+ops, bareTime+el
		ops, el = specChain(b, in.root, n, rawSlice, &chainCPU)
		chainOps, chainTime = chainOps+ops, chainTime+el
		s := in.open(b)
		b.StartTimer()
		drainCPU.start(b)
		stopProfile := drainProfile(b, n)
		start := time.Now()
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := waitAllDelivered(s, in.token, 2*pollEvery, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		drainTime += time.Since(start)
		stopProfile()
		drainCPU.stop(b)
		delivered += n * perDB
		b.StopTimer()
		// Counted from the stores' open (a few syncs each) to the end of
		// the drain: /metrics is served only once the server has started.
		syncs := walSyncs(b, s)
		primarySyncs += syncs[0]
		archiveSyncs += syncs[1]
		ops, el = rawWriters(b, in.root, n, rawSlice)
		rawOps, rawTime = rawOps+ops, rawTime+el
		commitCPU.start(b)
		stopCommitProfile := cpuProfile(b, "RIFFDB_COMMIT_PROFILE", fmt.Sprintf("commit-n%d.pprof", n))
		start = time.Now()
		ops, err := in.commandLoad(s, commandClients, 0, commitSlice)
		if err != nil {
			b.Fatal(err)
		}
		commits += ops
		commitTime += time.Since(start)
		stopCommitProfile()
		commitCPU.stop(b)
		if err := waitAllDelivered(s, in.token, 2*pollEvery, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		byDB, err := databaseData(s, in.token)
		if err != nil {
			b.Fatal(err)
		}
		stop(b, s)
		usage, data = diskUsage{}, 0
		for _, d := range in.cfg.Databases {
			usage = usage.plus(usageOf(b, d.Path)).plus(usageOf(b, d.Outbox.Directory))
			data += byDB[d.Alias]
		}
		ops, el = barePebble(b, in.root, n, rawSlice)
		bareOps, bareTime = bareOps+ops, bareTime+el
		ops, el = specChain(b, in.root, n, rawSlice, &chainCPU)
		chainOps, chainTime = chainOps+ops, chainTime+el
		b.StartTimer()
	}
	cores := float64(runtime.NumCPU())
	rate, raw := float64(delivered)/drainTime.Seconds(), float64(rawOps)/rawTime.Seconds()
	b.ReportMetric(float64(goProcs), "procs")
	b.ReportMetric(rate, "delivered_events/s")
	b.ReportMetric(float64(perDB), "events/db") // in each drain
	b.ReportMetric(raw, "raw_events/s")
	b.ReportMetric(rate/raw, "delivered_vs_raw")
	bare := float64(bareOps) / bareTime.Seconds()
	b.ReportMetric(bare, "pebble_events/s")
	b.ReportMetric(bare/raw, "pebble_vs_raw")
	b.ReportMetric(rate/bare, "delivered_vs_pebble")
	chain := float64(chainOps) / chainTime.Seconds()
	b.ReportMetric(chain, "spec_chain_events/s")
	b.ReportMetric(chain/raw, "spec_chain_vs_raw")
	b.ReportMetric(rate/chain, "delivered_vs_spec_chain")
	b.ReportMetric(float64(chainCPU.procSum.Microseconds())/float64(chainOps), "spec_chain_cpu_us/event")
	b.ReportMetric(chainCPU.machine(), "spec_chain_machine_cpu_util")
	b.ReportMetric(drainCPU.procSum.Seconds()/drainTime.Seconds()/cores, "delivery_cpu_util")
	b.ReportMetric(drainCPU.machine(), "delivery_machine_cpu_util")
	b.ReportMetric(float64(drainCPU.procSum.Microseconds())/float64(delivered), "cpu_us/event")
	b.ReportMetric(primarySyncs/float64(delivered), "primary_fsyncs/event")
	b.ReportMetric(archiveSyncs/float64(delivered), "archive_fsyncs/event")
	b.ReportMetric((primarySyncs+archiveSyncs)/drainTime.Seconds(), "delivery_fsyncs/s")
	b.ReportMetric(float64(commits)/commitTime.Seconds(), "commits/s")
	b.ReportMetric(commitCPU.procSum.Seconds()/commitTime.Seconds()/cores, "commit_cpu_util")
	b.ReportMetric(commitCPU.machine(), "commit_machine_cpu_util")
	b.ReportMetric(float64(commitCPU.procSum.Microseconds())/float64(commits), "cpu_us/commit")
	const mib = 1 << 20
	b.ReportMetric(float64(usage.allocated)/float64(n)/mib, "allocated_MiB/db")
	b.ReportMetric(float64(usage.apparent)/float64(n)/mib, "apparent_MiB/db")
	b.ReportMetric(float64(data)/float64(n)/mib, "data_MiB/db")
	b.ReportMetric(float64(usage.allocated-2*data)/float64(n)/mib, "over_2x_data_MiB/db")
}

// BenchmarkMultiDBMemory measures the process's peak RSS (VmHWM, reset
// right before server.New) with 32 databases at the default memory budget
// under a sustained load that fills the memtables: commandClients clients
// per database send commands with a 32 KiB note for memorySlice (each
// commit writes the note into the primary and, once delivered, into the
// archive), then everything is delivered. flushes/store is how many times
// each store's memtable filled and was flushed, on average. The RSS
// includes the in-process load generator. The disk figures are as in
// BenchmarkMultiDB; empty_allocated_MiB/db is each database's allocation
// once the server has started, before the load: the fixed overhead.
// peak_go_mapped_MiB and peak_go_heap_MiB are the Go runtime's share at its
// own peak (goPeak): memory from the OS, and heap objects live or not yet
// swept; the rest of the RSS is mostly the engines' C memory.
// RIFFDB_BENCH_SCRUB_RATE sets the archives' scrub rate (scrubRate).
func BenchmarkMultiDBMemory(b *testing.B) {
	const n, note = 32, 32 << 10
	var peak, commits int64
	var goMapped, goHeap uint64
	var flushes, empty float64
	var usage diskUsage
	var data int64
	for b.Loop() {
		b.StopTimer()
		in := newMultiInstall(b, n)
		resetPeakRSS(b)
		stopGo := goPeak()
		s := in.open(b)
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := waitArchivesOpen(in, time.Minute); err != nil {
			b.Fatal(err)
		}
		var fresh diskUsage
		for _, d := range in.cfg.Databases {
			fresh = fresh.plus(usageOf(b, d.Path)).plus(usageOf(b, d.Outbox.Directory))
		}
		empty = float64(fresh.allocated) / n
		b.StartTimer()
		f0, err := counterSum(s, "riffdb_pebble_flushes_total", "")
		if err != nil {
			b.Fatal(err)
		}
		ops, err := in.commandLoad(s, commandClients, note, memorySlice)
		if err != nil {
			b.Fatal(err)
		}
		commits += int64(ops)
		if err := waitAllDelivered(s, in.token, 2*pollEvery, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		f1, err := counterSum(s, "riffdb_pebble_flushes_total", "")
		if err != nil {
			b.Fatal(err)
		}
		flushes = (f1 - f0) / (2 * n)
		peak = max(peak, procStatusKiB(b, "VmHWM"))
		m, h := stopGo()
		goMapped, goHeap = max(goMapped, m), max(goHeap, h)
		b.StopTimer()
		byDB, err := databaseData(s, in.token)
		if err != nil {
			b.Fatal(err)
		}
		stop(b, s)
		usage, data = diskUsage{}, 0
		for _, d := range in.cfg.Databases {
			usage = usage.plus(usageOf(b, d.Path)).plus(usageOf(b, d.Outbox.Directory))
			data += byDB[d.Alias]
		}
		b.StartTimer()
	}
	const mib = 1 << 20
	b.ReportMetric(float64(peak)/1024, "peak_rss_MiB")
	b.ReportMetric(float64(goMapped)/mib, "peak_go_mapped_MiB")
	b.ReportMetric(float64(goHeap)/mib, "peak_go_heap_MiB")
	b.ReportMetric(float64(commits)/float64(b.N)/memorySlice.Seconds(), "commits/s")
	b.ReportMetric(flushes, "flushes/store")
	b.ReportMetric(empty/mib, "empty_allocated_MiB/db")
	b.ReportMetric(float64(usage.allocated)/n/mib, "allocated_MiB/db")
	b.ReportMetric(float64(data)/n/mib, "data_MiB/db")
	b.ReportMetric(float64(usage.allocated-2*data)/n/mib, "over_2x_data_MiB/db")
}

// memorySlice is how long BenchmarkMultiDBMemory's load runs.
const memorySlice = 15 * time.Second

// walSyncs returns the WAL fdatasyncs of every primary and every archive
// store so far, from /metrics.
func walSyncs(tb testing.TB, s *server.Server) [2]float64 {
	tb.Helper()
	var out [2]float64
	for i, store := range []string{`riffdb_store="primary"`, `riffdb_store="archive"`} {
		v, err := counterSum(s, "riffdb_pebble_wal_fsyncs_total", store)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// TestMultiDBHarness runs BenchmarkMultiDB's plumbing at a small size (two
// databases, a few preloaded events each, a short command load): every
// database drains, the commands are counted, the WAL sync counters and the
// disk and data figures are read. It keeps the benchmark from rotting
// between benchmark runs.
func TestMultiDBHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drains two databases through the real server")
	}
	in := newMultiInstall(t, 2)
	in.preload(t, eventsPerBulk+3)
	s := in.open(t)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	if err := waitAllDelivered(s, in.token, pollEvery, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Both stores' syncs counted; the archives' are fewer than their
	// events (their transactions share fsyncs), at least one each.
	if syncs := walSyncs(t, s); syncs[0] == 0 || syncs[1] < 2 {
		t.Fatalf("WAL syncs %v after delivering %d events to each of two archives", syncs, eventsPerBulk+3)
	}
	n, err := in.commandLoad(s, 2, 100, 200*time.Millisecond)
	if err != nil || n == 0 {
		t.Fatalf("command load: %d commands, %v", n, err)
	}
	if err := waitAllDelivered(s, in.token, pollEvery, time.Minute); err != nil {
		t.Fatal(err)
	}
	data, err := databaseData(s, in.token)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range in.cfg.Databases {
		if data[d.Alias] <= 0 {
			t.Fatalf("database %s accounts for %d bytes", d.Alias, data[d.Alias])
		}
		if u := usageOf(t, d.Outbox.Directory); u.allocated <= 0 || u.apparent <= 0 {
			t.Fatalf("archive of %s: %+v", d.Alias, u)
		}
	}
}

// waitArchivesOpen waits until every database's archive store has been
// opened (Pebble has written its OPTIONS file): the workers open them after
// Start.
func waitArchivesOpen(in *multiInstall, deadline time.Duration) error {
	limit := time.Now().Add(deadline)
	for _, d := range in.cfg.Databases {
		for {
			names, err := filepath.Glob(filepath.Join(d.Outbox.Directory, archive.StoreDirName, "OPTIONS-*"))
			if err != nil {
				return err
			}
			if len(names) > 0 {
				break
			}
			if time.Now().After(limit) {
				return fmt.Errorf("the archive of %s was not opened within %s", d.Alias, deadline)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// drainProfile starts a CPU profile of the drain alone when
// RIFFDB_DRAIN_PROFILE names a directory: the profile of the whole
// benchmark (-test.cpuprofile) mixes in the preload, the raw writers and
// the commit load. It writes drain-n<N>.pprof there (the last iteration's)
// and returns the function that stops it.
//
// RIFFDB_COMMIT_PROFILE likewise names a directory for a CPU profile of the
// command load alone (commit-n<N>.pprof; the server and the load generator
// share the process, their stacks tell them apart).
//
// RIFFDB_DRAIN_TRACE likewise names a directory for an execution trace of
// the drain (drain-n<N>.trace): where each worker's wall time goes, on the
// CPU, in a system call, blocked, or runnable and waiting for a thread
// (go tool trace -pprof=sched).
func drainProfile(tb testing.TB, n int) func() {
	tb.Helper()
	stopCPU := cpuProfile(tb, "RIFFDB_DRAIN_PROFILE", fmt.Sprintf("drain-n%d.pprof", n))
	stopTrace := record(tb, "RIFFDB_DRAIN_TRACE", fmt.Sprintf("drain-n%d.trace", n), trace.Start, trace.Stop)
	return func() {
		stopTrace()
		stopCPU()
	}
}

// cpuProfile starts a CPU profile into the file name of the directory
// that the environment variable env names, if it names one, and returns
// the function that stops it.
func cpuProfile(tb testing.TB, env, name string) (stop func()) {
	tb.Helper()
	return record(tb, env, name, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// record starts a recorder (start, stop: a CPU profile or an execution
// trace) into the file name of the directory that the environment variable
// env names, if it names one, and returns the function that stops it and
// closes the file.
func record(tb testing.TB, env, name string, start func(io.Writer) error, stop func()) func() {
	tb.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		tb.Fatal(err)
	}
	if err := start(f); err != nil {
		tb.Fatal(err)
	}
	return func() {
		stop()
		if err := f.Close(); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestDatabaseCounts: BenchmarkMultiDB runs the four counts unless
// RIFFDB_BENCH_DATABASES names others.
func TestDatabaseCounts(t *testing.T) {
	t.Setenv("RIFFDB_BENCH_DATABASES", "")
	if got := databaseCounts(t); !slices.Equal(got, []int{1, 4, 16, 32}) {
		t.Errorf("default counts %v", got)
	}
	t.Setenv("RIFFDB_BENCH_DATABASES", "2, 3")
	if got := databaseCounts(t); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("RIFFDB_BENCH_DATABASES=2, 3 gives %v", got)
	}
}
