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
// Exemplars: the meter provider uses the trace-based exemplar filter, so a
// measurement recorded with the context of a sampled span carries its
// trace_id and span_id. Prometheus only sees them in the OpenMetrics format,
// which MetricsHandler serves when the scraper sends
// "Accept: application/openmetrics-text".
//
// ObservePebble adds storage-engine gauges and counters for one Pebble store,
// read from pebble.Metrics at scrape time only.
//
// # Traces
//
// Root spans are sampled with Config.SampleRatio; child spans follow their
// parent (ParentBased), so a sampled caller's trace is never cut in the
// middle. With an OTLP endpoint, spans go through a batch processor with a
// bounded queue (SpanQueueSize) that drops rather than blocks.
//
// # Logs
//
// NewLogger builds a JSON zap logger; Logger(ctx, l) adds trace_id and
// span_id fields so that a log line can be joined with its trace.
package telemetry
