// Package promtext reads Prometheus text exposition (format 0.0.4, what a
// plain GET of /metrics returns) into flat samples, with Prometheus's own
// parser (github.com/prometheus/common/expfmt), for the tools that scrape a
// riffdb server: the load generator and the soak.
package promtext

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrMalformed is wrapped by Parse for exposition it cannot read.
var ErrMalformed = errors.New("promtext: malformed metrics exposition")

// Sample is one sample line as it appears in the exposition: a histogram
// yields its name_bucket (with label le), name_sum and name_count samples.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Parse reads text exposition, in the order of the metric families' names.
func Parse(r io.Reader) ([]Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []Sample
	for _, name := range names {
		for _, m := range families[name].GetMetric() {
			out = appendMetric(out, name, m)
		}
	}
	return out, nil
}

func appendMetric(out []Sample, name string, m *dto.Metric) []Sample {
	labels := func(extra ...string) map[string]string {
		l := make(map[string]string, len(m.GetLabel())+1)
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	switch {
	case m.Counter != nil:
		return append(out, Sample{name, labels(), m.GetCounter().GetValue()})
	case m.Gauge != nil:
		return append(out, Sample{name, labels(), m.GetGauge().GetValue()})
	case m.Untyped != nil:
		return append(out, Sample{name, labels(), m.GetUntyped().GetValue()})
	case m.Histogram != nil:
		h := m.GetHistogram()
		inf := false
		for _, b := range h.GetBucket() {
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
			out = append(out, Sample{name + "_bucket", labels("le", formatBound(b.GetUpperBound())), float64(b.GetCumulativeCount())})
		}
		if !inf && len(h.GetBucket()) > 0 {
			// Buckets without their +Inf one: its count is the sample
			// count. A family's _sum or _count line whose labels match no
			// bucket line forms a histogram without buckets: it gets none.
			out = append(out, Sample{name + "_bucket", labels("le", "+Inf"), float64(h.GetSampleCount())})
		}
		return append(out, Sample{name + "_sum", labels(), h.GetSampleSum()},
			Sample{name + "_count", labels(), float64(h.GetSampleCount())})
	case m.Summary != nil:
		s := m.GetSummary()
		for _, q := range s.GetQuantile() {
			out = append(out, Sample{name, labels("quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), q.GetValue()})
		}
		return append(out, Sample{name + "_sum", labels(), s.GetSampleSum()},
			Sample{name + "_count", labels(), float64(s.GetSampleCount())})
	}
	return out
}

func formatBound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

// Quantile estimates the q-quantile of a cumulative histogram (upper bound
// → observations at or below it, the +Inf bound holding the count) as
// PromQL's histogram_quantile does: linear interpolation inside the bucket
// that holds the rank, the lowest bucket starting at 0; a rank in the +Inf
// bucket gives the highest finite bound. It returns NaN for a histogram
// with no observations or fewer than two bounds.
func Quantile(buckets map[float64]float64, q float64) float64 {
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := buckets[math.Inf(1)]
	if len(bounds) < 2 || total <= 0 {
		return math.NaN()
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		c := buckets[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return prevBound
			}
			if c == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b, c
	}
	return prevBound
}
