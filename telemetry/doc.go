// Package telemetry owns riffdb's telemetry pipeline: the OpenTelemetry SDK
// (tracer and meter providers), the Prometheus exposition of metrics, OTLP
// trace export and the zap JSON logger.
//
// # Model
//
// Core packages (primary, archive, outbox) only use the OpenTelemetry API
// and receive providers from the server; they never import this package.
// The server calls Setup once, hands Telemetry.TracerProvider and
// Telemetry.MeterProvider to every component, serves
// Telemetry.MetricsHandler on the metrics listener, and calls Shutdown last.
// Nothing is installed as a global except the W3C TraceContext+Baggage text
// map propagator, which HTTP middleware needs to continue incoming traces.
//
// # Metrics
//
// Instruments are defined with OpenTelemetry names (riffdb.outbox.claim.duration,
// unit "s") and exported by the OpenTelemetry Prometheus exporter into a
// private prometheus.Registry, which also holds the Go runtime and process
// collectors (go_*, process_*). The translation strategy is pinned to
// UnderscoreEscapingWithSuffixes, so names keep their unit and type
// suffixes (riffdb_outbox_claim_duration_seconds_bucket, *_bytes, *_total),
// and scope labels are dropped. Resource attributes appear once, as
// target_info. Every histogram named "*.duration" gets DurationBuckets
// (seconds) through a View, because the SDK's default boundaries are
// millisecond-shaped; other histograms keep the boundaries they advise.
//
// Labels come only from bounded sets. The HTTP server instruments
// (http.server.*, recorded by the server's own instrumentation under
// HTTPServerScope, or by otelhttp) keep only HTTPServerAttributes —
// method (unknown methods become "_OTHER"), status code, scheme, protocol
// name and version, and the mux's route pattern. otelhttp also records
// server.address and server.port, taken from the client's Host header; a
// client varying it would add one series per value until the SDK's
// cardinality limit sends every new series, legitimate ones included, to
// otel_metric_overflow. Ids belong on spans, never on labels.
//
// Exemplars: the meter provider uses the trace-based exemplar filter, so a
// measurement recorded with the context of a sampled span carries its
// trace_id and span_id, and nothing else: the attributes a view filtered
// out are not kept on exemplars (the SDK would keep them and the exporter
// would print them as exemplar labels). Prometheus only sees exemplars in
// the OpenMetrics format, which MetricsHandler serves when the scraper
// sends "Accept: application/openmetrics-text".
//
// ObservePebble adds storage-engine gauges and counters for one Pebble store,
// read from pebble.Metrics at scrape time only.
//
// # Traces
//
// Config.SampleRatio decides for root spans and for spans continuing a
// trace context that came with a request (a remote parent): a client's
// sampled flag is ignored, so with ratio 0 nothing is sampled and with
// ratio 1 everything is, unless Config.HonorSampledParent is set, which
// additionally samples every span whose remote parent is sampled. Spans
// with a local parent follow it, so a trace is never cut in the middle of
// the process (see Sampler). Which requests may carry a trace context at
// all is the server's decision: it drops traceparent, tracestate and
// baggage from every request that is not an authenticated command (from
// every request when telemetry.trust_trace_context is off), so an
// unauthenticated client can neither choose a trace id (which would show up
// in exemplars) nor switch sampling on. With an OTLP endpoint, spans go
// through a batch processor with a bounded queue (SpanQueueSize) that
// drops rather than blocks.
//
// # Logs
//
// NewLogger builds a JSON zap logger; Logger(ctx, l) adds trace_id and
// span_id fields so that a log line can be joined with its trace.
package telemetry
