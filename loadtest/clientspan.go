package loadtest

import (
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// clientSpanName is the name of each request's client span, the child of
// its SpanName span and the parent of the server's spans.
const clientSpanName = "HTTP POST"

// The client span is the load generator's own, with the name, kind,
// attributes and status otelhttp's transport gave it (v0.72, the semantic
// conventions' HTTP client span), and send injects its traceparent. It used
// to be otelhttp's, which wraps the request body to count its bytes: net/http
// then cannot tell the body is in memory, flushes the headers and writes the
// body with a second system call, so every request crossed the loopback as
// two TCP segments. That second write and segment cost the generator more
// CPU per request than the do-nothing server spent on the whole request, and
// the generator shares the machine's cores with the server it measures (#47;
// TestEachRequestIsOneSegment).

// clientSpanAttrs returns the attributes every client span of a run to
// target, the command URL under the validated server URL u (no user
// information: validate refuses it), starts with: the method, the URL, the
// server's address and port (when not the scheme's default) and the
// protocol version.
func clientSpanAttrs(u *url.URL, target string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodPost, semconv.URLFull(target), semconv.ServerAddress(u.Hostname())}
	if port, err := strconv.Atoi(u.Port()); err == nil && port > 0 &&
		!(u.Scheme == "http" && port == 80 || u.Scheme == "https" && port == 443) {
		attrs = append(attrs, semconv.ServerPort(port))
	}
	return append(attrs, semconv.NetworkProtocolVersion("1.1"))
}

// endClientSpan ends a client span: with the response's status code (an
// error from 400 on, error.type the code), or, when no response came or its
// body could not be read, with err.
func endClientSpan(span trace.Span, status int, err error) {
	switch {
	case status != 0 && (status < 100 || status >= 400):
		span.SetAttributes(semconv.HTTPResponseStatusCode(status), semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, "")
	case status != 0:
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	case err != nil:
		span.SetAttributes(semconv.ErrorType(err))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
