// Package unrecorded is a tracer provider for a process whose spans go
// nowhere: it makes the same sampling decisions as the OpenTelemetry SDK
// with the same sampler, and gives every span a fresh identity, but it
// records nothing.
//
// Without an exporter the SDK's tracer provider still records every
// sampled span: it copies its attributes, events, links and status, reads
// the clock at its start and end, and then drops it, because no span
// processor is registered to receive it. The OpenTelemetry trace SDK
// specification says that a tracer with no processor is not enabled, and
// other SDKs skip the work (opentelemetry-java #8740, #8815; otel4s #991).
// This package skips it in Go.
//
// What a span of this provider keeps is what the rest of the process can
// see of a span: its span context. Its trace id is the parent's, or a new
// random one for a root; its span id is new and random; its sampled flag
// and trace state are the sampler's decision, exactly as
// go.opentelemetry.io/otel/sdk/trace decides them. So metric exemplars
// (the trace-based exemplar filter reads the sampled flag of the context's
// span), log lines carrying trace_id and span_id, and a trace context
// stored or propagated from the span are the same as with the SDK. What it
// drops, IsRecording reports: false, so that instrumentation can skip
// building attributes nobody reads.
package unrecorded

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// NewTracerProvider returns a tracer provider whose spans are sampled by
// sampler and never recorded.
func NewTracerProvider(sampler sdktrace.Sampler) trace.TracerProvider {
	p := &provider{}
	p.tracer = &tracer{provider: p, sampler: sampler}
	return p
}

type provider struct {
	embedded.TracerProvider
	tracer *tracer
}

// Records reports whether a span of tp may record anything: false for a
// provider of this package, true for any other. Instrumentation that would
// pass what only a recorded span keeps (a start or end timestamp) can leave
// it out when false: an option given to Start or End is an allocation.
func Records(tp trace.TracerProvider) bool {
	_, unrecorded := tp.(*provider)
	return !unrecorded
}

// Tracer returns the provider's one tracer: with nothing recorded, the
// instrumentation scope is never read.
func (p *provider) Tracer(string, ...trace.TracerOption) trace.Tracer { return p.tracer }

type tracer struct {
	embedded.Tracer
	provider *provider
	sampler  sdktrace.Sampler
}

// Start returns ctx with a new span, as the SDK's tracer would make it
// (go.opentelemetry.io/otel/sdk/trace, tracer.newSpan): the parent is the
// span context in ctx unless WithNewRoot is given; the trace id is the
// parent's if valid, else new; the span id is always new; the sampler is
// asked with the same parameters; the sampled flag is set or cleared on
// the parent's flags by its decision, and its trace state is kept.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	config := trace.NewSpanStartConfig(opts...)
	var psc trace.SpanContext
	if config.NewRoot() {
		ctx = trace.ContextWithSpanContext(ctx, psc)
	} else {
		psc = trace.SpanContextFromContext(ctx)
	}
	tid := psc.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{
		ParentContext: ctx,
		TraceID:       tid,
		Name:          name,
		Kind:          config.SpanKind(),
		Attributes:    config.Attributes(),
		Links:         config.Links(),
	})
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if res.Decision == sdktrace.RecordAndSample {
		flags |= trace.FlagsSampled
	}
	s := &span{provider: t.provider, sc: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     newSpanID(),
		TraceFlags: flags,
		TraceState: res.Tracestate,
	})}
	return trace.ContextWithSpan(ctx, s), s
}

// span is a span that records nothing: every method but SpanContext and
// TracerProvider is noop.Span's.
type span struct {
	noop.Span
	provider *provider
	sc       trace.SpanContext
}

func (s *span) SpanContext() trace.SpanContext       { return s.sc }
func (s *span) TracerProvider() trace.TracerProvider { return s.provider }

// newTraceID returns a random, valid trace id. math/rand/v2's top-level
// functions draw from the runtime's per-thread ChaCha8 generator: no lock,
// unpredictable, as random in all 128 bits as the SDK's ids (a
// TraceIDRatioBased sampler reads the low 63 bits of the id's second half).
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID returns a random, valid span id.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
