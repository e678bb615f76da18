package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/riffdb/riffdb/internal/observe/promtext"
)

// LagMetric is the server's histogram of the time from an event's commit to
// its acceptance by the archive, the source of Delivery.LagMillis.
const LagMetric = "riffdb_outbox_delivery_lag_seconds"

// drainPoll is how often the wait for delivery polls the server's stats.
const drainPoll = 100 * time.Millisecond

// Delivery is what a WaitDelivered run measured of the server's delivery
// of the run's events into the outbox archive. The counts are the
// database's, so other traffic to it during the run is included.
type Delivery struct {
	// Drained reports whether the backlog reached 0 within the wait timeout.
	Drained bool `json:"drained"`
	// Pending is the backlog when the wait ended (0 when drained).
	Pending uint64 `json:"pending"`
	// DeliveredEvents is the change of the stats' completed_deliveries from
	// before the first request to the end of the wait.
	DeliveredEvents uint64 `json:"delivered_events"`
	// Seconds runs from the start of the run to the end of the wait, and
	// DrainSeconds from the last request's end to the end of the wait.
	Seconds      float64 `json:"delivery_seconds"`
	DrainSeconds float64 `json:"drain_seconds"`
	// Throughput is DeliveredEvents per second of Seconds.
	Throughput float64 `json:"delivery_throughput_per_second"`
	// LagMillis holds the commit→archived lag percentiles of the events
	// delivered during the run, from the change of the server's LagMetric
	// histogram (interpolated within its buckets, like PromQL's
	// histogram_quantile); absent without Config.MetricsAddress.
	LagMillis *Lag `json:"lag_ms,omitempty"`
}

// Lag is a pair of lag percentiles in milliseconds, and the number of
// deliveries they describe.
type Lag struct {
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Count uint64  `json:"count"`
}

// statsClient reads the database's entry of GET /v1/stats and the server's
// metrics. Its HTTP client is not traced, so that polls add no spans.
type statsClient struct {
	s      *settings
	client *http.Client
}

// dbStats is what the load generator reads of a database's stats entry.
type dbStats struct {
	Pending   *uint64
	Completed uint64
}

func (c *statsClient) get(ctx context.Context) (dbStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.s.base+"/v1/stats", nil)
	if err != nil {
		return dbStats{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.s.Token)
	resp, err := c.client.Do(req)
	if err != nil {
		return dbStats{}, fmt.Errorf("loadtest: stats: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return dbStats{}, ErrNoStatistics
	case resp.StatusCode != http.StatusOK:
		return dbStats{}, fmt.Errorf("loadtest: stats: HTTP %d", resp.StatusCode)
	}
	var doc struct {
		Databases []struct {
			Alias   string  `json:"alias"`
			Pending *uint64 `json:"pending_outbox_deliveries"`
			Outbox  struct {
				Completed uint64 `json:"completed_deliveries"`
			} `json:"outbox"`
		} `json:"databases"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBytes)).Decode(&doc); err != nil {
		return dbStats{}, fmt.Errorf("loadtest: stats: %w", err)
	}
	for _, d := range doc.Databases {
		if d.Alias == c.s.Database {
			return dbStats{Pending: d.Pending, Completed: d.Outbox.Completed}, nil
		}
	}
	return dbStats{}, fmt.Errorf("loadtest: stats: the server has no database %q", c.s.Database)
}

// lagBuckets scrapes the server's metrics and returns the database's
// LagMetric buckets: upper bound → cumulative count, summed over series.
func (c *statsClient) lagBuckets(ctx context.Context) (map[float64]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.s.metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("loadtest: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("loadtest: metrics: HTTP %d", resp.StatusCode)
	}
	return parseLagBuckets(io.LimitReader(resp.Body, 64<<20), c.s.Database)
}

// parseLagBuckets reads Prometheus text exposition (with Prometheus's own
// parser, internal/observe/promtext) and sums the LagMetric_bucket samples whose
// riffdb_database label is database.
func parseLagBuckets(r io.Reader, database string) (map[float64]float64, error) {
	samples, err := promtext.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("loadtest: metrics: %w", err)
	}
	out := map[float64]float64{}
	for _, x := range samples {
		if x.Name != LagMetric+"_bucket" || x.Labels["riffdb_database"] != database {
			continue
		}
		le, err := strconv.ParseFloat(x.Labels["le"], 64)
		if err != nil {
			return nil, errors.New("loadtest: metrics: a malformed " + LagMetric + " bucket")
		}
		out[le] += x.Value
	}
	return out, nil
}

// lagPercentiles returns the p50 and p99 of the deliveries counted between
// two scrapes of the cumulative buckets (promtext.Quantile, as PromQL's
// histogram_quantile), nil when there were none or the histogram has no
// finite bound to interpolate in.
func lagPercentiles(before, after map[float64]float64) *Lag {
	delta := make(map[float64]float64, len(after))
	for le, v := range after {
		delta[le] = max(v-before[le], 0)
	}
	total, ok := delta[math.Inf(1)]
	if !ok || total <= 0 || len(delta) < 2 {
		return nil
	}
	ms := func(sec float64) float64 { return math.Round(sec*1e6) / 1e3 } // to the microsecond
	return &Lag{P50: ms(promtext.Quantile(delta, 0.50)), P99: ms(promtext.Quantile(delta, 0.99)), Count: uint64(total)}
}

// waitDelivered polls the stats until the backlog is 0 or the wait times
// out, and fills d. first is the stats before the first request, start the
// run's start and end the last request's end.
func (c *statsClient) waitDelivered(ctx context.Context, first dbStats, start, end time.Time) (*Delivery, error) {
	deadline := end.Add(c.s.WaitTimeout)
	d := &Delivery{}
	var last dbStats
	for {
		pctx, cancel := context.WithTimeout(ctx, c.s.RequestTimeout)
		st, err := c.get(pctx)
		cancel()
		now := c.s.now()
		if err == nil {
			last = st
			if st.Pending != nil && *st.Pending == 0 {
				d.Drained = true
			}
		} else if ctx.Err() != nil || errors.Is(err, ErrNoStatistics) {
			return nil, err
		}
		if d.Drained || !now.Before(deadline) {
			if last.Pending != nil {
				d.Pending = *last.Pending
			}
			d.DeliveredEvents = last.Completed - min(first.Completed, last.Completed)
			d.Seconds, d.DrainSeconds = now.Sub(start).Seconds(), max(now.Sub(end), 0).Seconds()
			if d.Seconds > 0 {
				d.Throughput = float64(d.DeliveredEvents) / d.Seconds
			}
			return d, nil
		}
		t := time.NewTimer(drainPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
}
