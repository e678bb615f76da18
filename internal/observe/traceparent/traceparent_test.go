package traceparent_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/internal/observe/traceparent"
)

// TestSameAsMapCarrier: Of and SpanContext read and write what the
// TraceContext propagator reads and writes through a header map, valid
// values and refused ones alike, and a tracestate changes nothing.
func TestSameAsMapCarrier(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []trace.SpanContext{
		{},
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid}), // no span id: not valid
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled | trace.FlagsRandom}),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 0xff}), // flags the spec does not define are dropped
	} {
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		if got := traceparent.Of(ctx); got != want.Get("traceparent") {
			t.Fatalf("Of(%v) = %q, want %q", sc, got, want.Get("traceparent"))
		}
	}
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"",
		"garbage",
	} {
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
		want := trace.SpanContextFromContext(ctx)
		if got := traceparent.SpanContext(tp); !got.Equal(want) || got.IsRemote() != want.IsRemote() {
			t.Fatalf("SpanContext(%q) = %v, want %v", tp, got, want)
		}
	}
}
