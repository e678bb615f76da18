// Package traceparent reads and writes the W3C traceparent value alone,
// through OpenTelemetry's TraceContext propagator, without the header map a
// propagation.MapCarrier is. The primary stores each command's traceparent
// with its events' outbox intents, and the outbox worker links every claim
// to them: once per command and once per delivered event.
package traceparent

import (
	"context"
	"encoding/hex"

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
//
// It writes what propagation.TraceContext's Inject writes (the version, the
// ids, the flags it keeps: sampled and random), in one allocation where
// Inject through a carrier takes two.
func Of(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	flags := [1]byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))}
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	b[0], b[1], b[2], b[35], b[52] = '0', '0', '-', '-', '-'
	hex.Encode(b[3:35], tid[:])
	hex.Encode(b[36:52], sid[:])
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// SpanContext returns the remote span context that the traceparent tp
// names, as the TraceContext propagator parses it; it is not valid when tp
// names none.
func SpanContext(tp string) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &carrier{v: tp}))
}
