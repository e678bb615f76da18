package e2e_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// scrubFoundCorruption is the archive's log line when a scrub (or a
// checkpoint) finds corrupt content while the store is open.
const scrubFoundCorruption = "archive content is corrupt; delivery stops, and the next start validates the whole archive"

// commitAndDrain commits n one-event commands (numbered from first) and
// waits until they are delivered.
func commitAndDrain(t *testing.T, p *proc, token string, first, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				code, _, body, err := p.command(context.Background(), token, "place_order", orderInput(i), "")
				if err == nil && code != http.StatusOK {
					err = &httpError{code: code, body: string(body)}
				}
				errs <- err
			}
		})
	}
	for i := first; i < first+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	waitFor(t, 2*time.Minute, "the outbox to drain", func() bool {
		d := p.stats(token).Databases[0]
		return d.PendingOutboxDeliveries != nil && *d.PendingOutboxDeliveries == 0 && d.Outbox.Health == "healthy"
	})
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return http.StatusText(e.code) + ": " + e.body }

// damageRecord flips a byte in the middle of the value of the record at
// position n in key order (negative: from the end) of the stopped archive,
// through Pebble: every table block's checksum holds; only the record's
// own checksum catches it.
func damageRecord(t *testing.T, outbox string, n int) {
	t.Helper()
	rawArchive(t, outbox, func(db *pebble.DB) {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'r'}, UpperBound: []byte{'s'}})
		must(t, err)
		var keys [][]byte
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, append([]byte(nil), it.Key()...))
		}
		must(t, it.Close())
		if n < 0 {
			n += len(keys)
		}
		v, closer, err := db.Get(keys[n])
		must(t, err)
		v = append([]byte(nil), v...)
		must(t, closer.Close())
		v[len(v)/2] ^= 0x20
		must(t, db.Set(keys[n], v, pebble.Sync))
	})
}

// waitStopped waits for the outbox to stop with corrupt_content while the
// server still serves commands.
func waitStopped(t *testing.T, p *proc, token string) {
	t.Helper()
	waitFor(t, time.Minute, "delivery to stop with corrupt_content", func() bool {
		o := p.stats(token).Databases[0].Outbox
		return o.Health == "stopped" && o.Reason == "corrupt_content"
	})
	if code, _, body, err := p.command(context.Background(), token, "place_order", orderInput(1_000_000), ""); err != nil || code != http.StatusOK {
		t.Fatalf("commands are not served while delivery is stopped: %d %v %s", code, err, body)
	}
}

// TestCorruptRecordBeyondTheCheckpointStopsDeliveryAtStartup: records
// accepted after the last checkpoint (a clean stop, then a SIGKILL) are
// validated at the next start; one of them damaged stops delivery before
// the archive is ever opened for delivery (the scrub, which would log its
// own finding, never runs).
func TestCorruptRecordBeyondTheCheckpointStopsDeliveryAtStartup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	commitAndDrain(t, p, token, 0, 300)
	p.stop() // the checkpoint covers these 300
	p = e.start()
	commitAndDrain(t, p, token, 300, 50)
	p.kill() // these 50 lie beyond the checkpoint
	damageRecord(t, e.outbox, -1)

	p = e.start()
	waitStopped(t, p, token)
	if strings.Contains(p.stderr.String(), scrubFoundCorruption) {
		t.Fatal("the scrub found the damage: startup validation should have")
	}
}

// TestCorruptRecordInsideTheCheckpointedPrefix: a record damaged inside the
// checkpointed prefix is trusted by the start (records are immutable), found
// by inspect, and found by the background scrub, which stops delivery with
// corrupt_content; the next start validates the whole archive and stops
// delivery at once.
func TestCorruptRecordInsideTheCheckpointedPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	commitAndDrain(t, p, token, 0, 600)
	dbID := p.stats(token).Databases[0].DatabaseID
	p.stop()
	damageRecord(t, e.outbox, 250)

	if r, res := e.inspect(dbID, 256); r.OK || res.Integrity != "corrupt" {
		t.Fatalf("inspect of the damaged archive: ok %v, %+v", r.OK, res)
	}

	p = e.start()
	waitStopped(t, p, token)
	waitFor(t, 10*time.Second, "the scrub's log line", func() bool {
		return strings.Contains(p.stderr.String(), scrubFoundCorruption)
	})
	p.stop()

	p = e.start()
	waitStopped(t, p, token)
	if strings.Contains(p.stderr.String(), scrubFoundCorruption) {
		t.Fatal("after the scrub's finding, the next start trusted the prefix again")
	}
}

// flipTableByte flips the byte in the middle of the largest table of the
// stopped archive, as the damage matrix does: bit rot that only a read of
// that block from disk can find.
func flipTableByte(t *testing.T, outbox string) {
	t.Helper()
	tables, err := filepath.Glob(filepath.Join(outbox, "archive.pebble", "*.sst"))
	must(t, err)
	var largest string
	var size int64
	for _, f := range tables {
		fi, err := os.Stat(f)
		must(t, err)
		if fi.Size() > size {
			largest, size = f, fi.Size()
		}
	}
	if largest == "" {
		t.Fatal("the archive has no table")
	}
	b, err := os.ReadFile(largest)
	must(t, err)
	b[len(b)/2] ^= 0xff
	must(t, os.WriteFile(largest, b, 0o600))
}

// TestScrubFindsBitRotInTheCheckpointedPrefix: a byte flipped in a table
// of the checkpointed prefix stops delivery with corrupt_content once the
// background scrub (at its default rate) reads the block, if the start did
// not already read it. This is the damage matrix's "table flip-byte" row:
// refused, with the scrub's first pass as the time it may take.
func TestScrubFindsBitRotInTheCheckpointedPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	commitAndDrain(t, p, token, 0, 600)
	p.stop()
	// Let the next start flush nothing: the records are all in tables.
	p = e.start()
	p.stop()
	flipTableByte(t, e.outbox)
	p = e.start()
	waitStopped(t, p, token)
}

// TestScrubMetrics: the scrub reports its passes, the records it validated
// and its progress, under the names docs/metrics.md gives them.
func TestScrubMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{outbox: true})
	token := e.token([]string{"execute_commands", "read_statistics"}, "")
	p := e.start()
	commitAndDrain(t, p, token, 0, 300)
	// Passes follow each other, each over a snapshot of the archive taken
	// when it starts (the first one while delivery was still running).
	var text string
	waitFor(t, 30*time.Second, "complete scrub passes over every record", func() bool {
		text = scrape(t, p, false)
		return metricValue(text, `riffdb_archive_scrub_passes_total{riffdb_database="default"`) >= 2 &&
			metricValue(text, `riffdb_archive_scrub_records_total{riffdb_database="default"`) >= 300
	})
	if r := metricValue(text, `riffdb_archive_scrub_progress_ratio{riffdb_database="default"`); r < 0 || r > 1 {
		t.Fatalf("riffdb_archive_scrub_progress_ratio = %v", r)
	}
}

// metricValue returns the value of the first sample whose line starts with
// prefix (a name and the start of its labels), or -1.
func metricValue(text, prefix string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}
