package loadtest_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/riffdb/riffdb/loadtest"
	"github.com/riffdb/riffdb/server/servertest"
)

// startRiffdb starts an in-process riffdb server with the embedded
// development configuration (place_order, an outbox archive) on ephemeral
// loopback ports, and returns its API address and a token with every
// permission.
func startRiffdb(t *testing.T) (addr, token string) {
	t.Helper()
	s, token := servertest.StartDev(t, t.TempDir())
	return "http://" + s.APIAddr(), token
}

func lastCommitSequence(t *testing.T, addr, token string) uint64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, addr+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Databases []struct {
			Alias              string `json:"alias"`
			LastCommitSequence uint64 `json:"last_commit_sequence"`
		} `json:"databases"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || len(doc.Databases) != 1 {
		t.Fatalf("stats: %v %+v", err, doc)
	}
	return doc.Databases[0].LastCommitSequence
}

// TestAgainstRiffdb drives a real in-process server: every request commits
// (the server's last commit sequence equals the request count), none is a
// replay; repeating the run id replays every request; a bad token fails all.
func TestAgainstRiffdb(t *testing.T) {
	addr, token := startRiffdb(t)
	cfg := loadtest.Config{Address: addr, Token: token, Requests: 150, Concurrency: 6, RunID: "same"}
	rep, err := loadtest.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 150 || rep.Succeeded != 150 || rep.Errors != 0 || rep.Replayed != 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := lastCommitSequence(t, addr, token); got != 150 {
		t.Fatalf("last commit sequence %d after 150 requests, want 150", got)
	}
	rep, err = loadtest.Run(t.Context(), cfg)
	if err != nil || rep.Succeeded != 150 || rep.Replayed != 150 {
		t.Fatalf("rerun with the same run id: err %v, %d succeeded, %d replayed; want all replayed", err, rep.Succeeded, rep.Replayed)
	}
	if got := lastCommitSequence(t, addr, token); got != 150 {
		t.Fatalf("replays committed: last commit sequence %d", got)
	}
	open := loadtest.Config{Address: addr, Token: token, Requests: 50, Rate: 2000, Concurrency: 4}
	if rep, err := loadtest.Run(t.Context(), open); err != nil || rep.Succeeded != 50 || rep.Replayed != 0 {
		t.Fatalf("open loop: err %v, report %+v", err, rep)
	}
	if got := lastCommitSequence(t, addr, token); got != 200 {
		t.Fatalf("last commit sequence %d after 200 distinct requests", got)
	}
	bad := loadtest.Config{Address: addr, Token: "riffdb_bogus", Requests: 10, Concurrency: 2}
	if rep, err := loadtest.Run(t.Context(), bad); err != nil || rep.Errors != 10 || rep.ErrorsByStatus["401"] != 10 {
		t.Fatalf("bad token: err %v, errors %v", err, rep.ErrorsByStatus)
	}
	unknown := loadtest.Config{Address: addr, Token: token, Requests: 4, Command: "no_such_command"}
	if rep, err := loadtest.Run(t.Context(), unknown); err != nil || rep.ErrorsByStatus["404"] != 4 {
		t.Fatalf("unknown command: err %v, errors %v", err, rep.ErrorsByStatus)
	}
}

// collector is a fake OTLP/gRPC trace collector.
type collector struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names map[string]int
	trace map[string]bool
}

func (c *collector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names[s.Name]++
				c.trace[hexID(s.TraceId)] = true
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, x := range b {
		out = append(out, digits[x>>4], digits[x&15])
	}
	return string(out)
}

// TestExportsSpansViaOTLP checks that with an OTLP endpoint every request's
// root and client spans reach the collector before Run returns.
func TestExportsSpansViaOTLP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{names: map[string]int{}, trace: map[string]bool{}}
	g := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(g, c)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)

	fs := newFakeServer(t, nil)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 30, Concurrency: 3,
		OTLPEndpoint: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names[loadtest.SpanName] != 30 || c.names["HTTP POST"] != 30 {
		t.Fatalf("collector received %v, want 30 %s and 30 client spans", c.names, loadtest.SpanName)
	}
	for _, s := range rep.Slowest {
		if !c.trace[s.TraceID] {
			t.Fatalf("slow request's trace %s was not exported", s.TraceID)
		}
	}
}

// TestSampleRatioDecidesExport checks that with a sample ratio only sampled
// traces are exported, and that the decision is propagated: the exported
// root spans are exactly the requests whose traceparent says sampled (01).
func TestSampleRatioDecidesExport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{names: map[string]int{}, trace: map[string]bool{}}
	g := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(g, c)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)

	fs := newFakeServer(t, nil)
	if _, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 200, Concurrency: 4,
		OTLPEndpoint: ln.Addr().String(), SampleRatio: 0.25}); err != nil {
		t.Fatal(err)
	}
	sampled := map[string]bool{}
	for _, r := range fs.requests() {
		if r.traceparent[len(r.traceparent)-2:] == "01" {
			sampled[r.traceparent[3:35]] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(sampled) == 0 || len(sampled) == 200 {
		t.Fatalf("%d of 200 traces sampled at ratio 0.25", len(sampled))
	}
	if c.names[loadtest.SpanName] != len(sampled) || len(c.trace) != len(sampled) {
		t.Fatalf("exported %d root spans in %d traces, %d requests were sampled", c.names[loadtest.SpanName], len(c.trace), len(sampled))
	}
	for id := range sampled {
		if !c.trace[id] {
			t.Fatalf("sampled trace %s not exported", id)
		}
	}
}

// BenchmarkPlaceOrder runs b.N place_order commands against an in-process
// server with 8 closed-loop workers and reports the percentiles.
func BenchmarkPlaceOrder(b *testing.B) {
	s, token := servertest.StartDev(b, b.TempDir())
	b.ResetTimer()
	rep, err := loadtest.Run(b.Context(), loadtest.Config{Address: s.APIAddr(), Token: token, Requests: b.N, Concurrency: 8})
	b.StopTimer()
	if err != nil || rep.Errors != 0 {
		b.Fatalf("err %v, errors %v", err, rep.ErrorsByStatus)
	}
	b.ReportMetric(rep.LatencyMillis.P50, "p50-ms")
	b.ReportMetric(rep.LatencyMillis.P99, "p99-ms")
	b.ReportMetric(rep.Throughput, "req/s")
}

// TestWaitDeliveredAgainstRiffdb: against a real server the run waits until
// the archive holds every event of the run, and reports the delivery and
// the commit→archived lag from the server's own histogram; the progress
// snapshots carry the server's backlog.
func TestWaitDeliveredAgainstRiffdb(t *testing.T) {
	s, token := servertest.StartDev(t, t.TempDir())
	var mu sync.Mutex
	var snaps []loadtest.Progress
	cfg := loadtest.Config{Address: "http://" + s.APIAddr(), Token: token, Requests: 120, Concurrency: 4,
		WaitDelivered: true, MetricsAddress: s.MetricsAddr(),
		Progress: func(p loadtest.Progress) { mu.Lock(); snaps = append(snaps, p); mu.Unlock() }}
	rep, err := loadtest.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Delivery
	if rep.Succeeded != 120 || d == nil || !d.Drained || d.Pending != 0 || d.DeliveredEvents != 120 || d.Throughput <= 0 {
		t.Fatalf("report %+v delivery %+v", rep, d)
	}
	if l := d.LagMillis; l == nil || l.Count != 120 || l.P50 <= 0 || l.P99 < l.P50 {
		t.Fatalf("lag %+v", d.LagMillis)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range snaps { // a run of a second or more has snapshots
		if p.Pending == nil {
			t.Fatalf("snapshot without the backlog: %+v", p)
		}
	}
}

// TestRetriesAgainstRiffdb checks retries against a real server: every
// retry is answered as a replay of its first send's commit, and no retry
// commits anything.
func TestRetriesAgainstRiffdb(t *testing.T) {
	addr, token := startRiffdb(t)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: addr, Token: token, Requests: 100, Concurrency: 4,
		RetryRatio: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 100 || rep.Retries != 10 || len(rep.RetryErrors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := lastCommitSequence(t, addr, token); got != 100 {
		t.Fatalf("last commit sequence %d after 100 requests and 10 retries, want 100", got)
	}
}
