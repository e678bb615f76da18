package archive

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/event"
)

// BenchmarkAcceptTxnWorker measures the process CPU per synced archive
// transaction (1 KiB records, one writer, on the real filesystem) with each
// transaction on a new goroutine ("goroutine", as before txnWorker) and on
// the store's long-lived worker ("worker"). Each loop iteration runs one
// slice of 500 transactions per mode, in alternating order, and charges
// each slice the getrusage CPU time of the process (Pebble's background
// work included).
func BenchmarkAcceptTxnWorker(b *testing.B) {
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
	var seq uint64
	slice := func(worker bool) (cpu time.Duration, wall time.Duration) {
		const n = 500
		s.st.noWorker = !worker
		before, start := rusage(b), time.Now()
		for range n {
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
	var cpu, wall [2]time.Duration // [0] goroutine, [1] worker
	round := 0
	for b.Loop() {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		round++
		for _, m := range order {
			c, w := slice(m == 1)
			cpu[m] += c
			wall[m] += w
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(round) }
	b.ReportMetric(us(cpu[0]), "goroutine_cpu_us/txn")
	b.ReportMetric(us(cpu[1]), "worker_cpu_us/txn")
	b.ReportMetric(us(wall[0]), "goroutine_wall_us/txn")
	b.ReportMetric(us(wall[1]), "worker_wall_us/txn")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "worker_vs_goroutine_cpu")
	b.ReportMetric(float64(wall[1])/float64(wall[0]), "worker_vs_goroutine_wall")
	b.ReportMetric(float64(s.st.txn.fallbacks.Load()), "worker_fallbacks")
}
