package server

import (
	"net/http"
	"strings"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/statsapi"
)

// traceContextHeaders are the W3C headers through which a request joins a
// trace (traceparent, tracestate) or carries caller-chosen context
// (baggage).
var traceContextHeaders = [...]string{headerTraceparent, headerTracestate, headerBaggage}

// The W3C trace context headers' canonical names, as net/http keeps a
// request's headers.
const (
	headerTraceparent = "Traceparent"
	headerTracestate  = "Tracestate"
	headerBaggage     = "Baggage"
)

// traceContextGate drops the W3C trace context headers from every request
// except an authenticated command, before next (httpTelemetry)
// extracts them. A request keeps its context only when trust is set (option
// telemetry.trust_trace_context), it is POST
// /v1/databases/{alias}/commands/{command}, and authenticated accepts it;
// every other request starts a new trace, whatever it sent.
//
// Why: a client-chosen trace context decides the trace id of the server's
// span (which then appears in metric exemplars and logs) and, through its
// sampled flag, could switch sampling on. On the unauthenticated endpoints
// (/healthz) anyone could do so; the stats and health endpoints have no
// caller worth joining a trace with.
//
// authenticated is called only for command requests that carry at least
// one of the headers, so ordinary traffic pays nothing. The capability it
// authenticated is remembered for the request (rememberCapability), so
// that the command handler does not authenticate the same token a second
// time. The gate never modifies the request it is given: a dropped header
// is removed from a shallow copy with its own header map.
func traceContextGate(trust bool, authenticated func(*http.Request) (capability.Capability, bool), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if carriesTraceContext(r.Header) {
			if trust && isCommandRequest(r) {
				if c, ok := authenticated(r); ok {
					rememberCapability(w, c)
					next.ServeHTTP(w, r)
					return
				}
			}
			stripped := new(http.Request)
			*stripped = *r
			stripped.Header = r.Header.Clone()
			for _, k := range traceContextHeaders {
				stripped.Header.Del(k)
			}
			r = stripped
		}
		next.ServeHTTP(w, r)
	})
}

// rememberCapability keeps c, which the request's bearer token
// authenticated as, on the request's keepAliveWriter (the writer the
// server's outermost handler makes for each request, found through the
// writers' Unwrap methods): a per-request slot that costs no allocation,
// where a context value would cost two (the context and a copy of the
// request). Without a keepAliveWriter (a handler chain built without
// keepAlive) it keeps nothing.
func rememberCapability(w http.ResponseWriter, c capability.Capability) {
	if kw := findKeepAliveWriter(w); kw != nil {
		kw.authenticated, kw.capability = true, c
	}
}

// rememberedCapability returns the capability the trace-context gate
// authenticated for this request, if it did. Only the gate sets it, after
// the same authentication the handlers make; a handler still checks the
// capability's permissions itself.
func rememberedCapability(w http.ResponseWriter) (capability.Capability, bool) {
	if kw := findKeepAliveWriter(w); kw != nil && kw.authenticated {
		return kw.capability, true
	}
	return capability.Capability{}, false
}

func findKeepAliveWriter(w http.ResponseWriter) *keepAliveWriter {
	for {
		switch x := w.(type) {
		case *keepAliveWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

func carriesTraceContext(h http.Header) bool {
	for _, k := range traceContextHeaders {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// isCommandRequest reports whether r is POST
// /v1/databases/{alias}/commands/{command} with a non-empty alias and
// command that are not dot segments. It is at least as strict as the API
// mux: a path the mux would redirect or refuse is not a command here.
func isCommandRequest(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/databases/")
	if !ok {
		return false
	}
	alias, command, ok := strings.Cut(rest, "/commands/")
	return ok && segment(alias) && segment(command)
}

func segment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// commandAuthenticator returns the check traceContextGate needs for the
// API: the request's bearer token authenticates with auth and grants
// execute_commands on the alias in its path; it returns the capability. A
// credential store that cannot be read counts as not authenticated (the
// command handler itself reports that error).
func commandAuthenticator(auth statsapi.Authenticator) func(*http.Request) (capability.Capability, bool) {
	return func(r *http.Request) (capability.Capability, bool) {
		token, ok := statsapi.BearerToken(r)
		if !ok {
			return capability.Capability{}, false
		}
		c, err := auth.Authenticate(token)
		if err != nil {
			return capability.Capability{}, false
		}
		rest, _ := strings.CutPrefix(r.URL.Path, "/v1/databases/")
		alias, _, _ := strings.Cut(rest, "/")
		if alias == "" || !c.Allows(capability.ExecuteCommands, alias) {
			return capability.Capability{}, false
		}
		return c, true
	}
}

// spanName names the API's server spans "{method} {route}" from bounded
// sets only: routeOf's routes, and the nine standard methods, any other
// method (net/http accepts any token, up to the header limit) becoming
// "HTTP" as in otelhttp's default names. newHTTPTelemetry names the spans
// with it.
func spanName(r *http.Request) string {
	route := routeOf(r)
	if name, ok := spanNames[[2]string{r.Method, route}]; ok {
		return name
	}
	return spanNames[[2]string{"HTTP", route}]
}

// spanNames holds every name spanName gives, by method and route, made once
// instead of per request.
var spanNames = func() map[[2]string]string {
	names := make(map[[2]string]string, (len(standardMethods)+1)*len(routes))
	for _, route := range routes {
		names[[2]string{"HTTP", route}] = "HTTP " + route
		for method := range standardMethods {
			names[[2]string{method, route}] = method + " " + route
		}
	}
	return names
}()
