package telemetry_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/riffdb/riffdb/telemetry"
)

// serveInstrumented sends one request per host through an otelhttp handler
// built on tel's providers, the way the server wraps its API.
func serveInstrumented(t *testing.T, tel *telemetry.Telemetry, method, target string, hosts []string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	h := otelhttp.NewHandler(mux, "riffdb.http",
		otelhttp.WithTracerProvider(tel.TracerProvider), otelhttp.WithMeterProvider(tel.MeterProvider))
	for _, host := range hosts {
		req := httptest.NewRequest(method, target, nil)
		req.Host = host
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// seriesLabels returns the label sets of every sample line of the metric
// family whose name starts with prefix.
var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? `)

func seriesOf(body, prefix string) []string {
	var out []string
	for line := range strings.SplitSeq(body, "\n") {
		if m := sampleLine.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[1], prefix) {
			out = append(out, m[1]+m[2])
		}
	}
	return out
}

func TestViewDropsClientControlledHTTPAttributes(t *testing.T) {
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	hosts := []string{"evil-host-a.example:8123", "evil-host-b.example", "[::1]:9999"}
	serveInstrumented(t, tel, http.MethodGet, "/healthz", hosts)
	serveInstrumented(t, tel, "BREW", "/healthz", []string{"evil-host-c.example:7777"})

	for _, openMetrics := range []bool{false, true} {
		body, _ := scrape(t, tel.MetricsHandler, openMetrics)
		series := seriesOf(body, "http_server_")
		if len(series) == 0 {
			t.Fatalf("no http_server_* series (openmetrics %v):\n%s", openMetrics, body)
		}
		// The host names must appear nowhere: neither as labels nor in
		// exemplars (which would carry attributes a view filtered out).
		for _, bad := range []string{"evil-host", `"8123"`, `"9999"`, `"7777"`, "server_address", "server_port", "BREW"} {
			if strings.Contains(body, bad) {
				t.Errorf("openmetrics %v: scrape contains %q:\n%s", openMetrics, bad, grepLines(body, bad))
			}
		}
		durations := seriesOf(body, "http_server_request_duration_seconds_count")
		want := map[string]bool{
			`http_request_method="GET"`:       true,
			`http_request_method="_OTHER"`:    true,
			`http_response_status_code="200"`: true,
			`url_scheme="http"`:               true,
			`network_protocol_name="http"`:    true,
			`network_protocol_version="1.1"`:  true,
			`http_route="/healthz"`:           true,
		}
		joined := strings.Join(durations, "\n")
		for label := range want {
			if !strings.Contains(joined, label) {
				t.Errorf("openmetrics %v: duration series lack %s:\n%s", openMetrics, label, joined)
			}
		}
		// Three hosts with GET collapse into one series; BREW is the other.
		if len(durations) != 2 {
			t.Errorf("openmetrics %v: %d duration series, want 2:\n%s", openMetrics, len(durations), joined)
		}
	}
	// The HTTP duration histogram keeps the second-shaped DurationBuckets.
	body, _ := scrape(t, tel.MetricsHandler, false)
	if !strings.Contains(body, `http_server_request_duration_seconds_bucket{http_request_method="GET"`) ||
		!regexp.MustCompile(`(?m)^http_server_request_duration_seconds_bucket\{[^}]*le="0.0005"[^}]*\} `).MatchString(body) {
		t.Errorf("HTTP duration histogram lacks DurationBuckets:\n%s", grepLines(body, "http_server_request_duration_seconds_bucket"))
	}
}

func TestViewKeepsHTTPCardinalityBounded(t *testing.T) {
	tel, _ := setup(t, telemetry.Config{SampleRatio: 1})
	serveInstrumented(t, tel, http.MethodGet, "/healthz", []string{"first.example"})
	before, _ := scrape(t, tel.MetricsHandler, false)
	hosts := make([]string, 3000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.example:%d", i, 1024+i)
	}
	serveInstrumented(t, tel, http.MethodGet, "/healthz", hosts)
	after, _ := scrape(t, tel.MetricsHandler, false)
	if strings.Contains(after, "otel_metric_overflow") {
		t.Errorf("scrape has overflow series:\n%s", grepLines(after, "otel_metric_overflow"))
	}
	if b, a := len(seriesOf(before, "http_server_")), len(seriesOf(after, "http_server_")); a != b {
		t.Errorf("http_server_* series grew from %d to %d with 3000 distinct hosts", b, a)
	}
	if !strings.Contains(after, "\nhttp_server_request_duration_seconds_count{") ||
		!regexp.MustCompile(`(?m)^http_server_request_duration_seconds_count\{[^}]*\} 3001$`).MatchString(after) {
		t.Errorf("all 3001 requests should count in one series:\n%s", grepLines(after, "http_server_request_duration_seconds_count"))
	}
}
