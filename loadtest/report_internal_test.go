package loadtest

import (
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRecorderPercentilesMergeAcrossWorkers records 1..1000 ms spread over
// four workers and checks the merged percentiles, the exact maximum, the
// slowest list, and the counts.
func TestRecorderPercentilesMergeAcrossWorkers(t *testing.T) {
	workers := []*recorder{newRecorder(), newRecorder(), newRecorder(), newRecorder()}
	for i := int64(1); i <= 1000; i++ {
		o := outcome{seq: i, latency: time.Duration(i) * time.Millisecond, status: 200, traceID: "t" + time.Duration(i).String()}
		switch {
		case i%100 == 0:
			o.status, o.failure = 503, "503"
		case i%250 == 1:
			o.status, o.failure = 0, "transport"
		case i%7 == 0:
			o.replayed = true
		}
		workers[i%4].record(o)
	}
	total := newRecorder()
	for _, w := range workers {
		total.merge(w)
	}
	var rep Report
	total.fill(&rep, 2*time.Second)

	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.001 { // HDR, 3 significant digits
			t.Errorf("%s = %v ms, want %v ms (±0.1%%)", name, got, want)
		}
	}
	near("p50", rep.LatencyMillis.P50, 500)
	near("p90", rep.LatencyMillis.P90, 900)
	near("p99", rep.LatencyMillis.P99, 990)
	near("p99.9", rep.LatencyMillis.P999, 999)
	near("mean", rep.LatencyMillis.Mean, 500.5)
	if rep.LatencyMillis.Max != 1000 {
		t.Errorf("max = %v, want exactly 1000", rep.LatencyMillis.Max)
	}
	if rep.Requests != 1000 || rep.Errors != 14 || rep.Succeeded != 986 {
		t.Errorf("requests/errors/succeeded = %d/%d/%d, want 1000/14/986", rep.Requests, rep.Errors, rep.Succeeded)
	}
	if rep.ErrorsByStatus["503"] != 10 || rep.ErrorsByStatus["transport"] != 4 || len(rep.ErrorsByStatus) != 2 {
		t.Errorf("errors by status = %v, want 503=10 transport=4", rep.ErrorsByStatus)
	}
	// Replays among successes: multiples of 7 that are neither failures.
	var replays int64
	for i := int64(1); i <= 1000; i++ {
		if i%7 == 0 && i%100 != 0 && i%250 != 1 {
			replays++
		}
	}
	if rep.Replayed != replays {
		t.Errorf("replayed = %d, want %d", rep.Replayed, replays)
	}
	if rep.Throughput != 500 || rep.ElapsedSeconds != 2 {
		t.Errorf("throughput %v over %v s, want 500 over 2", rep.Throughput, rep.ElapsedSeconds)
	}
	if len(rep.Slowest) != SlowestKept {
		t.Fatalf("%d slowest, want %d", len(rep.Slowest), SlowestKept)
	}
	for i, s := range rep.Slowest {
		want := int64(1000 - i)
		if s.Seq != want || s.LatencyMillis != float64(want) || s.TraceID != "t"+time.Duration(want).String() {
			t.Errorf("slowest #%d = %+v, want seq %d", i+1, s, want)
		}
	}
	if rep.Slowest[0].Status != 503 || rep.Slowest[1].Status != 200 {
		t.Errorf("statuses of the slowest: %d, %d", rep.Slowest[0].Status, rep.Slowest[1].Status)
	}
	text := rep.String()
	for _, want := range []string{"requests=1000 errors=14", "503=10 transport=4", "p50 500.", "slow #1 1000.000 ms  seq=1000 status=503"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
}

// TestRecorderClampsAndOrdersTies checks that latencies outside the
// histogram's range are clamped (not dropped) and that equal latencies are
// listed by sequence number.
func TestRecorderClampsAndOrdersTies(t *testing.T) {
	r := newRecorder()
	r.record(outcome{seq: 3, latency: 10 * time.Minute})
	r.record(outcome{seq: 1, latency: 0})
	for _, seq := range []int64{9, 2, 7, 5, 4, 8} {
		r.record(outcome{seq: seq, latency: time.Millisecond})
	}
	var rep Report
	r.fill(&rep, time.Second)
	if rep.Requests != 8 || r.hist.TotalCount() != 8 {
		t.Fatalf("requests %d, histogram count %d, want 8", rep.Requests, r.hist.TotalCount())
	}
	if rep.LatencyMillis.Max != float64(10*time.Minute/time.Millisecond) {
		t.Errorf("max %v, want the exact 10 min", rep.LatencyMillis.Max)
	}
	var seqs []int64
	for _, s := range rep.Slowest {
		seqs = append(seqs, s.Seq)
	}
	if want := []int64{3, 2, 4, 5, 7}; !slices.Equal(seqs, want) {
		t.Errorf("slowest seqs %v, want %v", seqs, want)
	}
}

// TestPercentilesNeverExceedTheMax: the histogram reports a value as the top
// of its bucket, 2,319 µs for the 2,318.923 µs of a run's slowest request
// (the CLI's test once saw p99 2.319 ms against max 2.318923 ms); no
// percentile may lie above the exact maximum.
func TestPercentilesNeverExceedTheMax(t *testing.T) {
	r := newRecorder()
	for seq := int64(1); seq <= 59; seq++ {
		r.record(outcome{seq: seq, latency: 700 * time.Microsecond})
	}
	r.record(outcome{seq: 60, latency: 2318923 * time.Nanosecond})
	var rep Report
	r.fill(&rep, time.Second)
	p := rep.LatencyMillis
	if p.Max != 2.318923 {
		t.Fatalf("max %v, want the exact 2.318923 ms", p.Max)
	}
	for name, v := range map[string]float64{"p50": p.P50, "p90": p.P90, "p99": p.P99, "p99.9": p.P999} {
		if v > p.Max {
			t.Errorf("%s %v ms above the max %v ms", name, v, p.Max)
		}
	}
	if p.P999 < 2.318 {
		t.Errorf("p99.9 %v ms, want the slowest request's 2.318923 ms within the histogram's precision", p.P999)
	}
}

// TestEmptyReport checks that a run without requests reports zeros, not
// garbage, and an empty (not null) slowest list.
func TestEmptyReport(t *testing.T) {
	var rep Report
	newRecorder().fill(&rep, 0)
	if rep.Requests != 0 || rep.Throughput != 0 || rep.LatencyMillis != (Percentiles{}) || rep.Slowest == nil {
		t.Fatalf("empty report %+v", rep)
	}
}

// TestDialRefusesNonLoopback checks the second line of defence: even a
// target that passed validation is not dialed unless its resolved address
// is loopback. Control runs before connect, so nothing is sent.
func TestDialRefusesNonLoopback(t *testing.T) {
	s, err := Config{Address: "http://127.0.0.1:1", Token: "x"}.validate()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(s, &connSet{m: map[net.Conn]struct{}{}})
	resp, err := c.Get("http://192.0.2.1:9/")
	if err == nil {
		resp.Body.Close()
		t.Fatal("a non-loopback address was dialed")
	}
	if !strings.Contains(err.Error(), errNotLoopbackDial.Error()) {
		t.Fatalf("error %v, want %v", err, errNotLoopbackDial)
	}
}

// TestBodyAndKey checks the request body: the template with {{n}} and
// {{run}} substituted, and the idempotency key.
func TestBodyAndKey(t *testing.T) {
	s, err := Config{Address: "localhost:7420", Token: "x", RunID: "r1",
		InputTemplate: `{"id":"{{run}}/{{n}}","n":{{n}}}`}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(s.body(42)), `{"input":{"id":"r1/42","n":42},"idempotency_key":"lt-r1-42"}`; got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
	if s.target != "http://localhost:7420/v1/databases/default/commands/place_order" {
		t.Fatalf("target %s", s.target)
	}
}
