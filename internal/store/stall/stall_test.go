package stall_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

func TestCountsStallsAndTheTimeWritesWereHeld(t *testing.T) {
	now := time.Unix(0, 0)
	core, logs := observer.New(zap.WarnLevel)
	tr := stall.New(zap.New(core), "archive", func() time.Time { return now })
	var a, b pebble.EventListener
	tr.Listen(&a)
	tr.Listen(&b) // a second Pebble instance of the same store (a reopen)

	a.WriteStallEnd() // an end without a begin changes nothing
	if n, held := tr.Stats(); n != 0 || held != 0 {
		t.Fatalf("before any stall: %d stalls, %s held", n, held)
	}
	a.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	now = now.Add(300 * time.Millisecond)
	if n, held := tr.Stats(); n != 1 || held != 300*time.Millisecond {
		t.Fatalf("during the first stall: %d stalls, %s held; want 1, 300ms", n, held)
	}
	a.WriteStallEnd()
	now = now.Add(time.Hour) // time without a stall adds nothing
	b.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	now = now.Add(2 * time.Second)
	b.WriteStallEnd()
	if n, held := tr.Stats(); n != 2 || held != 2300*time.Millisecond {
		t.Fatalf("after two stalls: %d stalls, %s held; want 2, 2.3s", n, held)
	}
	// An instance abandoned in a stall keeps counting: its writers are
	// still held. The other instance's stalls are its own.
	a.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	b.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	now = now.Add(time.Second)
	b.WriteStallEnd()
	now = now.Add(time.Second)
	if n, held := tr.Stats(); n != 4 || held != 2300*time.Millisecond+2*time.Second+time.Second {
		t.Fatalf("with one instance still stalled: %d stalls, %s held; want 4, 5.3s", n, held)
	}
	// Only the stall of LogAfter or longer was logged, with its reason.
	testutil.WaitFor(t, 5*time.Second, time.Millisecond, "the stalls' log lines", func() bool { return logs.Len() >= 2 })
	time.Sleep(20 * time.Millisecond) // a line of a shorter stall would be written by now
	if logs.Len() != 2 {
		t.Fatalf("%d log lines, want 2 (the stalls of 2 s and 1 s): %v", logs.Len(), logs.All())
	}
	for _, e := range logs.All() {
		f := e.ContextMap()
		if e.Message != "storage engine held writes back" || f["store"] != "archive" || f["duration"] == nil || f["reason"] == "" {
			t.Errorf("log line %q %v", e.Message, f)
		}
	}
}

// TestRecordsPebblesStalls: a real Pebble store whose flushes cannot keep up
// stalls its writers, and the Tracker listening to it counts the stalls and
// the time they held writes.
func TestRecordsPebblesStalls(t *testing.T) {
	tr := stall.New(nil, "primary", nil)
	o := &pebble.Options{FS: testutil.SlowTables{FS: vfs.NewMem(), Delay: 200 * time.Millisecond}, MemTableSize: 256 << 10,
		Logger: testutil.QuietPebbleLogger{}}
	o.EventListener = &pebble.EventListener{}
	tr.Listen(o.EventListener)
	db, err := pebble.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, 1024)
	for i := 0; i < 2000; i++ {
		if err := db.Set(fmt.Appendf(nil, "k%06d", i), value, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	n, held := tr.Stats()
	if n == 0 || held < 50*time.Millisecond {
		t.Fatalf("2 MB written past flushes delayed 200 ms each: %d stalls, %s held", n, held)
	}
	t.Logf("%d stalls, %s held", n, held)
}
