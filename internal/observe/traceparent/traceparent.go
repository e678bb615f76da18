// Package traceparent reads and writes the W3C traceparent value alone,
// through OpenTelemetry's TraceContext propagator, without the header map a
// propagation.MapCarrier is. The primary stores each command's traceparent
// with its events' outbox intents, and the outbox worker links every claim
// to them: once per command and once per delivered event.
package traceparent

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const header = "traceparent"

// carrier holds the traceparent value and nothing else: the propagator's
// tracestate is dropped on Set and absent on Get.
type carrier struct{ v string }

func (c *carrier) Get(key string) string {
	if key == header {
		return c.v
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == header {
		c.v = value
	}
}

func (c *carrier) Keys() []string { return []string{header} }

// Of returns the traceparent of the span context in ctx, or "" when ctx
// carries no valid one.
func Of(ctx context.Context) string {
	var c carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	return c.v
}

// SpanContext returns the remote span context that the traceparent tp
// names, as the TraceContext propagator parses it; it is not valid when tp
// names none.
func SpanContext(tp string) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &carrier{v: tp}))
}
