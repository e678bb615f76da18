package archive_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/internal/store/stall"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// TestWriteStallsAreRecorded: an archive whose flushes cannot keep up with
// its transactions stalls them, and the tracker it was opened with
// (Options.WriteStalls, which the server exports as
// riffdb.pebble.write_stalls) counts it. Without the store's listener wired
// to the tracker it counts nothing.
func TestWriteStallsAreRecorded(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/outbox", 0o700); err != nil {
		t.Fatal(err)
	}
	tr := stall.New(nil, "archive", nil)
	s, err := archive.Open(ctx, "/outbox", archive.Options{Database: db, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1,
		FS: testutil.SlowTables{FS: fs, Delay: 100 * time.Millisecond}, MemTableSize: 256 << 10, WriteStalls: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	payload := strings.Repeat("x", 1000)
	for i := range 1000 {
		k, r := stored(t, uint64(i+1), payload)
		if _, err := s.Accept(ctx, k, r); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := tr.Stats(); n == 0 {
		t.Fatal("1 MB accepted into 256 KiB memtables whose flushes wait 100 ms each: no write stall recorded")
	}
}
