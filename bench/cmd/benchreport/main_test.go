package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/riffdb/riffdb/primary
BenchmarkCommit/clients=1-2      	    2000	   1000000 ns/op
BenchmarkCommit/clients=1-2      	    2000	   3000000 ns/op
BenchmarkCommit/clients=1-2      	    2000	   2000000 ns/op
BenchmarkCommit/clients=64-2     	    2000	     50000 ns/op
BenchmarkRawFdatasync-2          	    2000	    250000 ns/op
BenchmarkPebbleSyncedBatch64-2   	    2000	     25000 ns/op
PASS
pkg: github.com/riffdb/riffdb/archive
BenchmarkAccept-2                	    3000	    500000 ns/op	      2000 events/s	     120 B/op	       3 allocs/op
BenchmarkRawFdatasync-2          	    3000	    250000 ns/op	      4000 events/s
BenchmarkInspectRSS/records=10000-2   3   70000000 ns/op   140000 records/s   50.00 rss_MiB
BenchmarkInspectRSS/records=1000000-2 3  300000000 ns/op   210000 records/s   60.00 rss_MiB
pkg: github.com/riffdb/riffdb/bench
BenchmarkDelivery-2  3  8e9 ns/op  3000 off_events/s  2700 trace_events/s  2400 otlp_events/s  4000 raw_events/s  0.75 off_vs_raw  0.7 trace_vs_raw  0.9 trace_vs_off  0.8 otlp_vs_off
BenchmarkDelivery-2  3  8e9 ns/op  3000 off_events/s  2700 trace_events/s  2400 otlp_events/s  4000 raw_events/s  0.85 off_vs_raw  0.7 trace_vs_raw  0.9 trace_vs_off  0.8 otlp_vs_off
BenchmarkStats
BenchmarkStats/pending=100-2     2000  68789 ns/op  0.040 p50_ms  0.5 p99_ms  100 pending
BenchmarkStats/pending=1000000-2 2000  68789 ns/op  0.080 p50_ms  0.6 p99_ms  1000000 pending
BenchmarkDeliveriesPage-2  300  1723274 ns/op  0.19 dead_letter_1000000_p50_ms  0.14 dead_letter_100_p50_ms  0.28 first_1000000_p50_ms  0.28 first_100_p50_ms  1.07 large_vs_small  0.26 next_1000000_p50_ms  0.26 next_100_p50_ms
BenchmarkStartup-2  15  1e9 ns/op  60 ms/start@10000  30 min_ms/start@10000  40 ms/start@1000000  33 min_ms/start@1000000  0.667 ratio@1000000  1.1 min_ratio@1000000
BenchmarkDeadLetters-2  3  1e9 ns/op  1000 clean_events/s  950 dead_events/s  0.95 dead_vs_clean  0.1 clean_stats_p50_ms  0.1 dead_stats_p50_ms  1 stats_p50_dead_vs_clean
BenchmarkFastDrain/n=1-2  1  1e9 ns/op  30000 delivered_events/s  75000 spec_chain_events/s  0.4 delivered_vs_spec_chain  42 cpu_us/event  18 spec_chain_cpu_us/event  11000 commits/s  170 cpu_us/commit
BenchmarkFastCommands-2  3  6e9 ns/op  4246 commands/s  0.499 commands_vs_null  155 generator_cpu_us/request  70 null_cpu_us/request  8509 null_requests/s  293 server_cpu_us/command  6100 floor_commands/s  0.696 commands_vs_floor  95 floor_cpu_us/command
BenchmarkMultiDB/n=4-2  1  1e9 ns/op  4000 delivered_events/s  5000 raw_events/s  0.8 delivered_vs_raw  4500 pebble_events/s  0.9 pebble_vs_raw  0.889 delivered_vs_pebble  1.2 allocated_MiB/db  0.5 data_MiB/db  0.2 over_2x_data_MiB/db
BenchmarkMultiDBProcs/n=16-2  1  1e9 ns/op  2 default_procs  8 procs  3000 default_delivered_events/s  4500 procs_delivered_events/s  1.5 delivered_procs_vs_default  1800 default_commits/s  3000 procs_commits/s  1.67 commits_procs_vs_default
BenchmarkMultiDBMemory-2  1  1e9 ns/op  579 peak_rss_MiB  312 peak_go_mapped_MiB
pkg: github.com/riffdb/riffdb/server
BenchmarkDeliveryWithScrub-2  5  1e9 ns/op  3000 events/s@0  2900 events/s@4  0.967 ratio@4
pkg: github.com/riffdb/riffdb/backup
BenchmarkCommitDuringBackup-2  4  1e9 ns/op  10000 commits/s-alone  7000 commits/s-during-backup  0.7 ratio  2.5 s/backup
`

func TestParseTakesMediansPerPackage(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.get("primary.Commit/clients=1", "ns/op"); got != 2000000 {
		t.Fatalf("median of three runs = %v, want 2e6", got)
	}
	if r.runs("primary.Commit/clients=1") != 3 {
		t.Fatalf("runs = %d", r.runs("primary.Commit/clients=1"))
	}
	// The same benchmark name in two packages stays apart.
	if p, a := r.get("primary.RawFdatasync", "ns/op"), r.get("archive.RawFdatasync", "events/s"); p != 250000 || a != 4000 {
		t.Fatalf("primary raw %v, archive raw %v", p, a)
	}
	if got := r.get("archive.Accept", "allocs/op"); got != 3 {
		t.Fatalf("allocs/op = %v", got)
	}
	if got := r.get("bench.Delivery", "off_vs_raw"); math.Abs(got-0.8) > 1e-12 {
		t.Fatalf("median of two paired ratios = %v, want 0.8", got)
	}
	if !math.IsNaN(r.get("bench.DeliveryLatency", "p50_ms")) {
		t.Fatal("an absent benchmark has a value")
	}
	if _, ok := r["bench.Stats"]; ok {
		t.Fatal("a name-only line was taken as a result")
	}
}

func TestReportRatiosAndVerdicts(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	find := func(measure, baseline string) row {
		for _, rw := range report(r) {
			if rw.measure == measure && rw.baselineName == baseline {
				return rw
			}
		}
		t.Fatalf("no row %q vs %q", measure, baseline)
		return row{}
	}
	// 64 clients: 20,000/s against 500/s for one client is 40×; against
	// Pebble's 40,000/s it is 0.5×, below the 0.7 target.
	if rw := find("commits, 64 clients", "commits, 1 client"); rw.ratio != 40 {
		t.Fatalf("64/1 = %v", rw.ratio)
	}
	if rw := find("commits, 64 clients", "pebble 64 writers"); rw.ratio != 0.5 {
		t.Fatalf("64/pebble = %v", rw.ratio)
	}
	if rw := find("accepts, 1 writer", "raw fdatasync"); rw.ratio != 0.5 {
		t.Fatalf("accept/raw = %v", rw.ratio)
	}
	if rw := find("inspect peak RSS, 1M records", "peak RSS, 10k"); rw.ratio != 1.2 || rw.atLeast {
		t.Fatalf("rss ratio = %+v", rw)
	}
	if rw := find("GET /v1/stats p50, 1M pending", "p50, 100 pending"); rw.ratio != 2 {
		t.Fatalf("stats ratio = %v", rw.ratio)
	}
	var out bytes.Buffer
	write(&out, report(r))
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = l
	}
	for _, want := range []string{
		"1 commit commits, 64 clients 20000 commits/s commits, 1 client 500 40× ≥ 15× meets",
		"1 commit commits, 64 clients 20000 commits/s pebble 64 writers 40000 0.5× ≥ 0.7× MISSES",
		"2 archive inspect peak RSS, 1M records 60 MiB peak RSS, 10k 50 1.2× ≤ 1.5× meets",
		"4 stats GET /v1/stats p50, 1M pending 0.08 ms p50, 100 pending 0.04 2× ≤ 1.5× MISSES",
		// a paired ratio is the runs' own ratio, not value/baseline
		"3 delivery delivered, tracing off 3000 events/s raw fdatasync 4000 0.8× ≥ 0.8× meets",
		"5 tracing delivered, sampling 1, OTLP export 2400 events/s tracing off 3000 0.8× ≥ 0.9× MISSES",
		"6 dead letters delivered, 100k dead letters below 950 events/s clean database 1000 0.95× ≥ 0.9× meets",
		"7 startup start → first delivery, 1000000 records, median 40 ms budget 1000 0.04× ≤ 1× meets",
		"7 startup start → first delivery, 1000000 records, median 40 ms 10,000 records 60 0.667× ≤ 1.2× meets",
		"7 startup start → first delivery, 1000000 records, fastest 33 ms 10,000 records, fastest 30 1.1× ≤ 1.2× meets",
		"8 scrub delivered, scrub at 4 pages/s (default) 2900 events/s no scrub 3000 0.967× ≥ 0.9× meets",
		"9 backup commits during a backup 7000 commits/s no backup 10000 0.7× ≥ 0.8× MISSES",
		"10 databases 4 databases: delivered 4000 events/s 4 raw writers 5000 0.8× ≥ 0.8× meets",
		"10 databases 4 bare Pebble stores, one synced commit each 4500 events/s 4 raw writers 5000 0.9×",
		"10 databases 4 databases: delivered 4000 events/s 4 bare Pebble stores 4500 0.889×",
		"10 databases 16 databases: delivered, GOMAXPROCS 8 4500 events/s GOMAXPROCS 2 3000 1.5×",
		"10 databases 16 databases: commits summed, GOMAXPROCS 8 3000 commits/s GOMAXPROCS 2 1800 1.67×",
		"10 databases 4 databases: allocated − 2 × data per database 0.2 MiB budget 3 0.0667× ≤ 1× meets",
		"10 databases 32 busy databases: peak RSS 579 MiB budget 1024 0.565× ≤ 1× meets",
		"12 fast storage tmpfs, 1 database: delivered 30000 events/s spec chain on bare Pebble 75000 0.4× ≥ 0.75× MISSES",
		"12 fast storage tmpfs, 1 database: CPU per delivered event 42 µs per spec chain event 18 2.33× ≤ 1.5× MISSES",
		"12 fast storage tmpfs: HTTP commands, 32 clients, delivery running 4246 commands/s do-nothing Go server 8509 0.499× ≥ 0.75× MISSES",
		"12 fast storage tmpfs: server CPU per command, its delivery included 293 µs budget 90 3.26× ≤ 1× MISSES",
		"12 fast storage tmpfs: HTTP commands against the storage floor 4246 commands/s do-nothing server + bare-Pebble commit and spec chain 6100 0.696×",
		"12 fast storage the floor's CPU per command, its delivery included 95 µs",
		"10 databases 32 busy databases: the Go runtime's peak, memory from the OS 312 MiB",
		// the interleaved commit benchmark is absent from the sample
		"1 commit interleaved: commits, 64 clients n/a commits/s commits, 1 client n/a n/a ≥ 15× not measured",
	} {
		if _, ok := lines[want]; !ok {
			t.Errorf("report lacks the row %q:\n%s", want, out.String())
		}
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{
		0.04313: "0.0431", 2.473: "2.47", 19.17: "19.2", 238.1: "238", 3043: "3043", 1e6: "1000000", math.NaN(): "n/a",
	} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}
