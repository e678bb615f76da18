package archive

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/event"
)

// TestMakeArchive builds a large archive for acceptance runs and
// benchmarks outside this package (bench/cmd/mkarchive runs it); it skips
// unless RIFFDB_MKARCHIVE_DIR is set:
//
//	RIFFDB_MKARCHIVE_DIR=/abs/outbox (an existing, empty 0700 directory)
//	RIFFDB_MKARCHIVE_DATABASE=<32 hex>
//	RIFFDB_MKARCHIVE_RECORDS=1000000
//	RIFFDB_MKARCHIVE_PAYLOAD_BYTES=900 (optional; records of about 1 KiB)
//	RIFFDB_MKARCHIVE_INCARNATION=1 (optional; the records' history incarnation)
//	RIFFDB_MKARCHIVE_COMPACT=1 (optional; end with a manual compaction of the whole store instead of waiting for the engine's)
//
// It loads with bulkLoad (large unsynced batches, then the accounting in
// one synced batch): an archive indistinguishable from one built by Accept,
// which Open validates and Inspect verifies, in seconds instead of one
// fsync per record. Its clean close validates every record and writes the
// validated-prefix checkpoint, as a server's clean shutdown does.
func TestMakeArchive(t *testing.T) {
	dir := os.Getenv("RIFFDB_MKARCHIVE_DIR")
	if dir == "" {
		t.Skip("set RIFFDB_MKARCHIVE_DIR to build an archive")
	}
	database, err := event.ParseDatabaseID(os.Getenv("RIFFDB_MKARCHIVE_DATABASE"))
	if err != nil {
		t.Fatalf("RIFFDB_MKARCHIVE_DATABASE: %v", err)
	}
	n, err := strconv.Atoi(os.Getenv("RIFFDB_MKARCHIVE_RECORDS"))
	if err != nil || n < 0 {
		t.Fatal("RIFFDB_MKARCHIVE_RECORDS must be a record count")
	}
	payload := bulkPayload
	if v := os.Getenv("RIFFDB_MKARCHIVE_PAYLOAD_BYTES"); v != "" {
		size, err := strconv.Atoi(v)
		if err != nil || size < 0 {
			t.Fatal("RIFFDB_MKARCHIVE_PAYLOAD_BYTES must be a byte count")
		}
		payload = strings.Repeat("x", size)
	}
	incarnation := uint64(1)
	if v := os.Getenv("RIFFDB_MKARCHIVE_INCARNATION"); v != "" {
		if incarnation, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal("RIFFDB_MKARCHIVE_INCARNATION must be a history incarnation")
		}
	}
	bulkLoadAt(t, dir, database, incarnation, n, payload, os.Getenv("RIFFDB_MKARCHIVE_COMPACT") == "1")
	k, r := rec(t, database, 1, 0, payload)
	t.Logf("archive of %d records, %d encoded bytes, database %s", n, int64(n)*Charge(k, r), database)
}
