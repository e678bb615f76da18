package bench_test

import (
	"sort"
	"testing"
	"time"
)

// BenchmarkStats measures GET /v1/stats over HTTP (authentication, stats
// assembly, JSON) at 100 and at 1,000,000 pending intents, each loop
// iteration one request; it reports p50_ms and p99_ms of the requests.
//
// The intents are preloaded into the primary store (62,500 commands of 16
// events with 64 concurrent committers for the million, tens of seconds)
// before the server opens it. The installation has no outbox section, so no
// worker drains the backlog while it is measured; the pending count is the
// undelivered index's. The server is asked for stats until the index is
// built and the count is exact before the measurement starts.
func BenchmarkStats(b *testing.B) {
	for _, pending := range []int{100, 1_000_000} {
		b.Run(map[int]string{100: "pending=100", 1_000_000: "pending=1000000"}[pending], func(b *testing.B) {
			in := newInstall(b, 1, "")
			in.cfg.Databases[0].Outbox = nil
			in.preload(b, pending)
			want := uint64(pending)
			s := in.start(b)
			defer stop(b, s)
			got, err := waitPending(s, in.token, 10*time.Millisecond, 5*time.Minute, func(n uint64) bool { return n >= want })
			if err != nil {
				b.Fatal(err)
			}
			if got != want {
				b.Fatalf("pending = %d, want %d", got, want)
			}
			var lat []time.Duration
			for b.Loop() {
				t := time.Now()
				st, err := stats(s, in.token)
				lat = append(lat, time.Since(t))
				if err != nil {
					b.Fatal(err)
				}
				if p := st.Databases[0].PendingOutboxDeliveries; p == nil || *p != want {
					b.Fatalf("pending = %v, want %d", p, want)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(want), "pending")
			b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
			b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99_ms")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
