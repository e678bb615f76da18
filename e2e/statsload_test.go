package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// archivePebbleGauges are the archive store's Pebble series a scrape must
// carry while the archive is open, with the archive's quota gauge.
var archivePebbleGauges = []string{
	"riffdb_pebble_compaction_debt_bytes",
	"riffdb_pebble_disk_usage_bytes",
	"riffdb_pebble_memtable_size_bytes",
	"riffdb_pebble_block_cache_size_bytes",
	"riffdb_pebble_read_amplification",
	"riffdb_pebble_compactions_total",
	"riffdb_pebble_flushes_total",
}

// loadStats is the part of /v1/stats this test watches, every archive field
// nullable.
type loadStats struct {
	Databases []struct {
		PendingOutboxDeliveries *uint64 `json:"pending_outbox_deliveries"`
		Outbox                  struct {
			Health                string `json:"health"`
			Reason                string `json:"reason"`
			ArchiveEncodedBytes   *int64 `json:"archive_encoded_bytes"`
			ArchiveAllocatedBytes *int64 `json:"archive_allocated_bytes"`
			ArchiveRecordCount    *int64 `json:"archive_record_count"`
			QuotaEncodedBytes     *int64 `json:"quota_encoded_bytes"`
		} `json:"outbox"`
	} `json:"databases"`
}

// statsWatch polls /v1/stats and scrapes /metrics at once and then every
// pollEvery from its own goroutine and records every violation of what a dashboard relies on:
//   - once the archive is open (a poll showed archive values, a healthy
//     worker, or a falling backlog, which needs an open archive), every
//     archive value of every poll is present and not negative, and every
//     scrape carries the archive's Pebble and quota gauges;
//   - every poll whose backlog is lower than the previous poll's (delivery is
//     making progress) reports the outbox healthy.
type statsWatch struct {
	p     *proc
	token string
	stop  chan struct{}
	done  chan struct{}

	// Written by the polling goroutine; read after done is closed.
	opened      bool
	polls       int
	progress    int // polls whose backlog fell
	lastPending *uint64
	violations  []string
}

func watchStats(p *proc, token string) *statsWatch {
	w := &statsWatch{p: p, token: token, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *statsWatch) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf("poll %d: ", w.polls)+fmt.Sprintf(format, args...))
}

// pollEvery is how often statsWatch polls. A restart's drain of the test's
// 3,000-event backlog takes a few hundred milliseconds on the disk, and
// once, with the custody audit made cheaper, a watch that first polled
// after 100 ms and then every 100 ms saw it whole in one poll, and no fall.
const pollEvery = 20 * time.Millisecond

func (w *statsWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		w.poll()
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

func (w *statsWatch) poll() {
	code, body, err := w.p.do(context.Background(), http.MethodGet, "/v1/stats", w.token, nil)
	var s loadStats
	if err == nil && code == http.StatusOK {
		err = json.Unmarshal(body, &s)
	}
	if err != nil || code != http.StatusOK || len(s.Databases) != 1 {
		w.violate("GET /v1/stats: %d %v %.200s", code, err, body)
		return
	}
	w.polls++
	d := s.Databases[0]
	o := d.Outbox
	falling := w.lastPending != nil && d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries < *w.lastPending
	if o.ArchiveEncodedBytes != nil || o.ArchiveAllocatedBytes != nil || o.ArchiveRecordCount != nil ||
		o.Health == "healthy" || falling {
		w.opened = true
	}
	if w.opened {
		for name, v := range map[string]*int64{"archive_encoded_bytes": o.ArchiveEncodedBytes,
			"archive_allocated_bytes": o.ArchiveAllocatedBytes, "archive_record_count": o.ArchiveRecordCount,
			"quota_encoded_bytes": o.QuotaEncodedBytes} {
			switch {
			case v == nil:
				w.violate("%s is null while the archive is open", name)
			case *v < 0:
				w.violate("%s is %d while the archive is open", name, *v)
			}
		}
	}
	if falling {
		w.progress++
		if o.Health != "healthy" {
			w.violate("the backlog fell from %d to %d but health is %s/%s", *w.lastPending, *d.PendingOutboxDeliveries, o.Health, o.Reason)
		}
	}
	w.lastPending = d.PendingOutboxDeliveries
	if !w.opened {
		return
	}
	// Scraped after a poll that saw the archive open: it is still open.
	text, err := scrapeText(w.p)
	if err != nil {
		w.violate("GET /metrics: %v", err)
		return
	}
	for _, name := range append([]string{"riffdb_archive_quota_used_bytes"}, archivePebbleGauges...) {
		want, series := map[string]string{"riffdb_database": "default"}, name+`{riffdb_database="default"}`
		if strings.HasPrefix(name, "riffdb_pebble_") {
			want["riffdb_store"] = "archive"
			series = name + `{riffdb_database="default",riffdb_store="archive"}`
		}
		if v := sample(text, name, want); v < 0 {
			w.violate("the scrape has no %s while the archive is open", series)
		}
	}
}

// finish stops the watch and fails the test on any violation, or when no
// poll saw delivery make progress.
func (w *statsWatch) finish(t *testing.T, phase string) {
	t.Helper()
	close(w.stop)
	<-w.done
	t.Logf("%s: %d polls, %d with a falling backlog, %d violations", phase, w.polls, w.progress, len(w.violations))
	if w.progress == 0 {
		t.Errorf("%s: no poll saw the backlog fall (%d polls)", phase, w.polls)
	}
	if n := len(w.violations); n > 0 {
		shown := w.violations[:min(n, 15)]
		t.Errorf("%s: %d violations, the first %d:\n%s", phase, n, len(shown), strings.Join(shown, "\n"))
	}
}

// scrapeText fetches /metrics as Prometheus text without failing the test
// (it runs in the watch's goroutine).
func scrapeText(p *proc) (string, error) {
	resp, err := httpClient.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), nil
}

// runLoad sends place_order commands first..first+n-1 from 8 clients.
func runLoad(t *testing.T, p *proc, token string, first, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				code, _, body, err := p.command(context.Background(), token, "place_order", orderInput(first+i), fmt.Sprint("sl-", first+i))
				if err != nil || code != http.StatusOK {
					failed.CompareAndSwap(nil, fmt.Sprintf("command %d: %d %v %.200s", first+i, code, err, body))
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatal(f)
	}
}

// TestStatsUnderLoad polls /v1/stats and scrapes /metrics every 20 ms
// (statsWatch) throughout a load of 3,000 commands and its delivery, and
// then throughout the drain of a standing backlog of 3,000 events after a
// restart. The backlog is built by running the server without its outbox
// section (intents stay pending, nothing is delivered), then restarting it
// with the section. Every poll must serve the archive's last committed
// accounting and allocated bytes (never null once the archive is open, never
// negative), every scrape the archive's Pebble gauges, and every poll taken
// while the backlog falls must report the outbox healthy: a worker that
// validated the archive and delivers is healthy before its first pass ends.
func TestStatsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: polls stats through 3,000 commands, a restart and a 3,000-event drain")
	}
	const commands, backlog = 3000, 3000
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")

	p := e.start()
	w := watchStats(p, token)
	runLoad(t, p, token, 0, commands)
	p.waitDrained(t, token)
	w.finish(t, "load")
	p.stop()

	withOutbox, err := os.ReadFile(e.config)
	must(t, err)
	cut := strings.Index(string(withOutbox), "[maintenance.outbox]")
	if cut < 0 {
		t.Fatal("no outbox section in the configuration")
	}
	must(t, os.WriteFile(e.config, withOutbox[:cut], 0o600))
	p = e.start()
	runLoad(t, p, token, commands, backlog)
	if n := p.stats(token).Databases[0].PendingOutboxDeliveries; n == nil || *n != backlog {
		t.Fatalf("standing backlog %v, want %d", n, backlog)
	}
	p.stop()

	must(t, os.WriteFile(e.config, withOutbox, 0o600))
	p = e.start()
	w = watchStats(p, token)
	p.waitDrained(t, token)
	w.finish(t, "drain after restart")
	p.stop()
}
