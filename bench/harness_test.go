package bench_test

import (
	"math"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP riffdb_outbox_delivery_lag_seconds Time from an event's commit to its archive acceptance.
# TYPE riffdb_outbox_delivery_lag_seconds histogram
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="a",le="0.001"} 0
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="a",le="0.01"} 50
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="a",le="0.1"} 90
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="a",le="+Inf"} 100
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="b",le="0.001"} 0
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="b",le="0.01"} 50
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="b",le="0.1"} 90
riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database="b",le="+Inf"} 100
riffdb_outbox_delivery_lag_seconds_sum{riffdb_database="a"} 3
riffdb_outbox_delivery_lag_seconds_count{riffdb_database="a"} 100
riffdb_other_seconds_bucket{le="0.01"} 7
`

func TestParseHistogramSumsSeriesAndQuantiles(t *testing.T) {
	h, err := parseHistogram(strings.NewReader(exposition), "riffdb_outbox_delivery_lag_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.count(); got != 200 {
		t.Fatalf("count = %v, want 200", got)
	}
	if got := h[0.01]; got != 100 {
		t.Fatalf("bucket 0.01 = %v, want 100 (both series, not the other metric)", got)
	}
	for _, c := range []struct{ q, want float64 }{
		{0.5, 0.01},                    // rank 100 ends exactly at the 0.01 bound
		{0.25, 0.001 + 0.009*0.5},      // rank 50 halfway through (0.001, 0.01]
		{0.7, 0.01 + 0.09*0.5},         // rank 140: halfway through (0.01, 0.1]
		{0.99, 0.1},                    // rank 198 in +Inf: the highest finite bound
		{0.0001, 0.001 + 0.009*0.0002}, // tiny rank near the low edge
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	before := cumulative{0.001: 0, 0.01: 100, 0.1: 100, math.Inf(1): 100}
	d := h.sub(before)
	if d.count() != 100 || d[0.01] != 0 || d[0.1] != 80 {
		t.Fatalf("sub = %v", d)
	}
	if got := d.quantile(0.5); math.Abs(got-(0.01+0.09*50/80)) > 1e-12 {
		t.Fatalf("delta median = %v", got)
	}
	if !math.IsNaN(cumulative{}.quantile(0.5)) {
		t.Fatal("empty histogram has a quantile")
	}
}

func TestParseHistogramRejectsMalformedSeries(t *testing.T) {
	for _, in := range []string{
		`m_bucket{le="0.1"`,
		`m_bucket{le="0.1"}`,
		`m_bucket{le="x"} 1`,
		`m_bucket{a="b"} 1`,
		`m_bucket{le="0.1"} one`,
	} {
		if _, err := parseHistogram(strings.NewReader(in), "m"); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

// TestHarnessDrainsPreloadedEvents runs the delivery benchmark's harness at
// a small size: preloaded intents are delivered by the real server, the lag
// histogram counts each of them, and commands sent open-loop over HTTP are
// delivered too. It keeps the benchmarks' plumbing from rotting unnoticed
// between benchmark runs.
func TestHarnessDrainsPreloadedEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drains a preloaded backlog through the real server")
	}
	in := newInstall(t, 1, "")
	const preloaded = 2*eventsPerBulk + 3 // two bulk commands and three one-event commands
	in.preload(t, preloaded)
	start := time.Now()
	s := in.start(t)
	defer stop(t, s)
	if _, err := waitPending(s, in.token, pollEvery, time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
		t.Fatal(err)
	}
	t.Logf("preloaded backlog drained in %s", time.Since(start))
	before, err := scrape(s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if before.count() != preloaded {
		t.Fatalf("lag observations after the drain = %v, want %d", before.count(), preloaded)
	}
	start = time.Now()
	if err := openLoop(s, in.token, 1000, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := waitPending(s, in.token, pollEvery, time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
		t.Fatal(err)
	}
	t.Logf("open-loop commands sent and drained in %s", time.Since(start))
	after, err := scrape(s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if got := after.sub(before).count(); got != 10 {
		t.Fatalf("lag observations of the open-loop load = %v, want 10", got)
	}
	st, err := stats(s, in.token)
	if err != nil {
		t.Fatal(err)
	}
	if enc := st.Databases[0].Outbox.ArchiveEncodedBytes; enc == nil || *enc == 0 {
		t.Fatalf("archive encoded bytes = %v after delivery", enc)
	}
	// BenchmarkDeadLetters' sync counters: syncs counted, and time spent
	// in them. Not one per event: the worker's archive transactions share
	// fsyncs (CONTRIBUTING, "applied in order and confirmed per group").
	syncs, err := archiveSyncs(s)
	if err != nil {
		t.Fatal(err)
	}
	if syncs.n == 0 || syncs.n > preloaded+10+16 || syncs.seconds <= 0 || syncs.mean() <= 0 {
		t.Fatalf("archive WAL syncs %+v after delivering %d events", syncs, preloaded+10)
	}
}
