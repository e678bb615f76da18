package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"github.com/riffdb/riffdb/outbox"
	"github.com/riffdb/riffdb/primary"
)

// scrubSetup is a primary with n delivered events and a closed archive
// (its clean close checkpointed every record) on one in-memory filesystem.
type scrubSetup struct {
	fs vfs.FS
	db *primary.DB
}

func newScrubSetup(t *testing.T, n int) *scrubSetup {
	t.Helper()
	fs := vfs.NewMem()
	prepareOutboxDir(t, fs)
	db, err := primary.Open(context.Background(), primary.Options{Path: "/db", Contract: relContract(t), FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		in, _ := json.Marshal(map[string]string{"k": fmt.Sprint(i)})
		if _, err := db.Execute(context.Background(), "put", in, ""); err != nil {
			t.Fatal(err)
		}
	}
	s := &scrubSetup{fs: fs, db: db}
	d := s.dest(t, 0)
	w := s.worker(t, d)
	for range 100 {
		if _, err := w.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, _ := db.UndeliveredCount(); n == 0 {
			break
		}
	}
	if n, _ := db.UndeliveredCount(); n != 0 {
		t.Fatalf("%d events not delivered", n)
	}
	if err := errors.Join(d.Close(), db.Close()); err != nil {
		t.Fatal(err)
	}
	// A restart: the primary opened again, with the history it holds.
	if s.db, err = primary.Open(context.Background(), primary.Options{Path: "/db", Contract: relContract(t), FS: fs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.db.Close() })
	return s
}

func (s *scrubSetup) dest(t *testing.T, rate int) *Destination {
	d := newDestination("/outbox", archive.Options{Database: s.db.Identity(), QuotaEncodedBytes: 1 << 30,
		FS: s.fs, MinFreeBytes: -1, Logger: zaptest.NewLogger(t)})
	d.setScrubRate(rate)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func (s *scrubSetup) worker(t *testing.T, d *Destination) *outbox.Worker {
	w, err := outbox.New(outbox.Options{Alias: "default", Source: d.anchoredTo(s.db), Destination: d, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// corruptRecord flips a byte in the middle of the value of the n-th record
// (in key order) of the closed archive, through Pebble: the table blocks'
// checksums hold, only the record's own checksum catches it.
func (s *scrubSetup) corruptRecord(t *testing.T, n int) {
	t.Helper()
	db, err := pebble.Open(s.fs.PathJoin("/outbox", archive.StoreDirName), &pebble.Options{FS: s.fs, FormatMajorVersion: archive.FormatMajorVersion, Logger: testutil.QuietPebbleLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'r'}, UpperBound: []byte{'s'}})
	if err != nil {
		t.Fatal(err)
	}
	var key, value []byte
	for ok, i := it.First(), 0; ok; ok, i = it.Next(), i+1 {
		if i == n {
			key, value = append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)
			break
		}
	}
	if err := it.Close(); err != nil || key == nil {
		t.Fatalf("no record %d (%v)", n, err)
	}
	value[len(value)/2] ^= 0x20
	if err := db.Set(key, value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen within 30 s", what)
	}
}

// TestScrubStopsDeliveryOnCorruptPrefix: the archive's startup trusts its
// checkpointed prefix, so a record damaged inside it opens; the background
// scrub finds it and stops delivery exactly as startup validation would
// (stopped, corrupt_content), with nothing to deliver; and the next start
// validates the whole archive and refuses it.
func TestScrubStopsDeliveryOnCorruptPrefix(t *testing.T) {
	s := newScrubSetup(t, 400)
	s.corruptRecord(t, 123)

	d := s.dest(t, outbox.MaxRun*16) // 256 pages a second
	w := s.worker(t, d)
	if _, err := w.RunOnce(context.Background()); err != nil { // the probe opens the archive
		t.Fatal(err)
	}
	if h := w.Health(); h.State != outbox.StateHealthy {
		t.Fatalf("health after the start %+v: the checkpointed prefix should be trusted at startup", h)
	}
	waitClosed(t, d.Failed(), "the scrub's failure")
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := w.Health(); h.State != outbox.StateStopped || h.Reason != deliverytype.ReasonCorruptContent {
		t.Fatalf("health after the scrub %+v, want stopped/corrupt_content", h)
	}
	if err := d.Probe(context.Background()); deliverytype.ReasonOf(err) != deliverytype.ReasonCorruptContent {
		t.Fatalf("Probe after the scrub: %v", err)
	}
	if err := d.Close(); err != nil && !errors.Is(err, archive.ErrCorrupt) {
		t.Fatal(err)
	}

	// The next start: the checkpoint was dropped, the whole archive is
	// validated, and it is refused.
	d2 := s.dest(t, 0)
	if err := d2.Probe(context.Background()); deliverytype.ReasonOf(err) != deliverytype.ReasonCorruptContent {
		t.Fatalf("Probe at the next start: %v, want corrupt content", err)
	}
}

// TestScrubPassesOverAHealthyArchive: the scrub completes passes over a
// healthy archive, over and over, and changes nothing.
func TestScrubPassesOverAHealthyArchive(t *testing.T) {
	s := newScrubSetup(t, 300)
	d := s.dest(t, 256)
	passes := make(chan struct{}, 16)
	d.onScrubStep = func(p archive.ScrubProgress) {
		if !p.Complete {
			return
		}
		select {
		case passes <- struct{}{}:
		default:
		}
	}
	w := s.worker(t, d)
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		waitClosed(t, chanOf(passes), fmt.Sprintf("scrub pass %d", i+1))
	}
	if h := w.Health(); h.State != outbox.StateHealthy {
		t.Fatalf("health %+v", h)
	}
	select {
	case <-d.Failed():
		t.Fatalf("the scrub failed a healthy archive: %v", d.failedErr())
	default:
	}
}

// chanOf turns one receive from c into a channel that closes.
func chanOf(c <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		<-c
		close(out)
	}()
	return out
}

// compactArchive moves every record of the closed archive into one table
// of the bottom level, as an archive's records end up.
func (s *scrubSetup) compactArchive(t *testing.T) {
	t.Helper()
	db, err := pebble.Open(s.fs.PathJoin("/outbox", archive.StoreDirName), &pebble.Options{FS: s.fs, FormatMajorVersion: archive.FormatMajorVersion, Logger: testutil.QuietPebbleLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// largestTable returns the bytes of the archive's largest table file (the
// records' table: the metadata keys have tables of their own).
func (s *scrubSetup) largestTable(t *testing.T) []byte {
	t.Helper()
	mem, ok := s.fs.(*vfs.MemFS)
	if !ok {
		t.Fatal("the setup's filesystem is not a MemFS")
	}
	dir := s.fs.PathJoin("/outbox", archive.StoreDirName)
	names, err := s.fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var largest []byte
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		buf, err := mem.UnsafeGetFileDataBuffer(s.fs.PathJoin(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if len(buf) > len(largest) {
			largest = buf
		}
	}
	if largest == nil {
		t.Fatal("no table file")
	}
	return largest
}

// TestScrubFindsDiskDamageUnderACachedTable: with a block cache that holds
// the whole archive, a pass reads every table into the cache; a byte of the
// records' table is then flipped on the disk. The pass that begins next
// reads the disk, not the cache, and stops delivery with corrupt_content:
// at most the pass in flight when the byte flipped may complete.
func TestScrubFindsDiskDamageUnderACachedTable(t *testing.T) {
	s := newScrubSetup(t, 400)
	s.compactArchive(t)
	table := s.largestTable(t)

	cache := pebble.NewCache(64 << 20) // the whole archive
	t.Cleanup(cache.Unref)
	d := newDestination("/outbox", archive.Options{Database: s.db.Identity(), QuotaEncodedBytes: 1 << 30,
		FS: s.fs, MinFreeBytes: -1, Logger: zaptest.NewLogger(t), Cache: cache})
	d.setScrubRate(256)
	t.Cleanup(func() { _ = d.Close() })
	var passes atomic.Int32
	missed := make(chan struct{}) // closed when a pass completed over the damage
	d.onScrubStep = func(p archive.ScrubProgress) {
		if !p.Complete {
			return
		}
		// On the scrub's goroutine, between its reads: the first pass
		// loaded every block of the table into the cache.
		switch passes.Add(1) {
		case 1:
			table[len(table)/3] ^= 0x10
		case 2:
			close(missed)
		}
	}
	w := s.worker(t, d)
	if _, err := w.RunOnce(context.Background()); err != nil { // the probe opens the archive
		t.Fatal(err)
	}
	select {
	case <-d.Failed():
	case <-missed:
		t.Fatal("a scrub pass that began after the table was damaged on the disk completed without finding it")
	case <-time.After(30 * time.Second):
		t.Fatal("the scrub neither failed nor completed a pass within 30 s")
	}
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := w.Health(); h.State != outbox.StateStopped || h.Reason != deliverytype.ReasonCorruptContent {
		t.Fatalf("health after the scrub %+v, want stopped/corrupt_content", h)
	}
}
