package outbox_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/riffdb/riffdb/internal/observe/promtext"
	"github.com/riffdb/riffdb/outbox"
)

// TestLagBucketsResolveTheP99 checks the delivery-lag buckets: where a
// healthy worker's lag lies (0.5 ms to 100 ms) no bucket is wider than
// 1.5 times its lower bound, every boundary of the earlier layout is kept
// (dashboards, rules and stored queries may name one), and a p99 read from
// the buckets the way histogram_quantile and the soak read it
// (promtext.Quantile: linear interpolation within the bucket) is within 5 % of the exact p99 of the
// samples. The earlier layout (1, 2.5, 5, 10, 25, 50, 100 ms) was off by up to
// 27 % on these distributions, and by different amounts in different
// buckets, so a ratio of two p99s (the soak's target) was distorted too.
func TestLagBucketsResolveTheP99(t *testing.T) {
	b := outbox.LagBuckets
	if !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
		t.Fatalf("LagBuckets not strictly increasing: %v", b)
	}
	if b[0] > 0.0005 || !slices.Contains(b, 0.1) {
		t.Errorf("LagBuckets do not cover 0.5 ms to 100 ms: %v", b)
	}
	for i := 1; i < len(b) && b[i] <= 0.1; i++ {
		if b[i] > 1.5*b[i-1]+1e-12 {
			t.Errorf("bucket (%g, %g] s is %.2f times its lower bound, want at most 1.5", b[i-1], b[i], b[i]/b[i-1])
		}
	}
	for _, old := range []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600} {
		if !slices.Contains(b, old) {
			t.Errorf("boundary %g s of the earlier layout is gone", old)
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for _, median := range []float64{0.0008, 0.0015, 0.003, 0.006} {
		for _, sigma := range []float64{0.5, 0.8, 1.1} {
			samples := make([]float64, 100_000)
			for i := range samples {
				samples[i] = median * math.Exp(sigma*rng.NormFloat64())
			}
			sort.Float64s(samples)
			exact := samples[len(samples)*99/100]
			if exact > 0.1 {
				continue
			}
			got := bucketQuantile(b, samples, 0.99)
			if err := got/exact - 1; math.Abs(err) > 0.05 {
				t.Errorf("lognormal lag, median %.1f ms, sigma %.1f: p99 %.2f ms from the buckets, %.2f ms exact (%+.0f %%)",
					median*1000, sigma, got*1000, exact*1000, err*100)
			}
		}
	}
}

// bucketQuantile counts sorted samples into cumulative buckets with upper
// bounds b (a sample equal to a bound falls in that bound's bucket, as in
// Prometheus and OpenTelemetry) and reads quantile q from them as the soak
// does.
func bucketQuantile(b, sorted []float64, q float64) float64 {
	buckets := map[float64]float64{math.Inf(1): float64(len(sorted))}
	for _, upper := range b {
		buckets[upper] = float64(sort.Search(len(sorted), func(i int) bool { return sorted[i] > upper }))
	}
	return promtext.Quantile(buckets, q)
}
