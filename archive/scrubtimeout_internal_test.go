package archive

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/riffdb/riffdb/deliverytype"
)

// slowReads delays every read of a table file while armed.
type slowReads struct {
	armed atomic.Bool
	reads atomic.Int64
	delay time.Duration
}

func (s *slowReads) MaybeError(op errorfs.Op) error {
	if s.armed.Load() && strings.HasSuffix(op.Path, ".sst") &&
		(op.Kind == errorfs.OpFileRead || op.Kind == errorfs.OpFileReadAt) {
		s.reads.Add(1)
		time.Sleep(s.delay)
	}
	return nil
}

func (s *slowReads) String() string { return "slowReads" }

// TestSlowScrubReadDoesNotFenceTheArchive: a page read of the background
// scrub that takes longer than the transaction timeout (a busy disk, cold
// blocks) completes under the scrub's own, longer bound, and the archive
// stays usable. With the transaction timeout the soak saw one slow scrub
// read mark the archive unusable and halt delivery.
func TestSlowScrubReadDoesNotFenceTheArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out a scrub read made slower than the transaction timeout (seconds)")
	}
	t.Parallel()
	ctx := context.Background()
	mem := newMemFS(t, false)
	inj := &slowReads{delay: 150 * time.Millisecond}
	opts := testOptions(t, errorfs.Wrap(mem, inj))
	opts.TxnTimeout = 100 * time.Millisecond
	opts.ScrubReadTimeout = 30 * time.Second
	s := mustOpen(t, opts)
	for i := range 300 {
		k, r := rec(t, testDatabase, uint64(i+1), 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts) // a cold block cache: the scrub reads the tables
	defer s.Close()
	sc, err := s.NewScrub()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	inj.armed.Store(true)
	p, err := sc.Step(ctx)
	inj.armed.Store(false)
	if err != nil {
		t.Fatalf("a slow scrub read: %v", err)
	}
	if inj.reads.Load() == 0 || p.Records == 0 {
		t.Fatalf("the scrub read %d records and %d table blocks: the test did not slow it", p.Records, inj.reads.Load())
	}
	k, r := rec(t, testDatabase, 1000, 0, "after")
	mustAccept(t, s, k, r, deliverytype.Stored)
}
