package primary

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/internal/observe/attrkey"
	"github.com/riffdb/riffdb/internal/observe/traceparent"
)

const instrumentationName = "github.com/riffdb/riffdb/primary"

// telemetry holds the instruments created from the injected providers.
type telemetry struct {
	tracer   trace.Tracer
	duration metric.Float64Histogram
	// durationAttrs holds the histogram's attribute set per (command label,
	// result), built once at Open: building a set sorts and hashes its
	// attributes, which is measurable on the commit path. Each is kept as
	// the one-element slice Record takes, so that passing it allocates
	// nothing.
	durationAttrs map[[2]string][]metric.RecordOption
	// groupSize is riffdb.commit.group.size: the commits of each group the
	// committer writes as one batch (see committer.go); groupAttrs is its
	// attribute set (the database alias), as the slice Record takes.
	groupSize  metric.Int64Histogram
	groupAttrs []metric.RecordOption
}

// groupSizeBuckets are the boundaries of riffdb.commit.group.size: powers of
// two up to maxGroup.
var groupSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// results are every result label Execute records (see resultOf).
var results = []string{"committed", "replayed", "unknown_command", "invalid_input",
	"idempotency_conflict", "failed", "closed", "canceled", "error"}

// durationOptions returns the attribute options of one command duration
// measurement.
func (db *DB) durationOptions(label, result string) []metric.RecordOption {
	if o, ok := db.tel.durationAttrs[[2]string{label, result}]; ok {
		return o
	}
	return []metric.RecordOption{metric.WithAttributes(
		attrkey.Database.String(db.alias),
		attrkey.Command.String(label),
		attribute.String("result", result),
	)}
}

// prepareDurationAttrs builds the attribute sets of every known command
// label and result. The map is read-only afterwards.
func (db *DB) prepareDurationAttrs(commands []string) {
	db.tel.durationAttrs = make(map[[2]string][]metric.RecordOption, (len(commands)+1)*len(results))
	for _, c := range append(commands, "_unknown") {
		for _, r := range results {
			db.tel.durationAttrs[[2]string{c, r}] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
				attrkey.Database.String(db.alias),
				attrkey.Command.String(c),
				attribute.String("result", r),
			))}
		}
	}
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, alias string) (telemetry, error) {
	m := mp.Meter(instrumentationName)
	d, err := m.Float64Histogram("riffdb.command.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of command execution, from request to durable commit."))
	if err != nil {
		return telemetry{}, fmt.Errorf("primary: create command histogram: %w", err)
	}
	g, err := m.Int64Histogram("riffdb.commit.group.size",
		metric.WithUnit("{command}"),
		metric.WithDescription("Commits written together as one batch and one WAL sync (group commit)."),
		metric.WithExplicitBucketBoundaries(groupSizeBuckets...))
	if err != nil {
		return telemetry{}, fmt.Errorf("primary: create commit group histogram: %w", err)
	}
	return telemetry{tracer: tp.Tracer(instrumentationName), duration: d, groupSize: g,
		groupAttrs: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrkey.Database.String(alias)))}}, nil
}

// traceParent returns the W3C traceparent of the span in ctx, or "".
func traceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "" // nothing to propagate (tracing off or no span)
	}
	tp := traceparent.Of(ctx)
	if len(tp) > maxTraceParentLen {
		return ""
	}
	return tp
}
