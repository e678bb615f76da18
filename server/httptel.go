package server

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/httpconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/internal/observe/unrecorded"
	"github.com/riffdb/riffdb/telemetry"
)

// httpTelemetry is the API's HTTP server instrumentation. For every
// request it makes the server span and records the three http.server.*
// histograms that otelhttp v0.72 (stable semantic conventions) made and
// recorded before it: the same span name, kind, attributes and status, the
// same instruments (names, units, descriptions, buckets) with the
// attributes telemetry.HTTPServerAttributes keeps
// (TestHTTPTelemetryMatchesOtelhttp holds it to otelhttp's output).
//
// What it saves: otelhttp built each request's metric attributes (server
// address and port included, for the view to drop again) into a new
// attribute set, wrapped the writer through httpsnoop and the body in a
// counting wrapper, and put a labeler in the context: about 15 µs of a
// command's 160 µs of server CPU on tmpfs, of which this keeps the span.
// The metric attribute sets are built once per method, route, status,
// scheme and protocol, and recorded under telemetry.HTTPServerScope, which
// the view's attribute filter leaves alone (the sets hold only kept keys).
type httpTelemetry struct {
	next       http.Handler
	tracer     trace.Tracer
	stamps     bool // the tracer's spans may record: they get the request's start and end times
	propagator propagation.TextMapPropagator
	name       func(*http.Request) string

	duration metric.Float64Histogram
	reqSize  metric.Int64Histogram
	respSize metric.Int64Histogram

	mu   sync.RWMutex
	sets map[metricKey][]metric.RecordOption
}

// metricKey is what a request's metric attributes are made of, each part
// from a bounded set: the method as the metrics name it (one of ten), the
// mux's pattern, the protocol net/http accepted, the server's status.
type metricKey struct {
	method, route, proto string
	status               int
	tls                  bool
}

// maxMetricSets bounds the cache of attribute sets; every key part is from
// a bounded set (metricKey), so it is never reached in practice, and past
// it a set is built per request.
const maxMetricSets = 4096

// newHTTPTelemetry instruments next with the providers of tel; name names
// the span (spanName). It is called once, before the mux routes the
// request, so it must not depend on the mux's pattern: otelhttp named the
// span again after routing, which gave spanName's name a second time.
func newHTTPTelemetry(tel *telemetry.Telemetry, propagator propagation.TextMapPropagator, name func(*http.Request) string, next http.Handler) (*httpTelemetry, error) {
	meter := tel.MeterProvider.Meter(telemetry.HTTPServerScope)
	dur, err := httpconv.NewServerRequestDuration(meter, metric.WithExplicitBucketBoundaries(
		0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	if err != nil {
		return nil, err
	}
	req, err := httpconv.NewServerRequestBodySize(meter)
	if err != nil {
		return nil, err
	}
	resp, err := httpconv.NewServerResponseBodySize(meter)
	if err != nil {
		return nil, err
	}
	return &httpTelemetry{next: next, tracer: tel.TracerProvider.Tracer(telemetry.HTTPServerScope),
		stamps:     unrecorded.Records(tel.TracerProvider),
		propagator: propagator, name: name,
		duration: dur.Inst(), reqSize: req.Inst(), respSize: resp.Inst(),
		sets: map[metricKey][]metric.RecordOption{}}, nil
}

func (h *httpTelemetry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := h.propagator.Extract(r.Context(), requestCarrier(r.Header))
	var span trace.Span
	if h.stamps {
		ctx, span = h.tracer.Start(ctx, h.name(r), trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	} else {
		// A span that cannot record keeps no time: without the timestamp
		// option (and its slice) the start allocates two times less.
		ctx, span = h.tracer.Start(ctx, h.name(r), serverSpan...)
	}
	// The request's attributes are taken now, as it arrived, and given to
	// the span with the response's in one call when it ends: the SDK
	// copies the attributes given at the start (into the start options,
	// then into the span) and grows the span's slice again for the ones
	// added later, four allocations and about 3 KiB a request where one
	// call makes one. Riffdb's sampler does not read attributes. A span
	// that does not record (not sampled, or no exporter) gets none.
	recording := span.IsRecording()
	var attrs []attribute.KeyValue
	if recording {
		attrs = requestAttrs(r)
	}
	// The writer's wrapper and the body's counter are one allocation.
	wrap := &struct {
		w telemetryWriter
		b countingBody
	}{w: telemetryWriter{ResponseWriter: w, status: http.StatusOK}}
	rw := &wrap.w
	var body *countingBody
	if r.Body != nil && r.Body != http.NoBody {
		wrap.b.ReadCloser = r.Body
		body = &wrap.b
		prev := r.Body
		r.Body = body
		defer func() { r.Body = prev }()
	}
	req := r.WithContext(ctx)
	h.next.ServeHTTP(rw, req)
	end := time.Now()
	var read int64
	if body != nil {
		read = body.n
	}
	if recording {
		if rw.status >= 500 || rw.status < 100 {
			span.SetStatus(codes.Error, statusMessage(rw.status))
		}
		if read > 0 {
			attrs = append(attrs, semconv.HTTPRequestBodySize(int(read)))
		}
		if rw.written > 0 {
			attrs = append(attrs, semconv.HTTPResponseBodySize(int(rw.written)))
		}
		if rw.status > 0 {
			attrs = append(attrs, semconv.HTTPResponseStatusCode(rw.status))
		}
		span.SetAttributes(attrs...)
	}
	set := h.metricSet(req, rw.status)
	h.reqSize.Record(ctx, read, set...)
	h.respSize.Record(ctx, rw.written, set...)
	h.duration.Record(ctx, end.Sub(start).Seconds(), set...)
	if h.stamps {
		span.End(trace.WithTimestamp(end))
	} else {
		span.End()
	}
}

// serverSpan is the start option of a server span that keeps no time,
// made once.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// requestCarrier is propagation.HeaderCarrier for a request's headers,
// which net/http keeps under their canonical names: the W3C trace context
// fields are looked up under theirs (traceContextHeaders), where http.Header.Get
// makes the canonical name anew for every field on every request (three
// for the default propagator, each a new string: about 0.6 µs and three
// allocations a request). Any other field is http.Header.Get's.
type requestCarrier http.Header

func (c requestCarrier) Get(key string) string {
	var v []string
	switch key {
	case "traceparent":
		v = c[headerTraceparent]
	case "tracestate":
		v = c[headerTracestate]
	case "baggage":
		v = c[headerBaggage]
	default:
		return http.Header(c).Get(key)
	}
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func (c requestCarrier) Set(key, value string) { propagation.HeaderCarrier(c).Set(key, value) }
func (c requestCarrier) Keys() []string        { return propagation.HeaderCarrier(c).Keys() }

// statusMessage is otelhttp's span status description: empty for a 5xx,
// and the code for one outside 100-599.
func statusMessage(code int) string {
	if code >= 100 && code < 600 {
		return ""
	}
	return "Invalid HTTP status code " + strconv.Itoa(code)
}

// metricSet returns the attribute set of r's metrics, answered with
// status: built once per key.
func (h *httpTelemetry) metricSet(r *http.Request, status int) []metric.RecordOption {
	k := metricKey{method: standardMethod(r.Method), route: httpRoute(r.Pattern), proto: r.Proto, status: status, tls: r.TLS != nil}
	h.mu.RLock()
	set, ok := h.sets[k]
	h.mu.RUnlock()
	if ok {
		return set
	}
	name, version := netProtocol(k.proto)
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(k.method), scheme(k.tls)}
	if name != "" {
		attrs = append(attrs, semconv.NetworkProtocolName(name))
	}
	if version != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(version))
	}
	if status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	if k.route != "" {
		attrs = append(attrs, semconv.HTTPRoute(k.route))
	}
	// Kept as the slice Record's variadic options are: a slice made at
	// each call would be one allocation per instrument and request.
	set = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	h.mu.Lock()
	if len(h.sets) < maxMetricSets {
		h.sets[k] = set
	}
	h.mu.Unlock()
	return set
}

// requestAttrs are the span's attributes known when the request arrives,
// as otelhttp's RequestTraceAttrs made them.
func requestAttrs(r *http.Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 15) // and the response's three
	host, port := splitHostPort(r.Host)
	attrs = append(attrs, semconv.ServerAddress(host))
	method, original := requestMethod(r.Method)
	attrs = append(attrs, method, scheme(r.TLS != nil))
	if p := requiredPort(r.TLS != nil, port); p > 0 {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	if original.Valid() {
		attrs = append(attrs, original)
	}
	peer, peerPort := splitHostPort(r.RemoteAddr)
	if peer != "" {
		attrs = append(attrs, semconv.NetworkPeerAddress(peer))
		if peerPort > 0 {
			attrs = append(attrs, semconv.NetworkPeerPort(peerPort))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, semconv.UserAgentOriginal(ua))
	}
	client, _, _ := strings.Cut(r.Header.Get("X-Forwarded-For"), ",")
	if client == "" {
		client = peer
	}
	if client != "" {
		attrs = append(attrs, semconv.ClientAddress(client))
	}
	if r.URL != nil && r.URL.Path != "" {
		attrs = append(attrs, semconv.URLPath(r.URL.Path))
	}
	name, version := netProtocol(r.Proto)
	if name != "" && name != "http" {
		attrs = append(attrs, semconv.NetworkProtocolName(name))
	}
	if version != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(version))
	}
	if route := httpRoute(r.Pattern); route != "" {
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	return attrs
}

// standardMethods are the request methods the conventions name; any other
// is "_OTHER" (HTTP in span names).
var standardMethods = map[string]attribute.KeyValue{
	http.MethodConnect: semconv.HTTPRequestMethodConnect, http.MethodDelete: semconv.HTTPRequestMethodDelete,
	http.MethodGet: semconv.HTTPRequestMethodGet, http.MethodHead: semconv.HTTPRequestMethodHead,
	http.MethodOptions: semconv.HTTPRequestMethodOptions, http.MethodPatch: semconv.HTTPRequestMethodPatch,
	http.MethodPost: semconv.HTTPRequestMethodPost, http.MethodPut: semconv.HTTPRequestMethodPut,
	http.MethodTrace: semconv.HTTPRequestMethodTrace,
}

// requestMethod returns the span's http.request.method and, for a method
// that is not one of the standard ones as sent, http.request.method_original.
func requestMethod(m string) (method, original attribute.KeyValue) {
	if m == "" {
		return semconv.HTTPRequestMethodOther, attribute.KeyValue{}
	}
	if a, ok := standardMethods[m]; ok {
		return a, attribute.KeyValue{}
	}
	original = semconv.HTTPRequestMethodOriginal(m)
	if a, ok := standardMethods[strings.ToUpper(m)]; ok {
		return a, original
	}
	return semconv.HTTPRequestMethodOther, original
}

// standardMethod is the metrics' http.request.method: the method in upper
// case if it is a standard one, else "_OTHER".
func standardMethod(m string) string {
	m = strings.ToUpper(m)
	if _, ok := standardMethods[m]; ok {
		return m
	}
	return "_OTHER"
}

func scheme(tls bool) attribute.KeyValue {
	if tls {
		return semconv.URLScheme("https")
	}
	return semconv.URLScheme("http")
}

// splitHostPort splits host[:port] as otelhttp does: port -1 when absent
// or not a 16-bit number, the host without IPv6 brackets.
func splitHostPort(hostport string) (host string, port int) {
	port = -1
	if strings.HasPrefix(hostport, "[") {
		end := strings.LastIndexByte(hostport, ']')
		if end < 0 {
			return "", port
		}
		if !strings.Contains(hostport[end:], ":") {
			return hostport[1:end], port
		}
	} else if !strings.Contains(hostport, ":") {
		return hostport, port
	}
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return host, port
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return host, port
	}
	return host, int(n)
}

// requiredPort is port unless it is the scheme's default (or absent).
func requiredPort(tls bool, port int) int {
	if port <= 0 || (tls && port == 443) || (!tls && port == 80) {
		return -1
	}
	return port
}

// httpRoute is the path part of a mux pattern ("POST /a/{b}" → "/a/{b}").
func httpRoute(pattern string) string {
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		return pattern[i:]
	}
	return ""
}

// netProtocol splits "HTTP/1.1" into the conventions' "http" and "1.1".
func netProtocol(proto string) (name, version string) {
	name, version, _ = strings.Cut(proto, "/")
	switch name {
	case "HTTP":
		name = "http"
	case "QUIC":
		name = "quic"
	case "SPDY":
		name = "spdy"
	default:
		name = strings.ToLower(name)
	}
	return name, version
}

// telemetryWriter notes a response's status and body bytes. Like otelhttp's
// writer, the first status other than an informational one counts, and a
// body written without one is a 200.
type telemetryWriter struct {
	http.ResponseWriter
	status      int
	written     int64
	wroteHeader bool
}

func (w *telemetryWriter) WriteHeader(code int) {
	if !w.wroteHeader && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.wroteHeader = true
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *telemetryWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

// Flush flushes the underlying writer, if it can.
func (w *telemetryWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *telemetryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the request body bytes the handler read.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}
