package bench_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/riffdb/riffdb/server"
)

// deliveryEvents is how many preloaded events one delivery measurement
// drains (512 commands of 16 events): a few seconds at fdatasync speed.
const deliveryEvents = 8192

// pollEvery is the /v1/stats polling interval while waiting for a drain.
const pollEvery = 2 * time.Millisecond

// BenchmarkDeliveryRawFdatasync is the same-run baseline of the delivery
// benchmarks: one writer appending 128 bytes and fdatasyncing, in the same
// kind of directory (b.TempDir) the primary and the archive live in.
func BenchmarkDeliveryRawFdatasync(b *testing.B) {
	dir := b.TempDir()
	var elapsed time.Duration
	for b.Loop() {
		elapsed += rawFdatasync(b, dir, 1)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

// BenchmarkDelivery measures how fast the real server (server.New: primary,
// archive adapter, outbox worker, all on one disk) drains a backlog of
// deliveryEvents preloaded events into the archive: events/s from Start
// until GET /v1/stats reports 0 pending. Each loop iteration preloads a new
// installation (not timed) and drains it (timed). The variants compare
// tracing: telemetry=off samples no span (ratio 0); trace=1 samples every
// span without exporting it (no OTLP endpoint); trace=1+otlp also exports
// every span over OTLP/gRPC to an in-process receiver that discards them.
func BenchmarkDelivery(b *testing.B) {
	for _, v := range []struct {
		name   string
		ratio  float64
		export bool
	}{
		{"telemetry=off", 0, false},
		{"trace=1", 1, false},
		{"trace=1+otlp", 1, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			otlp := ""
			if v.export {
				otlp = otlpReceiver(b)
			}
			var elapsed time.Duration
			var events int
			for b.Loop() {
				b.StopTimer()
				in := newInstall(b, v.ratio, otlp)
				in.preload(b, deliveryEvents)
				b.StartTimer()
				start := time.Now()
				s := in.start(b)
				if _, err := waitPending(s, in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				events += deliveryEvents
				b.StopTimer()
				stop(b, s)
				b.StartTimer()
			}
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkDeliveryLatency measures commit→archived latency at half the
// drain rate. It first drains deliveryEvents preloaded events to measure the
// drain rate R on this installation, then sends one-event commands over HTTP
// open-loop at R/2 for about five seconds, waits for the backlog to drain
// and reads the worker's riffdb.outbox.delivery.lag histogram from /metrics
// (the difference of two scrapes, so only this load counts). p50_ms and
// p99_ms are interpolated inside the histogram's buckets, as Prometheus's
// histogram_quantile does; their resolution is the bucket layout
// (outbox.LagBuckets). Tracing is at the default sample ratio 1.
func BenchmarkDeliveryLatency(b *testing.B) {
	var p50, p99, rate, sent float64
	for b.Loop() {
		b.StopTimer()
		in := newInstall(b, 1, "")
		in.preload(b, deliveryEvents)
		b.StartTimer()
		start := time.Now()
		s := in.start(b)
		if _, err := waitPending(s, in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
			b.Fatal(err)
		}
		drain := float64(deliveryEvents) / time.Since(start).Seconds()
		before, err := scrape(s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
		if err != nil {
			b.Fatal(err)
		}
		rate = drain / 2
		n := int(rate * 5)
		if err := openLoop(s, in.token, rate, n); err != nil {
			b.Fatal(err)
		}
		if _, err := waitPending(s, in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
			b.Fatal(err)
		}
		after, err := scrape(s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
		if err != nil {
			b.Fatal(err)
		}
		h := after.sub(before)
		if got := h.count(); got != float64(n) {
			b.Fatalf("lag histogram holds %v observations, want %d", got, n)
		}
		p50, p99, sent = h.quantile(0.5)*1000, h.quantile(0.99)*1000, float64(n)
		b.StopTimer()
		stop(b, s)
		b.StartTimer()
	}
	b.ReportMetric(rate, "offered_events/s")
	b.ReportMetric(sent, "events")
	b.ReportMetric(p50, "p50_ms")
	b.ReportMetric(p99, "p99_ms")
}

// openLoop sends n one-event commands at a fixed rate (per second), each at
// its scheduled time regardless of how long earlier ones take (open loop,
// so a slow commit does not lower the offered rate), with at most 512 in
// flight. It returns the first error.
func openLoop(s *server.Server, token string, rate float64, n int) error {
	interval := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := command(s, token, i); err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	return first
}

// otlpReceiver serves the OTLP/gRPC trace service on 127.0.0.1 for the
// benchmark's duration, discarding what it receives, and returns its
// address.
func otlpReceiver(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, discardTraces{})
	go func() { _ = gs.Serve(ln) }()
	b.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// discardTraces accepts every export and keeps nothing.
type discardTraces struct {
	coltracepb.UnimplementedTraceServiceServer
}

// Export implements the OTLP trace service.
func (discardTraces) Export(context.Context, *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	return &coltracepb.ExportTraceServiceResponse{}, nil
}
