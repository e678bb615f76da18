package unrecorded_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/internal/observe/unrecorded"
	"github.com/riffdb/riffdb/telemetry"
)

var (
	parentTrace = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	parentSpan  = trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

// parents are the span contexts a span can start under: none, remote or
// local, sampled or not, with and without a trace state.
func parents(t *testing.T) map[string]context.Context {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]context.Context{"none": context.Background()}
	for _, remote := range []bool{false, true} {
		for _, sampled := range []bool{false, true} {
			for _, state := range []trace.TraceState{{}, ts} {
				cfg := trace.SpanContextConfig{TraceID: parentTrace, SpanID: parentSpan, Remote: remote, TraceState: state}
				if sampled {
					cfg.TraceFlags = trace.FlagsSampled
				}
				name := fmt.Sprintf("remote %v sampled %v state %q", remote, sampled, state.String())
				out[name] = trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
			}
		}
	}
	return out
}

// TestDecisionsMatchTheSDK starts the same spans through the SDK's tracer
// provider and through unrecorded's, with the same sampler (riffdb's, at
// each ratio and honor setting), under every kind of parent, with and
// without WithNewRoot: the span contexts must agree in everything but the
// span id, which must be new. Where the trace id is new (a root), each
// span's sampled flag must be the sampler's decision for its trace id.
func TestDecisionsMatchTheSDK(t *testing.T) {
	for _, ratio := range []float64{0, 0.5, 1} {
		for _, honor := range []bool{false, true} {
			sampler := telemetry.Sampler(ratio, honor)
			sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler)).Tracer("test")
			ours := unrecorded.NewTracerProvider(sampler).Tracer("test")
			for name, ctx := range parents(t) {
				for _, newRoot := range []bool{false, true} {
					t.Run(fmt.Sprintf("ratio %v honor %v parent %s new root %v", ratio, honor, name, newRoot), func(t *testing.T) {
						var opts []trace.SpanStartOption
						if newRoot {
							opts = append(opts, trace.WithNewRoot())
						}
						_, want := sdk.Start(ctx, "riffdb.command", opts...)
						_, got := ours.Start(ctx, "riffdb.command", opts...)
						w, g := want.SpanContext(), got.SpanContext()
						if !g.IsValid() || g.IsRemote() {
							t.Fatalf("span context %+v: want valid and local", g)
						}
						if g.SpanID() == parentSpan {
							t.Fatal("the span reuses its parent's span id")
						}
						continues := name != "none" && !newRoot
						if continues {
							if g.TraceID() != parentTrace || w.TraceID() != parentTrace {
								t.Fatalf("trace id %s (SDK %s), want the parent's", g.TraceID(), w.TraceID())
							}
						} else if g.TraceID() == parentTrace {
							t.Fatal("a root span took the parent's trace id")
						}
						if continues || ratio != 0.5 {
							// The decision does not depend on a new trace id.
							if g.TraceFlags() != w.TraceFlags() || g.TraceState().String() != w.TraceState().String() {
								t.Fatalf("flags %v state %q, the SDK's %v %q", g.TraceFlags(), g.TraceState(), w.TraceFlags(), w.TraceState())
							}
						}
						res := sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctxOf(ctx, newRoot), TraceID: g.TraceID(), Name: "riffdb.command"})
						if g.IsSampled() != (res.Decision == sdktrace.RecordAndSample) {
							t.Fatalf("sampled %v, the sampler decided %v", g.IsSampled(), res.Decision)
						}
					})
				}
			}
		}
	}
}

func ctxOf(ctx context.Context, newRoot bool) context.Context {
	if newRoot {
		return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	return ctx
}

// TestRootTraceIDsAreRandom starts many roots at ratio 0.5: the trace ids
// must all differ and about half be sampled (the ratio sampler reads the
// trace id, so ids that are not random would skew it).
func TestRootTraceIDsAreRandom(t *testing.T) {
	tr := unrecorded.NewTracerProvider(telemetry.Sampler(0.5, false)).Tracer("test")
	const n = 4000
	seen := make(map[trace.TraceID]bool, n)
	spans := make(map[trace.SpanID]bool, n)
	sampled := 0
	for range n {
		_, s := tr.Start(context.Background(), "riffdb.command")
		sc := s.SpanContext()
		if seen[sc.TraceID()] || spans[sc.SpanID()] {
			t.Fatalf("trace id %s or span id %s repeated", sc.TraceID(), sc.SpanID())
		}
		seen[sc.TraceID()], spans[sc.SpanID()] = true, true
		if sc.IsSampled() {
			sampled++
		}
	}
	if sampled < n*45/100 || sampled > n*55/100 {
		t.Fatalf("%d of %d roots sampled at ratio 0.5", sampled, n)
	}
}

// TestSpansRecordNothing: a span says it does not record, takes every call
// of the API, is the span of the context Start returns, and its children
// continue its trace.
func TestSpansRecordNothing(t *testing.T) {
	tp := unrecorded.NewTracerProvider(telemetry.Sampler(1, false))
	ctx, span := tp.Tracer("test").Start(context.Background(), "riffdb.outbox.claim",
		trace.WithAttributes(attribute.String("k", "v")), trace.WithLinks(trace.Link{}), trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		t.Fatal("span records")
	}
	if !span.SpanContext().IsSampled() {
		t.Fatal("span at ratio 1 is not sampled")
	}
	if trace.SpanFromContext(ctx) != span {
		t.Fatal("the context does not carry the span")
	}
	if span.TracerProvider() != tp {
		t.Fatal("span.TracerProvider is not its provider")
	}
	span.SetAttributes(attribute.Int("n", 1))
	span.AddEvent("durable")
	span.AddLink(trace.Link{})
	span.RecordError(errors.New("x"))
	span.SetStatus(codes.Error, "x")
	span.SetName("renamed")
	span.End()
	_, child := tp.Tracer("other").Start(ctx, "riffdb.archive.txn")
	if child.SpanContext().TraceID() != span.SpanContext().TraceID() || !child.SpanContext().IsSampled() {
		t.Fatal("the child does not continue its parent's sampled trace")
	}
	if child.SpanContext().SpanID() == span.SpanContext().SpanID() {
		t.Fatal("the child reuses its parent's span id")
	}
}

// TestRecords: this package's provider says its spans cannot record; the
// SDK's says they may.
func TestRecords(t *testing.T) {
	if unrecorded.Records(unrecorded.NewTracerProvider(telemetry.Sampler(1, false))) {
		t.Error("Records is true for a provider that records nothing")
	}
	sdk := sdktrace.NewTracerProvider()
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	if !unrecorded.Records(sdk) {
		t.Error("Records is false for the SDK's provider")
	}
}
