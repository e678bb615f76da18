package e2e_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// hostFlood is how many distinct Host headers TestHostHeadersDoNotGrowMetrics
// sends; without a bound on the HTTP metrics' labels each adds series.
const hostFlood = 3000

// healthz sends GET /healthz with the given Host header, unauthenticated,
// as anyone on the network could. It is safe to call from any goroutine.
func healthz(p *proc, host string) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+p.api+"/healthz", nil)
	if err != nil {
		return err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /healthz (Host %q): %d", host, resp.StatusCode)
	}
	return nil
}

// TestHostHeadersDoNotGrowMetrics is issue #12's Host-header scenario on the
// real binary: thousands of unauthenticated /healthz requests, each with
// its own Host header, must not add series to /metrics (otelhttp labels
// its metrics with server.address and server.port from the Host header
// unless a view drops them), must not push anything into
// otel_metric_overflow, and must not echo a host anywhere, exemplars
// included.
func TestHostHeadersDoNotGrowMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := e.start()
	for range 10 {
		must(t, healthz(p, ""))
	}
	before := scrape(t, p, false)

	hosts := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for h := range hosts {
				if err := healthz(p, h); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range hostFlood {
		hosts <- fmt.Sprintf("h%d.attacker.example:%d", i, 1024+i)
	}
	close(hosts)
	wg.Wait()

	after := scrape(t, p, false)
	om := scrape(t, p, true)
	t.Logf("/metrics after 10 requests: %d bytes; after %d more with distinct Host headers: %d bytes (OpenMetrics %d bytes)",
		len(before), hostFlood, len(after), len(om))
	for name, text := range map[string]string{"text": after, "OpenMetrics": om} {
		if strings.Contains(text, "attacker.example") || strings.Contains(text, "server_address") || strings.Contains(text, "server_port") {
			t.Errorf("%s exposition carries client Host headers:\n%s", name, grep(text, "attacker.example"))
		}
		if strings.Contains(text, "otel_metric_overflow") {
			t.Errorf("%s exposition has overflow series:\n%s", name, grep(text, "otel_metric_overflow"))
		}
	}
	if len(after) >= 2*len(before) {
		t.Errorf("/metrics grew from %d to %d bytes with %d distinct Host headers", len(before), len(after), hostFlood)
	}
	if n := sample(after, "http_server_request_duration_seconds_count", map[string]string{"http_route": "/healthz"}); n != 10+hostFlood {
		t.Errorf("http_server_request_duration_seconds_count for /healthz = %v, want %d in one series:\n%s",
			n, 10+hostFlood, grep(after, "http_server_request_duration_seconds_count"))
	}
}

// traceSinkServer starts an OTLP/gRPC receiver and returns it with its
// address.
func traceSinkServer(t *testing.T) (*otlpSink, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	sink := &otlpSink{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return sink, lis.Addr().String()
}

// traceIDs returns the trace ids of every span the sink holds, and of every
// span those spans link to.
func (s *otlpSink) traceIDs() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := map[string]bool{}
	for _, sp := range s.spans {
		ids[hex.EncodeToString(sp.GetTraceId())] = true
		for _, l := range sp.GetLinks() {
			ids[hex.EncodeToString(l.GetTraceId())] = true
		}
	}
	return ids
}

// sampledParent returns a sampled W3C traceparent in trace id.
func sampledParent(id string) string { return "00-" + id + "-00f067aa0ba902b7-01" }

// traced sends method path with a sampled traceparent in trace id, baggage,
// and, when token is not empty, a bearer token; it returns the status.
func traced(t *testing.T, p *proc, method, path, token, id string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.api+path, bytes.NewReader(body))
	must(t, err)
	req.Header.Set("traceparent", sampledParent(id))
	req.Header.Set("baggage", "chosen=by-client")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func orderBody(key string) []byte {
	return fmt.Appendf(nil, `{"input":{"order_id":%q,"amount_cents":1},"idempotency_key":%q}`, key, key)
}

var exemplarTraceID = regexp.MustCompile(`trace_id="([0-9a-f]{32})"`)

// TestUntrustedTraceContextIsDropped checks, on the real binary with every
// trace sampled, that a traceparent is honoured only on an authenticated
// command: the ids a client sends to /healthz, to /v1/stats, or to the
// command endpoint with a bad token appear in no exported span and in no
// exemplar, while an authenticated command continues its caller's trace.
func TestUntrustedTraceContextIsDropped(t *testing.T) {
	t.Parallel()
	sink, addr := traceSinkServer(t)
	e := newEnv(t, envOpts{extra: fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\ntrace_sample_ratio = 1.0\n", addr)})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()

	const (
		viaHealthz  = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa01"
		viaBadToken = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa02"
		viaNoToken  = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa03"
		viaStats    = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa04"
		trusted     = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb01"
	)
	for _, r := range []struct {
		method, path, token, id string
		body                    []byte
		want                    int
	}{
		{http.MethodGet, "/healthz", "", viaHealthz, nil, http.StatusOK},
		{http.MethodPost, "/v1/databases/default/commands/place_order", "riffdb_not-a-valid-token", viaBadToken, orderBody("u-1"), http.StatusUnauthorized},
		{http.MethodPost, "/v1/databases/default/commands/place_order", "", viaNoToken, orderBody("u-2"), http.StatusUnauthorized},
		{http.MethodGet, "/v1/stats", token, viaStats, nil, http.StatusOK},
		{http.MethodPost, "/v1/databases/default/commands/place_order", token, trusted, orderBody("t-1"), http.StatusOK},
	} {
		if code := traced(t, p, r.method, r.path, r.token, r.id, r.body); code != r.want {
			t.Fatalf("%s %s: %d, want %d", r.method, r.path, code, r.want)
		}
	}
	untrusted := []string{viaHealthz, viaBadToken, viaNoToken, viaStats}

	om := scrape(t, p, true)
	if !exemplarTraceID.MatchString(om) {
		t.Fatalf("no exemplars on /metrics; the check below would prove nothing")
	}
	for _, id := range untrusted {
		if strings.Contains(om, id) {
			t.Errorf("client-chosen trace id %s appears on /metrics:\n%s", id, grep(om, id))
		}
	}

	p.stop() // flushes the span batcher
	waitFor(t, 10*time.Second, "the trusted command's spans", func() bool { return sink.traceIDs()[trusted] })
	ids := sink.traceIDs()
	for _, id := range untrusted {
		if ids[id] {
			t.Errorf("a span continues (or links to) the untrusted client trace %s", id)
		}
	}
}

// TestRatioZeroIgnoresSampledParents checks that with trace_sample_ratio = 0
// a client's sampled flag samples nothing, even on an authenticated
// command, unless honor_sampled_parent is set; and that even then an
// unauthenticated /healthz cannot switch sampling on.
func TestRatioZeroIgnoresSampledParents(t *testing.T) {
	t.Parallel()
	for _, honor := range []bool{false, true} {
		t.Run(fmt.Sprintf("honor_sampled_parent=%v", honor), func(t *testing.T) {
			sink, addr := traceSinkServer(t)
			e := newEnv(t, envOpts{extra: fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\ntrace_sample_ratio = 0.0\nhonor_sampled_parent = %v\n", addr, honor)})
			token := e.token([]string{"execute_commands"}, "")
			p := e.start()
			const (
				command = "cccccccccccccccccccccccccccccc01"
				health  = "cccccccccccccccccccccccccccccc02"
			)
			if code := traced(t, p, http.MethodPost, "/v1/databases/default/commands/place_order", token, command, orderBody("r-1")); code != http.StatusOK {
				t.Fatalf("command: %d", code)
			}
			if code := traced(t, p, http.MethodGet, "/healthz", "", health, nil); code != http.StatusOK {
				t.Fatalf("healthz: %d", code)
			}
			p.stop() // flushes whatever was sampled
			if honor {
				waitFor(t, 10*time.Second, "the honoured command's spans", func() bool { return sink.traceIDs()[command] })
			}
			ids := sink.traceIDs()
			if !honor && ids[command] {
				t.Error("ratio 0 sampled an authenticated command because its caller's traceparent said so")
			}
			if ids[health] {
				t.Error("ratio 0 sampled /healthz because an unauthenticated caller's traceparent said so")
			}
		})
	}
}
