package archive

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/observe/attrkey"
)

// BenchmarkAcceptFreeSpaceGuard measures the process CPU per synced archive
// transaction (1 KiB records, one writer, the default free-space guard on
// the real filesystem) with the guard measuring free space on every
// transaction ("percall": the measurement is discarded before each one, as
// before freeSpaceMaxAge) and with the guard's cached measurement
// ("cached"). Each loop iteration runs one slice of 500 transactions per
// mode, in alternating order, and charges each slice the getrusage CPU time
// of the process (Pebble's background work included).
func BenchmarkAcceptFreeSpaceGuard(b *testing.B) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	s, err := Open(ctx, dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := make([]byte, 1<<10)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	g := &s.free
	var seq uint64
	slice := func(perCall bool) (cpu time.Duration, wall time.Duration) {
		const n = 500
		before, start := rusage(b), time.Now()
		for range n {
			if perCall {
				*g = freeSpace{}
			}
			seq++
			id := event.ID{Seq: seq}
			st, err := event.NewStored(id, "order_placed", payload)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Accept(ctx, event.Key{Database: testDatabase, Incarnation: 1, Event: id}, st.Encode()); err != nil {
				b.Fatal(err)
			}
		}
		return (rusage(b) - before) / n, time.Since(start) / n
	}
	var cpu, wall [2]time.Duration // [0] percall, [1] cached
	round := 0
	for b.Loop() {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		round++
		for _, m := range order {
			c, w := slice(m == 0)
			cpu[m] += c
			wall[m] += w
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(round) }
	b.ReportMetric(us(cpu[0]), "percall_cpu_us/txn")
	b.ReportMetric(us(cpu[1]), "cached_cpu_us/txn")
	b.ReportMetric(us(wall[0]), "percall_wall_us/txn")
	b.ReportMetric(us(wall[1]), "cached_wall_us/txn")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cached_vs_percall_cpu")
}

// rusage returns the CPU time (user + system) the process has used.
func rusage(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCheckFreeSpace measures the free-space guard alone on the real
// filesystem, measuring on every call ("percall") and with its cached
// measurement ("cached"), under the store's single-writer mutex as Accept
// runs it.
func BenchmarkCheckFreeSpace(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, perCall := range []bool{true, false} {
		name := "cached"
		if perCall {
			name = "percall"
		}
		b.Run(name, func(b *testing.B) {
			s.mu.Lock()
			defer s.mu.Unlock()
			g := &s.free
			before := rusage(b)
			for b.Loop() {
				if perCall {
					*g = freeSpace{}
				}
				if err := s.checkFreeSpace(1 << 10); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rusage(b)-before)/float64(b.N), "cpu_ns/op")
		})
	}
}

// startSeen is a sampler that keeps the attributes each span was started
// with, and decides as next does (nil: drops every span).
type startSeen struct {
	mu    sync.Mutex
	attrs map[string][]attribute.KeyValue // by span name
	next  sdktrace.Sampler
}

func (s *startSeen) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.mu.Lock()
	if s.attrs == nil {
		s.attrs = map[string][]attribute.KeyValue{}
	}
	s.attrs[p.Name] = append(s.attrs[p.Name], p.Attributes...)
	s.mu.Unlock()
	if s.next == nil {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return s.next.ShouldSample(p)
}

func (s *startSeen) Description() string { return "startSeen" }

// TestAcceptSpanAttributesOnlyWhenRecording: a transaction span that is
// sampled carries the database, event id, incarnation, size and outcome,
// whether it starts a trace or continues a sampled one; it is started with
// none of them (they are given in one call as it ends, endTxnSpan), so the
// sampler sees none, and one that is not sampled never gets them: nothing
// formats the event id for it.
func TestAcceptSpanAttributesOnlyWhenRecording(t *testing.T) {
	t.Parallel()
	k, r := rec(t, testDatabase, 7, 2, "x")
	for _, parent := range []bool{false, true} {
		spans := tracetest.NewSpanRecorder()
		seen := &startSeen{next: sdktrace.ParentBased(sdktrace.AlwaysSample())}
		opts := testOptions(t, newMemFS(t, false))
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(seen))
		opts.TracerProvider = tp
		s := mustOpen(t, opts)
		ctx := context.Background()
		if parent {
			var claim trace.Span
			ctx, claim = tp.Tracer("test").Start(ctx, "claim")
			defer claim.End()
		}
		if out, err := s.Accept(ctx, k, r); err != nil || out != deliverytype.Stored {
			t.Fatalf("Accept = %v, %v", out, err)
		}
		var got map[attribute.Key]attribute.Value
		for _, sp := range spans.Ended() {
			if sp.Name() == "riffdb.archive.txn" {
				got = map[attribute.Key]attribute.Value{}
				for _, a := range sp.Attributes() {
					got[a.Key] = a.Value
				}
			}
		}
		want := map[attribute.Key]attribute.Value{
			"riffdb.database":            s.dbAttr.Value,
			attrkey.EventID:              attribute.StringValue("7.2"),
			"riffdb.history.incarnation": attribute.Int64Value(1),
			"riffdb.event.bytes":         attribute.IntValue(len(r)),
			"riffdb.archive.outcome":     attribute.StringValue("stored"),
		}
		if len(got) != len(want) {
			t.Fatalf("sampled txn span (parent %v): attributes %v; want %v", parent, got, want)
		}
		for key, v := range want {
			if got[key] != v {
				t.Fatalf("sampled txn span (parent %v): %s = %v; want %v (attributes %v)", parent, key, got[key], v, got)
			}
		}
		seen.mu.Lock()
		started := len(seen.attrs["riffdb.archive.txn"])
		seen.mu.Unlock()
		if started != 0 {
			t.Fatalf("txn span (parent %v) started with %d attributes, want none", parent, started)
		}
	}

	seen := new(startSeen)
	opts := testOptions(t, newMemFS(t, false))
	opts.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(seen))
	s := mustOpen(t, opts)
	mustAccept(t, s, k, r, deliverytype.Stored)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, a := range seen.attrs["riffdb.archive.txn"] {
		if a.Key != "riffdb.database" && a.Key != "riffdb.group.size" {
			t.Fatalf("an unsampled span was started with %s", a.Key)
		}
	}
}
