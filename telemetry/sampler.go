package telemetry

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Sampler returns the sampler Setup installs. ratio (in [0, 1]) decides for
// root spans and for spans whose parent is remote, that is, a trace context
// a client sent with its request:
//
//   - A remote parent's sampled flag is ignored unless honorSampledParent
//     is set: the span continues the caller's trace id, but ratio decides
//     whether it is recorded. A client can neither switch sampling on (with
//     ratio 0 nothing is sampled) nor off (with ratio 1 everything is).
//   - With honorSampledParent, a sampled remote parent is always sampled;
//     an unsampled one is still left to ratio, so the option only ever adds
//     traces to what ratio samples.
//   - Local parents are followed both ways, so a trace is never cut in the
//     middle of one process.
//
// The ratio is applied to the trace id (TraceIDRatioBased), so processes
// that share a ratio take the same decision for one trace. A client whose
// trace context is trusted chooses the trace id and can therefore pick ids
// that a ratio strictly between 0 and 1 samples; which clients are trusted
// is the HTTP layer's decision (the server drops trace context from every
// request that is not an authenticated command).
func Sampler(ratio float64, honorSampledParent bool) sdktrace.Sampler {
	byRatio := sdktrace.TraceIDRatioBased(ratio)
	remoteSampled := byRatio
	if honorSampledParent {
		remoteSampled = sdktrace.AlwaysSample()
	}
	return sdktrace.ParentBased(byRatio,
		sdktrace.WithRemoteParentSampled(remoteSampled),
		sdktrace.WithRemoteParentNotSampled(byRatio))
}
