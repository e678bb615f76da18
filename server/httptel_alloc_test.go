package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// discardWriter is a ResponseWriter that allocates nothing per request.
type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header       { return w.h }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// TestHTTPTelemetryAllocations holds the API instrumentation's allocations
// per request (the mux's included), with the default telemetry (every
// request sampled, no exporter), to the 14 it makes: the span, its start
// options and context, the request's context and attributes, the writer's
// wrapper, the mux's match. Two habits cost seven more (21, and about
// 3 KiB of the 13 KiB the server allocated per command): giving the span
// attributes at its start and again at its end (the SDK copies those
// given at the start twice, and grows the span's slice again for later
// ones), and passing each metric's attribute set to Record as a new
// one-element slice. A change of Go or of the OpenTelemetry SDK may move
// the count; then look at what allocates (go test -memprofile) before
// moving the bound.
func TestHTTPTelemetryAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	tel := defaultTelemetry(t, io.Discard)
	body := []byte(`{"commit_seq":1}`)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(body)
	})
	h, err := newHTTPTelemetry(tel, propagation.TraceContext{}, func(r *http.Request) string { return r.Method }, mux)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/v1/databases/default/commands/place_order", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("User-Agent", "riffdb-loadtest")
	w := discardWriter{h: http.Header{}}
	h.ServeHTTP(w, req) // the metric attribute sets are made once
	allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) })
	if allocs > 14 {
		t.Fatalf("the instrumentation allocates %.0f times per request, want at most 14", allocs)
	}
}
