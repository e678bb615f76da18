package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/riffdb/riffdb/internal/observe/promtext"
)

// series is one sample of Prometheus text exposition.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// errExposition is returned, wrapping promtext.ErrMalformed, for text
// exposition that cannot be parsed.
var errExposition = promtext.ErrMalformed

// parseExposition reads Prometheus text exposition (format 0.0.4) with
// Prometheus's own parser (internal/observe/promtext): every sample, a histogram's
// as its _bucket, _sum and _count samples.
func parseExposition(r io.Reader) ([]series, error) {
	samples, err := promtext.Parse(r)
	if err != nil {
		return nil, err
	}
	out := make([]series, len(samples))
	for i, x := range samples {
		out[i] = series{name: x.Name, labels: x.Labels, value: x.Value}
	}
	return out, nil
}

// sum returns the sum of the samples of metric name whose labels include
// every pair of match, and whether there was any.
func sum(ss []series, name string, match map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, s := range ss {
		if s.name != name || !matches(s.labels, match) {
			continue
		}
		total += s.value
		found = true
	}
	return total, found
}

// blockCaches returns the bytes in the server's block caches: the soak's one
// database has one primary, which reports the primaries' cache, and one
// archive, which reports the archives' cache. ok is false when neither
// reports.
func blockCaches(ss []series) (v float64, ok bool) {
	for _, store := range []string{"primary", "archive"} {
		if c, found := sum(ss, "riffdb_pebble_block_cache_size_bytes", map[string]string{"riffdb_store": store}); found {
			v, ok = v+c, true
		}
	}
	return v, ok
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// histogram is a cumulative Prometheus histogram: count by upper bound (the
// +Inf bucket has bound +Inf).
type histogram map[float64]float64

// histogramOf sums the _bucket series of metric whose labels include match.
func histogramOf(ss []series, metric string, match map[string]string) (histogram, error) {
	h := histogram{}
	for _, s := range ss {
		if s.name != metric+"_bucket" || !matches(s.labels, match) {
			continue
		}
		le, ok := s.labels["le"]
		if !ok {
			return nil, fmt.Errorf("%w: %s bucket without le", errExposition, metric)
		}
		b, err := strconv.ParseFloat(le, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s bucket bound %q", errExposition, metric, le)
		}
		h[b] += s.value
	}
	return h, nil
}

// sub returns h − before, bucket by bucket (a counter reset, which cannot
// happen within one process, would give negative counts: they are clamped
// to 0).
func (h histogram) sub(before histogram) histogram {
	out := histogram{}
	for b, v := range h {
		out[b] = max(v-before[b], 0)
	}
	return out
}

// add adds o to h bucket by bucket.
func (h histogram) add(o histogram) {
	for b, v := range o {
		h[b] += v
	}
}

// count is the number of observations (the +Inf bucket).
func (h histogram) count() float64 { return h[math.Inf(1)] }

// bounds returns the bucket bounds in ascending order.
func (h histogram) bounds() []float64 {
	out := make([]float64, 0, len(h))
	for b := range h {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// quantile estimates the q-quantile as PromQL's histogram_quantile does
// (promtext.Quantile); NaN for an empty histogram.
func (h histogram) quantile(q float64) float64 { return promtext.Quantile(h, q) }

// schedMetric is the runtime's scheduling latency histogram, which the
// server adds to the Go collector's default set (telemetry).
const schedMetric = "go_sched_latencies_seconds"

// slowSchedWait is the wait for a CPU from which schedWaits counts a wait
// as slow: the histogram's largest bound at or below it is used.
const slowSchedWait = 0.001

// schedWaits returns the sum and the count of the server's scheduling
// latency histogram, and how many of its waits were longer than its
// largest bound at or below slowSchedWait; NaN when the scrape lacks it.
func schedWaits(ss []series) (seconds, waits, slow float64) {
	return beyond(ss, schedMetric, slowSchedWait)
}

// archiveTxnMetric is the duration of one archive transaction, from its
// read phase to its synced commit (the archive's WAL fdatasync).
const archiveTxnMetric = "riffdb_archive_txn_duration_seconds"

// slowArchiveTxn is the duration from which archiveTxns counts a
// transaction as slow: ten or more times its usual time on a disk that
// syncs in well under a millisecond, a sync stalled behind something else.
const slowArchiveTxn = 0.005

// archiveTxns returns the count of the server's archive transactions and
// how many took longer than the largest bound at or below slowArchiveTxn
// (5 ms with telemetry.DurationBuckets); NaN when the scrape lacks them.
func archiveTxns(ss []series) (txns, slow float64) {
	_, txns, slow = beyond(ss, archiveTxnMetric, slowArchiveTxn)
	return txns, slow
}

// beyond returns the sum and the count of histogram metric, and how many
// of its observations were above its largest bound at or below threshold;
// NaN for what the scrape lacks.
func beyond(ss []series, metric string, threshold float64) (seconds, count, slow float64) {
	seconds, count, slow = math.NaN(), math.NaN(), math.NaN()
	if v, ok := sum(ss, metric+"_sum", nil); ok {
		seconds = v
	}
	h, err := histogramOf(ss, metric, nil)
	if err != nil || len(h) == 0 {
		return seconds, count, slow
	}
	count = h.count()
	bound := math.Inf(-1)
	for b := range h {
		if b <= threshold && b > bound {
			bound = b
		}
	}
	if !math.IsInf(bound, -1) {
		slow = count - h[bound]
	}
	return seconds, count, slow
}
