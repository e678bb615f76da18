package delivery

import (
	"context"
	"encoding/json"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

// TestTelemetryOfOneDeliveryCycle runs one full delivery cycle that includes
// a retry (an injected archive I/O error) and a quota pause, and asserts each
// span (name, parent or link, attributes, error status) and each metric.
func TestTelemetryOfOneDeliveryCycle(t *testing.T) {
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(mr))
	t.Cleanup(func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) })
	clock := &manualClock{now: time.Unix(1_800_000_000, 0)}

	c, err := contract.Compile([]byte(modelContract))
	if err != nil {
		t.Fatal(err)
	}
	db, err := primary.Open(ctx, primary.Options{Path: "/db", Contract: c, FS: vfs.NewMem(), Clock: clock,
		TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// Three commits under a parent span standing in for the HTTP server span.
	parentCtx, parent := tp.Tracer("test").Start(ctx, "POST /v1/databases/{alias}/commands/{command}")
	var commits []primary.Commit
	for i := 0; i < 3; i++ {
		b, _ := json.Marshal(map[string]string{"k": "x", "pad": "0123456789"})
		cm, err := db.Execute(parentCtx, "put", b, "")
		if err != nil {
			t.Fatal(err)
		}
		commits = append(commits, cm)
	}
	parent.End()
	raw, _ := db.LoadEvent(ctx, commits[0].Events[0])
	quota := 2 * archive.Charge(event.Key{}, raw) // the third event does not fit

	mem := vfs.NewMem()
	if err := mem.MkdirAll("/outbox", 0o700); err != nil {
		t.Fatal(err)
	}
	var faulty atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if faulty.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &os.PathError{Op: "inject", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	}))
	dest := newDestination("/outbox", archive.Options{Database: db.Identity(), QuotaEncodedBytes: quota, FS: fs,
		MinFreeBytes: -1, TxnTimeout: 2 * time.Second, Clock: clock, TracerProvider: tp, MeterProvider: mp})
	defer dest.Close()
	if err := dest.Probe(ctx); err != nil { // open and validate before the fault
		t.Fatal(err)
	}
	w, err := outbox.New(outbox.Options{Alias: "default", Source: db, Destination: dest, Clock: clock,
		TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	faulty.Store(true)
	res, err := w.RunOnce(ctx)
	if err != nil || res.Claimed != 2 || res.Retried != 2 {
		t.Fatalf("faulty pass: %+v %v", res, err)
	}
	faulty.Store(false)
	clock.advance(outbox.RetryDelay)
	res, err = w.RunOnce(ctx)
	if err != nil || res.Stored != 2 || res.Completed != 2 || res.Halted != deliverytype.ReasonCapacityExhausted {
		t.Fatalf("second pass: %+v %v", res, err)
	}

	spans := sr.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	// Commands: children of the server span.
	cmds := byName["riffdb.command"]
	if len(cmds) != 3 {
		t.Fatalf("%d riffdb.command spans", len(cmds))
	}
	cmdSpans := map[trace.SpanID]bool{}
	for _, s := range cmds {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("command span's parent %v, want the server span", s.Parent().SpanID())
		}
		cmdSpans[s.SpanContext().SpanID()] = true
	}
	// Claims: linked to the commit spans of their members.
	claims := byName["riffdb.outbox.claim"]
	if len(claims) != 2 {
		t.Fatalf("%d claim spans", len(claims))
	}
	for _, s := range claims {
		if len(s.Links()) != 2 {
			t.Fatalf("claim span has %d links, want 2", len(s.Links()))
		}
		for _, l := range s.Links() {
			if !cmdSpans[l.SpanContext.SpanID()] {
				t.Fatalf("claim link %v is not a command span", l.SpanContext.SpanID())
			}
		}
		if !hasAttr(s.Attributes(), "messaging.batch.message_count", attribute.IntValue(2)) || !hasAttr(s.Attributes(), "riffdb.database", attribute.StringValue("default")) {
			t.Fatalf("claim attributes %v", s.Attributes())
		}
	}
	// Archive transactions: children of a claim span; the injected fault is
	// an error span.
	claimIDs := map[trace.SpanID]bool{claims[0].SpanContext().SpanID(): true, claims[1].SpanContext().SpanID(): true}
	txns := byName["riffdb.archive.txn"]
	var failed, ok int
	for _, s := range txns {
		if !claimIDs[s.Parent().SpanID()] {
			t.Fatalf("archive txn parent is not a claim span")
		}
		if s.Status().Code == codes.Error {
			failed++
		} else {
			ok++
		}
	}
	// The first member's transaction is applied and fails when its sync
	// does (archive.Store.Durable); the second fails when it is applied if
	// the log writer met the error by then, and is not attempted
	// otherwise (the store was dropped: it is retried with the first).
	if failed < 1 || failed > 2 || ok != 2 {
		t.Fatalf("archive txn spans: %d failed, %d ok", failed, ok)
	}
	if len(byName["riffdb.archive.quota.check"]) < 2 {
		t.Fatalf("quota check spans: %d", len(byName["riffdb.archive.quota.check"]))
	}
	flushes := byName["riffdb.outbox.completion.flush"]
	if len(flushes) != 1 || !hasAttr(flushes[0].Attributes(), "riffdb.reason", attribute.StringValue("failure")) {
		t.Fatalf("completion flush spans %v", flushes)
	}

	var rm metricdata.ResourceMetrics
	if err := mr.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	histCount := func(name string) uint64 {
		m, ok := got[name]
		if !ok {
			t.Fatalf("metric %s missing", name)
		}
		var n uint64
		switch d := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				n += dp.Count
			}
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				n += dp.Count
			}
		default:
			t.Fatalf("%s is %T", name, m.Data)
		}
		return n
	}
	sum := func(name string, match func(attribute.Set) bool) int64 {
		m, ok := got[name]
		if !ok {
			t.Fatalf("metric %s missing", name)
		}
		var n int64
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				if match == nil || match(dp.Attributes) {
					n += dp.Value
				}
			}
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				if match == nil || match(dp.Attributes) {
					n += dp.Value
				}
			}
		default:
			t.Fatalf("%s is %T", name, m.Data)
		}
		return n
	}
	attrIs := func(k, v string) func(attribute.Set) bool {
		return func(s attribute.Set) bool { x, ok := s.Value(attribute.Key(k)); return ok && x.AsString() == v }
	}
	for name, want := range map[string]uint64{
		"riffdb.command.duration":                   3,
		"riffdb.outbox.claim.duration":              2,
		"riffdb.outbox.claim.batch.size":            2,
		"riffdb.outbox.completion.flush.duration":   1,
		"riffdb.outbox.completion.flush.batch.size": 1,
		"riffdb.outbox.delivery.lag":                2,
	} {
		if n := histCount(name); n != want {
			t.Errorf("%s: %d observations, want %d", name, n, want)
		}
	}
	// One duration per archive transaction attempted (see the spans).
	if n := histCount("riffdb.archive.txn.duration"); n != uint64(len(txns)) {
		t.Errorf("riffdb.archive.txn.duration: %d observations, want %d", n, len(txns))
	}
	if n := sum("riffdb.outbox.retries", nil); n != 2 {
		t.Errorf("retries %d", n)
	}
	if n := sum("riffdb.archive.accepted.events", attrIs("result", "stored")); n != 2 {
		t.Errorf("accepted stored %d", n)
	}
	if n := sum("riffdb.archive.quota.decisions", attrIs("result", "does_not_fit")); n < 2 {
		t.Errorf("quota does_not_fit decisions %d", n)
	}
	if n := sum("riffdb.outbox.health", attrIs("riffdb.outbox.state", "degraded")); n != 1 {
		t.Errorf("health gauge degraded = %d", n)
	}
	if n := sum("riffdb.outbox.health", nil); n != 1 {
		t.Errorf("health gauge: %d states at 1", n)
	}
	if n := sum("riffdb.outbox.health.reason", attrIs("riffdb.reason", "capacity_exhausted")); n != 1 {
		t.Errorf("health reason gauge capacity_exhausted = %d", n)
	}
	if n := sum("riffdb.outbox.health.reason", nil); n != 1 {
		t.Errorf("health reason gauge: %d reasons at 1", n)
	}
}

func hasAttr(kvs []attribute.KeyValue, k string, v attribute.Value) bool {
	for _, kv := range kvs {
		if string(kv.Key) == k && kv.Value == v {
			return true
		}
	}
	return false
}
