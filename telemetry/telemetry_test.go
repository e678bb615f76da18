package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/telemetry"
)

// syncBuffer is the shared test buffer, safe for the concurrent reads of a
// test and writes of a logger.
type syncBuffer = testutil.SyncBuffer

func setup(t *testing.T, cfg telemetry.Config) (*telemetry.Telemetry, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	if cfg.LogOutput == nil {
		cfg.LogOutput = logs
	}
	tel, err := telemetry.Setup(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tel.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return tel, logs
}

// scrape GETs the metrics handler, optionally asking for OpenMetrics.
func scrape(t *testing.T, h http.Handler, openMetrics bool) (body, contentType string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if openMetrics {
		req.Header.Set("Accept", "application/openmetrics-text")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape status %d: %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String(), rec.Header().Get("Content-Type")
}

var bucketLine = regexp.MustCompile(`^riffdb_outbox_claim_duration_seconds_bucket\{le="([^"]+)"\} (\d+)(.*)$`)

// TestSpansAreRecordedOnlyWithAnExporter: without an OTLP endpoint nothing
// would receive a recorded span, so none is recorded (IsRecording is
// false, and instrumentation skips its attributes); the span still has
// valid ids and the sampler's decision, which exemplars and log lines
// read (TestMetricsHandlerServesSecondBucketsWithExemplars runs without an
// endpoint). TestShutdownFlushesSpansToOTLP checks the other side.
func TestSpansAreRecordedOnlyWithAnExporter(t *testing.T) {
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	ctx, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "riffdb.command")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("a span records although no exporter is configured")
	}
	sc := span.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() {
		t.Fatalf("span context %+v: want valid ids, sampled at ratio 1", sc)
	}
	if !trace.SpanContextFromContext(ctx).Equal(sc) {
		t.Fatal("the span's context does not carry its span context")
	}
}

func TestMetricsHandlerServesSecondBucketsWithExemplars(t *testing.T) {
	tel, _ := setup(t, telemetry.Config{ServiceName: "riffdb", ServiceVersion: "v9.9.9", InstanceID: "node-a", SampleRatio: 1})
	ctx := context.Background()
	hist, err := tel.MeterProvider.Meter("test").Float64Histogram("riffdb.outbox.claim.duration",
		metric.WithUnit("s"), metric.WithDescription("Claim run duration."))
	if err != nil {
		t.Fatal(err)
	}
	sctx, span := tel.TracerProvider.Tracer("test").Start(ctx, "riffdb.outbox.claim")
	if !span.SpanContext().IsSampled() {
		t.Fatal("span with ratio 1 is not sampled")
	}
	hist.Record(sctx, 0.003)
	span.End()
	hist.Record(ctx, 2) // no span: counted, no exemplar

	body, ct := scrape(t, tel.MetricsHandler, true)
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("content type %q, want OpenMetrics", ct)
	}
	traceID := span.SpanContext().TraceID().String()
	var les []float64
	exemplarSeen := false
	for line := range strings.SplitSeq(body, "\n") {
		m := bucketLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		le, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("bad le in %q", line)
		}
		les = append(les, le)
		count, _ := strconv.Atoi(m[2])
		want := 0
		if le >= 0.003 {
			want++
		}
		if le >= 2 {
			want++
		}
		if count != want {
			t.Errorf("bucket le=%v count %d, want %d", le, count, want)
		}
		if strings.Contains(m[3], `trace_id="`+traceID+`"`) {
			exemplarSeen = true
			if le != 0.005 {
				t.Errorf("exemplar on bucket le=%v, want 0.005", le)
			}
			if !strings.Contains(m[3], `span_id="`+span.SpanContext().SpanID().String()+`"`) {
				t.Errorf("exemplar without span_id: %q", line)
			}
		}
	}
	want := append(append([]float64{}, telemetry.DurationBuckets...), math.Inf(1))
	if len(les) != len(want) {
		t.Fatalf("bucket boundaries %v, want %v\n%s", les, want, body)
	}
	for i := range want {
		if les[i] != want[i] {
			t.Fatalf("bucket boundaries %v, want %v", les, want)
		}
	}
	if !exemplarSeen {
		t.Errorf("no exemplar with trace_id %s:\n%s", traceID, body)
	}
	for _, prefix := range []string{"go_goroutines ", "go_memstats_", "go_sched_latencies_seconds_bucket{", "process_cpu_seconds_total ", "riffdb_outbox_claim_duration_seconds_count 2"} {
		if !strings.Contains(body, "\n"+prefix) {
			t.Errorf("scrape lacks %q", prefix)
		}
	}
	if !regexp.MustCompile(`(?m)^target_info\{.*service_instance_id="node-a".*service_name="riffdb".*service_version="v9\.9\.9".*\} 1`).MatchString(body) {
		t.Errorf("target_info lacks service attributes:\n%s", grepLines(body, "target_info"))
	}
	if strings.Contains(body, "otel_scope_name") {
		t.Error("scope labels present despite WithoutScopeInfo")
	}

	plain, ct := scrape(t, tel.MetricsHandler, false)
	if !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("content type %q, want text/plain", ct)
	}
	if strings.Contains(plain, traceID) {
		t.Error("plain text exposition carries exemplars")
	}
	if !strings.Contains(plain, `riffdb_outbox_claim_duration_seconds_bucket{le="0.005"} 1`) {
		t.Errorf("plain exposition lacks the bucket:\n%s", grepLines(plain, "riffdb_"))
	}
}

func TestOtherHistogramsKeepAdvisedBuckets(t *testing.T) {
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	m := tel.MeterProvider.Meter("test")
	lag, err := m.Float64Histogram("riffdb.outbox.delivery.lag", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(1, 60, 3600))
	if err != nil {
		t.Fatal(err)
	}
	lag.Record(context.Background(), 90)
	// Advice on a *.duration histogram is overridden by DurationBuckets.
	dur, err := m.Float64Histogram("riffdb.command.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(1, 60, 3600))
	if err != nil {
		t.Fatal(err)
	}
	dur.Record(context.Background(), 0.2)
	// A backup takes minutes: LongDurationBuckets, once, not DurationBuckets too.
	long, err := m.Float64Histogram("riffdb.backup.duration", metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	long.Record(context.Background(), 90)
	body, _ := scrape(t, tel.MetricsHandler, false)
	for _, want := range []string{
		`riffdb_outbox_delivery_lag_seconds_bucket{le="60"} 0`,
		`riffdb_outbox_delivery_lag_seconds_bucket{le="3600"} 1`,
		`riffdb_command_duration_seconds_bucket{le="0.25"} 1`,
		`riffdb_command_duration_seconds_bucket{le="0.1"} 0`,
		`riffdb_backup_duration_seconds_bucket{le="60"} 0`,
		`riffdb_backup_duration_seconds_bucket{le="120"} 1`,
		`riffdb_backup_duration_seconds_bucket{le="3600"} 1`,
	} {
		if !strings.Contains(body, "\n"+want) {
			t.Errorf("scrape lacks %q:\n%s", want, grepLines(body, "riffdb_"))
		}
	}
	if n := strings.Count(body, "\nriffdb_backup_duration_seconds_count"); n != 1 {
		t.Errorf("riffdb_backup_duration_seconds_count appears %d times, want once", n)
	}
	if strings.Contains(body, `riffdb_command_duration_seconds_bucket{le="60"}`) {
		t.Error("advice overrode DurationBuckets on a *.duration histogram")
	}
}

func TestSetupRejectsBadConfig(t *testing.T) {
	for _, r := range []float64{-0.1, 1.01, math.NaN(), math.Inf(1)} {
		if _, err := telemetry.Setup(context.Background(), telemetry.Config{SampleRatio: r}); !errors.Is(err, telemetry.ErrInvalidSampleRatio) {
			t.Errorf("ratio %v: err %v, want ErrInvalidSampleRatio", r, err)
		}
	}
	if _, err := telemetry.Setup(context.Background(), telemetry.Config{SampleRatio: 1, LogLevel: "verbose"}); !errors.Is(err, telemetry.ErrInvalidLogLevel) {
		t.Errorf("bad level: err %v, want ErrInvalidLogLevel", err)
	}
}

func TestSetupInstallsOnlyThePropagator(t *testing.T) {
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	if otel.GetTracerProvider() != prevTP || otel.GetMeterProvider() != prevMP {
		t.Fatal("Setup replaced a global provider")
	}
	ctx, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "riffdb.command")
	defer span.End()
	ctx, err := withBaggage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if !strings.Contains(carrier["traceparent"], span.SpanContext().TraceID().String()) {
		t.Errorf("traceparent not injected: %v", carrier)
	}
	if carrier["baggage"] != "tenant=a" {
		t.Errorf("baggage not injected: %v", carrier)
	}
}

func TestSetupLoggerWritesJSONAtLevel(t *testing.T) {
	tel, logs := setup(t, telemetry.Config{SampleRatio: 1, LogLevel: "warn"})
	tel.Logger.Info("hidden")
	tel.Logger.Warn("shown")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want 1: %q", len(lines), logs.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("log line is not JSON: %v", err)
	}
	if rec["msg"] != "shown" || rec["level"] != "warn" {
		t.Errorf("log record %v", rec)
	}
}

// traceSink is an OTLP/gRPC trace receiver that keeps what it is sent.
type traceSink struct {
	collectortrace.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
}

func (s *traceSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// received returns span name → service.name for every span received.
func (s *traceSink) received() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := map[string]string{}
	for _, req := range s.reqs {
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					got[sp.GetName()] = service
				}
			}
		}
	}
	return got
}

func TestShutdownFlushesSpansToOTLP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink := &traceSink{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	tel, err := telemetry.Setup(context.Background(), telemetry.Config{
		ServiceName: "riffdb-test", OTLPEndpoint: lis.Addr().String(), SampleRatio: 1, LogOutput: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := tel.TracerProvider.Tracer("test")
	ctx, parent := tr.Start(context.Background(), "riffdb.outbox.claim")
	if !parent.IsRecording() {
		t.Fatal("with an OTLP endpoint a sampled span does not record")
	}
	_, child := tr.Start(ctx, "riffdb.archive.txn")
	child.End()
	parent.End()
	// An unsampled span (the child of an unsampled local parent, the only
	// kind ratio 1 leaves unsampled) must not be exported.
	_, dropped := tr.Start(trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}})), "unsampled")
	dropped.End()

	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	got := sink.received()
	want := map[string]string{"riffdb.outbox.claim": "riffdb-test", "riffdb.archive.txn": "riffdb-test"}
	if len(got) != len(want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	for name, svc := range want {
		if got[name] != svc {
			t.Errorf("span %s: service %q, want %q (all: %v)", name, got[name], svc, got)
		}
	}
	if err := tel.Shutdown(sctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestShutdownReportsUnreachableCollectorWithinDeadline(t *testing.T) {
	// A port nobody listens on: grab one and close it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{OTLPEndpoint: addr, SampleRatio: 1, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "riffdb.command")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := tel.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown reported success although no span could be exported")
	}
}

func grepLines(body, substr string) string {
	var out []string
	for line := range strings.SplitSeq(body, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func withBaggage(ctx context.Context) (context.Context, error) {
	m, err := baggage.NewMember("tenant", "a")
	if err != nil {
		return nil, err
	}
	b, err := baggage.New(m)
	if err != nil {
		return nil, err
	}
	return baggage.ContextWithBaggage(ctx, b), nil
}
