package bench_test

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/riffdb/riffdb/internal/observe/promtext"
)

// cumulative is a Prometheus histogram: cumulative counts by upper bound
// (the +Inf bucket has bound +Inf), summed over every series of one metric.
type cumulative map[float64]float64

// parseHistogram reads the _bucket series of metric (the Prometheus name
// without the suffix) from text exposition, summing series that differ only
// in labels other than le.
func parseHistogram(r io.Reader, metric string) (cumulative, error) {
	h := cumulative{}
	prefix := metric + "_bucket{"
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("malformed series %q", line)
		}
		labels, rest := line[len(prefix):end], strings.Fields(line[end+1:])
		if len(rest) == 0 {
			return nil, fmt.Errorf("series without value %q", line)
		}
		v, err := strconv.ParseFloat(rest[0], 64)
		if err != nil {
			return nil, fmt.Errorf("series value %q: %w", line, err)
		}
		le, ok := label(labels, "le")
		if !ok {
			return nil, fmt.Errorf("bucket without le %q", line)
		}
		bound, err := strconv.ParseFloat(le, 64) // accepts "+Inf"
		if err != nil {
			return nil, fmt.Errorf("bucket bound %q: %w", le, err)
		}
		h[bound] += v
	}
	return h, sc.Err()
}

// label returns the value of name in a Prometheus label list.
func label(labels, name string) (string, bool) {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == name {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// sub returns h − before bucket by bucket: the observations made between
// two scrapes.
func (h cumulative) sub(before cumulative) cumulative {
	out := cumulative{}
	for b, v := range h {
		out[b] = v - before[b]
	}
	return out
}

// count is the number of observations (the +Inf bucket).
func (h cumulative) count() float64 { return h[math.Inf(1)] }

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does (promtext.Quantile); NaN for an empty histogram.
func (h cumulative) quantile(q float64) float64 { return promtext.Quantile(h, q) }

// scrape fetches the server's /metrics and parses one histogram.
func scrape(addr, metric string) (cumulative, error) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseHistogram(resp.Body, metric)
}

// stringsReader is strings.NewReader as an io.Reader (request bodies).
func stringsReader(s string) io.Reader { return strings.NewReader(s) }
