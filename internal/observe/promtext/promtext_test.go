package promtext

import (
	"errors"
	"strings"
	"testing"
)

const exposition = `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 42
# TYPE riffdb_events_total counter
riffdb_events_total{riffdb_database="a"} 7
weird{a="x\"y,z}",b="new\nline"} 3
# TYPE lag_seconds histogram
lag_seconds_bucket{riffdb_database="default",le="0.01"} 60
lag_seconds_bucket{riffdb_database="default",le="0.1"} 90
lag_seconds_bucket{riffdb_database="default",le="+Inf"} 100
lag_seconds_sum{riffdb_database="default"} 2.5
lag_seconds_count{riffdb_database="default"} 100
`

func TestParseFlattensEveryFamily(t *testing.T) {
	ss, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range ss {
		key := s.Name
		if le, ok := s.Labels["le"]; ok {
			key += "@" + le
		}
		got[key] = s.Value
		if s.Name == "weird" && (s.Labels["a"] != `x"y,z}` || s.Labels["b"] != "new\nline") {
			t.Errorf("escaped labels parsed as %q", s.Labels)
		}
		if strings.HasPrefix(s.Name, "lag_seconds") && s.Labels["riffdb_database"] != "default" {
			t.Errorf("%s lost its labels: %q", s.Name, s.Labels)
		}
	}
	for key, want := range map[string]float64{
		"go_goroutines": 42, "riffdb_events_total": 7, "weird": 3,
		"lag_seconds_bucket@0.01": 60, "lag_seconds_bucket@0.1": 90, "lag_seconds_bucket@+Inf": 100,
		"lag_seconds_sum": 2.5, "lag_seconds_count": 100,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if len(ss) != 8 {
		t.Errorf("%d samples, want 8: %+v", len(ss), ss)
	}
}

// TestParseAddsNoBucketToACountAlone: a _count line whose labels match no
// bucket line yields no bucket (the load generator sums buckets by label).
func TestParseAddsNoBucketToACountAlone(t *testing.T) {
	in := "# TYPE h histogram\n" +
		"h_bucket{a=\"x\",le=\"0.1\"} 5\nh_bucket{a=\"x\",le=\"+Inf\"} 9\nh_count{a=\"x\"} 9\n" +
		"h_count{b=\"y\"} 4\n"
	ss, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	buckets := 0
	for _, s := range ss {
		if s.Name == "h_bucket" {
			buckets++
			if s.Labels["a"] != "x" {
				t.Errorf("a bucket for the lone count: %+v", s)
			}
		}
	}
	if buckets != 2 {
		t.Fatalf("%d buckets, want 2: %+v", buckets, ss)
	}
}

func TestParseRejectsMalformedExposition(t *testing.T) {
	for _, in := range []string{
		`m{le="0.1"`,
		`m{le="0.1"}`,
		`m{le=0.1} 1`,
		`m one`,
		"# TYPE m counter\nm -x\n",
	} {
		if _, err := Parse(strings.NewReader(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", in, err)
		}
	}
}
