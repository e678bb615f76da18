// Package loadtest is riffdb's traced load generator: it drives a command
// endpoint of a local riffdb primary and reports throughput, latency
// percentiles and the slowest requests with their trace ids.
//
// # Model
//
// Every request runs the command Config.Command on Config.Database with a
// unique input (Config.InputTemplate with {{n}} replaced by the request's
// sequence number and {{run}} by the run id) and a unique idempotency key
// ("lt-<run>-<n>"), so every request is a real commit and never a replay.
//
// Two load shapes are offered:
//
//   - Closed loop (Rate == 0): Concurrency workers each send one request,
//     wait for its response and send the next. Latency is measured from the
//     moment the request is sent. A closed loop slows down with the server
//     and therefore understates tail latency (coordinated omission).
//   - Open loop (Rate > 0): request n is due at start + n/Rate, whatever the
//     server does; at most Concurrency requests are in flight, and a request
//     that has to wait for a free slot waits in a queue. Latency is measured
//     from the intended send time, so the queueing a slow server causes is
//     counted instead of omitted. Prefer this mode for tail latencies.
//
// A run is bounded by Config.Requests and by Config.Duration (whichever ends
// first) and stops by itself; requests already sent when the duration ends
// complete (each is bounded by Config.RequestTimeout).
//
// # Tracing
//
// Each request has a root span "loadgen.request" and, under it, a client
// span "HTTP POST" (the one otelhttp's transport made; see clientspan.go for
// why it is the generator's own) whose W3C traceparent header the request
// carries, so the server's spans (its HTTP span and riffdb.command) join the
// same trace. Without Config.TracerProvider the run builds its own: with
// Config.OTLPEndpoint the OTel SDK's, whose spans are exported via OTLP/gRPC
// (flushed before Run returns); otherwise one whose spans are not recorded
// (internal/observe/unrecorded) but keep their ids and the sampler's
// decisions, which the traceparent header carries and the report prints
// next to the slowest requests. The load
// generator is a tool, not a core package, so it may own an SDK provider; it
// installs nothing global.
//
// # Progress and delivery
//
// With Config.Progress the run reports a snapshot every ProgressInterval:
// elapsed time, requests, rate, errors and the p99 so far, and the server's
// pending outbox deliveries of the database when the token may read the
// statistics (GET /v1/stats; a refusal stops the polling for the run). The
// CLI prints it as a line rewritten in place, on a terminal only.
//
// With Config.WaitDelivered the run reads the stats before the first
// request (a token without read_statistics is refused with ErrNoStatistics
// before anything is sent) and, after the last request, polls them until
// the backlog is 0 or Config.WaitTimeout has passed. Report.Delivery then
// holds the events delivered (the change of completed_deliveries), the time
// from the start and after the last request, and the throughput. The
// commit→archived lag is read from the server's own histogram
// riffdb_outbox_delivery_lag_seconds at Config.MetricsAddress, scraped
// before the first request and after the wait: its change is the run's
// deliveries, whose p50 and p99 are interpolated within the buckets as
// PromQL's histogram_quantile does (so they are as coarse as the buckets).
// Stats carry no lag, which is why the metrics endpoint is the source.
//
// # Safety
//
// The target (and the OTLP and metrics endpoints) must be a loopback address:
// 127.0.0.0/8, ::1 or localhost. The address is checked before the run and
// every dialed connection is checked again, so a name that resolves elsewhere
// is refused too.
//
// # Measurement
//
// Latencies go into per-worker HDR histograms (1 µs to 5 min, 3 significant
// digits) that are merged at the end; longer latencies are clamped to the
// highest trackable value. Percentiles are therefore exact to 0.1 %, the
// maximum and the slowest requests are exact.
package loadtest
