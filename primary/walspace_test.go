package primary_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

// TestWALSpaceFollowsTheLog checks the primary's WAL disk use on a real
// disk: Options.MemTableSize reaches Pebble (a 256 KiB memtable rotates
// WALs many times in 2,000 commits), obsolete WALs are deleted rather than
// recycled, and the WAL left allocates about its log plus at most one
// walfill.Step of zeros,
// not a 1.1-memtable reservation.
func TestWALSpaceFollowsTheLog(t *testing.T) {
	const memtable = 256 << 10
	dir := filepath.Join(t.TempDir(), "db")
	db, _ := setup(t, func(o *primary.Options) { o.Path, o.FS, o.MemTableSize = dir, nil, memtable })
	for i := range 2000 {
		exec(t, db, "two", fmt.Sprintf(`{"x":%d}`, i), "")
	}
	if m := db.Metrics(); m.Flush.Count < 3 {
		t.Fatalf("%d flushes: the memtable size did not reach Pebble", m.Flush.Count)
	}
	var logs []string
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "obsolete WALs to be deleted", func() bool {
		var err error
		if logs, err = filepath.Glob(filepath.Join(dir, "*.log")); err != nil {
			t.Fatal(err)
		}
		m := db.Metrics()
		return m.Flush.NumInProgress == 0 && m.MemTable.Count == 1 && len(logs) == 1
	})
	info, err := os.Stat(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	allocated := info.Sys().(*syscall.Stat_t).Blocks * 512
	if info.Size() > memtable*11/10+walfill.Step || allocated > info.Size()+64<<10 {
		t.Fatalf("the live WAL is %d bytes and allocates %d", info.Size(), allocated)
	}
}
