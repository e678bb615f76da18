package archive

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestObsoleteWALsAreDeleted: once memtables are flushed, the archive keeps
// only its live WAL: no obsolete WAL is kept for recycling.
func TestObsoleteWALsAreDeleted(t *testing.T) {
	t.Parallel()
	dir := bulkDir(t)
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1,
		MemTableSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 1500 {
		k, r := rec(t, testDatabase, uint64(i+1), 0, fmt.Sprintf("payload %0500d", i))
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	if m := s.db.Metrics(); m.Flush.Count < 3 {
		t.Fatalf("%d flushes: the memtable size did not reach Pebble", m.Flush.Count)
	}
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "obsolete WALs to be deleted", func() bool {
		logs, err := filepath.Glob(filepath.Join(dir, "archive.pebble", "*.log"))
		if err != nil {
			t.Fatal(err)
		}
		m := s.db.Metrics()
		return m.Flush.NumInProgress == 0 && m.MemTable.Count == 1 && len(logs) == 1
	})
}
