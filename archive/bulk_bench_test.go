package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// bulkPayload makes records of about 1 KiB, like BenchmarkAccept's.
var bulkPayload = strings.Repeat("x", 900)

// bulkBatch is the number of records per unsynced loading batch: about one
// memtable (DefaultMemTableSize) of 1 KiB records, so that the engine
// flushes and merges a load into the tables that records stored one by one
// get (about one table per 32 MiB of records, see pebbleOptions).
const bulkBatch = 2_000

// bulkLoad creates an archive in dir (a precreated 0700 directory on the
// real filesystem) bound to database and fills it with n records (history
// incarnation 1, sequences 1..n, position 0) much faster than n synced
// Accepts: records are written in large unsynced batches through the
// package's own encoding (recordKey, encodeValue, Charge), then the
// accounting of all of them is written in one synced batch, which also makes
// every earlier batch durable (one WAL). The result is indistinguishable
// from an archive built by Accept: Open validates it and Inspect verifies
// it. Its Close validates every record (they were written behind the
// checkpoint's back) and checkpoints them, as a clean shutdown does.
func bulkLoad(tb testing.TB, dir string, database event.DatabaseID, n int, payload string) {
	tb.Helper()
	bulkLoadAt(tb, dir, database, 1, n, payload, false)
}

// bulkLoadAt is bulkLoad with the records' history incarnation. It waits
// for the compactions the load queued; with compact, it ends with a manual
// compaction of the whole store instead (one bottom level of tables of up
// to 32 MiB compressed: fewer than records stored one by one get when they
// compress).
func bulkLoadAt(tb testing.TB, dir string, database event.DatabaseID, incarnation uint64, n int, payload string, compact bool) {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{Database: database, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		tb.Fatal(err)
	}
	s.mu.Lock()
	acct := s.acct
	for i := 0; i < n; i += bulkBatch {
		b := s.db.NewBatch()
		for seq := i + 1; seq <= min(n, i+bulkBatch); seq++ {
			k, r := rec(tb, database, uint64(seq), 0, payload)
			k.Incarnation = incarnation
			if err := b.Set(recordKey(k), encodeValue(k, r), nil); err != nil {
				tb.Fatal(err)
			}
			acct.Records++
			acct.EncodedBytes += Charge(k, r)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			tb.Fatal(err)
		}
		_ = b.Close()
	}
	b := s.db.NewBatch()
	_ = b.Set(keyAccounting, encodeAccounting(acct), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		tb.Fatal(err)
	}
	_ = b.Close()
	s.acct = acct
	s.records.Store(acct.Records)
	s.encoded.Store(acct.EncodedBytes)
	s.mu.Unlock()
	if compact {
		if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
			tb.Fatal(err)
		}
	} else {
		settleCompactions(s.db)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// settleCompactions waits until the engine has run no compaction for
// 200 ms: the compactions a load queued have then run, as they would have
// while records were stored one by one, and the next opens do not pay for
// them.
func settleCompactions(db *pebble.DB) {
	for idle := 0; idle < 10; {
		if db.Metrics().Compact.NumInProgress == 0 {
			idle++
		} else {
			idle = 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bulkDir returns a fresh 0700 archive directory on the real disk.
func bulkDir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// TestBulkLoadIsAValidArchive checks the benchmark loader: its archive
// passes Open's startup validation with the exact accounting, Inspect
// verifies it completely, and a synced Accept after it stores the next
// record (the accounting in memory matches the durable one).
func TestBulkLoadIsAValidArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := bulkDir(t)
	const n = bulkBatch + 1234 // more than one batch, the last one partial
	bulkLoad(t, dir, testDatabase, n, "p")
	rep, err := Inspect(ctx, dir, testDatabase, InspectOptions{MaxPages: MaxInspectPages})
	if err != nil {
		t.Fatal(err)
	}
	k1, r1 := rec(t, testDatabase, 1, 0, "p")
	if rep.Integrity != IntegrityVerified || rep.RecordCount != n || rep.ScannedRecords != n ||
		rep.EncodedBytes != n*Charge(k1, r1) {
		t.Fatalf("Inspect = %+v", rep)
	}
	s, err := Open(ctx, dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if u := s.Usage(); u.Records != n || u.EncodedBytes != rep.EncodedBytes {
		t.Fatalf("Usage = %+v", u)
	}
	mustAccept(t, s, k1, r1, deliverytype.Duplicate)
	k, r := rec(t, testDatabase, n+1, 0, "p")
	mustAccept(t, s, k, r, deliverytype.Stored)
	if u := s.Usage(); u.Records != n+1 {
		t.Fatalf("Usage after Accept = %+v", u)
	}
}

// BenchmarkInspectRSS measures the peak resident set of one run of
// `riffdb outbox archive inspect --max-pages 256` in a child process (the
// real binary, built with go build) over an archive of 10,000 and of
// 1,000,000 records of about 1 KiB, loaded with bulkLoad. 256 pages examine
// at most 65,536 records, so the 10,000-record run is a complete, verified
// scan and the 1,000,000-record run an incomplete one of 65,536 records:
// the claim checked is that inspection is paged, so its memory does not
// grow with the archive. rss_MiB is the largest peak (ru_maxrss of the
// inspect process, measured by bench/cmd/peakrss, which keeps this large
// benchmark process's own peak out of it) over the loop's runs; records/s is records examined per
// second of the child's wall time, process start included. The case
// records=1000000/pages=1 inspects one page of the large archive: the part of
// the peak that opening the store costs, apart from the scan.
func BenchmarkInspectRSS(b *testing.B) {
	bins := b.TempDir()
	bin, launcher := filepath.Join(bins, "riffdb"), filepath.Join(bins, "peakrss")
	build := exec.Command("go", "build", "-o", bins, "github.com/riffdb/riffdb/cmd/riffdb",
		"github.com/riffdb/riffdb/bench/cmd/peakrss")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	// One archive per size, shared by the cases and kept for the whole
	// benchmark (a sub-benchmark's TempDir ends with it).
	dirs := map[int]string{10_000: bulkDir(b), 1_000_000: bulkDir(b)}
	loaded := map[int]bool{}
	for _, c := range []struct {
		name      string
		records   int
		pages     int
		integrity string
	}{
		{"records=10000", 10_000, MaxInspectPages, IntegrityVerified},
		{"records=1000000", 1_000_000, MaxInspectPages, IntegrityIncomplete},
		// The same archive with one page: what opening the store costs
		// apart from the scan.
		{"records=1000000/pages=1", 1_000_000, 1, IntegrityIncomplete},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := dirs[c.records]
			if !loaded[c.records] {
				bulkLoad(b, dir, testDatabase, c.records, bulkPayload)
				loaded[c.records] = true
			}
			var peak int64
			var scanned int
			var wall time.Duration
			for b.Loop() {
				cmd := exec.Command(launcher, bin, "outbox", "archive", "inspect", "--output", "json",
					"--directory", dir, "--database-id", testDatabase.String(), "--max-pages", strconv.Itoa(c.pages))
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				start := time.Now()
				err := cmd.Run()
				wall += time.Since(start)
				if err != nil {
					b.Fatalf("inspect: %v\n%s%s", err, out.String(), errOut.String())
				}
				var env struct {
					Result struct {
						RecordCount   int64  `json:"record_count"`
						PagesExamined int    `json:"pages_examined"`
						Integrity     string `json:"integrity"`
					} `json:"result"`
				}
				if err := json.Unmarshal(out.Bytes(), &env); err != nil {
					b.Fatalf("inspect output: %v\n%s", err, out.String())
				}
				if env.Result.Integrity != c.integrity || env.Result.RecordCount != int64(c.records) {
					b.Fatalf("inspect result %+v, want integrity %s over %d records", env.Result, c.integrity, c.records)
				}
				scanned += min(c.records, c.pages*MaxPageRecords)
				kib, err := peakKiB(errOut.String())
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, kib)
			}
			b.ReportMetric(float64(peak)/1024, "rss_MiB")
			b.ReportMetric(float64(scanned)/wall.Seconds(), "records/s")
		})
	}
}

// peakKiB reads the "peakrss: N KiB" line that bench/cmd/peakrss writes last.
func peakKiB(stderr string) (int64, error) {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var kib int64
	if _, err := fmt.Sscanf(lines[len(lines)-1], "peakrss: %d KiB", &kib); err != nil {
		return 0, fmt.Errorf("no peak RSS in %q: %w", stderr, err)
	}
	return kib, nil
}

// BenchmarkOpen measures Open (custody audit, storage-engine open, startup
// validation, anchors) and Close of a bulk-loaded archive of 10,000 and of
// 1,000,000 records of about 1 KiB, after a clean close: what a server's
// restart spends on its archive before the first delivery. ms/open is the
// mean over the loop.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			dir := bulkDir(b)
			bulkLoad(b, dir, testDatabase, n, bulkPayload)
			opts := Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1}
			for b.Loop() {
				s, err := Open(context.Background(), dir, opts)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/open")
		})
	}
}
