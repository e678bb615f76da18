package bench_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
	"github.com/riffdb/riffdb/server"
)

// deadLetterCount is the dead-letter population of BenchmarkDeadLetters:
// 6,250 bulk commands of 16 events, every intent dead-lettered.
const deadLetterCount = 100_000

// burstCommands is the number of 16-event bulk commands of one delivery
// burst (4,096 events: a few seconds of delivery at fdatasync speed).
const burstCommands = 256

// burstClients is the number of concurrent HTTP clients sending a burst.
const burstClients = 16

// trickleRate and trickleEvents shape the trickle load: one-event commands
// sent open-loop far below the drain rate, so that most events find the
// worker idle and each is delivered by a pass of its own.
const (
	trickleRate   = 100
	trickleEvents = 200
)

// statsPerRound is the number of GET /v1/stats requests timed per variant
// and round.
const statsPerRound = 200

// BenchmarkDeadLetters measures delivery of new events with deadLetterCount
// dead letters at the bottom of the undelivered index against delivery
// without them, in the same run. Three installations are prepared: clean
// (an empty database), clean_b (another, identical one) and dead (the dead
// letters, made by bulk commits and DeadLetter transitions straight on the
// primary store before the server opens it). The servers run side by side;
// the dead one's first pass, which walks the dead letters once, ends before
// anything is timed. clean_b is the control: two installations that differ
// in nothing still deliver at different rates on one disk, and
// clean_b_vs_clean shows by how much in the same run.
//
// Each loop iteration is one round; every round runs, for each variant in
// an order that rotates from round to round so that the drifts of a noisy
// machine fall on both alike:
//   - a burst: burstCommands bulk commands over HTTP from burstClients
//     clients, timed from the first send until the backlog is back to the
//     dead letters alone (events/s);
//   - a trickle: trickleEvents one-event commands open-loop at trickleRate/s,
//     and the commit→archived lag of those events from the server's
//     histogram (p50/p99);
//   - statsPerRound GET /v1/stats requests, timed one by one.
//
// It reports the burst rates and their ratio dead_vs_clean (target ≥ 0.9),
// the control's clean_b_vs_clean, and dead_vs_cleans, the dead
// installation's rate against both clean ones' together,
// the trickle lag percentiles of each variant with their ratios (the lag's
// buckets are coarse: 2.5, 5, 10, 25, 50 ms…, and the percentiles are
// interpolated within them), and the stats p50/p99 of each variant with
// their ratios (target: unchanged).
//
// It also reports what the bursts' delivery waited on: each server's
// archive WAL syncs during its bursts, per delivered event and their mean
// duration (dead_vs_clean compares work and disk alike; these separate
// them). RIFFDB_DEADLETTER_PROFILE names a directory that receives a CPU
// profile of each burst, <variant>-<round>.pprof.
func BenchmarkDeadLetters(b *testing.B) {
	clean := newInstall(b, 1, "")
	cleanB := newInstall(b, 1, "")
	dead := newInstall(b, 1, "")
	dead.deadLetters(b, deadLetterCount)

	type variant struct {
		name   string
		in     *install
		s      *server.Server
		base   uint64 // the backlog that stays: its dead letters
		events int
		burst  time.Duration
		lag    cumulative
		stats  []time.Duration
		syncs  syncTally // the archive's WAL syncs during the bursts
	}
	vs := []*variant{{name: "clean", in: clean}, {name: "dead", in: dead, base: deadLetterCount}, {name: "clean_b", in: cleanB}}
	for _, v := range vs {
		v.s = v.in.start(b)
		v.lag = cumulative{}
		defer stop(b, v.s)
	}
	// The dead server's first pass scans every dead letter once (it learns
	// where their run ends); wait for it, and for the clean server's
	// index, before timing anything.
	for _, v := range vs {
		if _, err := waitPending(v.s, v.in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == v.base }); err != nil {
			b.Fatal(err)
		}
		if err := settle(v.s, v.in.token, v.base); err != nil {
			b.Fatal(err)
		}
	}
	round, seq := 0, 0
	for b.Loop() {
		for k := range vs {
			v := vs[(round+k)%len(vs)]
			seq++
			syncsBefore, err := archiveSyncs(v.s)
			if err != nil {
				b.Fatal(err)
			}
			stopProfile := burstProfile(b, v.name, round)
			start := time.Now()
			if err := burst(v.s, v.in.token, seq); err != nil {
				b.Fatal(err)
			}
			if _, err := waitPending(v.s, v.in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == v.base }); err != nil {
				b.Fatal(err)
			}
			v.burst += time.Since(start)
			stopProfile()
			syncsAfter, err := archiveSyncs(v.s)
			if err != nil {
				b.Fatal(err)
			}
			v.syncs.n += syncsAfter.n - syncsBefore.n
			v.syncs.seconds += syncsAfter.seconds - syncsBefore.seconds
			v.events += burstCommands * eventsPerBulk

			before, err := scrape(v.s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
			if err != nil {
				b.Fatal(err)
			}
			if err := openLoop(v.s, v.in.token, trickleRate, trickleEvents); err != nil {
				b.Fatal(err)
			}
			if _, err := waitPending(v.s, v.in.token, pollEvery, 5*time.Minute, func(n uint64) bool { return n == v.base }); err != nil {
				b.Fatal(err)
			}
			after, err := scrape(v.s.MetricsAddr(), "riffdb_outbox_delivery_lag_seconds")
			if err != nil {
				b.Fatal(err)
			}
			for bound, c := range after.sub(before) {
				v.lag[bound] += c
			}

			for range statsPerRound {
				t := time.Now()
				st, err := stats(v.s, v.in.token)
				v.stats = append(v.stats, time.Since(t))
				if err != nil {
					b.Fatal(err)
				}
				if p := st.Databases[0].PendingOutboxDeliveries; p == nil || *p != v.base {
					b.Fatalf("%s: pending = %v, want %d", v.name, p, v.base)
				}
			}
		}
		round++
	}
	pct := func(d []time.Duration, p int) float64 {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return ms(s[min(len(s)-1, len(s)*p/100)])
	}
	rate := func(v *variant) float64 { return float64(v.events) / v.burst.Seconds() }
	c, d, cb := vs[0], vs[1], vs[2]
	b.ReportMetric(deadLetterCount, "dead_letters")
	b.ReportMetric(rate(c), "clean_events/s")
	b.ReportMetric(rate(d), "dead_events/s")
	b.ReportMetric(rate(cb), "clean_b_events/s")
	b.ReportMetric(rate(d)/rate(c), "dead_vs_clean")
	b.ReportMetric(rate(cb)/rate(c), "clean_b_vs_clean")
	cleans := float64(c.events+cb.events) / (c.burst + cb.burst).Seconds()
	b.ReportMetric(cleans, "cleans_events/s")
	b.ReportMetric(rate(d)/cleans, "dead_vs_cleans")
	b.ReportMetric(c.lag.quantile(0.5)*1000, "clean_lag_p50_ms")
	b.ReportMetric(c.lag.quantile(0.99)*1000, "clean_lag_p99_ms")
	b.ReportMetric(d.lag.quantile(0.5)*1000, "dead_lag_p50_ms")
	b.ReportMetric(d.lag.quantile(0.99)*1000, "dead_lag_p99_ms")
	b.ReportMetric(d.lag.quantile(0.5)/c.lag.quantile(0.5), "lag_p50_dead_vs_clean")
	b.ReportMetric(d.lag.quantile(0.99)/c.lag.quantile(0.99), "lag_p99_dead_vs_clean")
	b.ReportMetric(pct(c.stats, 50), "clean_stats_p50_ms")
	b.ReportMetric(pct(c.stats, 99), "clean_stats_p99_ms")
	b.ReportMetric(pct(d.stats, 50), "dead_stats_p50_ms")
	b.ReportMetric(pct(d.stats, 99), "dead_stats_p99_ms")
	b.ReportMetric(pct(d.stats, 50)/pct(c.stats, 50), "stats_p50_dead_vs_clean")
	b.ReportMetric(pct(d.stats, 99)/pct(c.stats, 99), "stats_p99_dead_vs_clean")
	b.ReportMetric(c.syncs.n/float64(c.events), "clean_archive_syncs/event")
	b.ReportMetric(d.syncs.n/float64(d.events), "dead_archive_syncs/event")
	b.ReportMetric(c.syncs.mean()*1000, "clean_archive_sync_ms")
	b.ReportMetric(d.syncs.mean()*1000, "dead_archive_sync_ms")
	b.ReportMetric(d.syncs.mean()/c.syncs.mean(), "archive_sync_dead_vs_clean")
}

// syncTally counts a store's WAL syncs and the seconds they took.
type syncTally struct{ n, seconds float64 }

// mean is the mean duration of a sync in seconds.
func (w syncTally) mean() float64 { return w.seconds / w.n }

// archiveSyncs scrapes the server's archive WAL sync counters.
func archiveSyncs(s *server.Server) (syncTally, error) {
	const archive = `riffdb_store="archive"`
	n, err := counterSum(s, "riffdb_pebble_wal_fsyncs_total", archive)
	if err != nil {
		return syncTally{}, err
	}
	sec, err := counterSum(s, "riffdb_pebble_wal_fsync_time_seconds_total", archive)
	return syncTally{n: n, seconds: sec}, err
}

// burstProfile starts a CPU profile of one burst into the directory
// RIFFDB_DEADLETTER_PROFILE names, if any, and returns what stops it.
func burstProfile(b *testing.B, variant string, round int) (stop func()) {
	return cpuProfile(b, "RIFFDB_DEADLETTER_PROFILE", fmt.Sprintf("%s-%d.pprof", variant, round))
}

// settle waits until the server's worker has gone idle with the backlog at
// base: the health is healthy (the first pass reached the end of the index)
// and the pending count has stayed at base for a few polls.
func settle(s *server.Server, token string, base uint64) error {
	deadline := time.Now().Add(5 * time.Minute)
	steady := 0
	for steady < 5 {
		st, err := stats(s, token)
		if err != nil {
			return err
		}
		d := st.Databases[0]
		if p := d.PendingOutboxDeliveries; p != nil && *p == base && d.Outbox.Health == "healthy" {
			steady++
		} else {
			steady = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the worker did not settle at %d pending (health %s/%s)", base, d.Outbox.Health, d.Outbox.Reason)
		}
		time.Sleep(pollEvery)
	}
	return nil
}

// burst sends burstCommands bulk commands from burstClients clients; seq
// makes the inputs of this burst distinct from other bursts'.
func burst(s *server.Server, token string, seq int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range burstClients {
		wg.Go(func() {
			for i := next.Add(1); i <= burstCommands; i = next.Add(1) {
				if err := bulkCommand(s, token, seq*burstCommands+int(i)); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// bulkCommand sends one 16-event bulk command over HTTP.
func bulkCommand(s *server.Server, token string, x int) error {
	req, err := http.NewRequest(http.MethodPost, "http://"+s.APIAddr()+"/v1/databases/default/commands/bulk",
		strings.NewReader(fmt.Sprintf(`{"input":{"x":%d}}`, x)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bulk command: %s", resp.Status)
	}
	return nil
}

// deadLetters commits n events (n a multiple of eventsPerBulk) straight into
// the installation's primary store and moves every one of their intents to
// dead_letter, while no server runs: the undelivered index then holds n dead
// letters below anything committed later. The transitions are synced one by
// one (DeadLetter is one transition), so committers goroutines run them
// concurrently and share the fsyncs.
func (in *install) deadLetters(tb testing.TB, n int) {
	tb.Helper()
	if n%eventsPerBulk != 0 {
		tb.Fatalf("dead letters: %d is not a multiple of %d", n, eventsPerBulk)
	}
	in.preload(tb, n)
	c, err := contract.Compile([]byte(benchContract))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	db, err := primary.Open(ctx, primary.Options{Path: in.cfg.Databases[0].Path, Contract: c})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			tb.Fatal(err)
		}
	}()
	const page = 4096
	var after *event.ID
	moved := 0
	for {
		intents, err := db.ScanIntents(ctx, after, page)
		if err != nil {
			tb.Fatal(err)
		}
		if len(intents) == 0 {
			break
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, committers)
		for range committers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(intents)); i = next.Add(1) - 1 {
					if _, err := db.DeadLetter(ctx, intents[i], "bench", primary.Failure{}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			tb.Fatal(err)
		}
		moved += len(intents)
		last := intents[len(intents)-1].Event
		after = &last
	}
	if moved != n {
		tb.Fatalf("dead-lettered %d intents, want %d", moved, n)
	}
	if got, st := db.UndeliveredCount(); st != primary.IndexReady || got != uint64(n) {
		tb.Fatalf("undelivered = %d (%s), want %d", got, st, n)
	}
}
