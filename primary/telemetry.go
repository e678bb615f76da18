package primary

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const instrumentationName = "github.com/riffdb/riffdb/primary"

// telemetry holds the instruments created from the injected providers.
type telemetry struct {
	tracer   trace.Tracer
	duration metric.Float64Histogram
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (telemetry, error) {
	m := mp.Meter(instrumentationName)
	d, err := m.Float64Histogram("riffdb.command.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of command execution, from request to durable commit."))
	if err != nil {
		return telemetry{}, fmt.Errorf("primary: create command histogram: %w", err)
	}
	return telemetry{tracer: tp.Tracer(instrumentationName), duration: d}, nil
}

// traceParent returns the W3C traceparent of the span in ctx, or "".
func traceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	tp := c.Get("traceparent")
	if len(tp) > maxTraceParentLen {
		return ""
	}
	return tp
}
