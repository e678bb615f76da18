package loadtest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds, in microseconds.
const (
	histMinMicros = 1
	histMaxMicros = int64(5 * time.Minute / time.Microsecond)
	histSigFigs   = 3
)

// Report is the outcome of a run. Its JSON form is the result of
// `riffdb loadtest --output json`.
type Report struct {
	// Mode is "closed" or "open".
	Mode string `json:"mode"`
	// LatencyFrom is "send" (closed loop) or "intended_send" (open loop:
	// queueing behind a slow server is counted).
	LatencyFrom string `json:"latency_measured_from"`
	// Target is the command URL.
	Target      string  `json:"target"`
	RunID       string  `json:"run_id"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate_per_second"` // 0 in the closed loop
	// Requests counts completed requests, successful or not.
	Requests  int64 `json:"requests"`
	Succeeded int64 `json:"succeeded"`
	Errors    int64 `json:"errors"`
	// ErrorsByStatus counts failures by HTTP status code ("409", "503") or
	// by "transport", "timeout" and "canceled" for requests without one.
	ErrorsByStatus map[string]int64 `json:"errors_by_status"`
	// Replayed counts successful responses the server marked as replays;
	// it stays 0 unless an idempotency key was reused.
	Replayed int64 `json:"replayed"`
	// Retries counts the second sends of Config.RetryRatio (they are not
	// requests: not counted in Requests nor in the latencies); RetryErrors
	// counts those that were not answered as a replay of the same commit,
	// by errors_by_status key, RetryNotReplayed or RetryOtherCommit.
	Retries        int64            `json:"retries"`
	RetryErrors    map[string]int64 `json:"retry_errors"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
	// Throughput is completed requests per second of elapsed time.
	Throughput float64 `json:"throughput_per_second"`
	// LatencyMillis holds the percentiles of every completed request.
	LatencyMillis Percentiles `json:"latency_ms"`
	// Slowest lists the slowest requests, slowest first.
	Slowest []Sample `json:"slowest"`
	// Interrupted is set when the context ended the run early.
	Interrupted bool `json:"interrupted"`
	// Delivery is the server's delivery of the run's events into the
	// archive, measured by Config.WaitDelivered; absent otherwise.
	Delivery *Delivery `json:"delivery,omitempty"`
}

// Percentiles are latencies in milliseconds. P50 … P999 come from the HDR
// histogram (within 0.1 %, and never above Max); Max is exact.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Sample is one request of the slowest list.
type Sample struct {
	// Seq is the request's sequence number (the {{n}} of its input).
	Seq           int64   `json:"seq"`
	LatencyMillis float64 `json:"latency_ms"`
	// Status is the HTTP status, 0 when none was received.
	Status int `json:"status"`
	// TraceID is the W3C trace id (32 hex digits) of the request's trace.
	TraceID string `json:"trace_id"`
	// Sampled reports whether the trace was sampled (and so exported when
	// an OTLP endpoint is configured).
	Sampled bool `json:"sampled"`

	latency time.Duration
}

// RetryErrors keys of a retry answered with success but not as a replay of
// the first send's commit.
const (
	// RetryNotReplayed: the retry committed again (replayed was false).
	RetryNotReplayed = "not_replayed"
	// RetryOtherCommit: the replay names another commit sequence.
	RetryOtherCommit = "other_commit"
)

// outcome is what one request produced.
type outcome struct {
	seq      int64
	latency  time.Duration
	status   int    // 0: none
	failure  string // "" on success, else the errors_by_status key
	replayed bool
	traceID  string
	sampled  bool
	// retried is set when the request was sent a second time; retryFailure
	// is then "" or its RetryErrors key.
	retried      bool
	retryFailure string
}

// recorder accumulates outcomes; each worker owns one, so it needs no lock.
type recorder struct {
	hist      *hdrhistogram.Histogram
	slow      []Sample // at most SlowestKept, slowest first
	errs      map[string]int64
	ok        int64
	replayed  int64
	completed int64
	maxExact  time.Duration
	retries   int64
	retryErrs map[string]int64
}

func newRecorder() *recorder {
	return &recorder{hist: hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs), errs: map[string]int64{},
		retryErrs: map[string]int64{}}
}

func (r *recorder) record(o outcome) {
	r.completed++
	us := min(max(o.latency.Microseconds(), histMinMicros), histMaxMicros)
	_ = r.hist.RecordValue(us) // in range by construction
	r.maxExact = max(r.maxExact, o.latency)
	if o.failure == "" {
		r.ok++
		if o.replayed {
			r.replayed++
		}
	} else {
		r.errs[o.failure]++
	}
	if o.retried {
		r.retries++
		if o.retryFailure != "" {
			r.retryErrs[o.retryFailure]++
		}
	}
	r.offer(Sample{Seq: o.seq, latency: o.latency, Status: o.status, TraceID: o.traceID, Sampled: o.sampled})
}

// slower orders samples slowest first, then by sequence number.
func slower(a, b Sample) int {
	if c := cmp.Compare(b.latency, a.latency); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

func (r *recorder) offer(s Sample) {
	if len(r.slow) == SlowestKept && slower(s, r.slow[len(r.slow)-1]) >= 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(r.slow, s, slower)
	r.slow = slices.Insert(r.slow, i, s)
	if len(r.slow) > SlowestKept {
		r.slow = r.slow[:SlowestKept]
	}
}

// merge folds o into r.
func (r *recorder) merge(o *recorder) {
	r.hist.Merge(o.hist)
	for k, v := range o.errs {
		r.errs[k] += v
	}
	r.ok += o.ok
	r.replayed += o.replayed
	r.completed += o.completed
	r.maxExact = max(r.maxExact, o.maxExact)
	r.retries += o.retries
	for k, v := range o.retryErrs {
		r.retryErrs[k] += v
	}
	for _, s := range o.slow {
		r.offer(s)
	}
}

func millis(us int64) float64 { return float64(us) / 1000 }

// fill writes r's numbers into rep.
func (r *recorder) fill(rep *Report, elapsed time.Duration) {
	rep.Requests = r.completed
	rep.Succeeded = r.ok
	rep.Errors = r.completed - r.ok
	rep.ErrorsByStatus = maps.Clone(r.errs)
	rep.Replayed = r.replayed
	rep.Retries = r.retries
	rep.RetryErrors = maps.Clone(r.retryErrs)
	rep.ElapsedSeconds = elapsed.Seconds()
	if elapsed > 0 {
		rep.Throughput = float64(r.completed) / elapsed.Seconds()
	}
	if r.completed > 0 {
		top := float64(r.maxExact) / float64(time.Millisecond)
		// The histogram answers with the top of a value's bucket, which
		// can lie above the exact maximum; no percentile is above it.
		at := func(q float64) float64 { return min(millis(r.hist.ValueAtPercentile(q)), top) }
		rep.LatencyMillis = Percentiles{
			P50:  at(50),
			P90:  at(90),
			P99:  at(99),
			P999: at(99.9),
			Max:  top,
			Mean: r.hist.Mean() / 1000,
		}
	}
	rep.Slowest = make([]Sample, len(r.slow))
	for i, s := range r.slow {
		s.LatencyMillis = float64(s.latency) / float64(time.Millisecond)
		rep.Slowest[i] = s
	}
}

// statusKey is the errors_by_status key of an HTTP status.
func statusKey(code int) string { return strconv.Itoa(code) }

// String renders the report as the text output of the CLI.
func (r *Report) String() string {
	var b []byte
	if r.Mode == "open" {
		b = fmt.Appendf(b, "open loop at %g/s (at most %d in flight) → %s\n", r.Rate, r.Concurrency, r.Target)
	} else {
		b = fmt.Appendf(b, "closed loop with %d workers → %s\n", r.Concurrency, r.Target)
	}
	b = fmt.Appendf(b, "requests=%d errors=%d elapsed=%.3fs throughput=%.0f/s", r.Requests, r.Errors, r.ElapsedSeconds, r.Throughput)
	if r.Replayed > 0 {
		b = fmt.Appendf(b, " replayed=%d", r.Replayed)
	}
	if r.Retries > 0 {
		b = fmt.Appendf(b, " retries=%d", r.Retries)
	}
	if r.Interrupted {
		b = append(b, " (interrupted)"...)
	}
	b = append(b, '\n')
	if len(r.ErrorsByStatus) > 0 {
		b = append(b, "errors by status:"...)
		for _, k := range slices.Sorted(maps.Keys(r.ErrorsByStatus)) {
			b = fmt.Appendf(b, " %s=%d", k, r.ErrorsByStatus[k])
		}
		b = append(b, '\n')
	}
	if len(r.RetryErrors) > 0 {
		b = append(b, "retries not replayed:"...)
		for _, k := range slices.Sorted(maps.Keys(r.RetryErrors)) {
			b = fmt.Appendf(b, " %s=%d", k, r.RetryErrors[k])
		}
		b = append(b, '\n')
	}
	p := r.LatencyMillis
	b = fmt.Appendf(b, "latency (ms, from %s): p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
		r.LatencyFrom, p.P50, p.P90, p.P99, p.P999, p.Max)
	if d := r.Delivery; d != nil {
		verdict := "drained"
		if !d.Drained {
			verdict = fmt.Sprintf("NOT drained (%d pending at the timeout)", d.Pending)
		}
		b = fmt.Appendf(b, "delivery: %s after %.3fs  delivered=%d in %.3fs  throughput=%.0f/s\n",
			verdict, d.DrainSeconds, d.DeliveredEvents, d.Seconds, d.Throughput)
		if l := d.LagMillis; l != nil {
			b = fmt.Appendf(b, "commit→archived lag (ms, %d deliveries, from %s): p50 %.3f  p99 %.3f  (command latency p50 %.3f  p99 %.3f)\n",
				l.Count, LagMetric, l.P50, l.P99, p.P50, p.P99)
		} else {
			b = append(b, "commit→archived lag: not measured (no metrics address, or no delivery in its histogram)\n"...)
		}
	}
	for i, s := range r.Slowest {
		status := "-"
		if s.Status != 0 {
			status = strconv.Itoa(s.Status)
		}
		sampled := ""
		if !s.Sampled {
			sampled = " (not sampled)"
		}
		b = fmt.Appendf(b, "slow #%d %.3f ms  seq=%d status=%s trace=%s%s\n", i+1, s.LatencyMillis, s.Seq, status, s.TraceID, sampled)
	}
	return string(b)
}
