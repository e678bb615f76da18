package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/riffdb/riffdb/loadtest"
)

// sampleEvery calls take at start and every interval after it until
// duration, with the time each sample stands for: k × interval, the end of
// the interval it describes. A sample is taken a little after that (the
// timer's and the previous sample's delay); labelled with the time it was
// taken, a sample due at a window's edge (the last one, due at duration
// itself) fell just past the edge, and out of its window.
func sampleEvery(ctx context.Context, start time.Time, interval, duration time.Duration, take func(elapsed time.Duration) error) error {
	if err := take(0); err != nil {
		return err
	}
	for k := 1; time.Duration(k)*interval <= duration; k++ {
		at := time.Duration(k) * interval
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Until(start.Add(at))):
			if err := take(at); err != nil {
				return err
			}
		}
	}
	return nil
}

// soak runs the load for o.duration and samples every o.interval; it
// returns the samples and each command's report.
func soak(ctx context.Context, srv *process, o options, perCommand float64, csvOut io.Writer, progress io.Writer) ([]Sample, []loadtest.Report, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	first, err := srv.scrape(ctx)
	if err != nil {
		return nil, nil, err
	}
	prevLag, err := histogramOf(first, loadtest.LagMetric, nil)
	if err != nil {
		return nil, nil, err
	}
	cw := newCSVWriter(csvOut, prevLag.bounds())
	disk, err := diskStatPath(srv.dir)
	if err != nil {
		fmt.Fprintf(progress, "soak: no disk statistics (%v); the disk columns stay empty\n", err)
	}

	done := make([]atomic.Int64, len(commandMix))
	var reports []loadtest.Report
	var errs []error
	loaded := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(loaded)
		reports, errs = runMix(ctx, srv, perCommand, o.duration, o.retryRatio, func(i int, n int64) { done[i].Store(n) })
	}()
	var samples []Sample
	take := func(elapsed time.Duration) error {
		s := Sample{Elapsed: recorded(elapsed), RSSBytes: nanValue, Goroutines: nanValue, OpenFDs: nanValue, Sockets: nanValue, Tables: nanValue,
			DebtPrimary: nanValue, DebtArchive: nanValue, Memtables: nanValue, HeapInUse: nanValue, BlockCache: nanValue, Pending: nanValue,
			CompactionsPrimary: nanValue, CompactionsArchive: nanValue, FsyncsPrimary: nanValue, FsyncsArchive: nanValue, FsyncSecondsPrimary: nanValue, FsyncSecondsArchive: nanValue,
			CHeapRSS: nanValue, FileRSS: nanValue, GoRetained: nanValue, CHeapFree: nanValue, StallSecondsPrimary: nanValue, StallSecondsArchive: nanValue,
			ServerCPUSeconds: nanValue, DiskWrites: nanValue, DiskWrittenBytes: nanValue, DiskWriteSeconds: nanValue, DiskFlushes: nanValue, DiskFlushSeconds: nanValue,
			SchedWaitSeconds: nanValue, SchedWaits: nanValue, SchedWaitsSlow: nanValue,
			CompactionSecondsPrimary: nanValue, CompactionSecondsArchive: nanValue, CompactedBytesPrimary: nanValue, CompactedBytesArchive: nanValue,
			ArchiveTxns: nanValue, ArchiveTxnsSlow: nanValue}
		s.MachineBusySeconds, s.MachineSeconds, _ = machineCPU()
		if disk != "" {
			if d, err := readDisk(disk); err == nil {
				s.DiskWrites, s.DiskWrittenBytes, s.DiskWriteSeconds, s.DiskFlushes, s.DiskFlushSeconds = d.Writes, d.WrittenBytes, d.WriteSeconds, d.Flushes, d.FlushSeconds
			}
		}
		for i := range done {
			s.Requests += float64(done[i].Load())
		}
		if !srv.alive() {
			return fmt.Errorf("soak: the server exited during the soak (%v); see its log", srv.waitErr)
		}
		s.RSSBytes, s.FileRSS, _ = rssBytes(srv.pid())
		s.CHeapRSS, _ = cHeapRSS(srv.pid())
		s.OpenFDs, s.Sockets, s.Tables, _ = openFDs(srv.pid())
		if ss, err := srv.scrape(ctx); err == nil {
			if v, ok := sum(ss, "go_goroutines", nil); ok {
				s.Goroutines = v
			}
			for _, c := range []struct {
				name  string
				store string
				into  *float64
			}{
				{"riffdb_pebble_compaction_debt_bytes", "primary", &s.DebtPrimary},
				{"riffdb_pebble_compaction_debt_bytes", "archive", &s.DebtArchive},
				{"riffdb_pebble_compactions_total", "primary", &s.CompactionsPrimary},
				{"riffdb_pebble_compactions_total", "archive", &s.CompactionsArchive},
				{"riffdb_pebble_wal_fsyncs_total", "primary", &s.FsyncsPrimary},
				{"riffdb_pebble_wal_fsyncs_total", "archive", &s.FsyncsArchive},
				{"riffdb_pebble_wal_fsync_time_seconds_total", "primary", &s.FsyncSecondsPrimary},
				{"riffdb_pebble_wal_fsync_time_seconds_total", "archive", &s.FsyncSecondsArchive},
				{"riffdb_pebble_write_stall_time_seconds_total", "primary", &s.StallSecondsPrimary},
				{"riffdb_pebble_write_stall_time_seconds_total", "archive", &s.StallSecondsArchive},
				{"riffdb_pebble_compaction_time_seconds_total", "primary", &s.CompactionSecondsPrimary},
				{"riffdb_pebble_compaction_time_seconds_total", "archive", &s.CompactionSecondsArchive},
				{"riffdb_pebble_compaction_written_bytes_total", "primary", &s.CompactedBytesPrimary},
				{"riffdb_pebble_compaction_written_bytes_total", "archive", &s.CompactedBytesArchive},
			} {
				if v, ok := sum(ss, c.name, map[string]string{"riffdb_store": c.store}); ok {
					*c.into = v
				}
			}
			if v, ok := sum(ss, "riffdb_pebble_memtable_size_bytes", nil); ok {
				s.Memtables = v
			}
			if v, ok := sum(ss, "process_cpu_seconds_total", nil); ok {
				s.ServerCPUSeconds = v
			}
			if v, ok := sum(ss, "go_memstats_heap_inuse_bytes", nil); ok {
				s.HeapInUse = v
			}
			sys, ok1 := sum(ss, "go_memstats_sys_bytes", nil)
			released, ok2 := sum(ss, "go_memstats_heap_released_bytes", nil)
			if ok1 && ok2 {
				s.GoRetained = sys - released
			}
			if v, ok := sum(ss, "riffdb_c_allocator_memory_bytes", map[string]string{"riffdb_c_allocator_state": "heap_free"}); ok {
				s.CHeapFree = v
			}
			s.SchedWaitSeconds, s.SchedWaits, s.SchedWaitsSlow = schedWaits(ss)
			s.ArchiveTxns, s.ArchiveTxnsSlow = archiveTxns(ss)
			if v, ok := blockCaches(ss); ok {
				s.BlockCache = v
			}
			if lag, err := histogramOf(ss, loadtest.LagMetric, nil); err == nil && elapsed > 0 {
				s.Lag = lag.sub(prevLag)
				prevLag = lag
			}
		}
		if st, err := srv.stats(ctx); err == nil {
			s.Pending = st.Pending
		}
		samples = append(samples, s)
		fmt.Fprintf(progress, "soak %8s rss=%.1fMiB goroutines=%.0f fds=%.0f sockets=%.0f debt=%.1f/%.1fMiB lag p50=%.3fms p99=%.3fms pending=%.0f requests=%.0f\n",
			elapsed.Round(time.Second), s.RSSBytes/(1<<20), s.Goroutines, s.OpenFDs, s.Sockets, s.DebtPrimary/(1<<20), s.DebtArchive/(1<<20),
			s.LagP(0.5), s.LagP(0.99), s.Pending, s.Requests)
		return cw.Write(s)
	}
	serr := sampleEvery(ctx, start, o.interval, o.duration, take)
	if err := cw.Close(); err != nil && serr == nil {
		serr = err
	}
	if serr != nil {
		cancel(serr)
	}
	<-loaded
	if serr != nil {
		return samples, reports, serr
	}
	var all int64
	for i, err := range errs {
		if err != nil {
			return samples, reports, fmt.Errorf("soak: %s load: %w", commandMix[i].name, err)
		}
		all += reports[i].Requests - reports[i].Errors
	}
	if all == 0 {
		return samples, reports, errors.New("soak: every request of the load failed")
	}
	return samples, reports, nil
}
