package server

import (
	"bytes"
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
// request sampled, no exporter), to the 6 it makes: the span and its
// context, the request's copy with that context, the writer's and the
// body's wrappers (one allocation), the mux's match. Habits that cost more
// (11, then 21, and about 3 KiB of the 13 KiB the server allocated per
// command): giving a span that cannot record its start and end times (each
// option and its slice an allocation), giving the span attributes at its
// start and again at its end (the SDK copies those given at the start
// twice, and grows the span's slice again for later ones), and passing each
// metric's attribute set to Record as a new one-element slice. A change of
// Go or of the OpenTelemetry SDK may move the count; then look at what
// allocates (go test -memprofile) before moving the bound.
func TestHTTPTelemetryAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	tel := defaultTelemetry(t, io.Discard)
	reply := []byte(`{"commit_seq":1}`)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(reply)
	})
	h, err := newHTTPTelemetry(tel, propagation.TraceContext{}, func(r *http.Request) string { return r.Method }, mux)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{{"without a body", nil}, {"with a body", []byte(`{"sku":"a"}`)}} {
		t.Run(tc.name, func(t *testing.T) {
			var body *bytes.Reader
			req := httptest.NewRequest("POST", "/v1/databases/default/commands/place_order", nil)
			if tc.body != nil {
				body = bytes.NewReader(tc.body)
				req = httptest.NewRequest("POST", "/v1/databases/default/commands/place_order", body)
			}
			req.RemoteAddr = "127.0.0.1:40000"
			req.Header.Set("User-Agent", "riffdb-loadtest")
			w := discardWriter{h: http.Header{}}
			h.ServeHTTP(w, req) // the metric attribute sets are made once
			allocs := testing.AllocsPerRun(200, func() {
				if body != nil {
					body.Reset(tc.body)
				}
				h.ServeHTTP(w, req)
			})
			if allocs > 6 {
				t.Fatalf("the instrumentation allocates %.0f times per request, want at most 6", allocs)
			}
		})
	}
}
