package primary_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/primary"
)

// TestWriteStallsAreRecorded: a primary whose flushes cannot keep up with
// its commits stalls them, and the store's tracker (DB.WriteStalls, which
// the server exports as riffdb.pebble.write_stalls) counts it. Without the
// store's listener wired to the tracker it counts nothing.
func TestWriteStallsAreRecorded(t *testing.T) {
	db, bu := setup(t, func(o *primary.Options) { o.MemTableSize = 256 << 10 })
	_ = db.Close()
	db, err := primary.Open(t.Context(), func() primary.Options {
		o := bu.opts
		o.FS = testutil.SlowTables{FS: bu.fs, Delay: 100 * time.Millisecond}
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pad := strings.Repeat("x", 1000)
	for i := range 1000 {
		exec(t, db, "place_order", fmt.Sprintf(`{"order_id":"o%d","amount_cents":%d,"note":%q}`, i, i, pad), "")
	}
	if n, _ := db.WriteStalls().Stats(); n == 0 {
		t.Fatal("1 MB committed into 256 KiB memtables whose flushes wait 100 ms each: no write stall recorded")
	}
}
