package loadtest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TestClientSpanMatchesOtelhttp: the client span send makes has the name,
// kind, attributes and status otelhttp's transport (v0.72) gave the same
// request, for a success and for a refusal, and both carry the span's
// traceparent. For a transport error (no server) both are errors with an
// error.type (the error's own type differs: net/http's client wraps the
// transport's).
func TestClientSpanMatchesOtelhttp(t *testing.T) {
	status := http.StatusOK
	var traceparents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		traceparents = append(traceparents, r.Header.Get("traceparent"))
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"commit_sequence":1,"replayed":false}`)
	}))
	s, err := Config{Address: srv.URL, Token: "tok"}.validate()
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	oursTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ours))
	theirsTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(theirs))
	r := &runner{s: s, tracer: oursTP.Tracer("test"), client: newClient(s, &connSet{m: map[net.Conn]struct{}{}})}
	otelClient := &http.Client{Transport: otelhttp.NewTransport(&http.Transport{},
		otelhttp.WithTracerProvider(theirsTP), otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.TraceContext{}))}
	body := []byte(`{"input":{}}`)
	viaOtelhttp := func() {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.target, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := otelClient.Do(req)
		if err == nil {
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
	}
	for _, code := range []int{http.StatusOK, http.StatusConflict, http.StatusServiceUnavailable} {
		status = code
		traceparents = nil
		_, _, _, _ = r.send(context.Background(), body)
		viaOtelhttp()
		o, th := last(t, ours), last(t, theirs)
		compareSpans(t, code, o, th)
		for i, sp := range []sdktrace.ReadOnlySpan{o, th} {
			if want := "00-" + sp.SpanContext().TraceID().String() + "-" + sp.SpanContext().SpanID().String() + "-01"; traceparents[i] != want {
				t.Errorf("status %d: traceparent %q, want the client span's %q", code, traceparents[i], want)
			}
		}
	}
	srv.Close()
	_, _, _, _ = r.send(context.Background(), body)
	viaOtelhttp()
	o, th := last(t, ours), last(t, theirs)
	for _, sp := range []sdktrace.ReadOnlySpan{o, th} {
		if sp.Status().Code.String() != "Error" || !hasKey(sp.Attributes(), semconv.ErrorTypeKey) {
			t.Errorf("transport error: span %q status %v attributes %v, want an error with error.type", sp.Name(), sp.Status(), sp.Attributes())
		}
	}
}

func last(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := rec.Ended()
	if len(ended) == 0 {
		t.Fatal("no span ended")
	}
	return ended[len(ended)-1]
}

func compareSpans(t *testing.T, code int, o, th sdktrace.ReadOnlySpan) {
	t.Helper()
	if o.Name() != th.Name() || o.SpanKind() != th.SpanKind() || o.SpanKind() != trace.SpanKindClient || o.Status() != th.Status() {
		t.Errorf("status %d: span %q %v %+v, otelhttp %q %v %+v", code, o.Name(), o.SpanKind(), o.Status(), th.Name(), th.SpanKind(), th.Status())
	}
	oa, ta := attrMap(o.Attributes()), attrMap(th.Attributes())
	if len(oa) != len(ta) {
		t.Errorf("status %d: attributes %v, otelhttp %v", code, oa, ta)
	}
	for k, v := range ta {
		if oa[k] != v {
			t.Errorf("status %d: %s = %v, otelhttp %v", code, k, oa[k], v)
		}
	}
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func hasKey(kvs []attribute.KeyValue, k attribute.Key) bool {
	_, ok := attrMap(kvs)[k]
	return ok
}
