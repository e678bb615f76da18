package bench_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/riffdb/riffdb/outboxapi"
	"github.com/riffdb/riffdb/server"
)

// BenchmarkDeliveriesPage measures a page of the deliveries listing (GET
// /v1/databases/{alias}/outbox/deliveries over HTTP: authentication, the
// index read, the cursor, JSON) with 1,000,000 undelivered events against
// one with 100, in the same run: a page must cost O(page), not O(backlog).
//
// Both installations are preloaded straight into their primary stores (the
// million as 62,500 commands of 16 events, tens of seconds) and have no
// outbox section, so every event stays pending. Each loop iteration asks
// each server, in alternating order, for three pages of 50: the first, the
// next one through its cursor, and a page filtered to dead_letter (there
// are none, so it reads up to its bound of 4 × 50 intents and returns an
// empty page: with a cursor over the million, without one over the 100,
// which it read to the end). It reports the p50 and p99 of each kind and
// variant in milliseconds and large_vs_small, the ratio of the p50s of all
// three (target: about 1; the LSM's depth is the only thing that grows).
func BenchmarkDeliveriesPage(b *testing.B) {
	const large, small = 1_000_000, 100
	type variant struct {
		name string
		s    *server.Server
		in   *install
		lat  map[string][]time.Duration
	}
	var vs []*variant
	for _, n := range []int{small, large} {
		in := newInstall(b, 1, "")
		in.cfg.Databases[0].Outbox = nil
		in.preload(b, n)
		s := in.start(b)
		defer stop(b, s)
		got, err := waitPending(s, in.token, 10*time.Millisecond, 5*time.Minute, func(p uint64) bool { return p >= uint64(n) })
		if err != nil || got != uint64(n) {
			b.Fatalf("pending %d (%v), want %d", got, err, n)
		}
		vs = append(vs, &variant{name: fmt.Sprint(n), s: s, in: in, lat: map[string][]time.Duration{}})
	}
	page := func(v *variant, kind, query string) string {
		start := time.Now()
		var resp outboxapi.ListResponse
		if err := getJSON(v.s, v.in.token, "/v1/databases/default/outbox/deliveries?"+query, &resp); err != nil {
			b.Fatal(err)
		}
		v.lat[kind] = append(v.lat[kind], time.Since(start))
		if (kind != "dead_letter" && (len(resp.Deliveries) != 50 || resp.NextCursor == "")) || (kind == "dead_letter" && len(resp.Deliveries) != 0) {
			b.Fatalf("%s page of %s: %d items, cursor %q", kind, v.name, len(resp.Deliveries), resp.NextCursor)
		}
		return resp.NextCursor
	}
	round := 0
	for b.Loop() {
		for i := range vs {
			v := vs[(i+round)%len(vs)]
			next := page(v, "first", "limit=50")
			page(v, "next", "limit=50&after="+url.QueryEscape(next))
			page(v, "dead_letter", "limit=50&state=dead_letter")
		}
		round++
	}
	p50 := map[string]float64{}
	for _, v := range vs {
		var sum float64
		for _, kind := range []string{"first", "next", "dead_letter"} {
			lat := v.lat[kind]
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(ms(lat[len(lat)/2]), fmt.Sprintf("%s_%s_p50_ms", kind, v.name))
			b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), fmt.Sprintf("%s_%s_p99_ms", kind, v.name))
			sum += ms(lat[len(lat)/2])
		}
		p50[v.name] = sum
	}
	b.ReportMetric(p50[fmt.Sprint(large)]/p50[fmt.Sprint(small)], "large_vs_small")
}

// getJSON GETs path from s with token and decodes a 200 answer into out.
func getJSON(s *server.Server, token, path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+s.APIAddr()+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}
