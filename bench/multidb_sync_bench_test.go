package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/bench"
	"github.com/riffdb/riffdb/internal/store/goexit"
	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/outbox"
)

// BenchmarkParallelSync measures, for n = 1, 4, 16 and 32 independent
// durable streams on one disk, interleaved in time (bench.Interleave, three
// rounds of half a second each):
//
//   - append: n raw writers appending 128 bytes + fdatasync, one file each
//     (BenchmarkMultiDB's baseline);
//   - overwrite: the same into files already written with zeros, which is
//     what a zero-filled WAL does (internal/store/walfill);
//   - pebble: n Pebble stores with the stores' WAL handling (walfill.New,
//     walfill.Cleaner), each with one goroutine committing a synced
//     1,100-byte Set at a time: an archive transaction without the
//     archive's own work.
//
// It reports each rate and overwrite_vs_append and pebble_vs_append: how
// much of n raw writers one synced commit at a time per store can reach.
func BenchmarkParallelSync(b *testing.B) {
	for _, n := range []int{1, 4, 16, 32} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchParallelSync(b, n) })
	}
}

// zeroFilled is the size of each overwrite file; writes wrap around in it.
const zeroFilled = 4 << 20

func benchParallelSync(b *testing.B, n int) {
	dir := b.TempDir()
	appendFiles, overwriteFiles := make([]*os.File, n), make([]*os.File, n)
	zeros := make([]byte, zeroFilled)
	for i := range n {
		var err error
		if appendFiles[i], err = os.OpenFile(filepath.Join(dir, fmt.Sprintf("append-%02d", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			b.Fatal(err)
		}
		defer appendFiles[i].Close()
		if overwriteFiles[i], err = os.OpenFile(filepath.Join(dir, fmt.Sprintf("overwrite-%02d", i)), os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
			b.Fatal(err)
		}
		defer overwriteFiles[i].Close()
		if _, err := overwriteFiles[i].Write(zeros); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fsync(int(overwriteFiles[i].Fd())); err != nil {
			b.Fatal(err)
		}
	}
	stores := openBareStores(b, dir, n)
	defer closeBareStores(b, stores)
	buf := make([]byte, 128)
	offsets := make([]int64, n)
	ws := []bench.Workload{
		{Name: "append", Run: perStream(n, func(i int) error {
			if _, err := appendFiles[i].Write(buf); err != nil {
				return err
			}
			return unix.Fdatasync(int(appendFiles[i].Fd()))
		})},
		{Name: "overwrite", Run: perStream(n, func(i int) error {
			if _, err := overwriteFiles[i].WriteAt(buf, offsets[i]); err != nil {
				return err
			}
			offsets[i] = (offsets[i] + int64(len(buf))) % (zeroFilled - int64(len(buf)))
			return unix.Fdatasync(int(overwriteFiles[i].Fd()))
		})},
		{Name: "pebble", Run: bareCommits(stores)},
	}
	total := make([]bench.Rate, len(ws))
	for b.Loop() {
		rates, err := bench.Interleave(3, 500*time.Millisecond, ws)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range rates {
			total[i].Ops += r.Ops
			total[i].Elapsed += r.Elapsed
		}
	}
	app, over, peb := total[0].PerSecond(), total[1].PerSecond(), total[2].PerSecond()
	b.ReportMetric(app, "append_ops/s")
	b.ReportMetric(over, "overwrite_ops/s")
	b.ReportMetric(peb, "pebble_ops/s")
	b.ReportMetric(over/app, "overwrite_vs_append")
	b.ReportMetric(peb/app, "pebble_vs_append")
}

// perStream returns a Workload.Run that calls op(i) in a loop from one
// goroutine per stream i < n until d has passed, and counts the calls.
func perStream(n int, op func(i int) error) func(d time.Duration) (int, error) {
	return func(d time.Duration) (int, error) {
		deadline := time.Now().Add(d)
		var ops atomic.Int64
		var failed atomic.Pointer[error]
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for failed.Load() == nil && time.Now().Before(deadline) {
					if err := op(i); err != nil {
						failed.Store(&err)
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			return int(ops.Load()), *err
		}
		return int(ops.Load()), nil
	}
}

// openBareStores opens n Pebble stores under dir (store-00, store-01, ...)
// with the archive's WAL handling (walfill.New, walfill.Cleaner), its
// format and a 2 MiB memtable: an archive without the archive.
func openBareStores(tb testing.TB, dir string, n int) []*pebble.DB {
	tb.Helper()
	stores := make([]*pebble.DB, n)
	for i := range n {
		db, err := pebble.Open(filepath.Join(dir, fmt.Sprintf("store-%02d", i)), &pebble.Options{
			FS: walfill.New(vfs.Default), Cleaner: walfill.Cleaner{}, FormatMajorVersion: pebble.FormatValueSeparation, MemTableSize: 2 << 20})
		if err != nil {
			closeBareStores(tb, stores[:i])
			tb.Fatal(err)
		}
		stores[i] = db
	}
	return stores
}

func closeBareStores(tb testing.TB, stores []*pebble.DB) {
	tb.Helper()
	for _, db := range stores {
		if err := db.Close(); err != nil {
			tb.Error(err)
		}
	}
}

// bareCommits returns a Workload.Run in which one goroutine per store
// commits a synced 1,100-byte Set at a time (about an archive record): an
// archive transaction without the archive's own work.
func bareCommits(stores []*pebble.DB) func(d time.Duration) (int, error) {
	value := make([]byte, 1100)
	var key atomic.Uint64
	return perStream(len(stores), func(i int) error {
		return stores[i].Set(fmt.Appendf(nil, "k%016d", key.Add(1)), value, pebble.Sync)
	})
}

// barePebble runs bareCommits on n bare stores (timeBare) for about d and
// returns the commits completed and the elapsed time: what n stores reach
// with one synced Pebble commit at a time each, on the same disk.
func barePebble(tb testing.TB, dir string, n int, d time.Duration) (int, time.Duration) {
	return timeBare(tb, dir, "bare-", n, 1, d, nil, func(sets [][]*pebble.DB) func(time.Duration) (int, error) {
		return bareCommits(sets[0])
	})
}

// timeBare opens sets groups of n bare stores (openBareStores) in a new
// directory under dir, runs the workload run makes of them for about d,
// measured by cpu unless it is nil, closes and removes them, and returns
// the workload's count and the elapsed time.
func timeBare(tb testing.TB, dir, prefix string, n, sets int, d time.Duration, cpu *cpuMeter,
	run func(sets [][]*pebble.DB) func(time.Duration) (int, error)) (int, time.Duration) {
	tb.Helper()
	sub, err := os.MkdirTemp(dir, prefix)
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(sub)
	stores := make([][]*pebble.DB, sets)
	for i := range stores {
		stores[i] = openBareStores(tb, filepath.Join(sub, fmt.Sprintf("set-%d", i)), n)
		defer closeBareStores(tb, stores[i])
	}
	workload := run(stores)
	if cpu != nil {
		cpu.start(tb)
	}
	start := time.Now()
	ops, err := workload(d)
	elapsed := time.Since(start)
	if cpu != nil {
		cpu.stop(tb)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return ops, elapsed
}

// specChains returns a Workload.Run in which one goroutine per database runs
// the synced steps the spec sets for delivering its events, and nothing
// else: for each run of outbox.MaxRun events, one synced commit of MaxRun
// small Sets on the database's primary store (the claim), then MaxRun
// synced 1,100-byte Sets on its archive store, one after another (each
// event's own archive transaction), then one unsynced commit of MaxRun
// small Sets on the primary (the completion, made durable by the next
// claim's sync). The count is in events. As the worker does (outbox's
// prepareNext), the claim of the next run is made on a goroutine of its own
// once the run's first archive commit returned, and awaited before the next
// run's first archive commit: the spec asks a claim to be durable before its
// members are delivered, not that nothing else runs meanwhile. It is the
// chain a worker cannot shorten while it keeps to the spec, without the
// worker's own work: the bound delivery is held against.
func specChains(primaries, archives []*pebble.DB) func(d time.Duration) (int, error) {
	return specChainsVia(primaries, archives, func(_ int, commit func() error) error { return commit() })
}

// specChainsVia is specChains with each archive commit made through via,
// called on the chain's goroutine for database i.
func specChainsVia(primaries, archives []*pebble.DB, via func(i int, commit func() error) error) func(d time.Duration) (int, error) {
	value := make([]byte, 1100)
	var key atomic.Uint64
	// Each database's claim made ahead: the first event of its run and
	// the claim's result. Only database i's goroutine touches entry i.
	type ahead struct {
		first uint64
		done  chan error
	}
	next := make([]ahead, len(archives))
	claim := func(i int) ahead {
		a := ahead{first: key.Add(outbox.MaxRun) - outbox.MaxRun, done: make(chan error, 1)}
		go func() { a.done <- intentBatch(primaries[i], a.first, pebble.Sync) }()
		return a
	}
	runs := perStream(len(archives), func(i int) error {
		cur := next[i]
		if cur.done == nil { // the database's first run: claimed here
			cur = claim(i)
		}
		next[i] = ahead{}
		if err := <-cur.done; err != nil {
			return err
		}
		for k := range uint64(outbox.MaxRun) {
			if err := via(i, func() error {
				return archives[i].Set(fmt.Appendf(nil, "k%016d", cur.first+k), value, pebble.Sync)
			}); err != nil {
				return err
			}
			if k == 0 {
				next[i] = claim(i)
			}
		}
		return intentBatch(primaries[i], cur.first, pebble.NoSync) // the completion
	})
	return func(d time.Duration) (int, error) {
		n, err := runs(d)
		// The claims made ahead for runs that were not started end before
		// the stores may close.
		for i, a := range next {
			if a.done != nil {
				if cerr := <-a.done; err == nil {
					err = cerr
				}
				next[i] = ahead{} // received: a later call claims anew
			}
		}
		return n * outbox.MaxRun, err
	}
}

// intentBatch commits one batch of outbox.MaxRun 80-byte Sets (about an
// intent record each) under the keys of events first, first+1, ...
func intentBatch(db *pebble.DB, first uint64, opts *pebble.WriteOptions) error {
	b := db.NewBatch()
	defer b.Close()
	intent := make([]byte, 80)
	for k := range uint64(outbox.MaxRun) {
		if err := b.Set(fmt.Appendf(nil, "i%016d", first+k), intent, nil); err != nil {
			return err
		}
	}
	return b.Commit(opts)
}

// specChain runs specChains on n bare primaries and n bare archives
// (timeBare) for about d with cpu measuring it, and returns the events
// delivered and the elapsed time.
func specChain(tb testing.TB, dir string, n int, d time.Duration, cpu *cpuMeter) (int, time.Duration) {
	return timeBare(tb, dir, "chain-", n, 2, d, cpu, func(sets [][]*pebble.DB) func(time.Duration) (int, error) {
		return specChains(sets[0], sets[1])
	})
}

// TestSpecChainsRunTheSpecsSyncedSteps checks specChains' count against the
// stores: every counted event is one archive record, each run of 16 one
// synced claim, and the archive's WAL was synced once per event.
func TestSpecChainsRunTheSpecsSyncedSteps(t *testing.T) {
	dir := t.TempDir()
	primaries := openBareStores(t, filepath.Join(dir, "primary"), 2)
	defer closeBareStores(t, primaries)
	archives := openBareStores(t, filepath.Join(dir, "archive"), 2)
	defer closeBareStores(t, archives)
	syncs := func(dbs []*pebble.DB) (n uint64) {
		for _, db := range dbs {
			var m dto.Metric
			if err := db.Metrics().LogWriter.FsyncLatency.Write(&m); err != nil {
				t.Fatal(err)
			}
			n += m.GetHistogram().GetSampleCount()
		}
		return n
	}
	a0, p0 := syncs(archives), syncs(primaries)
	events, err := specChains(primaries, archives)(50 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if events == 0 || events%outbox.MaxRun != 0 {
		t.Fatalf("counted %d events, want a positive multiple of %d", events, outbox.MaxRun)
	}
	records := 0
	for _, db := range archives {
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		for it.First(); it.Valid(); it.Next() {
			records++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if records != events {
		t.Fatalf("archives hold %d records after %d counted events", records, events)
	}
	// Pebble records a sync's latency after it wakes the commit waiting
	// for it, so the last sync of each store may be counted a moment after
	// specChains returned.
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, p := syncs(archives)-a0, syncs(primaries)-p0
		if a >= uint64(events) && p >= uint64(events/outbox.MaxRun) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d archive and %d primary WAL syncs for %d events", a, p, events)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkChainCPU measures what CPU per event costs the spec's chain
// (specChains) at 4 databases on this machine, and whether it matters
// where that CPU is spent. Interleaved, in one process:
//   - chain: the spec's chain as it is;
//   - on_chain: 20 µs of CPU spun before each archive commit, on the
//     chain's goroutine (work between one event's durability and the
//     next event's commit);
//   - off_chain: the same 20 µs spun on a goroutine of its own while the
//     commit is in flight (work moved off the chain, and one goroutine
//     handoff per event);
//   - handoff: each commit made on a kept goroutine (goexit.Runner) and
//     waited for, as the archive's transactions are, and no spin.
//
// It reports each rate per second and its ratio to chain.
func BenchmarkChainCPU(b *testing.B) {
	const n, spin = 4, 20 * time.Microsecond
	dir := b.TempDir()
	primaries := openBareStores(b, filepath.Join(dir, "primary"), n)
	defer closeBareStores(b, primaries)
	archives := openBareStores(b, filepath.Join(dir, "archive"), n)
	defer closeBareStores(b, archives)
	runners := make([]*goexit.Runner, n)
	for i := range runners {
		runners[i] = goexit.NewRunner()
		defer runners[i].Close()
	}
	ws := []bench.Workload{
		{Name: "chain", Run: specChains(primaries, archives)},
		{Name: "on_chain", Run: specChainsVia(primaries, archives, func(_ int, commit func() error) error {
			spinFor(spin)
			return commit()
		})},
		{Name: "off_chain", Run: specChainsVia(primaries, archives, func(_ int, commit func() error) error {
			done := make(chan struct{})
			go func() { spinFor(spin); close(done) }()
			err := commit()
			<-done
			return err
		})},
		{Name: "handoff", Run: specChainsVia(primaries, archives, func(i int, commit func() error) error {
			o := <-runners[i].Go(commit)
			return o.Err
		})},
	}
	total := make([]bench.Rate, len(ws))
	for b.Loop() {
		rates, err := bench.Interleave(3, time.Second, ws)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range rates {
			total[i].Ops += r.Ops
			total[i].Elapsed += r.Elapsed
		}
	}
	chain := total[0].PerSecond()
	for i, w := range ws {
		b.ReportMetric(total[i].PerSecond(), w.Name+"_events/s")
		if i > 0 {
			b.ReportMetric(total[i].PerSecond()/chain, w.Name+"_vs_chain")
		}
	}
}

// spinFor keeps the CPU busy for d.
func spinFor(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
