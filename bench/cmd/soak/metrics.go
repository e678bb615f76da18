package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// series is one sample of Prometheus text exposition.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// errExposition is returned, wrapped with the line number, for a line of
// text exposition that cannot be parsed.
var errExposition = errors.New("soak: malformed metrics exposition")

// parseExposition reads Prometheus text exposition (format 0.0.4): every
// sample line `name{label="value",…} value [timestamp]`, comments and blank
// lines skipped.
func parseExposition(r io.Reader) ([]series, error) {
	var out []series
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", errExposition, n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("soak: reading metrics: %w", err)
	}
	return out, nil
}

func parseLine(line string) (series, error) {
	s := series{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, errors.New("no value")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		rest, err := parseLabelSet(line[1:], s.labels)
		if err != nil {
			return s, err
		}
		line = rest
	}
	fields := strings.Fields(line)
	if len(fields) == 0 || len(fields) > 2 {
		return s, errors.New("want a value and an optional timestamp")
	}
	v, err := strconv.ParseFloat(fields[0], 64) // accepts +Inf, -Inf and NaN
	if err != nil {
		return s, fmt.Errorf("value %q", fields[0])
	}
	s.value = v
	return s, nil
}

// parseLabelSet parses `name="value",…}` into labels and returns what
// follows the closing brace. Values may hold \\, \" and \n escapes.
func parseLabelSet(s string, labels map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return "", errors.New("label without a quoted value")
		}
		name := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var v strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(s[i])
				}
				continue
			}
			v.WriteByte(s[i])
		}
		if i == len(s) {
			return "", errors.New("unterminated label value")
		}
		labels[name] = v.String()
		s = strings.TrimLeft(s[i+1:], " \t")
		if strings.HasPrefix(s, ",") {
			s = s[1:]
		} else if !strings.HasPrefix(s, "}") {
			return "", errors.New("labels not separated by commas")
		}
	}
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

// largest returns the largest sample of metric name, and whether there
// was any.
func largest(ss []series, name string) (float64, bool) {
	v, found := math.Inf(-1), false
	for _, s := range ss {
		if s.name == name {
			v, found = max(v, s.value), true
		}
	}
	return v, found
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

// quantile estimates the q-quantile as PromQL's histogram_quantile does:
// linear interpolation inside the bucket that holds the rank, the lowest
// bucket starting at 0; a rank in the +Inf bucket gives the highest finite
// bound. It returns NaN for an empty histogram.
func (h histogram) quantile(q float64) float64 {
	bounds := h.bounds()
	total := h.count()
	if len(bounds) < 2 || total <= 0 {
		return math.NaN()
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		c := h[b]
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
