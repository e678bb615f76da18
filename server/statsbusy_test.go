package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// deliverAll runs n commands on database a and waits, without polling stats
// (a poll would leave a value behind for the next one), until the worker
// delivered them and is healthy.
func deliverAll(t *testing.T, ts *testServer, n int) *database {
	t.Helper()
	d := ts.dbs[0]
	for range n {
		if _, err := d.db.Execute(context.Background(), "put", json.RawMessage(`{"k":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 20*time.Second, 10*time.Millisecond, "delivery", func() bool {
		c, st := d.db.UndeliveredCount()
		return st == primary.IndexReady && c == 0 && d.worker.Health().State == outbox.StateHealthy
	})
	return d
}

// TestStatsAndMetricsWhileAnArchiveTransactionRuns: with the archive busy
// (the destination's lock held, as by the worker during an archive
// transaction), /v1/stats still serves the archive's accounting and the
// allocated bytes, and a scrape still has the archive's Pebble series.
func TestStatsAndMetricsWhileAnArchiveTransactionRuns(t *testing.T) {
	ts := newTestServer(t, nil, true)
	d := deliverAll(t, ts, 5)
	release := d.dest.Hold()
	o := ts.statsDoc(t)[0]["outbox"].(map[string]any)
	series := pebbleSeries(t, ts.tel, "a")
	release()
	for _, k := range []string{"archive_encoded_bytes", "archive_allocated_bytes", "archive_record_count"} {
		if v, ok := o[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v while an archive transaction runs, want the last committed value", k, o[k])
		}
	}
	if o["archive_record_count"] != float64(5) {
		t.Errorf("archive_record_count = %v, want 5", o["archive_record_count"])
	}
	if series["archive"] == 0 {
		t.Errorf("no Pebble series of the archive store while an archive transaction runs: %v", series)
	}
}

// TestStatsArchiveValuesNeverNegative removes the archive's store directory
// under the running server: the allocated bytes become null (they cannot be
// measured), never negative, while the accounting stays the last committed
// one.
func TestStatsArchiveValuesNeverNegative(t *testing.T) {
	ts := newTestServer(t, nil, true)
	d := deliverAll(t, ts, 3)
	if err := os.RemoveAll(filepath.Join(ts.root, "outbox", archive.StoreDirName)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.Execute(context.Background(), "put", json.RawMessage(`{"k":"y"}`), ""); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, 20*time.Millisecond, "unmeasurable allocated bytes", func() bool {
		o := ts.statsDoc(t)[0]["outbox"].(map[string]any)
		for _, k := range []string{"archive_encoded_bytes", "archive_allocated_bytes", "archive_record_count"} {
			if v, ok := o[k].(float64); ok && v < 0 {
				t.Fatalf("%s = %v: negative (health %v/%v)", k, v, o["health"], o["reason"])
			}
		}
		if o["archive_encoded_bytes"] == nil || o["archive_record_count"] != float64(3) {
			t.Fatalf("the last committed accounting was lost: %v", o)
		}
		return o["health"] != "healthy" && o["archive_allocated_bytes"] == nil
	})
}
