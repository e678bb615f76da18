package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/telemetry"
)

var parentTrace = trace.TraceID{1, 2, 3}

// withParent returns a context whose span context is a parent with the given
// origin (remote: extracted from a request) and sampled flag.
func withParent(remote, sampled bool) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: parentTrace, SpanID: trace.SpanID{4, 5, 6}, Remote: remote,
	})
	if sampled {
		sc = sc.WithTraceFlags(trace.FlagsSampled)
	}
	if remote {
		return trace.ContextWithRemoteSpanContext(context.Background(), sc)
	}
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func TestSamplerRatioDecidesUnlessHonorSampledParent(t *testing.T) {
	type parent int
	const (
		none parent = iota
		remoteSampled
		remoteUnsampled
		localSampled
		localUnsampled
	)
	names := map[parent]string{none: "root", remoteSampled: "remote sampled parent",
		remoteUnsampled: "remote unsampled parent", localSampled: "local sampled parent", localUnsampled: "local unsampled parent"}
	for _, tc := range []struct {
		ratio  float64
		honor  bool
		parent parent
		want   bool
	}{
		{0, false, none, false},
		{0, false, remoteSampled, false}, // a client cannot switch sampling on
		{0, false, remoteUnsampled, false},
		{0, false, localSampled, true}, // children follow their root
		{0, true, none, false},
		{0, true, remoteSampled, true},
		{0, true, remoteUnsampled, false},
		{1, false, none, true},
		{1, false, remoteSampled, true},
		{1, false, remoteUnsampled, true}, // nor switch it off
		{1, false, localUnsampled, false},
		{1, true, remoteSampled, true},
		{1, true, remoteUnsampled, true}, // honouring only ever adds
	} {
		t.Run(fmt.Sprintf("ratio %v honor %v %s", tc.ratio, tc.honor, names[tc.parent]), func(t *testing.T) {
			tel, _ := setup(t, telemetry.Config{SampleRatio: tc.ratio, HonorSampledParent: tc.honor})
			tr := tel.TracerProvider.Tracer("test")
			ctx := context.Background()
			if tc.parent != none {
				ctx = withParent(tc.parent == remoteSampled || tc.parent == remoteUnsampled,
					tc.parent == remoteSampled || tc.parent == localSampled)
			}
			for range 20 {
				_, span := tr.Start(ctx, "riffdb.command")
				sc := span.SpanContext()
				span.End()
				if !sc.IsValid() {
					t.Fatal("span has no valid ids (needed for log correlation)")
				}
				if got := sc.IsSampled(); got != tc.want {
					t.Fatalf("sampled = %v, want %v", got, tc.want)
				}
				if tc.parent != none && sc.TraceID() != parentTrace {
					t.Fatal("span does not continue its parent's trace")
				}
			}
		})
	}
}
