package outbox_test

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/outbox"
)

// TestHaltedWorkerLogsAtABoundedRate: a worker whose archive stays
// unavailable probes once a probe interval and halts each time; the
// "outbox delivery halted" line backs off like the storage engines' errors
// (1 s, 2 s, 4 s, ... up to 30 s) instead of being written at every probe,
// each line counting the probes it stands for, and one line says when
// delivery works again.
func TestHaltedWorkerLogsAtABoundedRate(t *testing.T) {
	b := setup(t, 1<<30, 0)
	core, logs := observer.New(zap.DebugLevel)
	w, err := outbox.New(outbox.Options{Alias: "default", Source: b.src, Destination: b.dst, Clock: b.clock,
		Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	b.w = w
	b.commit(t, 3)
	b.dst.probeErr = fmt.Errorf("%w: the archive directory is missing", errUnavailable)
	const probes = 100 // 100 s of outage, one probe a second
	for range probes {
		if res := b.run(t); res.Halted == "" {
			t.Fatalf("pass %+v did not halt", res)
		}
		b.clock.Advance(outbox.DefaultProbeInterval)
	}
	halted := logs.FilterMessage("outbox delivery halted").All()
	// Lines at 0, 1, 3, 7, 15, 31, 61, 91 s.
	if len(halted) != 8 {
		t.Fatalf("%d halted lines for %d probes, want 8", len(halted), probes)
	}
	stood := 0
	for _, e := range halted {
		m := e.ContextMap()
		stood += 1 + int(m["suppressed"].(int64))
		if m["state"] != outbox.StateDegraded || m["reason"] != "destination_unavailable" {
			t.Fatalf("line fields %v", m)
		}
	}
	b.dst.mu.Lock()
	b.dst.probeErr = nil
	b.dst.mu.Unlock()
	b.clock.Advance(outbox.RetryDelay)
	if res := b.run(t); res.Completed != 3 {
		t.Fatalf("after the repair: pass %+v", res)
	}
	cleared := logs.FilterMessage("outbox delivery halted cleared").All()
	if len(cleared) != 1 {
		t.Fatalf("%d cleared lines, want 1", len(cleared))
	}
	// The halts since the last line are counted by the cleared line.
	if stood += int(cleared[0].ContextMap()["suppressed"].(int64)); stood != probes {
		t.Fatalf("the lines stand for %d halts, want %d", stood, probes)
	}
}
