package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/riffdb/riffdb/telemetry"
)

// parityMux routes like the API: commands, /healthz, a failing route, a
// route answering with an informational status first, and a streaming one
// (Flush, then http.ResponseController).
func parityMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"database":%q,"read":%d}`, r.PathValue("alias"), len(body))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
	})
	mux.HandleFunc("POST /v1/databases/{alias}/backups", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
		w.(http.Flusher).Flush()
		if err := http.NewResponseController(w).SetWriteDeadline(time.Time{}); err != nil {
			panic(err)
		}
		_, _ = w.Write([]byte("streamed"))
	})
	return mux
}

type parityRequest struct {
	method, target, host, remote, body, ua, xff string
	tls                                         bool
}

var parityRequests = []parityRequest{
	{method: "POST", target: "/v1/databases/default/commands/place_order", host: "127.0.0.1:7420", remote: "127.0.0.1:50000", body: `{"input":{"a":1}}`, ua: "riffdb-loadtest/1"},
	{method: "GET", target: "/healthz", host: "db.example", remote: "[::1]:5555"},
	{method: "GET", target: "/healthz", host: "[::1]:80", remote: "10.0.0.1:1", xff: "203.0.113.9, 10.0.0.2"},
	{method: "GET", target: "/v1/stats", host: "h:443", remote: "10.0.0.1:2", tls: true},
	{method: "POST", target: "/v1/databases/x/backups", host: "h", remote: "10.0.0.1:3", body: "{}"},
	{method: "BREW", target: "/healthz", host: "evil:8123", remote: "10.0.0.1:4"},
	{method: "post", target: "/v1/databases/default/commands/c", host: "h:1", remote: "bad-remote"},
	{method: "GET", target: "/nowhere", host: "", remote: "10.0.0.1:5", ua: "curl/8"},
}

// serveParity sends parityRequests through h and returns the spans ended.
func serveParity(t *testing.T, h http.Handler, rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	t.Helper()
	for _, pr := range parityRequests {
		var body io.Reader
		if pr.body != "" {
			body = strings.NewReader(pr.body)
		}
		req := httptest.NewRequest(pr.method, pr.target, body)
		req.Host, req.RemoteAddr = pr.host, pr.remote
		if pr.ua != "" {
			req.Header.Set("User-Agent", pr.ua)
		}
		if pr.xff != "" {
			req.Header.Set("X-Forwarded-For", pr.xff)
		}
		if pr.tls {
			req.TLS = &tls.ConnectionState{}
		}
		h.ServeHTTP(deadlineRecorder{httptest.NewRecorder()}, req)
	}
	return rec.Ended()
}

// deadlineRecorder is a recorder whose write deadline can be set, as a
// server connection's can: http.ResponseController reaches it only through
// the instrumentation's Unwrap.
type deadlineRecorder struct{ *httptest.ResponseRecorder }

func (deadlineRecorder) SetWriteDeadline(time.Time) error { return nil }

// defaultTelemetry is the telemetry pipeline of the default configuration
// (every request sampled, no exporter), its logs written to logs, shut
// down at the test's end.
func defaultTelemetry(t *testing.T, logs io.Writer) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{SampleRatio: 1, LogOutput: logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

func parityTelemetry(t *testing.T) (*telemetry.Telemetry, *tracetest.SpanRecorder) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{SampleRatio: 1, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
		_ = tel.Shutdown(ctx)
	})
	return &telemetry.Telemetry{TracerProvider: tp, MeterProvider: tel.MeterProvider, MetricsHandler: tel.MetricsHandler}, rec
}

// TestHTTPTelemetryMatchesOtelhttp: the API's instrumentation makes, for
// the same requests, the spans otelhttp v0.72 made when the server used it
// (name, kind, status, attributes) and the same http.server.* series on
// /metrics (names, labels, counts and body sizes; durations differ by
// nature).
func TestHTTPTelemetryMatchesOtelhttp(t *testing.T) {
	telOld, recOld := parityTelemetry(t)
	old := otelhttp.NewHandler(parityMux(), "riffdb.http",
		otelhttp.WithTracerProvider(telOld.TracerProvider), otelhttp.WithMeterProvider(telOld.MeterProvider),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return spanName(r) }))
	telNew, recNew := parityTelemetry(t)
	lean, err := newHTTPTelemetry(telNew, otel.GetTextMapPropagator(), spanName, parityMux())
	if err != nil {
		t.Fatal(err)
	}
	want, got := serveParity(t, old, recOld), serveParity(t, lean, recNew)
	if len(got) != len(want) || len(got) != len(parityRequests) {
		t.Fatalf("%d spans, otelhttp %d, for %d requests", len(got), len(want), len(parityRequests))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.Name() != w.Name() || g.SpanKind() != w.SpanKind() || g.Status() != w.Status() {
			t.Errorf("request %d: span %q %v %+v, otelhttp %q %v %+v", i, g.Name(), g.SpanKind(), g.Status(), w.Name(), w.SpanKind(), w.Status())
		}
		if ga, wa := attrStrings(g), attrStrings(w); !slices.Equal(ga, wa) {
			t.Errorf("request %d (%s %s): attributes\n got %v\nwant %v", i, parityRequests[i].method, parityRequests[i].target, ga, wa)
		}
		if !g.EndTime().After(g.StartTime()) && !g.EndTime().Equal(g.StartTime()) {
			t.Errorf("request %d: span ends before it starts", i)
		}
	}
	wantSeries, gotSeries := httpSeries(t, telOld), httpSeries(t, telNew)
	if len(wantSeries) == 0 || !slices.Equal(gotSeries, wantSeries) {
		t.Errorf("http.server series differ:\n got %s\nwant %s", strings.Join(gotSeries, "\n     "), strings.Join(wantSeries, "\n     "))
	}
}

func attrStrings(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, a := range s.Attributes() {
		out = append(out, string(a.Key)+"="+a.Value.String())
	}
	slices.Sort(out)
	return out
}

var durationSample = regexp.MustCompile(`^http_server_request_duration_seconds_(bucket|sum)`)

// httpSeries returns the http_server_* samples of tel's /metrics, without
// the duration histogram's buckets and sum (timings), and the help and
// type lines, sorted.
func httpSeries(t *testing.T, tel *telemetry.Telemetry) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var out []string
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if strings.HasPrefix(name, "http_server_") && !durationSample.MatchString(line) {
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}

// TestHTTPMetricSetsStayBounded: requests with ever new methods (any token
// up to the header limit reaches the server) share the "_OTHER" attribute
// set instead of adding one cache entry, holding the method, each.
func TestHTTPMetricSetsStayBounded(t *testing.T) {
	tel, _ := parityTelemetry(t)
	h, err := newHTTPTelemetry(tel, otel.GetTextMapPropagator(), spanName, parityMux())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		req := httptest.NewRequest(fmt.Sprintf("X%0200d", i), "/healthz", nil)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	h.mu.RLock()
	n := len(h.sets)
	h.mu.RUnlock()
	if n != 1 {
		t.Fatalf("%d attribute sets cached for 200 unknown methods, want 1", n)
	}
}

// TestHTTPTelemetrySpanTimesAreTheMeasuredOnes: with a tracer provider that
// records, the server span starts and ends at the times the request's
// duration was measured between (one clock read each), so the span's length
// is the duration the http.server.request.duration histogram records.
func TestHTTPTelemetrySpanTimesAreTheMeasuredOnes(t *testing.T) {
	tel, rec := parityTelemetry(t)
	h, err := newHTTPTelemetry(tel, otel.GetTextMapPropagator(), spanName, parityMux())
	if err != nil {
		t.Fatal(err)
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	metrics := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(metrics, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var sum string
	for line := range strings.SplitSeq(metrics.Body.String(), "\n") {
		if strings.HasPrefix(line, "http_server_request_duration_seconds_sum{") {
			sum = line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	if sum == "" {
		t.Fatalf("no http_server_request_duration_seconds_sum in\n%s", metrics.Body)
	}
	if got := strconv.FormatFloat(spans[0].EndTime().Sub(spans[0].StartTime()).Seconds(), 'g', -1, 64); got != sum {
		t.Fatalf("the span lasts %s s, the recorded duration is %s s", got, sum)
	}
}
