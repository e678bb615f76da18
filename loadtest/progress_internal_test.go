package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// statsServer is a fake riffdb: the command endpoint (blocking while hold
// is set until release is closed), GET /v1/stats answering with the next
// of pending (the last one repeats) or with denied, and /metrics serving
// the lag histogram of metrics (the next one per scrape, the last repeats).
type statsServer struct {
	*httptest.Server
	denied    int // status for /v1/stats, 0: 200
	release   chan struct{}
	hold      atomic.Bool
	mu        sync.Mutex
	pending   []uint64
	completed []uint64
	metrics   []string
	polls     atomic.Int64
	commands  atomic.Int64
}

func newStatsServer(t *testing.T) *statsServer {
	t.Helper()
	fs := &statsServer{release: make(chan struct{})}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/stats":
			fs.polls.Add(1)
			if fs.denied != 0 {
				w.WriteHeader(fs.denied)
				fmt.Fprint(w, `{"error":{"code":"forbidden","message":"no"}}`)
				return
			}
			fs.mu.Lock()
			p, c := fs.pending[0], fs.completed[0]
			if len(fs.pending) > 1 {
				fs.pending, fs.completed = fs.pending[1:], fs.completed[1:]
			}
			fs.mu.Unlock()
			fmt.Fprintf(w, `{"databases":[{"alias":"other","pending_outbox_deliveries":99},`+
				`{"alias":"default","pending_outbox_deliveries":%d,"outbox":{"completed_deliveries":%d}}]}`, p, c)
		case r.URL.Path == "/metrics":
			fs.mu.Lock()
			m := fs.metrics[0]
			if len(fs.metrics) > 1 {
				fs.metrics = fs.metrics[1:]
			}
			fs.mu.Unlock()
			fmt.Fprint(w, m)
		default:
			fs.commands.Add(1)
			if fs.hold.Load() {
				<-fs.release
			}
			fmt.Fprint(w, `{"replayed":false}`)
		}
	}))
	t.Cleanup(fs.Close)
	return fs
}

// fakeClock advances by step at every reading.
func fakeClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	t := time.Unix(1e9, 0)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(step)
		return t
	}
}

// TestProgressEveryTick drives the progress loop with a fake ticker while
// every request is held by the server: each tick gives exactly one
// snapshot with the numbers so far and the server's backlog of the
// database; no snapshot follows the end of Run.
func TestProgressEveryTick(t *testing.T) {
	fs := newStatsServer(t)
	fs.pending, fs.completed = []uint64{7, 3}, []uint64{0, 0}
	fs.hold.Store(true)
	tick := make(chan time.Time)
	got := make(chan Progress)
	var ended atomic.Bool
	cfg := Config{Address: fs.URL, Token: "t", Requests: 4, Concurrency: 2, tick: tick, now: fakeClock(time.Second),
		Progress: func(p Progress) {
			if ended.Load() {
				t.Error("a progress snapshot after Run returned")
			}
			got <- p
		}}
	done := make(chan Report)
	go func() {
		rep, err := Run(context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		ended.Store(true)
		done <- rep
	}()
	tick <- time.Time{}
	p := <-got
	if p.Requests != 0 || p.Pending == nil || *p.Pending != 7 || p.Draining || p.Elapsed <= 0 {
		t.Fatalf("first snapshot %+v (pending %v)", p, p.Pending)
	}
	if !strings.Contains(p.String(), "requests=0") || !strings.Contains(p.String(), "pending=7") {
		t.Fatalf("line %q", p.String())
	}
	// Nothing arrives between ticks.
	select {
	case p := <-got:
		t.Fatalf("a snapshot without a tick: %+v", p)
	default:
	}
	tick <- time.Time{}
	if p := <-got; p.Pending == nil || *p.Pending != 3 {
		t.Fatalf("second snapshot %+v", p)
	}
	fs.hold.Store(false)
	close(fs.release)
	rep := <-done
	if rep.Requests != 4 || rep.Delivery != nil {
		t.Fatalf("report %+v", rep)
	}
	if n := fs.polls.Load(); n != 2 {
		t.Fatalf("%d stats polls for 2 ticks", n)
	}
}

// TestProgressLiveNumbers checks the snapshot arithmetic: requests, errors,
// rate over the elapsed time and the p99 of the latencies so far.
func TestProgressLiveNumbers(t *testing.T) {
	l := newLive()
	for i := range 100 {
		o := outcome{latency: time.Duration(i+1) * time.Millisecond}
		if i%10 == 0 {
			o.failure = "503"
		}
		l.record(o)
	}
	p := l.snapshot(4 * time.Second)
	if p.Requests != 100 || p.Errors != 10 || p.Rate != 25 || p.P99 < 98*time.Millisecond || p.P99 > 100*time.Millisecond {
		t.Fatalf("snapshot %+v", p)
	}
	pending := uint64(12)
	p.Pending, p.Draining = &pending, true
	want := "loadtest: 4s  requests=100  rate=25/s  errors=10  p99=99.007ms  pending=12  (waiting for delivery)"
	if p.String() != want {
		t.Fatalf("line %q, want %q", p.String(), want)
	}
	if got := newLive().snapshot(0); got.P99 != 0 || got.Rate != 0 || strings.Contains(got.String(), "pending") {
		t.Fatalf("empty snapshot %+v %q", got, got.String())
	}
}

// TestProgressWithoutStatistics: a token without read_statistics gets
// progress without a backlog, and the stats are asked once only.
func TestProgressWithoutStatistics(t *testing.T) {
	fs := newStatsServer(t)
	fs.denied = http.StatusForbidden
	fs.hold.Store(true)
	tick := make(chan time.Time)
	got := make(chan Progress)
	cfg := Config{Address: fs.URL, Token: "t", Requests: 2, Concurrency: 2, tick: tick,
		Progress: func(p Progress) { got <- p }}
	done := make(chan error)
	go func() { _, err := Run(context.Background(), cfg); done <- err }()
	for range 3 {
		tick <- time.Time{}
		if p := <-got; p.Pending != nil || strings.Contains(p.String(), "pending") {
			t.Fatalf("snapshot %+v with a backlog although the stats were refused", p)
		}
	}
	close(fs.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := fs.polls.Load(); n != 1 {
		t.Fatalf("%d stats polls after a refusal, want 1", n)
	}
}

// TestWaitDeliveredNeedsStatistics: without read_statistics the run is
// refused before any request is sent.
func TestWaitDeliveredNeedsStatistics(t *testing.T) {
	for _, status := range []int{http.StatusForbidden, http.StatusUnauthorized} {
		fs := newStatsServer(t)
		fs.denied = status
		_, err := Run(context.Background(), Config{Address: fs.URL, Token: "t", Requests: 3, WaitDelivered: true})
		if !errors.Is(err, ErrNoStatistics) || !strings.Contains(err.Error(), "read_statistics") {
			t.Fatalf("status %d: err %v", status, err)
		}
		if n := fs.commands.Load(); n != 0 {
			t.Fatalf("%d requests sent although the wait was refused", n)
		}
	}
}

func lagExposition(counts ...float64) string {
	bounds := []string{"0.001", "0.01", "0.1", "1", "+Inf"}
	var b strings.Builder
	b.WriteString("# HELP riffdb_outbox_delivery_lag_seconds lag\n# TYPE riffdb_outbox_delivery_lag_seconds histogram\n")
	for i, le := range bounds {
		fmt.Fprintf(&b, "riffdb_outbox_delivery_lag_seconds_bucket{otel_scope_name=\"x\",riffdb_database=\"default\",le=\"%s\"} %g\n", le, counts[i])
		fmt.Fprintf(&b, "riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database=\"other\",le=\"%s\"} 1000\n", le)
	}
	fmt.Fprintf(&b, "riffdb_outbox_delivery_lag_seconds_count{riffdb_database=\"default\"} %g\n", counts[len(counts)-1])
	return b.String()
}

// TestWaitDelivered: after the last request the run polls the stats until
// the backlog is 0, then reports the events delivered since before the
// first request, the throughput over the whole run, the drain time, and the
// lag percentiles of the histogram's change over the run.
func TestWaitDelivered(t *testing.T) {
	fs := newStatsServer(t)
	// The first poll is the baseline before the first request.
	fs.pending, fs.completed = []uint64{0, 9, 4, 0}, []uint64{100, 102, 107, 111}
	// Before: 100 deliveries all under 1 ms; after: 10 more, 5 ≤ 10 ms and 5 ≤ 100 ms.
	fs.metrics = []string{lagExposition(100, 100, 100, 100, 100), lagExposition(100, 105, 110, 110, 110)}
	cfg := Config{Address: fs.URL, Token: "t", Requests: 11, Concurrency: 2, WaitDelivered: true,
		MetricsAddress: strings.TrimPrefix(fs.URL, "http://"), now: fakeClock(time.Second)}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Delivery
	if d == nil || !d.Drained || d.Pending != 0 || d.DeliveredEvents != 11 {
		t.Fatalf("delivery %+v", d)
	}
	// Clock readings: start (1), end of requests (2), polls at 3, 4, 5.
	if d.Seconds != 4 || d.DrainSeconds != 3 || d.Throughput != 11.0/4 {
		t.Fatalf("delivery times %+v", d)
	}
	if l := d.LagMillis; l == nil || l.Count != 10 || math.Abs(l.P50-10) > 1e-9 || math.Abs(l.P99-98.2) > 1e-9 {
		t.Fatalf("lag %+v", d.LagMillis)
	}
	text := rep.String()
	for _, want := range []string{"delivery: drained after 3.000s  delivered=11 in 4.000s  throughput=3/s",
		"commit→archived lag (ms, 10 deliveries, from riffdb_outbox_delivery_lag_seconds): p50 10.000  p99 98.200  (command latency p50"} {
		if !strings.Contains(text, want) {
			t.Fatalf("text lacks %q:\n%s", want, text)
		}
	}
	b, _ := json.Marshal(rep)
	if !strings.Contains(string(b), `"delivery":{"drained":true,"pending":0,"delivered_events":11,`) ||
		!strings.Contains(string(b), `"lag_ms":{"p50":10,"p99":98.2,"count":10}`) {
		t.Fatalf("JSON %s", b)
	}
}

// TestWaitDeliveredTimesOut: a backlog that does not drain ends the wait at
// the timeout, measured with the run's clock, with the backlog left.
func TestWaitDeliveredTimesOut(t *testing.T) {
	fs := newStatsServer(t)
	fs.pending, fs.completed = []uint64{0, 7}, []uint64{5, 6}
	cfg := Config{Address: fs.URL, Token: "t", Requests: 3, WaitDelivered: true, WaitTimeout: 3 * time.Second,
		now: fakeClock(time.Second)}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Delivery
	if d == nil || d.Drained || d.Pending != 7 || d.DeliveredEvents != 1 || d.LagMillis != nil || d.DrainSeconds != 3 {
		t.Fatalf("delivery %+v", d)
	}
	if n := fs.polls.Load(); n != 4 { // the baseline and 3 polls a second apart
		t.Fatalf("%d polls", n)
	}
	if !strings.Contains(rep.String(), "delivery: NOT drained (7 pending at the timeout)") ||
		!strings.Contains(rep.String(), "lag: not measured") {
		t.Fatalf("text:\n%s", rep.String())
	}
}

// TestLagPercentiles checks the bucket interpolation against hand-computed
// values, like PromQL's histogram_quantile.
func TestLagPercentiles(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name          string
		before, after map[float64]float64
		p50, p99      float64
		count         uint64
		none          bool
	}{
		{"no change", map[float64]float64{1: 5, inf: 5}, map[float64]float64{1: 5, inf: 5}, 0, 0, 0, true},
		{"no +Inf", nil, map[float64]float64{1: 5}, 0, 0, 0, true},
		{"first bucket", nil, map[float64]float64{0.01: 4, 0.1: 4, inf: 4}, 5, 9.9, 4, false},
		{"beyond the last bound", nil, map[float64]float64{0.01: 0, 0.1: 0, inf: 2}, 100, 100, 2, false},
		{"from a baseline", map[float64]float64{0.01: 50, 0.1: 50, inf: 50}, map[float64]float64{0.01: 50, 0.1: 150, inf: 150}, 55, 99.1, 100, false},
	} {
		l := lagPercentiles(tc.before, tc.after)
		if tc.none {
			if l != nil {
				t.Errorf("%s: %+v, want none", tc.name, l)
			}
			continue
		}
		if l == nil || math.Abs(l.P50-tc.p50) > 1e-9 || math.Abs(l.P99-tc.p99) > 1e-9 || l.Count != tc.count {
			t.Errorf("%s: %+v, want p50 %v p99 %v count %d", tc.name, l, tc.p50, tc.p99, tc.count)
		}
	}
}

func TestParseLagBuckets(t *testing.T) {
	in := "riffdb_outbox_delivery_lag_seconds_bucket{a=\"x\\\"},y\",riffdb_database=\"default\",le=\"0.5\"} 3 1700000000\n" +
		"riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database=\"default\",le=\"+Inf\"} 4\n" +
		"riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database=\"default\",le=\"0.5\"} 1\n" +
		"riffdb_outbox_delivery_lag_seconds_sum{riffdb_database=\"default\"} 9\n"
	got, err := parseLagBuckets(strings.NewReader(in), "default")
	if err != nil || len(got) != 2 || got[0.5] != 4 || got[math.Inf(1)] != 4 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := parseLagBuckets(strings.NewReader("riffdb_outbox_delivery_lag_seconds_bucket{riffdb_database=\"default\",le=\"x\"} 1\n"), "default"); err == nil {
		t.Fatal("a malformed bound was accepted")
	}
}

func TestMetricsAddressChecked(t *testing.T) {
	for addr, want := range map[string]error{"10.0.0.1:9464": ErrNotLoopback, "127.0.0.1:9464?x=1": ErrInvalidConfig} {
		if _, err := Run(context.Background(), Config{Address: "127.0.0.1:1", Token: "t", MetricsAddress: addr}); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", addr, err, want)
		}
	}
	s, err := Config{Address: "127.0.0.1:1", Token: "t", MetricsAddress: "localhost:9464"}.validate()
	if err != nil || s.metrics != "http://localhost:9464/metrics" {
		t.Fatalf("%v %+v", err, s)
	}
}
