package loadtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestOpenLoopCountsQueueingDelay checks the open loop's answer to
// coordinated omission: with one request in flight, the server holds the
// first request until every request has been queued (so at least until the
// last one was due, 18 ms after the start). Request k was due at 2k ms, so
// measured from its intended send time its latency is at least (18 − 2k) ms.
// Measured from the actual send it would be a fraction of a millisecond.
func TestOpenLoopCountsQueueingDelay(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-release
		_, _ = io.WriteString(w, `{"replayed":false}`)
	}))
	defer srv.Close()
	cfg := Config{Address: srv.URL, Token: "tok", Requests: 10, Rate: 500, Concurrency: 1, Duration: time.Minute}
	cfg.scheduled = func() { once.Do(func() { close(release) }) }
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 10 || rep.Errors != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Slowest {
		if floor := float64(18 - 2*s.Seq); s.LatencyMillis < floor {
			t.Errorf("request %d: latency %.3f ms, want ≥ %.0f ms (from its intended send time)", s.Seq, s.LatencyMillis, floor)
		}
	}
	if rep.LatencyMillis.P50 < 8 {
		t.Errorf("p50 %.3f ms: queueing behind the held request is not counted", rep.LatencyMillis.P50)
	}
}
