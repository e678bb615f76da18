package e2e_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// otlpSink is an OTLP/gRPC trace receiver that keeps every span it is sent.
type otlpSink struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (s *otlpSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (s *otlpSink) byName(name string) []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*tracepb.Span
	for _, sp := range s.spans {
		if sp.GetName() == name {
			out = append(out, sp)
		}
	}
	return out
}

// TestTracesJoinCommandAndDelivery runs the real binary with an OTLP
// endpoint, sends a command carrying a W3C traceparent, and checks the
// exported spans: the client's trace continues in the server's HTTP span,
// which parents the riffdb.command span, and the worker's riffdb.outbox.claim
// span links to that command span and parents the archive transaction.
func TestTracesJoinCommandAndDelivery(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	sink := &otlpSink{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	e := newEnv(t, envOpts{outbox: true, extra: fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\ntrace_sample_ratio = 1.0\n", lis.Addr().String())})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()

	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan := "00f067aa0ba902b7"
	body := []byte(`{"input":{"order_id":"t-1","amount_cents":7},"idempotency_key":"t-1"}`)
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.api+"/v1/databases/default/commands/place_order", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	resp, err := httpClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("command: %d", resp.StatusCode)
	}
	p.waitDrained(t, token)
	p.stop() // flushes the span batcher

	waitFor(t, 10*time.Second, "spans to arrive", func() bool { return len(sink.byName("riffdb.archive.txn")) > 0 })
	hexID := func(b []byte) string { return hex.EncodeToString(b) }
	var httpSpan *tracepb.Span
	sink.mu.Lock()
	all := append([]*tracepb.Span(nil), sink.spans...)
	sink.mu.Unlock()
	for _, sp := range all {
		if sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER && hexID(sp.GetTraceId()) == traceID {
			httpSpan = sp
		}
	}
	if httpSpan == nil || hexID(httpSpan.GetParentSpanId()) != clientSpan {
		t.Fatalf("no server span continuing the client's trace (spans: %d)", len(all))
	}
	cmds := sink.byName("riffdb.command")
	if len(cmds) != 1 || hexID(cmds[0].GetTraceId()) != traceID || hexID(cmds[0].GetParentSpanId()) != hexID(httpSpan.GetSpanId()) {
		t.Fatalf("riffdb.command is not a child of the HTTP server span: %v", cmds)
	}
	claims := sink.byName("riffdb.outbox.claim")
	if len(claims) != 1 {
		t.Fatalf("%d claim spans", len(claims))
	}
	links := claims[0].GetLinks()
	if len(links) != 1 || hexID(links[0].GetTraceId()) != traceID || hexID(links[0].GetSpanId()) != hexID(cmds[0].GetSpanId()) {
		t.Fatalf("claim links %v, want the command span", links)
	}
	txns := sink.byName("riffdb.archive.txn")
	if len(txns) != 1 || hexID(txns[0].GetParentSpanId()) != hexID(claims[0].GetSpanId()) {
		t.Fatalf("archive txn is not a child of the claim span")
	}
	if len(sink.byName("riffdb.outbox.completion.flush")) != 1 || len(sink.byName("riffdb.archive.quota.check")) == 0 {
		t.Fatalf("completion flush or quota check span missing")
	}
}
