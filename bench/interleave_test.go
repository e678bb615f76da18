package bench_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/bench"
)

func TestInterleaveRotatesAndSums(t *testing.T) {
	var order []string
	w := func(name string, ops int) bench.Workload {
		return bench.Workload{Name: name, Run: func(time.Duration) (int, error) {
			order = append(order, name)
			return ops, nil
		}}
	}
	rates, err := bench.Interleave(3, time.Millisecond, []bench.Workload{w("a", 1), w("b", 10), w("c", 100)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c", "b", "c", "a", "c", "a", "b"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i, want := range []int{3, 30, 300} {
		if rates[i].Ops != want || rates[i].Name != []string{"a", "b", "c"}[i] || rates[i].Elapsed <= 0 {
			t.Fatalf("rate %d = %+v, want %d ops", i, rates[i], want)
		}
	}
	if got := (bench.Rate{Ops: 10, Elapsed: 2 * time.Second}).PerSecond(); got != 5 {
		t.Fatalf("PerSecond = %v", got)
	}
	if got := (bench.Rate{}).PerSecond(); got != 0 {
		t.Fatalf("PerSecond of nothing = %v", got)
	}
}

func TestInterleaveStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	ran := 0
	_, err := bench.Interleave(2, time.Millisecond, []bench.Workload{
		{Name: "ok", Run: func(time.Duration) (int, error) { ran++; return 1, nil }},
		{Name: "bad", Run: func(time.Duration) (int, error) { return 0, boom }},
	})
	if !errors.Is(err, boom) || ran != 1 {
		t.Fatalf("err %v after %d runs", err, ran)
	}
	if _, err := bench.Interleave(1, time.Millisecond, nil); !errors.Is(err, bench.ErrNoWorkload) {
		t.Fatalf("no workloads: %v", err)
	}
}

func TestParallelCountsSuccessesAndStopsOnError(t *testing.T) {
	var calls atomic.Int64
	n, err := bench.Parallel(4, func() error { calls.Add(1); return nil })(5 * time.Millisecond)
	if err != nil || n == 0 || int64(n) != calls.Load() {
		t.Fatalf("n %d, calls %d, err %v", n, calls.Load(), err)
	}
	boom := errors.New("boom")
	var m atomic.Int64
	n, err = bench.Parallel(4, func() error {
		if m.Add(1) == 10 {
			return boom
		}
		return nil
	})(time.Minute) // ends at the error, not the deadline
	if !errors.Is(err, boom) || n < 9 {
		t.Fatalf("n %d, err %v", n, err)
	}
}

func TestEnginesIdleWaitsForBackgroundWork(t *testing.T) {
	var calls int
	busyTwice := func() *pebble.Metrics {
		calls++
		m := &pebble.Metrics{}
		if calls <= 2 {
			m.Compact.NumInProgress = 1
		}
		return m
	}
	bench.EnginesIdle(busyTwice)()
	if calls != 3 {
		t.Fatalf("metrics read %d times, want 3 (busy, busy, idle)", calls)
	}
}
