package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0" // the schema the SDK v1.47.0 resource uses
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/internal/observe/unrecorded"
)

// DefaultServiceName is the service.name resource attribute used when
// Config.ServiceName is empty.
const DefaultServiceName = "riffdb"

// schedLatencies adds the runtime's /sched/latencies:seconds to the Go
// collector's default set, as go_sched_latencies_seconds: how long
// goroutines waited, runnable, for a CPU. It is the direct sign of a
// process short of CPU (on 2 cores a compaction, a GC cycle or a burst of
// commands makes the outbox worker and the WAL sync loops wait for one),
// which CPU utilisation alone does not show.
var schedLatencies = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)}

// Span export limits. The batch span processor drops spans once
// SpanQueueSize spans are waiting, so a slow or absent collector can never
// grow the process's memory without bound or block an instrumented call.
const (
	SpanQueueSize      = 8192
	SpanExportBatch    = 512
	SpanBatchTimeout   = time.Second
	SpanExportDeadline = 10 * time.Second
)

// DurationBuckets are the explicit histogram bucket boundaries, in seconds,
// that a View applies to every histogram instrument whose name ends in
// ".duration", overriding any boundaries the instrument advises. The SDK's
// default boundaries (0, 5, 10, … 10000) are shaped for milliseconds and
// would put every second-valued observation into the first bucket. Other
// histograms (batch sizes, riffdb.outbox.delivery.lag) keep the boundaries
// they advise with metric.WithExplicitBucketBoundaries.
var DurationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
	0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
}

// LongDurationBuckets replace DurationBuckets for the histograms named in
// LongDurations: operations that copy a whole store take seconds to an
// hour, and would all land in DurationBuckets' +Inf.
var LongDurationBuckets = []float64{
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

// LongDurations names the "*.duration" histograms that get
// LongDurationBuckets.
var LongDurations = []string{"riffdb.backup.duration"}

// Errors returned by Setup and NewLogger.
var (
	// ErrInvalidSampleRatio is returned by Setup when Config.SampleRatio is
	// not a number in [0, 1].
	ErrInvalidSampleRatio = errors.New("telemetry: sample ratio must be between 0 and 1")
	// ErrInvalidLogLevel is returned when a log level is not one of debug,
	// info, warn or error.
	ErrInvalidLogLevel = errors.New("telemetry: log level must be one of debug, info, warn, error")
)

// Config configures Setup. Every field is read once; changing it later has no
// effect (riffdb configuration is applied at restart).
type Config struct {
	// ServiceName, ServiceVersion and InstanceID become the service.name,
	// service.version and service.instance.id resource attributes (exposed
	// on /metrics as the target_info series). An empty ServiceName means
	// DefaultServiceName; empty version or instance are left out.
	ServiceName, ServiceVersion, InstanceID string
	// OTLPEndpoint is the "host:port" of an OTLP/gRPC trace receiver,
	// reached without TLS. Empty means spans are not exported and so not
	// recorded: sampling decisions are still made, every span still has its
	// trace and span id, and sampled spans still feed metric exemplars and
	// log lines (see internal/observe/unrecorded).
	OTLPEndpoint string
	// SampleRatio is the fraction of traces that are sampled, in [0, 1]:
	// it decides for root spans and for spans whose parent came from
	// another process (see Sampler). Zero means nothing is sampled unless
	// HonorSampledParent is set: the caller passes its configured value, no
	// default is implied.
	SampleRatio float64
	// HonorSampledParent samples every span whose remote parent is
	// sampled, whatever SampleRatio says. False means a remote parent's
	// sampled flag is ignored and SampleRatio decides.
	HonorSampledParent bool
	// LogLevel is debug, info, warn or error; empty means info.
	LogLevel string
	// LogOutput receives the JSON log lines; nil means os.Stderr. It must
	// be safe to call Write from the logger (Setup serializes writes).
	LogOutput io.Writer
}

// Telemetry holds the process's telemetry pipeline. Instrumented packages
// receive TracerProvider and MeterProvider explicitly; nothing is installed
// as an OpenTelemetry global except the W3C TraceContext+Baggage propagator.
type Telemetry struct {
	// TracerProvider samples with Sampler(Config.SampleRatio,
	// Config.HonorSampledParent). With Config.OTLPEndpoint it is the SDK's,
	// and records and exports every sampled span; without, nothing would
	// receive a recorded span, and it records none (unrecorded.NewTracerProvider).
	TracerProvider trace.TracerProvider
	// MeterProvider is read by the Prometheus exporter at scrape time.
	MeterProvider *sdkmetric.MeterProvider
	// Registry is private to this Telemetry: Go runtime and process
	// collectors plus the OpenTelemetry exporter.
	Registry *prometheus.Registry
	// MetricsHandler serves Registry in the Prometheus text format, or in
	// OpenMetrics (with exemplars carrying trace ids) when the scraper asks
	// for application/openmetrics-text.
	MetricsHandler http.Handler
	// Logger writes JSON lines at Config.LogLevel to Config.LogOutput.
	Logger *zap.Logger

	sdkTracer    *sdktrace.TracerProvider // nil without an OTLP endpoint
	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the telemetry pipeline described by cfg. It installs only the
// global text-map propagator (W3C TraceContext and Baggage, needed by HTTP
// middleware to join incoming traces); providers are returned, not made
// global. The caller must call Shutdown. Setup does not connect to the OTLP
// endpoint: the gRPC connection is made lazily by the first export.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	if math.IsNaN(cfg.SampleRatio) || cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, ErrInvalidSampleRatio
	}
	logger, err := NewLogger(cfg.LogLevel, cfg.LogOutput)
	if err != nil {
		return nil, err
	}
	res, err := newResource(cfg)
	if err != nil {
		return nil, err
	}

	sampler := Sampler(cfg.SampleRatio, cfg.HonorSampledParent)
	var (
		tp        trace.TracerProvider = unrecorded.NewTracerProvider(sampler)
		sdkTracer *sdktrace.TracerProvider
	)
	if cfg.OTLPEndpoint != "" {
		exp, err := otlptracegrpc.New(ctx,
			otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint),
			otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, fmt.Errorf("telemetry: create OTLP trace exporter: %w", err)
		}
		sdkTracer = sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sampler),
			sdktrace.WithBatcher(exp,
				sdktrace.WithMaxQueueSize(SpanQueueSize),
				sdktrace.WithMaxExportBatchSize(SpanExportBatch),
				sdktrace.WithBatchTimeout(SpanBatchTimeout),
				sdktrace.WithExportTimeout(SpanExportDeadline)))
		tp = sdkTracer
	}
	stopTracer := func(ctx context.Context) error {
		if sdkTracer == nil {
			return nil
		}
		return sdkTracer.Shutdown(ctx)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{}))

	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(schedLatencies))); err != nil {
		return nil, errors.Join(fmt.Errorf("telemetry: register Go collector: %w", err), stopTracer(ctx))
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, errors.Join(fmt.Errorf("telemetry: register process collector: %w", err), stopTracer(ctx))
	}
	promExp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		// Pinned: keeps _seconds/_bytes/_total suffixes even if a later
		// exporter release changes its default.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("telemetry: create Prometheus exporter: %w", err), stopTracer(ctx))
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(promExp),
		sdkmetric.WithExemplarFilter(exemplar.TraceBasedFilter),
		sdkmetric.WithView(view()))

	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		Registry:          reg, // counts promhttp's own errors in reg
		ErrorLog:          promLogger{logger},
		// A partial scrape beats none: a failing collector is logged and
		// counted, the rest is still served.
		ErrorHandling: promhttp.ContinueOnError,
	})
	return &Telemetry{
		TracerProvider: tp,
		sdkTracer:      sdkTracer,
		MeterProvider:  mp,
		Registry:       reg,
		MetricsHandler: h,
		Logger:         logger,
	}, nil
}

func newResource(cfg Config) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(cmp.Or(cfg.ServiceName, DefaultServiceName))}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	if cfg.InstanceID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.InstanceID))
	}
	// The configured attributes win over resource.Default's (which include
	// OTEL_RESOURCE_ATTRIBUTES): riffdb's configuration is the source of truth.
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: build resource: %w", err)
	}
	return res, nil
}

// Shutdown flushes and stops the pipeline in order: pending spans are
// exported first (so the tail of a run reaches the collector), then the
// meter provider is shut down, then the logger is synced. It blocks until
// done or until ctx ends; pass a bounded context (e.g. five seconds) after
// the HTTP servers have stopped. Shutdown is idempotent: later calls return
// the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		if t.sdkTracer != nil {
			if err := t.sdkTracer.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: flush spans: %w", err))
			}
		}
		if err := t.MeterProvider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: stop metrics: %w", err))
		}
		if err := syncLogger(t.Logger); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: sync logger: %w", err))
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}

// promLogger adapts zap to promhttp's error logger.
type promLogger struct{ l *zap.Logger }

func (p promLogger) Println(v ...any) {
	p.l.Error("metrics scrape error", zap.String("error", fmt.Sprint(v...)))
}
