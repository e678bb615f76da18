package bench_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/riffdb/riffdb/server"
)

// deliveryEvents is how many preloaded events one delivery measurement
// drains (512 commands of 16 events): a few seconds at fdatasync speed.
const deliveryEvents = 8192

// pollEvery is the /v1/stats polling interval while waiting for a drain:
// coarse enough not to load the server measured (a stats request briefly
// takes the archive adapter's lock), fine enough to add at most 0.5% to a
// drain of a few seconds.
const pollEvery = 10 * time.Millisecond

// rawPerDrain is the number of raw fdatasyncs measured right before each
// drain, in the same installation directory: the paired baseline.
const rawPerDrain = 1000

// BenchmarkDelivery measures how fast the real server (server.New: primary,
// archive adapter, outbox worker, all on one disk) drains a backlog of
// deliveryEvents preloaded events into the archive: events/s from Start
// until GET /v1/stats reports 0 pending (server.New, which opens the stores,
// is not timed). Three tracing variants are compared: off samples no span
// (ratio 0); trace samples every span without exporting it (no OTLP
// endpoint, the default ratio 1: the spans keep their ids and sampling
// decisions but are not recorded, internal/observe/unrecorded); otlp
// records every span and exports it over OTLP/gRPC to an in-process
// receiver that discards them.
//
// Each loop iteration drains one fresh installation per variant, in an
// order that rotates from one iteration to the next, and right before each
// drain runs rawPerDrain append+fdatasync calls in the same directory: the
// baseline is paired in time with what it is compared to, so the slow drifts
// of this noisy disk affect both alike. It reports each variant's events/s,
// the baseline's raw_events/s, and the ratios off_vs_raw, trace_vs_raw,
// trace_vs_off and otlp_vs_off.
func BenchmarkDelivery(b *testing.B) {
	variants := []struct {
		name   string
		ratio  float64
		export bool
	}{{"off", 0, false}, {"trace", 1, false}, {"otlp", 1, true}}
	receiver := otlpReceiver(b)
	drained := make([]time.Duration, len(variants))
	var rawTime time.Duration
	var rawOps, round int
	for b.Loop() {
		for k := range variants {
			i := (round + k) % len(variants)
			v := variants[i]
			b.StopTimer()
			otlp := ""
			if v.export {
				otlp = receiver
			}
			in := newInstall(b, v.ratio, otlp)
			in.preload(b, deliveryEvents)
			rawTime += rawFdatasync(b, in.root, rawPerDrain)
			rawOps += rawPerDrain
			s := in.open(b)
			b.StartTimer()
			start := time.Now()
			if err := s.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			if _, err := waitPending(s, in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
				b.Fatal(err)
			}
			drained[i] += time.Since(start)
			b.StopTimer()
			stop(b, s)
			b.StartTimer()
		}
		round++
	}
	rate := func(i int) float64 { return float64(deliveryEvents*round) / drained[i].Seconds() }
	raw := float64(rawOps) / rawTime.Seconds()
	off, trace, otlp := rate(0), rate(1), rate(2)
	b.ReportMetric(off, "off_events/s")
	b.ReportMetric(trace, "trace_events/s")
	b.ReportMetric(otlp, "otlp_events/s")
	b.ReportMetric(raw, "raw_events/s")
	b.ReportMetric(off/raw, "off_vs_raw")
	b.ReportMetric(trace/raw, "trace_vs_raw")
	b.ReportMetric(trace/off, "trace_vs_off")
	b.ReportMetric(otlp/off, "otlp_vs_off")
}

// BenchmarkDeliveryLatency measures commit→archived latency at half the
// drain rate. It first drains deliveryEvents preloaded events to measure the
// drain rate R on this installation, then the command capacity C (one-event
// commands from latencyClients closed-loop clients for two seconds, delivery
// running; once everything delivered), then sends one-event commands over
// HTTP open-loop at min(R, C)/2 for about five seconds, waits for the backlog to drain
// and reads the worker's riffdb.outbox.delivery.lag histogram from /metrics
// (the difference of two scrapes, so only this load counts). p50_ms and
// p99_ms are interpolated inside the histogram's buckets, as Prometheus's
// histogram_quantile does; their resolution is the bucket layout
// (outbox.LagBuckets). Tracing is at the default sample ratio 1.
func BenchmarkDeliveryLatency(b *testing.B) {
	var p50, p99, rate, sent, capacity float64
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
		// Since archive transactions are made durable once per group, the
		// drain can outrun what the command path sustains on two cores: half
		// the drain rate then overloaded the server, and the latency
		// measured was the backlog's.
		b.StopTimer()
		var err error
		if capacity, err = closedLoop(s, in.token, latencyClients, 2*time.Second); err != nil {
			b.Fatal(err)
		}
		if _, err := waitPending(s, in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == 0 }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		before, err := scrape(s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
		if err != nil {
			b.Fatal(err)
		}
		rate = min(drain, capacity) / 2
		if v, err := strconv.ParseFloat(os.Getenv("RIFFDB_BENCH_LATENCY_RATE"), 64); err == nil && v > 0 {
			rate = v // a fixed offered rate, to compare builds whose drain rates differ
		}
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
	b.ReportMetric(capacity, "command_capacity/s")
	b.ReportMetric(rate, "offered_events/s")
	b.ReportMetric(sent, "events")
	b.ReportMetric(p50, "p50_ms")
	b.ReportMetric(p99, "p99_ms")
}

// latencyClients is how many closed-loop clients measure the command
// capacity in BenchmarkDeliveryLatency.
const latencyClients = 16

// closedLoop sends one-event commands from clients clients, each waiting
// for its answer before the next, for d, and returns the commands per
// second it got. Its order ids start far from openLoop's.
func closedLoop(s *server.Server, token string, clients int, d time.Duration) (float64, error) {
	var ops atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				if err := commandWith(openLoopClient, s, token, 1<<30+c<<20+i); err != nil {
					once.Do(func() { first = err })
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(ops.Load()) / time.Since(start).Seconds(), first
}

// openLoop sends n one-event commands at a fixed rate (per second), each at
// its scheduled time regardless of how long earlier ones take (open loop,
// so a slow commit does not lower the offered rate), with at most 512 in
// flight over at most openLoopConns connections (openLoopClient). It
// returns the first error.
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
			if err := commandWith(openLoopClient, s, token, i); err != nil {
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
