package server

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestRequestCarrierIsHeaderCarrier: the API's carrier answers every field
// as propagation.HeaderCarrier does, for headers as net/http parses them
// (in any spelling on the wire).
func TestRequestCarrierIsHeaderCarrier(t *testing.T) {
	raw := "POST /v1/databases/default/commands/x HTTP/1.1\r\nHost: a\r\n" +
		"TRACEPARENT: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n" +
		"tracestate: a=1\r\ntracestate: b=2\r\nBaggage: k=v\r\nx-other: o\r\nContent-Length: 0\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	empty := http.Header{}
	fields := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}).Fields()
	for _, h := range []http.Header{r.Header, empty} {
		for _, k := range append(fields, "TraceParent", "x-other", "X-Other", "host", "missing") {
			if got, want := requestCarrier(h).Get(k), propagation.HeaderCarrier(h).Get(k); got != want {
				t.Errorf("Get(%q) = %q, want %q", k, got, want)
			}
		}
	}
	if got := requestCarrier(r.Header).Get("traceparent"); got == "" {
		t.Fatal("the traceparent sent as TRACEPARENT was not found")
	}
	a, b := http.Header{}, http.Header{}
	requestCarrier(a).Set("traceparent", "v")
	propagation.HeaderCarrier(b).Set("traceparent", "v")
	if a.Get("Traceparent") != "v" || len(a) != len(b) {
		t.Fatalf("Set: %v, want %v", a, b)
	}
	if got, want := len(requestCarrier(r.Header).Keys()), len(propagation.HeaderCarrier(r.Header).Keys()); got != want {
		t.Fatalf("Keys: %d, want %d", got, want)
	}
}

// TestHTTPTelemetryAllocationsWithTraceContext is
// TestHTTPTelemetryAllocations for a request that joins a trace, extracted
// by the server's own propagator (trace context and baggage): the field
// names are not made anew per request (requestCarrier).
func TestHTTPTelemetryAllocationsWithTraceContext(t *testing.T) {
	testutil.SkipUnderRace(t)
	tel := defaultTelemetry(t, io.Discard)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"commit_seq":1}`))
	})
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	h, err := newHTTPTelemetry(tel, prop, func(r *http.Request) string { return r.Method }, mux)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/v1/databases/default/commands/place_order", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	w := discardWriter{h: http.Header{}}
	h.ServeHTTP(w, req)
	allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) })
	if allocs > 9 {
		t.Fatalf("the instrumentation allocates %.0f times per request joining a trace, want at most 9 (12 with propagation.HeaderCarrier)", allocs)
	}
}
