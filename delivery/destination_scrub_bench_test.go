package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

// BenchmarkDeliveryWithScrub measures the background scrub's cost to
// delivery on the real disk: each iteration commits 2,000 one-event
// commands (about 1 KiB each) while no worker runs, then drains them with
// the real worker and archive destination, once per scrub rate in turn
// (interleaved): 0 (no scrub, the baseline), the default
// (config.DefaultScrubPagesPerSecond) and the maximum
// (config.MaxScrubPagesPerSecond). The archive holds 20,000 older records
// (another history incarnation), so a pass at the default rate lasts about
// 20 s and the scrub reads throughout every drain; at the maximum rate it
// finishes a pass every 0.3 s and starts the next. events/s@R is the median
// drain rate at rate R, ratio@R that median over the no-scrub median
// (target: ≥ 0.9 at the default rate), and scrubbed_records/s@R how fast
// the scrub validated records meanwhile (proof that it ran). The rates take
// turns going first.
func BenchmarkDeliveryWithScrub(b *testing.B) {
	const prefill, batch = 20_000, 2_000
	root := b.TempDir()
	dbPath, outboxDir := filepath.Join(root, "db"), filepath.Join(root, "outbox")
	if err := os.Mkdir(outboxDir, 0o700); err != nil {
		b.Fatal(err)
	}
	c, err := contract.Compile([]byte(modelContract))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	db, err := primary.Open(ctx, primary.Options{Path: dbPath, Contract: c})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	opts := archive.Options{Database: db.Identity(), QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1}

	// The older records: another incarnation's, through the store itself.
	s, err := archive.Open(ctx, outboxDir, opts)
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 900)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= prefill; i = next.Add(1) {
				st, err := event.NewStored(event.ID{Seq: uint64(i)}, "put", []byte(`{"k":"old","pad":"`+pad+`"}`))
				if err != nil {
					b.Error(err)
					return
				}
				k := event.Key{Database: db.Identity(), Incarnation: 0, Event: st.ID}
				if _, err := s.Accept(ctx, k, st.Encode()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil || b.Failed() {
		b.Fatal(err)
	}

	commits := 0
	commit := func() {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := next.Add(1); i <= batch; i = next.Add(1) {
					in, _ := json.Marshal(map[string]string{"k": fmt.Sprint(commits + int(i)), "pad": pad})
					if _, err := db.Execute(ctx, "put", in, ""); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		commits += batch
	}
	// One destination, as in a server: closed between drains, so that the
	// next open starts its background goroutine at the next rate.
	d := newDestination(outboxDir, opts)
	source := d.anchoredTo(db)
	defer d.Close()
	var scrubbed atomic.Int64
	scrubRates := map[int][]float64{} // records the scrub validated per second of drain, by rate
	d.onScrubStep = func(p archive.ScrubProgress) { scrubbed.Add(p.Records) }
	drain := func(rate int) float64 {
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		d.setScrubRate(rate)
		w, err := outbox.New(outbox.Options{Alias: "default", Source: source, Destination: d})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		if err := d.Probe(ctx); err != nil { // open (and start the scrub) before the clock starts
			b.Fatal(err)
		}
		scrubbed.Store(0)
		start := time.Now()
		for {
			if _, err := w.RunOnce(ctx); err != nil {
				b.Fatal(err)
			}
			if n, _ := db.UndeliveredCount(); n == 0 {
				break
			}
		}
		elapsed := time.Since(start).Seconds()
		scrubRates[rate] = append(scrubRates[rate], float64(scrubbed.Load())/elapsed)
		return batch / elapsed
	}

	rates := []int{0, config.DefaultScrubPagesPerSecond, config.MaxScrubPagesPerSecond}
	results := make([][]float64, len(rates))
	for iter := 0; b.Loop(); iter++ {
		for j := range rates {
			i := (iter + j) % len(rates) // a different rate goes first each time
			commit()
			if b.Failed() {
				b.FailNow()
			}
			results[i] = append(results[i], drain(rates[i]))
		}
	}
	var base float64
	for i, r := range rates {
		m := median(results[i])
		if i == 0 {
			base = m
		}
		b.ReportMetric(m, fmt.Sprintf("events/s@%d", r))
		b.ReportMetric(median(scrubRates[r]), fmt.Sprintf("scrubbed_records/s@%d", r))
		if i > 0 {
			b.ReportMetric(m/base, fmt.Sprintf("ratio@%d", r))
		}
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
