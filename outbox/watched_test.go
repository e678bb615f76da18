package outbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/outbox"
)

// watchedArchive is a memArchive that can fail between the worker's calls,
// as the archive does when its background scrub finds corrupt content.
type watchedArchive struct {
	*memArchive
	failed chan struct{}
}

func (a *watchedArchive) Failed() <-chan struct{} { return a.failed }

// TestIdleWorkerStopsWhenItsDestinationFails: a healthy worker with nothing
// to deliver makes no destination call; when a Watched destination fails,
// the loop wakes, probes it and stops delivery with the failure's reason.
func TestIdleWorkerStopsWhenItsDestinationFails(t *testing.T) {
	b := setup(t, 1<<30, 0)
	dst := &watchedArchive{memArchive: b.dst, failed: make(chan struct{})}
	w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: dst, Clock: b.clock})
	if err != nil {
		t.Fatal(err)
	}
	sig := w.InitTestSignals(t)
	b.commit(t, 3)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	for w.Health().State != outbox.StateHealthy || b.pending(t) != 0 {
		sig.PassEnded.WaitOrTimeout(t)
	}
	sig.Parked.WaitOrTimeout(t) // idle: parked until something happens

	dst.mu.Lock()
	dst.probeErr = fmt.Errorf("%w: the scrub found a damaged record", errCorrupt)
	dst.mu.Unlock()
	close(dst.failed)
	// Passes the commits' notifications started may still end first; the
	// pass the failure starts halts (a few at most, never a timeout).
	for i := 0; ; i++ {
		res := sig.PassEnded.WaitOrTimeout(t)
		if res.Halted == deliverytype.ReasonCorruptContent {
			break
		}
		if i == 3 {
			t.Fatalf("no pass halted on the failure; last %+v", res)
		}
	}
	if h := w.Health(); h.State != outbox.StateStopped || h.Reason != deliverytype.ReasonCorruptContent {
		t.Fatalf("health %+v, want stopped/corrupt_content", h)
	}
}
