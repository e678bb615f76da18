package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/riffdb/riffdb/loadtest"
)

// jaegerBinEnv names the Jaeger all-in-one binary TestJaegerTracing runs;
// `make e2e-tracing` builds it (Jaeger v1.76.0, tools/jaeger) and sets it.
const jaegerBinEnv = "RIFFDB_JAEGER_BIN"

// jaegerConfig is a loopback-only all-in-one configuration with in-memory
// storage: OTLP/gRPC in, the query API out, a health check. Without a
// configuration file jaeger_query would listen on every interface.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}, logs: {level: warn}}
extensions:
  jaeger_storage: {backends: {mem: {memory: {max_traces: 100000}}}}
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: "127.0.0.1:%d"}
    grpc: {endpoint: "127.0.0.1:%d"}
  healthcheckv2: {use_v2: true, http: {endpoint: "127.0.0.1:%d"}}
receivers:
  otlp: {protocols: {grpc: {endpoint: "127.0.0.1:%d"}}}
processors: {batch: {timeout: 200ms}}
exporters: {jaeger_storage_exporter: {trace_storage: mem}}
`

// freePorts returns n distinct free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// jaeger is a running all-in-one: the OTLP/gRPC endpoint and the query
// API's base URL.
type jaeger struct {
	otlp, query string
}

func startJaeger(t *testing.T, bin string) jaeger {
	t.Helper()
	p := freePorts(t, 4) // query HTTP, query gRPC, health, OTLP gRPC
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	must(t, os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, p[0], p[1], p[2], p[3]), 0o600))
	cmd := exec.Command(bin, "--config=file:"+cfg)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	health := fmt.Sprintf("http://127.0.0.1:%d/status", p[2])
	waitFor(t, 60*time.Second, "Jaeger's health check", func() bool {
		select {
		case <-exited:
			t.Fatalf("jaeger exited:\n%s", out.String())
		default:
		}
		resp, err := httpClient.Get(health)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return jaeger{otlp: fmt.Sprintf("127.0.0.1:%d", p[3]), query: fmt.Sprintf("http://127.0.0.1:%d", p[0])}
}

// jaegerTrace is a trace of Jaeger's query API (/api/traces).
type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// jaegerSpan is a span of a jaegerTrace. Links are FOLLOWS_FROM references.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	ProcessID     string `json:"processID"`
	Duration      int64  `json:"duration"` // µs
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func tag(s jaegerSpan, key string) string {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

// parentOf returns the span's CHILD_OF reference, "" for a root span.
func parentOf(s jaegerSpan) string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// searchTraces runs GET /api/traces with the query q.
func (j jaeger) searchTraces(t *testing.T, q url.Values) []jaegerTrace {
	t.Helper()
	resp, err := httpClient.Get(j.query + "/api/traces?" + q.Encode())
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/traces?%s: %d %s", q.Encode(), resp.StatusCode, b)
	}
	var doc struct {
		Data []jaegerTrace `json:"data"`
	}
	must(t, json.Unmarshal(b, &doc))
	return doc.Data
}

// TestJaegerTracing runs the real server and `riffdb loadtest` against a
// real Jaeger (opt-in: RIFFDB_JAEGER_BIN, set by `make e2e-tracing`). It
// fetches the slowest request's trace through Jaeger's query API and checks
// that it holds the load generator's root and HTTP client spans, the
// server's HTTP span and riffdb.command, each the child of the one before;
// then that a claim trace (riffdb.outbox.claim) links to that command span
// and holds the archive transaction (riffdb.archive.txn) of its event.
func TestJaegerTracing(t *testing.T) {
	bin := os.Getenv(jaegerBinEnv)
	if bin == "" {
		t.Skipf("%s is not set: `make e2e-tracing` builds Jaeger v1.76.0 and runs this test", jaegerBinEnv)
	}
	j := startJaeger(t, bin)
	e := newEnv(t, envOpts{outbox: true, extra: fmt.Sprintf("\n[telemetry]\notlp_endpoint = %q\ntrace_sample_ratio = 1.0\n", j.otlp)})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	tokenFile := filepath.Join(e.root, "token")
	must(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	p := e.start()
	defer p.stop()

	const requests = 300
	r := cli(t, "loadtest", "--address", p.api, "--token-file", tokenFile, "-n", strconv.Itoa(requests), "-c", "8",
		"--rate", "300", "--otlp-endpoint", j.otlp, "--wait-delivered", "--metrics-address", p.metrics)
	if !r.OK {
		t.Fatalf("loadtest: %+v %s", r.Error, r.Stderr)
	}
	var rep loadtest.Report
	must(t, json.Unmarshal(r.Result, &rep))
	if rep.Succeeded != requests || rep.Delivery == nil || !rep.Delivery.Drained || rep.Delivery.DeliveredEvents != requests {
		t.Fatalf("loadtest report %+v delivery %+v", rep, rep.Delivery)
	}
	slow := rep.Slowest[0]
	t.Logf("loadtest: %d requests in %.3fs (%.0f/s), latency ms p50 %.3f p99 %.3f max %.3f", rep.Requests,
		rep.ElapsedSeconds, rep.Throughput, rep.LatencyMillis.P50, rep.LatencyMillis.P99, rep.LatencyMillis.Max)
	d := rep.Delivery
	t.Logf("delivery: %d events in %.3fs (%.0f/s), drained %.3fs after the last request", d.DeliveredEvents,
		d.Seconds, d.Throughput, d.DrainSeconds)
	if d.LagMillis != nil {
		t.Logf("commit→archived lag ms: p50 %.3f p99 %.3f (%d deliveries)", d.LagMillis.P50, d.LagMillis.P99, d.LagMillis.Count)
	}
	t.Logf("slowest request: seq %d, %.3f ms, trace %s", slow.Seq, slow.LatencyMillis, slow.TraceID)

	// The slowest request's trace, through the search API of the load
	// generator's service. The exporters batch, so poll for it.
	var tr jaegerTrace
	waitFor(t, 60*time.Second, "the slowest request's trace in Jaeger", func() bool {
		q := url.Values{"service": {loadtest.ServiceName}, "operation": {loadtest.SpanName},
			"limit": {strconv.Itoa(2 * requests)}, "lookback": {"1h"}}
		for _, c := range j.searchTraces(t, q) {
			if c.TraceID == slow.TraceID && len(c.Spans) >= 4 {
				tr = c
				return true
			}
		}
		return false
	})
	byName := map[string]jaegerSpan{}
	service := map[string]string{}
	for _, s := range tr.Spans {
		kind := tag(s, "span.kind")
		name := s.OperationName
		switch {
		case kind == "client":
			name = "(client)"
		case kind == "server":
			name = "(server)"
		}
		byName[name] = s
		service[name] = tr.Processes[s.ProcessID].ServiceName
		t.Logf("  slowest trace: %-48s %-16s kind=%-8s %7d µs span=%s parent=%s", s.OperationName,
			tr.Processes[s.ProcessID].ServiceName, kind, s.Duration, s.SpanID, parentOf(s))
	}
	chain := []struct{ name, service string }{
		{loadtest.SpanName, loadtest.ServiceName}, {"(client)", loadtest.ServiceName}, {"(server)", "riffdb"}, {"riffdb.command", "riffdb"},
	}
	for i, c := range chain {
		s, ok := byName[c.name]
		if !ok || service[c.name] != c.service {
			t.Fatalf("the slowest trace has no %s span of %s", c.name, c.service)
		}
		if i > 0 && parentOf(s) != byName[chain[i-1].name].SpanID {
			t.Fatalf("%s is not the child of %s", c.name, chain[i-1].name)
		}
	}
	if op := byName["(server)"].OperationName; op != "POST /v1/databases/{alias}/commands/{command}" {
		t.Errorf("HTTP server span %q", op)
	}
	cmd := byName["riffdb.command"]
	seq := tag(cmd, "riffdb.commit.seq")
	if seq == "" {
		t.Fatal("riffdb.command has no riffdb.commit.seq")
	}
	eventID := seq + ".0" // place_order emits one event

	// The claim trace that links to this command, and its archive
	// transaction of the command's event.
	var claim jaegerTrace
	var claimSpan jaegerSpan
	waitFor(t, 60*time.Second, "a claim trace linking to the command", func() bool {
		q := url.Values{"service": {"riffdb"}, "operation": {"riffdb.outbox.claim"},
			"limit": {strconv.Itoa(4 * requests)}, "lookback": {"1h"}}
		for _, c := range j.searchTraces(t, q) {
			for _, s := range c.Spans {
				if s.OperationName != "riffdb.outbox.claim" {
					continue
				}
				for _, r := range s.References {
					if r.RefType == "FOLLOWS_FROM" && r.TraceID == tr.TraceID && r.SpanID == cmd.SpanID {
						claim, claimSpan = c, s
						return true
					}
				}
			}
		}
		return false
	})
	var txn *jaegerSpan
	names := map[string]int{}
	for _, s := range claim.Spans {
		names[s.OperationName]++
		if s.OperationName == "riffdb.archive.txn" && parentOf(s) == claimSpan.SpanID && tag(s, "riffdb.event.id") == eventID {
			txn = &s
		}
	}
	t.Logf("claim trace %s: claim span %s (%d µs, %s members, events %s..%s, %d links), spans %v", claim.TraceID,
		claimSpan.SpanID, claimSpan.Duration, tag(claimSpan, "messaging.batch.message_count"),
		tag(claimSpan, "riffdb.outbox.first_event"), tag(claimSpan, "riffdb.outbox.last_event"), len(claimSpan.References), names)
	if parentOf(claimSpan) != "" {
		t.Errorf("the claim span has a parent: %s", parentOf(claimSpan))
	}
	if txn == nil {
		t.Fatalf("the claim trace holds no riffdb.archive.txn of event %s as the claim's child", eventID)
	}
	if out := tag(*txn, "riffdb.archive.outcome"); out != "stored" {
		t.Errorf("archive transaction of %s: outcome %q", eventID, out)
	}
	t.Logf("archive transaction of event %s: span %s, %d µs, outcome %s", eventID, txn.SpanID, txn.Duration, tag(*txn, "riffdb.archive.outcome"))
}
