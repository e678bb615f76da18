package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// allocatedUnder returns the blocks allocated to the files under dir, in
// bytes.
func allocatedUnder(t *testing.T, dir string) int64 {
	t.Helper()
	allocated, _ := testutil.DiskUsage(t, dir)
	return allocated
}

// fixedDiskOverhead is the disk a database may allocate beyond twice its
// data (docs/benchmarks.md, "Disk per database").
const fixedDiskOverhead = 3 << 20

// TestYoungDatabasesStayWithinTwiceTheirData: two databases that took
// 3,000 one-event commands each, everything delivered, hold no table file
// yet: their history, intents and archive records are all in the WALs of
// memtables not yet flushed, four or so per store (a new store's memtables
// start at 256 KiB and grow, and Pebble flushes once the queued ones add up
// to a memtable). Each database's allocated disk stays within twice its
// data (retained history and archive encoded bytes, its own accounting) plus
// the stated fixed overhead. With a whole MiB of zeros ahead of every WAL
// however little it logged, each database allocated 7.1 MiB for 1.3 MiB of
// data: 4.5 MiB over.
func TestYoungDatabasesStayWithinTwiceTheirData(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 3,000 commands into two databases, then their disk use (seconds)")
	}
	const commands = 3000
	s, _ := startDev(t, withDatabases(t, 2))
	var wg sync.WaitGroup
	errs := make(chan error, len(s.dbs))
	for _, d := range s.dbs {
		wg.Go(func() {
			for i := range commands {
				in, _ := json.Marshal(map[string]any{"order_id": fmt.Sprint(i), "amount_cents": 100 + i})
				if _, err := d.db.Execute(context.Background(), "place_order", in, ""); err != nil {
					errs <- fmt.Errorf("%s: %w", d.alias, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done := true
		for _, d := range s.dbs {
			done = done && d.db.Delivered().Completed >= commands
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the events were not all delivered within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := s.stats()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(st.Databases) != len(s.cfg.Databases) || len(st.Databases) != 2 {
		t.Fatalf("stats of %d databases, configured %d", len(st.Databases), len(s.cfg.Databases))
	}
	for i, dc := range s.cfg.Databases {
		ds := st.Databases[i]
		if ds.Alias != dc.Alias || ds.Outbox.ArchiveEncodedBytes == nil {
			t.Fatalf("stats of %s: %+v", dc.Alias, ds)
		}
		data := ds.History.RetainedBytes + *ds.Outbox.ArchiveEncodedBytes
		alloc := allocatedUnder(t, dc.Path) + allocatedUnder(t, dc.Outbox.Directory)
		t.Logf("%s: %.2f MiB allocated for %.2f MiB of data (%.2f MiB over twice the data)",
			dc.Alias, float64(alloc)/(1<<20), float64(data)/(1<<20), float64(alloc-2*data)/(1<<20))
		if data <= 0 {
			t.Fatalf("%s holds no data by its accounting", dc.Alias)
		}
		if alloc > 2*data+fixedDiskOverhead {
			t.Errorf("%s allocates %d bytes for %d bytes of data: more than twice the data plus %d", dc.Alias, alloc, data, fixedDiskOverhead)
		}
	}
}
