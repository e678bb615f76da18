package loadtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/loadtest"
)

// seen is one request as the fake server received it.
type seen struct {
	path, auth, contentType, traceparent string
	key                                  string
	input                                json.RawMessage
	seq                                  int64
}

// fakeServer is an httptest server speaking the command endpoint. respond
// chooses the status for request seq (0: 200); it records every request and
// creates server spans (as riffdb's otelhttp handler does) in spans.
type fakeServer struct {
	*httptest.Server
	spans *tracetest.SpanRecorder
	mu    sync.Mutex
	reqs  []seen
}

func newFakeServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, seq int64) int) *fakeServer {
	t.Helper()
	fs := &fakeServer{spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(fs.spans))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Input          json.RawMessage `json:"input"`
			IdempotencyKey string          `json:"idempotency_key"`
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			// The client went away mid-body (a cancelled run closes its
			// connections): nothing was sent that could be checked.
			return
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("body %q: %v", b, err)
		}
		i := strings.LastIndexByte(body.IdempotencyKey, '-')
		seq, err := strconv.ParseInt(body.IdempotencyKey[i+1:], 10, 64)
		if err != nil {
			t.Errorf("idempotency key %q has no sequence number", body.IdempotencyKey)
		}
		fs.mu.Lock()
		fs.reqs = append(fs.reqs, seen{path: r.URL.Path, auth: r.Header.Get("Authorization"),
			contentType: r.Header.Get("Content-Type"), traceparent: r.Header.Get("traceparent"),
			key: body.IdempotencyKey, input: body.Input, seq: seq})
		fs.mu.Unlock()
		code := 0
		if respond != nil {
			code = respond(w, r, seq)
		}
		if code == -1 { // the handler took care of the connection
			return
		}
		if code == 0 || code == 200 {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"database":"default","command":"place_order","commit_sequence":%d,"events":["%d.0"],"replayed":false}`, seq+1, seq+1)
			return
		}
		w.WriteHeader(code)
		fmt.Fprint(w, `{"error":{"code":"x","message":"refused"}}`)
	})
	fs.Server = httptest.NewServer(otelhttp.NewHandler(h, "riffdb.http", otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), otelhttp.WithPropagators(propagation.TraceContext{})))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fakeServer) requests() []seen {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]seen(nil), fs.reqs...)
}

func TestClosedLoopCountsAndUniqueRequests(t *testing.T) {
	fs := newFakeServer(t, nil)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 300, Concurrency: 7,
		Database: "orders db", Command: "ship", Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 300 || rep.Succeeded != 300 || rep.Errors != 0 || rep.Replayed != 0 || len(rep.ErrorsByStatus) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Mode != "closed" || rep.LatencyFrom != "send" || rep.Concurrency != 7 {
		t.Fatalf("mode %s from %s with %d", rep.Mode, rep.LatencyFrom, rep.Concurrency)
	}
	p := rep.LatencyMillis
	if !(0 < p.P50 && p.P50 <= p.P90 && p.P90 <= p.P99 && p.P99 <= p.P999 && p.P999 <= p.Max*1.001) {
		t.Fatalf("percentiles not ordered: %+v", p)
	}
	if len(rep.Slowest) != 5 || rep.Slowest[0].LatencyMillis != p.Max {
		t.Fatalf("slowest %+v, max %v", rep.Slowest, p.Max)
	}
	reqs := fs.requests()
	if len(reqs) != 300 {
		t.Fatalf("server saw %d requests, want 300", len(reqs))
	}
	keys, inputs, seqs := map[string]bool{}, map[string]bool{}, map[int64]bool{}
	for _, r := range reqs {
		if r.path != "/v1/databases/orders db/commands/ship" || r.auth != "Bearer tok" || r.contentType != "application/json" {
			t.Fatalf("request %+v", r)
		}
		var in struct {
			OrderID     string `json:"order_id"`
			AmountCents int64  `json:"amount_cents"`
		}
		if err := json.Unmarshal(r.input, &in); err != nil || in.AmountCents != r.seq ||
			in.OrderID != "lt-"+rep.RunID+"-"+strconv.FormatInt(r.seq, 10) {
			t.Fatalf("input %s for seq %d (%v)", r.input, r.seq, err)
		}
		keys[r.key], inputs[string(r.input)], seqs[r.seq] = true, true, true
	}
	if len(keys) != 300 || len(inputs) != 300 || len(seqs) != 300 {
		t.Fatalf("%d keys, %d inputs, %d sequence numbers for 300 requests: not unique", len(keys), len(inputs), len(seqs))
	}
	for n := int64(0); n < 300; n++ {
		if !seqs[n] {
			t.Fatalf("sequence number %d never sent", n)
		}
	}
}

// TestTraceparentAndServerSpanIsAChild checks that every request carries a
// W3C traceparent, and that the server span is the child of the client span,
// itself the child of the root span loadgen.request, all in one trace whose
// id the report lists for the slowest requests.
func TestTraceparentAndServerSpanIsAChild(t *testing.T) {
	fs := newFakeServer(t, nil)
	client := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(client))
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 40, Concurrency: 4, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]bool{}
	for _, r := range fs.requests() {
		if r.traceparent == "" {
			t.Fatalf("request %d has no traceparent", r.seq)
		}
		headers[r.traceparent] = true
	}
	byID := map[string]sdktrace.ReadOnlySpan{}
	roots := map[string]sdktrace.ReadOnlySpan{} // by trace id
	for _, s := range client.Ended() {
		byID[s.SpanContext().SpanID().String()] = s
		if s.Name() == loadtest.SpanName {
			if s.Parent().IsValid() {
				t.Fatalf("%s has a parent", loadtest.SpanName)
			}
			roots[s.SpanContext().TraceID().String()] = s
		}
	}
	if len(roots) != 40 {
		t.Fatalf("%d root spans in distinct traces, want 40", len(roots))
	}
	servers := fs.spans.Ended()
	if len(servers) != 40 {
		t.Fatalf("%d server spans, want 40", len(servers))
	}
	for _, srv := range servers {
		clientSpan, ok := byID[srv.Parent().SpanID().String()]
		if !ok || !srv.Parent().IsRemote() {
			t.Fatalf("server span's parent %v is not a client span of the load generator", srv.Parent())
		}
		root, ok := roots[srv.SpanContext().TraceID().String()]
		if !ok || clientSpan.Parent().SpanID() != root.SpanContext().SpanID() ||
			clientSpan.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Fatalf("client span %q is not the child of a %s span of the same trace", clientSpan.Name(), loadtest.SpanName)
		}
		want := fmt.Sprintf("00-%s-%s-01", clientSpan.SpanContext().TraceID(), clientSpan.SpanContext().SpanID())
		if !headers[want] {
			t.Fatalf("no request carried traceparent %s", want)
		}
	}
	for _, s := range rep.Slowest {
		if _, ok := roots[s.TraceID]; !ok || !s.Sampled {
			t.Fatalf("slow request %+v: trace id is not one of the run's traces", s)
		}
	}
}

// TestOwnProviderPropagatesTraceIDs runs with the load generator's own
// provider (no exporter, so one that records nothing): the report's trace
// ids are the ones the server received, every one sampled at ratio 1.
func TestOwnProviderPropagatesTraceIDs(t *testing.T) {
	fs := newFakeServer(t, nil)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 20, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	traces := map[string]bool{}
	for _, r := range fs.requests() {
		parts := strings.Split(r.traceparent, "-")
		if len(parts) != 4 || len(parts[1]) != 32 || parts[3] != "01" {
			t.Fatalf("traceparent %q", r.traceparent)
		}
		traces[parts[1]] = true
	}
	for _, s := range rep.Slowest {
		if !traces[s.TraceID] {
			t.Fatalf("slow request trace %s was never sent", s.TraceID)
		}
	}
	if len(traces) != 20 {
		t.Fatalf("%d distinct traces, want 20", len(traces))
	}
}

func TestErrorsByStatus(t *testing.T) {
	fs := newFakeServer(t, func(w http.ResponseWriter, _ *http.Request, seq int64) int {
		switch {
		case seq%10 == 3:
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			return -1
		case seq%4 == 1:
			return http.StatusConflict
		case seq%4 == 2:
			return http.StatusServiceUnavailable
		}
		return 0
	})
	want := map[string]int64{}
	var ok int64
	for seq := int64(0); seq < 200; seq++ {
		switch {
		case seq%10 == 3:
			want["transport"]++
		case seq%4 == 1:
			want["409"]++
		case seq%4 == 2:
			want["503"]++
		default:
			ok++
		}
	}
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 200, Concurrency: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 200 || rep.Succeeded != ok || rep.Errors != 200-ok {
		t.Fatalf("requests %d succeeded %d errors %d, want 200, %d, %d", rep.Requests, rep.Succeeded, rep.Errors, ok, 200-ok)
	}
	if len(rep.ErrorsByStatus) != len(want) {
		t.Fatalf("errors by status %v, want %v", rep.ErrorsByStatus, want)
	}
	for k, v := range want {
		if rep.ErrorsByStatus[k] != v {
			t.Fatalf("errors by status %v, want %v", rep.ErrorsByStatus, want)
		}
	}
}

// TestOpenLoopHonorsTheRate checks that the open loop sends exactly the
// requests due before the deadline (rate × duration), and exactly -n when
// that ends first. The counts do not depend on how fast the machine is.
func TestOpenLoopHonorsTheRate(t *testing.T) {
	fs := newFakeServer(t, nil)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 100000,
		Rate: 400, Duration: 100 * time.Millisecond, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 40 || len(fs.requests()) != 40 || rep.Mode != "open" || rep.LatencyFrom != "intended_send" {
		t.Fatalf("open loop at 400/s for 100 ms sent %d (server saw %d) in mode %s, want 40", rep.Requests, len(fs.requests()), rep.Mode)
	}
	rep, err = loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 25,
		Rate: 1000, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 25 {
		t.Fatalf("open loop with -n 25 sent %d", rep.Requests)
	}
}

// TestClosedLoopStopsAtTheDuration checks that the duration bounds a run
// whose request count would take far longer.
func TestClosedLoopStopsAtTheDuration(t *testing.T) {
	fs := newFakeServer(t, nil)
	rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: fs.URL, Token: "tok", Requests: 10_000_000,
		Concurrency: 2, Duration: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests == 0 || rep.Requests >= 10_000_000 || rep.Interrupted {
		t.Fatalf("requests %d interrupted %v", rep.Requests, rep.Interrupted)
	}
}

// TestCancelEndsTheRun checks that ending the context stops the run and
// still reports what completed.
func TestCancelEndsTheRun(t *testing.T) {
	reached := make(chan struct{})
	var once sync.Once
	fs := newFakeServer(t, func(_ http.ResponseWriter, r *http.Request, _ int64) int {
		once.Do(func() { close(reached) })
		<-r.Context().Done()
		return http.StatusServiceUnavailable
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-reached
		cancel()
	}()
	rep, err := loadtest.Run(ctx, loadtest.Config{Address: fs.URL, Token: "tok", Requests: 1000, Concurrency: 3})
	if !errors.Is(err, context.Canceled) || !rep.Interrupted {
		t.Fatalf("err %v interrupted %v", err, rep.Interrupted)
	}
	if rep.Requests == 0 || rep.Requests > 3 || rep.ErrorsByStatus["canceled"] != rep.Requests {
		t.Fatalf("after cancel: %d requests, errors %v", rep.Requests, rep.ErrorsByStatus)
	}
}

func TestNonLoopbackRefused(t *testing.T) {
	for _, addr := range []string{"http://10.0.0.1:7420", "example.com:7420", "http://[2001:db8::1]:7420",
		"http://192.168.1.10", "http://0.0.0.0:7420", "https://riffdb.example:443", "http://127.0.0.1.example.com"} {
		_, err := loadtest.Run(t.Context(), loadtest.Config{Address: addr, Token: "tok", Requests: 1})
		if !errors.Is(err, loadtest.ErrNotLoopback) {
			t.Errorf("%s: err %v, want ErrNotLoopback", addr, err)
		}
	}
	_, err := loadtest.Run(t.Context(), loadtest.Config{Address: "127.0.0.1:1", Token: "tok", Requests: 1, OTLPEndpoint: "10.0.0.5:4317"})
	if !errors.Is(err, loadtest.ErrNotLoopback) {
		t.Errorf("non-loopback OTLP endpoint: err %v, want ErrNotLoopback", err)
	}
	// Loopback forms are accepted (nothing listens on port 1: transport errors).
	for _, addr := range []string{"127.0.0.1:1", "http://127.9.8.7:1", "http://[::1]:1", "http://localhost:1", "LOCALHOST:1"} {
		rep, err := loadtest.Run(t.Context(), loadtest.Config{Address: addr, Token: "tok", Requests: 1})
		if err != nil || rep.ErrorsByStatus["transport"] != 1 {
			t.Errorf("%s: err %v, errors %v; want one transport error", addr, err, rep.ErrorsByStatus)
		}
	}
}

func TestInvalidConfigRefused(t *testing.T) {
	base := loadtest.Config{Address: "127.0.0.1:1", Token: "tok"}
	for name, mod := range map[string]func(*loadtest.Config){
		"no {{n}}":       func(c *loadtest.Config) { c.InputTemplate = `{"order_id":"x"}` },
		"not an object":  func(c *loadtest.Config) { c.InputTemplate = `[{{n}}]` },
		"invalid JSON":   func(c *loadtest.Config) { c.InputTemplate = `{"a":{{n}}` },
		"no token":       func(c *loadtest.Config) { c.Token = "" },
		"no address":     func(c *loadtest.Config) { c.Address = "" },
		"bad scheme":     func(c *loadtest.Config) { c.Address = "ftp://127.0.0.1:1" },
		"negative rate":  func(c *loadtest.Config) { c.Rate = -1 },
		"negative n":     func(c *loadtest.Config) { c.Requests = -1 },
		"sample ratio":   func(c *loadtest.Config) { c.SampleRatio = 1.5 },
		"bad run id":     func(c *loadtest.Config) { c.RunID = "a b" },
		"otlp not h:p":   func(c *loadtest.Config) { c.OTLPEndpoint = "127.0.0.1" },
		"url with query": func(c *loadtest.Config) { c.Address = "http://127.0.0.1:1/?x=1" },
	} {
		c := base
		mod(&c)
		if _, err := loadtest.Run(t.Context(), c); !errors.Is(err, loadtest.ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestRunClosesItsConnections checks that every connection the run opened,
// including any the transport dialed and never used, is closed when Run
// returns: an open one would hold up the server's graceful shutdown.
func TestRunClosesItsConnections(t *testing.T) {
	var (
		mu     sync.Mutex
		open   = map[net.Conn]bool{}
		closed = make(chan struct{}, 1)
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"replayed":false}`)
	}))
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	srv.Start()
	defer srv.Close()
	if _, err := loadtest.Run(t.Context(), loadtest.Config{Address: srv.URL, Token: "tok", Requests: 200, Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		mu.Lock()
		n := len(open)
		mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-closed:
		case <-timeout:
			t.Fatalf("%d connections still open after Run returned", n)
		}
	}
}
