package archive

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/process/clock"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestMonitorServesWhileTheWriterIsBusy: while an archive transaction holds
// the store's writer lock, the Monitor still serves the last committed
// accounting, the allocated bytes and the engine metrics (a Store's own
// Metrics skips such a scrape), and the writer reads fresh metrics for the
// scrape that found it busy before it lets go of the store.
func TestMonitorServesWhileTheWriterIsBusy(t *testing.T) {
	fs := newMemFS(t, false)
	opts := testOptions(t, fs)
	m := new(Monitor)
	opts.Monitor = m
	if _, ok := m.Usage(); ok {
		t.Fatal("Usage before any open: ok, want unknown")
	}
	s := mustOpen(t, opts)
	var want int64
	for i := uint64(1); i <= 5; i++ {
		k, r := rec(t, testDatabase, i, 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
		want += Charge(k, r)
	}
	s.mu.Lock() // an archive transaction in progress
	if s.Metrics() != nil {
		t.Fatal("Store.Metrics with the writer busy: want nil (it never waits)")
	}
	u, ok := m.Usage()
	if !ok || u.Records != 5 || u.EncodedBytes != want || u.QuotaEncodedBytes != opts.QuotaEncodedBytes || u.AllocatedBytes < 0 {
		t.Fatalf("Monitor.Usage with the writer busy = %+v, %v; want 5 records, %d bytes, allocated >= 0", u, ok, want)
	}
	stale := m.Metrics()
	if stale == nil {
		t.Fatal("Monitor.Metrics with the writer busy: nil, want the last metrics")
	}
	if !m.wantMetrics.Load() {
		t.Fatal("the busy scrape did not ask the writer for fresh metrics")
	}
	s.mu.Unlock()
	k, r := rec(t, testDatabase, 6, 0, "payload")
	mustAccept(t, s, k, r, deliverytype.Stored)
	if m.wantMetrics.Load() {
		t.Fatal("the writer did not serve the metrics a busy scrape asked for")
	}
	if got := m.metrics.Load(); got == stale {
		t.Fatal("the writer did not read fresh metrics")
	}
	if u, _ := m.Usage(); u.Records != 6 {
		t.Fatalf("Usage after a commit: %d records, want 6", u.Records)
	}
}

// TestMonitorAfterClose: a closed archive keeps its last committed
// accounting in the Monitor (records are never deleted), serves no engine
// metrics, and reports the allocated bytes as unknown (-1, never another
// negative value) once its files cannot be measured; a reopen publishes the
// new store.
func TestMonitorAfterClose(t *testing.T) {
	fs := newMemFS(t, false)
	opts := testOptions(t, fs)
	m := new(Monitor)
	opts.Monitor = m
	s := mustOpen(t, opts)
	k, r := rec(t, testDatabase, 1, 0, "payload")
	mustAccept(t, s, k, r, deliverytype.Stored)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Metrics() != nil {
		t.Fatal("Metrics of a closed archive: want nil")
	}
	u, ok := m.Usage()
	if !ok || u.Records != 1 || u.EncodedBytes != Charge(k, r) || u.AllocatedBytes <= 0 {
		t.Fatalf("Usage after close = %+v, %v; want the last accounting and allocated bytes", u, ok)
	}
	if err := fs.RemoveAll(testDir); err != nil {
		t.Fatal(err)
	}
	m.measure()
	if u, ok := m.Usage(); !ok || u.AllocatedBytes != -1 || u.Records != 1 {
		t.Fatalf("Usage with the directory gone = %+v, %v; want allocated -1 (unknown) and the last accounting", u, ok)
	}
	prepareArchiveDir(t, fs)
	opts.Floor = 0
	s2 := mustOpen(t, opts)
	if m.Metrics() == nil {
		t.Fatal("Metrics after a reopen: nil")
	}
	if u, _ := m.Usage(); u.Records != 0 || u.AllocatedBytes <= 0 {
		t.Fatalf("Usage after reopening a new archive = %+v", u)
	}
	_ = s2
}

// TestMonitorAllocatedRefresh: the allocated bytes are measured again in the
// background by a read that finds them older than AllocatedRefresh, and not
// before.
func TestMonitorAllocatedRefresh(t *testing.T) {
	fs := newMemFS(t, false)
	opts := testOptions(t, fs)
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	opts.Clock = clock.Func(func() time.Time { return time.Unix(0, now.Load()) })
	m := new(Monitor)
	opts.Monitor = m
	s := mustOpen(t, opts)
	u0, _ := m.Usage()
	for i := uint64(1); i <= 50; i++ {
		k, r := rec(t, testDatabase, i, 0, "a payload that makes the log grow")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	if u, _ := m.Usage(); u.AllocatedBytes != u0.AllocatedBytes {
		t.Fatalf("allocated bytes measured again before AllocatedRefresh passed: %d, then %d", u0.AllocatedBytes, u.AllocatedBytes)
	}
	now.Add(int64(AllocatedRefresh))
	_, _ = m.Usage()
	testutil.WaitFor(t, 10*time.Second, 5*time.Millisecond, "a background measurement", func() bool {
		u, _ := m.Usage()
		return u.AllocatedBytes != u0.AllocatedBytes
	})
}
