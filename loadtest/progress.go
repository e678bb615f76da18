package loadtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Progress is a snapshot of a running load test, passed to Config.Progress
// every ProgressInterval.
type Progress struct {
	// Elapsed is the time since the run started.
	Elapsed time.Duration
	// Requests counts completed requests, Errors the failed ones among them.
	Requests, Errors int64
	// Rate is completed requests per second of Elapsed.
	Rate float64
	// P99 is the 99th percentile of the latencies so far (0 before the
	// first completed request).
	P99 time.Duration
	// Pending is the server's pending outbox deliveries of the database,
	// nil when unknown: the token lacks read_statistics, or the poll failed.
	Pending *uint64
	// Draining is set after the last request, while WaitDelivered waits
	// for the backlog to drain.
	Draining bool
}

// String renders p as the CLI's progress line.
func (p Progress) String() string {
	s := fmt.Sprintf("loadtest: %s  requests=%d  rate=%.0f/s  errors=%d  p99=%.3fms",
		p.Elapsed.Round(time.Second), p.Requests, p.Rate, p.Errors, float64(p.P99)/float64(time.Millisecond))
	if p.Pending != nil {
		s += fmt.Sprintf("  pending=%d", *p.Pending)
	}
	if p.Draining {
		s += "  (waiting for delivery)"
	}
	return s
}

// live accumulates the outcomes of every worker for the progress line; it
// is safe for concurrent use.
type live struct {
	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
	completed int64
	errors    int64
}

func newLive() *live {
	return &live{hist: hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs)}
}

func (l *live) record(o outcome) {
	us := min(max(o.latency.Microseconds(), histMinMicros), histMaxMicros)
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.hist.RecordValue(us) // in range by construction
	l.completed++
	if o.failure != "" {
		l.errors++
	}
}

// snapshot returns the numbers so far, elapsed after the start.
func (l *live) snapshot(elapsed time.Duration) Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := Progress{Elapsed: elapsed, Requests: l.completed, Errors: l.errors}
	if elapsed > 0 {
		p.Rate = float64(l.completed) / elapsed.Seconds()
	}
	if l.completed > 0 {
		p.P99 = time.Duration(l.hist.ValueAtPercentile(99)) * time.Microsecond
	}
	return p
}

// progressLoop calls s.Progress at every tick until stop is closed or ctx
// ends. draining reports whether the requests are over. The server's
// backlog is polled at each tick until the server refuses the token's
// statistics (then the snapshots carry no Pending).
type progressLoop struct {
	s        *settings
	live     *live
	stats    *statsClient
	start    time.Time
	draining func() bool
}

func (p *progressLoop) run(ctx context.Context, stop <-chan struct{}) {
	tick := p.s.tick
	if tick == nil {
		t := time.NewTicker(ProgressInterval)
		defer t.Stop()
		tick = t.C
	}
	denied := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick:
		}
		snap := p.live.snapshot(p.s.now().Sub(p.start))
		snap.Draining = p.draining()
		if !denied {
			pctx, cancel := context.WithTimeout(ctx, ProgressInterval)
			st, err := p.stats.get(pctx)
			cancel()
			switch {
			case errors.Is(err, ErrNoStatistics):
				denied = true
			case err == nil:
				snap.Pending = st.Pending
			}
		}
		select {
		case <-stop: // the run ended while the server was polled
			return
		default:
		}
		p.s.Progress(snap)
	}
}
