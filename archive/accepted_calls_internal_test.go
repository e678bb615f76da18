package archive

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/riffdb/riffdb/deliverytype"
)

// countingProvider hands out the SDK's meters, with each Int64Counter
// wrapped so that the test can count the Add calls made on it by name.
type countingProvider struct {
	metric.MeterProvider
	adds map[string]*int
}

func (p countingProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return countingMeter{p.MeterProvider.Meter(name, opts...), p.adds}
}

type countingMeter struct {
	metric.Meter
	adds map[string]*int
}

func (m countingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c, err := m.Meter.Int64Counter(name, opts...)
	n := new(int)
	m.adds[name] = n
	return countingCounter{c, n}, err
}

type countingCounter struct {
	metric.Int64Counter
	n *int
}

func (c countingCounter) Add(ctx context.Context, v int64, opts ...metric.AddOption) {
	*c.n++
	c.Int64Counter.Add(ctx, v, opts...)
}

// TestAcceptedCountedOncePerGroup: the transactions of a group applied with
// Apply and confirmed with one Durable are counted in
// riffdb.archive.accepted.events by one Add for the group, not one per
// event (each call costs the SDK an attribute lookup and an exemplar offer,
// whatever it adds), and the counter still holds every stored event.
func TestAcceptedCountedOncePerGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	adds := map[string]*int{}
	opts := testOptions(t, newMemFS(t, false))
	opts.MeterProvider = countingProvider{sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), adds}
	s := mustOpen(t, opts)
	const name = "riffdb.archive.accepted.events"
	atOpen := *adds[name] // the zeros of the known label sets
	const group, groups = 16, 3
	for g := range groups {
		for i := range group {
			k, r := rec(t, testDatabase, uint64(g*group+i+1), 0, fmt.Sprintf("event %d", g*group+i))
			if out, err := s.Apply(ctx, k, r); err != nil || out != deliverytype.Stored {
				t.Fatalf("Apply = %v, %v", out, err)
			}
		}
		if err := s.Durable(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if calls := *adds[name] - atOpen; calls != groups {
		t.Fatalf("%d Add calls for %d groups of %d, want one per group", calls, groups, group)
	}
	if got := sumByResult(collect(t, reader), name); got["stored"] != group*groups {
		t.Fatalf("accepted.events %v, want stored %d", got, group*groups)
	}
	// A Durable with nothing applied adds nothing.
	if err := s.Durable(ctx); err != nil {
		t.Fatal(err)
	}
	k, r := rec(t, testDatabase, 1, 0, "event 0")
	mustAccept(t, s, k, r, deliverytype.Duplicate)
	if calls := *adds[name] - atOpen; calls != groups+1 {
		t.Fatalf("%d Add calls after one more Accept, want %d", calls, groups+1)
	}
}
