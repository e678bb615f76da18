package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/statsapi"
	"github.com/riffdb/riffdb/telemetry"
)

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	commandPath   = "/v1/databases/default/commands/place_order"
)

// seen is what the handler behind the gate and the instrumentation observed.
type seen struct {
	headers map[string]string
	baggage string
	span    trace.SpanContext
}

// gateSetup builds gate → httpTelemetry → handler, the order the server uses,
// with an in-memory span recorder. authenticated accepts "Bearer good" and
// counts its calls.
func gateSetup(t *testing.T, trust bool) (h http.Handler, rec *tracetest.SpanRecorder, calls *atomic.Int32, last *seen) {
	t.Helper()
	rec = tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(telemetry.Sampler(1, false)), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	last = &seen{}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.headers = map[string]string{}
		for _, k := range []string{"traceparent", "tracestate", "baggage"} {
			if v := r.Header.Get(k); v != "" {
				last.headers[k] = v
			}
		}
		last.baggage = baggage.FromContext(r.Context()).String()
		last.span = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	})
	calls = &atomic.Int32{}
	auth := func(r *http.Request) (capability.Capability, bool) {
		calls.Add(1)
		return goodCapability, r.Header.Get("Authorization") == "Bearer good"
	}
	api, err := newHTTPTelemetry(&telemetry.Telemetry{TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider()},
		propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), spanName, inner)
	if err != nil {
		t.Fatal(err)
	}
	h = traceContextGate(trust, auth, api)
	return h, rec, calls, last
}

func tracedRequest(method, target, token string) *http.Request {
	req := httptest.NewRequest(method, target, strings.NewReader(`{}`))
	req.Header.Set("traceparent", clientParent)
	req.Header.Set("tracestate", "vendor=client-chosen")
	req.Header.Set("baggage", "tenant=client-chosen")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

func TestTraceContextGateTrustsOnlyAuthenticatedCommands(t *testing.T) {
	for _, tc := range []struct {
		name         string
		trust        bool
		method, path string
		token        string
		want         bool
	}{
		{"authenticated command", true, http.MethodPost, commandPath, "good", true},
		{"unauthenticated command", true, http.MethodPost, commandPath, "", false},
		{"command with a bad token", true, http.MethodPost, commandPath, "bad", false},
		{"trust off", false, http.MethodPost, commandPath, "good", false},
		{"healthz", true, http.MethodGet, "/healthz", "", false},
		{"healthz with a good token", true, http.MethodGet, "/healthz", "good", false},
		{"stats with a good token", true, http.MethodGet, "/v1/stats", "good", false},
		{"GET on the command path", true, http.MethodGet, commandPath, "good", false},
		{"extra segment", true, http.MethodPost, commandPath + "/x", "good", false},
		{"empty alias", true, http.MethodPost, "/v1/databases//commands/place_order", "good", false},
		{"dot segment", true, http.MethodPost, "/v1/databases/../commands/place_order", "good", false},
		{"unknown path", true, http.MethodPost, "/v1/other", "good", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, rec, _, last := gateSetup(t, tc.trust)
			req := tracedRequest(tc.method, tc.path, tc.token)
			h.ServeHTTP(httptest.NewRecorder(), req)
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			sc := spans[0].SpanContext()
			joined := sc.TraceID().String() == clientTraceID
			if joined != tc.want {
				t.Fatalf("span trace id %s, client's %s: joined = %v, want %v", sc.TraceID(), clientTraceID, joined, tc.want)
			}
			if last.span.TraceID() != sc.TraceID() {
				t.Fatal("handler does not run in the server span")
			}
			if tc.want {
				if spans[0].Parent().SpanID().String() != clientSpanID || !spans[0].Parent().IsRemote() {
					t.Errorf("span parent %v, want the client's span", spans[0].Parent())
				}
				if last.baggage != "tenant=client-chosen" || len(last.headers) != 3 {
					t.Errorf("trusted request lost its context: headers %v, baggage %q", last.headers, last.baggage)
				}
				return
			}
			if spans[0].Parent().IsValid() {
				t.Errorf("untrusted request's span has parent %v", spans[0].Parent())
			}
			if len(last.headers) != 0 || last.baggage != "" {
				t.Errorf("untrusted request kept headers %v, baggage %q", last.headers, last.baggage)
			}
			// The gate works on a copy: the server's request is unchanged.
			if req.Header.Get("traceparent") != clientParent {
				t.Error("the gate modified the caller's request")
			}
		})
	}
}

func TestTraceContextGateAuthenticatesOnlyWhenContextIsSent(t *testing.T) {
	h, _, calls, _ := gateSetup(t, true)
	req := httptest.NewRequest(http.MethodPost, commandPath, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer good")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if n := calls.Load(); n != 0 {
		t.Errorf("authenticated %d times for a request without trace context", n)
	}
	h.ServeHTTP(httptest.NewRecorder(), tracedRequest(http.MethodGet, "/healthz", "good"))
	if n := calls.Load(); n != 0 {
		t.Errorf("authenticated %d times for a request that is not a command", n)
	}
	h.ServeHTTP(httptest.NewRecorder(), tracedRequest(http.MethodPost, commandPath, "good"))
	if n := calls.Load(); n != 1 {
		t.Errorf("authenticated %d times for a traced command, want 1", n)
	}
}

// TestTraceContextGateKeepsClientTraceIDsOutOfExemplars runs the gate in
// front of the API's instrumentation on the real telemetry pipeline (ratio 1): a traceparent
// sent to the unauthenticated /healthz must not reach the exemplars, while
// the same on an authenticated command does (the case the gate trusts).
func TestTraceContextGateKeepsClientTraceIDsOutOfExemplars(t *testing.T) {
	tel := defaultTelemetry(t, &strings.Builder{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /v1/databases/{alias}/commands/{command}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	api, err := newHTTPTelemetry(tel, otel.GetTextMapPropagator(), spanName, mux)
	if err != nil {
		t.Fatal(err)
	}
	h := traceContextGate(true, func(r *http.Request) (capability.Capability, bool) {
		return goodCapability, r.Header.Get("Authorization") == "Bearer good"
	}, api)
	scrapeOM := func() string {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text")
		rec := httptest.NewRecorder()
		tel.MetricsHandler.ServeHTTP(rec, req)
		return rec.Body.String()
	}

	h.ServeHTTP(httptest.NewRecorder(), tracedRequest(http.MethodGet, "/healthz", ""))
	body := scrapeOM()
	if !strings.Contains(body, `trace_id="`) {
		t.Fatalf("no exemplars at all, the check below would prove nothing:\n%s", body)
	}
	if strings.Contains(body, clientTraceID) {
		t.Fatalf("the client's trace id reached the exemplars through /healthz")
	}
	h.ServeHTTP(httptest.NewRecorder(), tracedRequest(http.MethodPost, commandPath, "good"))
	if !strings.Contains(scrapeOM(), clientTraceID) {
		t.Error("a trusted command's trace id is missing from the exemplars")
	}
}

// fakeAuth is a statsapi.Authenticator over a fixed token table.
type fakeAuth map[string]capability.Capability

var errStoreUnreadable = errors.New("capability: the store cannot be read")

func (f fakeAuth) Authenticate(token string) (capability.Capability, error) {
	if token == "broken" {
		return capability.Capability{}, errStoreUnreadable
	}
	c, ok := f[token]
	if !ok {
		return capability.Capability{}, capability.ErrUnauthenticated
	}
	return c, nil
}

func TestCommandAuthenticatorNeedsExecuteCommandsOnTheAlias(t *testing.T) {
	auth := commandAuthenticator(fakeAuth{
		"global":   {Permissions: []capability.Permission{capability.ExecuteCommands}},
		"scoped":   {Permissions: []capability.Permission{capability.ExecuteCommands}, Database: "default"},
		"other-db": {Permissions: []capability.Permission{capability.ExecuteCommands}, Database: "other"},
		"stats":    {Permissions: []capability.Permission{capability.ReadStatistics}},
		"revoked":  {Permissions: []capability.Permission{capability.ExecuteCommands}, Revoked: true},
	})
	for token, want := range map[string]bool{
		"global": true, "scoped": true, "other-db": false, "stats": false, "revoked": false,
		"unknown": false, "broken": false, "": false,
	} {
		req := httptest.NewRequest(http.MethodPost, commandPath, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		c, got := auth(req)
		if got != want {
			t.Errorf("token %q: authenticated = %v, want %v", token, got, want)
		}
		if got && c.Database != map[string]string{"global": "", "scoped": "default"}[token] {
			t.Errorf("token %q: the capability returned is for database %q", token, c.Database)
		}
	}
}

// goodCapability is what gateSetup's authenticator accepts "Bearer good" as.
var goodCapability = capability.Capability{Permissions: []capability.Permission{capability.ExecuteCommands}, Database: "default"}

// TestTraceContextGateRemembersTheCapability: behind keepAlive, as in the
// server, a traced command whose token the gate authenticated reaches the
// handler with that capability remembered (so the command handler does not
// authenticate the token again); every other request reaches it with
// none, and the handler authenticates as before.
func TestTraceContextGateRemembersTheCapability(t *testing.T) {
	var s Server
	for _, tc := range []struct {
		name  string
		trust bool
		req   *http.Request
		want  bool
	}{
		{"traced command, good token", true, tracedRequest(http.MethodPost, commandPath, "good"), true},
		{"traced command, bad token", true, tracedRequest(http.MethodPost, commandPath, "bad"), false},
		{"traced command, trust off", false, tracedRequest(http.MethodPost, commandPath, "good"), false},
		{"traced /healthz, good token", true, tracedRequest(http.MethodGet, "/healthz", "good"), false},
		{"untraced command, good token", true, func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, commandPath, strings.NewReader(`{}`))
			r.Header.Set("Authorization", "Bearer good")
			return r
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got capability.Capability
			var ok bool
			inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				got, ok = rememberedCapability(w)
				w.WriteHeader(http.StatusNoContent)
			})
			gate := traceContextGate(tc.trust, func(r *http.Request) (capability.Capability, bool) {
				return goodCapability, r.Header.Get("Authorization") == "Bearer good"
			}, &telemetryWriterHandler{inner})
			s.keepAlive(gate).ServeHTTP(httptest.NewRecorder(), tc.req)
			if ok != tc.want {
				t.Fatalf("remembered = %v, want %v", ok, tc.want)
			}
			if ok && got.Database != goodCapability.Database {
				t.Fatalf("remembered capability for %q, want %q", got.Database, goodCapability.Database)
			}
		})
	}
}

// telemetryWriterHandler wraps the writer as httpTelemetry does, so that
// rememberedCapability must find the keepAliveWriter through Unwrap.
type telemetryWriterHandler struct{ next http.Handler }

func (h *telemetryWriterHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.next.ServeHTTP(&telemetryWriter{ResponseWriter: w, status: http.StatusOK}, r)
}

// TestCommandHandlerUsesTheRememberedCapability calls the command handler
// with a capability remembered for the request and a server without a
// credential store: it must not authenticate again (it would fail on the
// missing store), and it must still check the capability's permission on
// the alias.
func TestCommandHandlerUsesTheRememberedCapability(t *testing.T) {
	s := &Server{cfg: &config.Config{}}
	failures := statsapi.NewFailureLog(zap.NewNop(), nil, 0)
	for _, tc := range []struct {
		name string
		c    capability.Capability
		code int
	}{
		{"execute_commands on the alias", goodCapability, http.StatusNotFound}, // no database "default" here
		{"read_statistics only", capability.Capability{Permissions: []capability.Permission{capability.ReadStatistics}}, http.StatusForbidden},
		{"another database", capability.Capability{Permissions: []capability.Permission{capability.ExecuteCommands}, Database: "other"}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			kw := &keepAliveWriter{ResponseWriter: rec, keep: true}
			rememberCapability(kw, tc.c)
			r := tracedRequest(http.MethodPost, commandPath, "good")
			r.SetPathValue("alias", "default")
			r.SetPathValue("command", "place_order")
			s.handleCommand(&telemetryWriter{ResponseWriter: kw, status: http.StatusOK}, r, failures)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
		})
	}
}

func TestSpanNameIsBounded(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodPost, commandPath, "POST /v1/databases/{alias}/commands/{command}"},
		{http.MethodGet, "/healthz", "GET /healthz"},
		{"BREW", "/healthz", "HTTP /healthz"},
		{"get", "/v1/stats", "HTTP /v1/stats"},
		{strings.Repeat("X", 4096), "/anything/else", "HTTP other"},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.Method = tc.method
		if got := spanName(req); got != tc.want {
			t.Errorf("spanName(%.20s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestSpanNames: a span is named "{method} {route}" for the standard
// methods and "HTTP {route}" for any other, from names made once: naming a
// request allocates nothing.
func TestSpanNames(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodPost, "/v1/databases/orders/commands/place_order", "POST /v1/databases/{alias}/commands/{command}"},
		{http.MethodGet, "/v1/stats", "GET /v1/stats"},
		{http.MethodGet, "/healthz", "GET /healthz"},
		{http.MethodDelete, "/v1/databases/orders/backups", "DELETE /v1/databases/{alias}/backups"},
		{"PURGE", "/v1/health", "HTTP /v1/health"},
		{"HTTP", "/nowhere", "HTTP other"},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if got := spanName(r); got != tc.want {
			t.Errorf("spanName(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	testutil.SkipUnderRace(t)
	r := httptest.NewRequest(http.MethodPost, "/v1/databases/orders/commands/place_order", nil)
	if allocs := testing.AllocsPerRun(100, func() { _ = spanName(r) }); allocs > 0 {
		t.Fatalf("spanName allocates %.0f times, want 0", allocs)
	}
}
