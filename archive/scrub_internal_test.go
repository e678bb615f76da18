package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/riffdb/riffdb/deliverytype"
)

// scrubAll runs one complete scrub pass and returns its last progress.
func scrubAll(t *testing.T, s *Store) (ScrubProgress, error) {
	t.Helper()
	sc, err := s.NewScrub()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for {
		p, err := sc.Step(context.Background())
		if err != nil || p.Complete {
			return p, err
		}
	}
}

func TestScrubPassVerifiesEveryRecord(t *testing.T) {
	t.Parallel()
	fs := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, fs))
	fillRange(t, s, 1, 600)
	if err := s.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	fillRange(t, s, 601, 700)
	sc, err := s.NewScrub()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	fillRange(t, s, 701, 710) // after the snapshot: not in this pass
	var steps int
	var p ScrubProgress
	for !p.Complete {
		if p, err = sc.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		steps++
	}
	if steps != 3 || p.Scanned != 700 || p.Total != 700 {
		t.Fatalf("%d steps, last %+v; want 3 pages over 700 records", steps, p)
	}
	if err := s.Unusable(); err != nil {
		t.Fatalf("a clean scrub made the store unusable: %v", err)
	}
}

// TestCorruptRecordInsideTheCheckpointedPrefix: Open trusts the validated
// prefix, so a record damaged inside it (with block checksums that still
// hold, as a tampered or miswritten store would have) opens; inspect and
// the scrub both find it. The scrub makes the store unusable (ErrCorrupt,
// class stop) and drops the checkpoint, so that the next Open validates
// the whole archive and refuses it.
func TestCorruptRecordInsideTheCheckpointedPrefix(t *testing.T) {
	t.Parallel()
	fs := closedStore(t, 600)
	editStore(t, fs, func(db *pebble.DB) {
		k, r := rec(t, testDatabase, 300, 0, "payload")
		v := encodeValue(k, r)
		v[len(v)/2] ^= 0x20
		setKey(t, db, recordKey(k), v)
	})

	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages})
	if err != nil || rep.Integrity != IntegrityCorrupt {
		t.Fatalf("inspect: %+v, %v; want corrupt", rep, err)
	}

	s, err := Open(context.Background(), testDir, testOptions(t, fs))
	if err != nil {
		t.Fatalf("Open trusts the checkpointed prefix, yet: %v", err)
	}
	_, err = scrubAll(t, s)
	if !errors.Is(err, ErrCorrupt) || ClassOf(err) != deliverytype.Stop {
		t.Fatalf("scrub = %v, want ErrCorrupt", err)
	}
	k, r := rec(t, testDatabase, 601, 0, "payload")
	if _, err := s.Accept(context.Background(), k, r); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Accept after the scrub found corrupt content: %v", err)
	}
	_ = s.Close()
	if _, err := Open(context.Background(), testDir, testOptions(t, fs)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open after the scrub found corrupt content: %v, want ErrCorrupt (the checkpoint was dropped)", err)
	}
}

// TestScrubFindsTableCorruption: a flipped byte in a table block of the
// prefix (bit rot) is found by Pebble's block checksum when the scrub reads
// the block from disk.
func TestScrubFindsTableCorruption(t *testing.T) {
	t.Parallel()
	fs := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, fs))
	fillRange(t, s, 1, 2000)
	// One table in the bottom level: no compaction reads it at the next
	// Open, so only a read of its blocks can find the damage.
	if err := s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	flipSSTByte(t, fs)
	s, err := Open(context.Background(), testDir, testOptions(t, fs))
	if err != nil {
		t.Fatalf("Open trusts the checkpointed prefix, yet: %v", err)
	}
	defer s.Close()
	if _, err := scrubAll(t, s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scrub = %v, want ErrCorrupt", err)
	}
}

// TestScrubChecksTheCheckpoint: a checkpoint whose totals disagree with the
// records up to its key is corrupt content for the scrub.
func TestScrubChecksTheCheckpoint(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	fillRange(t, s, 1, 300)
	if err := s.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.ckpt.acct.Records-- // as if a record up to the key had vanished
	s.mu.Unlock()
	if _, err := scrubAll(t, s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scrub = %v, want ErrCorrupt", err)
	}
}

func TestScrubAfterCloseIsClosed(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	fillRange(t, s, 1, 10)
	sc, err := s.NewScrub()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Step(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Step after Close: %v", err)
	}
	if _, err := s.NewScrub(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewScrub after Close: %v", err)
	}
}

// TestScrubReadsTheDiskWhateverTheCache: a block damaged on disk after a
// scrub pass read it is found by the next pass, whether the block cache is
// small next to the archive (the archives' BlockCacheBytes) or holds the
// whole archive: a scrub pass reads every table from its file, bypassing
// the cache (scrub_tables.go). Before that read, a cache holding the
// archive served the next pass from memory, whose blocks Pebble does not
// check again, and the damage went unseen (issue #48, item 6: eight passes
// over a damaged table, healthy).
func TestScrubReadsTheDiskWhateverTheCache(t *testing.T) {
	t.Parallel()
	const records = 6144 // 24 MiB of incompressible records: a small archive, yet well beyond the archive cache
	for _, c := range []struct {
		name       string
		cacheBytes int64
	}{
		// As the server sizes it: the blocks and Pebble's reservation
		// for three memtables (internal/process/membudget).
		{"archive cache", BlockCacheBytes + 3*DefaultMemTableSize},
		{"cache holding the whole archive", 64 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fs := newMemFS(t, false)
			cache := pebble.NewCache(c.cacheBytes)
			defer cache.Unref()
			opts := testOptions(t, fs)
			opts.Cache = cache
			s := mustOpen(t, opts)
			rng := rand.New(rand.NewPCG(1, 2))
			payload := make([]byte, recordPayload)
			for i := range uint64(records) {
				for j := range payload {
					payload[j] = byte(rng.Uint32())
				}
				k, r := rec(t, testDatabase, i+1, 0, string(payload))
				mustAccept(t, s, k, r, deliverytype.Stored)
			}
			// Every record in one table of the bottom level, as an
			// archive's records end up.
			if err := s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
				t.Fatal(err)
			}
			if p, err := scrubAll(t, s); err != nil || p.Scanned != records {
				t.Fatalf("first pass: %+v, %v", p, err)
			}
			flipSSTByte(t, fs) // a third of the way into the table: a data block the first pass read
			if _, err := scrubAll(t, s); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("second pass over the damaged table with a %d MiB cache: %v; want ErrCorrupt", c.cacheBytes>>20, err)
			}
		})
	}
}

// recordPayload is the payload size of TestScrubReadsTheDiskWhateverTheCache.
const recordPayload = 4 << 10

// TestScansThatOnlyValidateCheckEveryRecordAlike: the scrub and the scans
// read pages without decoding their events (Reader.checkPage), and must
// refuse exactly what ReadPage refuses. Each case is a record inside the
// checkpointed prefix (Open trusts it) whose value checksum holds, so only
// the stored event's own checks can find it: a payload changed after its
// hash was taken, and the bytes of another event under this key.
func TestScansThatOnlyValidateCheckEveryRecordAlike(t *testing.T) {
	t.Parallel()
	k, r := rec(t, testDatabase, 300, 0, "payload")
	_, other := rec(t, testDatabase, 301, 0, "payload")
	tampered := bytes.Clone(r)
	tampered[bytes.Index(tampered, []byte("payload"))] ^= 0x20
	for name, bad := range map[string][]byte{"hash": tampered, "identity": other} {
		for _, decode := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/decode=%v", name, decode), func(t *testing.T) {
				t.Parallel()
				fs := closedStore(t, 600)
				editStore(t, fs, func(db *pebble.DB) { setKey(t, db, recordKey(k), encodeValue(k, bad)) })
				s, err := Open(context.Background(), testDir, testOptions(t, fs))
				if err != nil {
					t.Fatalf("Open trusts the checkpointed prefix, yet: %v", err)
				}
				defer s.Close()
				r := s.NewReader()
				defer r.Close()
				var after Cursor
				for {
					p, err := r.readPage(context.Background(), after, decode)
					if err != nil {
						if !errors.Is(err, ErrCorrupt) {
							t.Fatalf("%v, want ErrCorrupt", err)
						}
						return
					}
					if p.Next == nil {
						t.Fatal("every page read without an error")
					}
					after = p.Next
				}
			})
		}
	}
}

// TestCheckPageKeepsNoEvents: checkPage returns the keys and charges that
// ReadPage returns, and no payloads.
func TestCheckPageKeepsNoEvents(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	fillRange(t, s, 1, 300)
	r := s.NewReader()
	defer r.Close()
	for after := Cursor(nil); ; {
		full, err := r.ReadPage(context.Background(), after)
		if err != nil {
			t.Fatal(err)
		}
		checked, err := r.checkPage(context.Background(), after)
		if err != nil {
			t.Fatal(err)
		}
		if len(full.Records) != len(checked.Records) || full.EncodedBytes != checked.EncodedBytes {
			t.Fatalf("ReadPage %d records / %d bytes, checkPage %d / %d",
				len(full.Records), full.EncodedBytes, len(checked.Records), checked.EncodedBytes)
		}
		for i, c := range checked.Records {
			if c.Key != full.Records[i].Key || c.Charge != full.Records[i].Charge || full.Records[i].Event.Payload == nil {
				t.Fatalf("record %d: ReadPage %+v, checkPage %+v", i, full.Records[i], c)
			}
			if c.Event.Payload != nil || c.Event.Type != "" {
				t.Fatalf("checkPage kept the event of record %d", i)
			}
		}
		if full.Next == nil {
			return
		}
		after = full.Next
	}
}

// TestScrubPagesAreBoundedInBytes: a scrub page holds at most
// ScrubPageBytes of charges (at least one record), where a ReadPage page
// holds up to MaxPageBytes: 40 events of 20 KiB are one ReadPage page and
// four scrub pages.
func TestScrubPagesAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	payload := strings.Repeat("x", 20<<10)
	for i := uint64(1); i <= 40; i++ {
		k, r := rec(t, testDatabase, i, 0, payload)
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	r := s.NewReader()
	p, err := r.ReadPage(context.Background(), nil)
	_ = r.Close()
	if err != nil || len(p.Records) != 40 || p.Next != nil {
		t.Fatalf("ReadPage: %d records, next %v, %v; want all 40 in one page", len(p.Records), p.Next, err)
	}
	perPage := int(ScrubPageBytes / p.Records[0].Charge)
	sc, err := s.NewScrub()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var steps int
	for pr := (ScrubProgress{}); !pr.Complete; steps++ {
		if pr, err = sc.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if pr.EncodedBytes > ScrubPageBytes || (!pr.Complete && pr.Records != int64(perPage)) {
			t.Fatalf("step %d: %d records, %d bytes; want %d records of at most %d bytes",
				steps, pr.Records, pr.EncodedBytes, perPage, ScrubPageBytes)
		}
	}
	if want := (40 + perPage - 1) / perPage; steps != want {
		t.Fatalf("%d scrub steps, want %d", steps, want)
	}
}

// TestValidatingScansDoNotCopyPayloads: checkPage validates 40 events of
// 20 KiB without allocating their payloads, where ReadPage copies them all.
// Not parallel: it reads the process's allocation counter.
func TestValidatingScansDoNotCopyPayloads(t *testing.T) {
	s := mustOpen(t, testOptions(t, newMemFS(t, false)))
	defer s.Close()
	payload := strings.Repeat("x", 20<<10)
	for i := uint64(1); i <= 40; i++ {
		k, r := rec(t, testDatabase, i, 0, payload)
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	r := s.NewReader()
	defer r.Close()
	allocated := func(decode bool) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p, err := r.readPage(context.Background(), nil, decode)
		runtime.ReadMemStats(&after)
		if err != nil || len(p.Records) != 40 {
			t.Fatalf("%d records, %v", len(p.Records), err)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	const payloads = 40 * 20 << 10
	if got := allocated(true); got < payloads {
		t.Fatalf("ReadPage allocated %d bytes for %d bytes of payloads: the check below would prove nothing", got, payloads)
	}
	// The least of three reads: the counter is the process's, and a
	// background goroutine may allocate during one of them.
	got := min(allocated(false), allocated(false), allocated(false))
	t.Logf("checkPage allocated %d bytes", got)
	if got > payloads/8 {
		t.Fatalf("checkPage allocated %d bytes for %d bytes of payloads", got, payloads)
	}
}
