package archive

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/crashfs"
)

// observedOptions returns test options whose logger records every entry.
func observedOptions(t *testing.T, fs vfs.FS) (Options, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	o := testOptions(t, fs)
	o.Logger = zap.New(core)
	return o, logs
}

// openValidation returns what Open's validation logged: validated is the
// number of records it validated, whole whether it validated the whole
// archive (no checkpoint, or one that did not hold).
func openValidation(t *testing.T, logs *observer.ObservedLogs) (validated int64, whole bool) {
	t.Helper()
	for _, e := range logs.All() {
		switch e.Message {
		case "archive validated":
			return e.ContextMap()["records"].(int64), true
		case "archive validated beyond its checkpoint":
			return e.ContextMap()["validated_records"].(int64), false
		}
	}
	t.Fatal("Open logged no validation")
	return 0, false
}

func fillRange(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		k, r := rec(t, testDatabase, i, 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
}

// closedStore returns a MemFS holding an archive of records 1 to n, closed
// cleanly (so its checkpoint covers them all), for a test to edit.
func closedStore(t *testing.T, n uint64) *vfs.MemFS {
	t.Helper()
	fs := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, fs))
	fillRange(t, s, 1, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestCleanCloseLeavesNothingToValidate: the first Open of an archive
// without a checkpoint validates everything and writes one; after a clean
// Close the next Open validates no record (only the checkpoint's own record
// and the continuity); after a crash it validates only what was accepted
// since the last checkpoint.
func TestCleanCloseLeavesNothingToValidate(t *testing.T) {
	t.Parallel()
	mem := crashfs.New()
	prepareArchiveDir(t, mem)
	s := mustOpen(t, testOptions(t, mem))
	fillRange(t, s, 1, 600)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	opts, logs := observedOptions(t, mem)
	s = mustOpen(t, opts)
	if n, whole := openValidation(t, logs); n != 0 || whole {
		t.Fatalf("Open after a clean close validated %d records (whole archive: %v), want 0 beyond the checkpoint", n, whole)
	}
	fillRange(t, s, 601, 900)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	opts, logs = observedOptions(t, crashed)
	s = mustOpen(t, opts)
	if n, whole := openValidation(t, logs); n != 300 || whole {
		t.Fatalf("Open after a crash validated %d records (whole archive: %v), want the 300 accepted since the checkpoint", n, whole)
	}
	if u := s.Usage(); u.Records != 900 {
		t.Fatalf("Usage after the crash: %+v", u)
	}
}

// TestCheckpointAdvancesWhileDelivering: Checkpoint moves the checkpoint
// over what was accepted, so a crash afterwards leaves only the records
// accepted after it to validate; CheckpointDue says when one is due.
func TestCheckpointAdvancesWhileDelivering(t *testing.T) {
	t.Parallel()
	mem := crashfs.New()
	prepareArchiveDir(t, mem)
	s := mustOpen(t, testOptions(t, mem))
	fillRange(t, s, 1, 500)
	if s.CheckpointDue() {
		t.Fatal("a checkpoint is due after 500 records")
	}
	if err := s.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	ck := s.ckpt
	s.mu.Unlock()
	if ck.acct.Records != 500 || ck.key.Event.Seq != 500 {
		t.Fatalf("checkpoint after 500 records: %+v", ck)
	}
	fillRange(t, s, 501, 520)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()
	opts, logs := observedOptions(t, crashed)
	_ = mustOpen(t, opts)
	if n, whole := openValidation(t, logs); n != 20 || whole {
		t.Fatalf("Open validated %d records (whole: %v), want the 20 accepted after the checkpoint", n, whole)
	}

	s2 := mustOpen(t, testOptions(t, newMemFS(t, false)))
	s2.records.Store(CheckpointRecords)
	if !s2.CheckpointDue() {
		t.Fatal("no checkpoint due at CheckpointRecords records beyond it")
	}
}

// TestAcceptBelowTheCheckpointKeepsContinuity: a record that sorts before
// the checkpoint's key (a retried event older than records already
// archived) joins the validated prefix in its own batch, so that the next
// Open still finds the checkpoint and the accounting continuous. Without
// that, the checkpoint would hold one record too few and Open would have to
// validate the whole archive.
func TestAcceptBelowTheCheckpointKeepsContinuity(t *testing.T) {
	t.Parallel()
	mem := crashfs.New()
	prepareArchiveDir(t, mem)
	s := mustOpen(t, testOptions(t, mem))
	fillRange(t, s, 2, 300)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, testOptions(t, mem))
	k, r := rec(t, testDatabase, 1, 0, "payload")
	mustAccept(t, s, k, r, deliverytype.Stored)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()
	opts, logs := observedOptions(t, crashed)
	s = mustOpen(t, opts)
	if n, whole := openValidation(t, logs); n != 0 || whole {
		t.Fatalf("Open validated %d records (whole: %v), want none: the record below the checkpoint joined it", n, whole)
	}
	if s.ckpt.acct.Records != 300 {
		t.Fatalf("checkpoint %+v, want 300 records", s.ckpt)
	}
}

// TestCheckpointDuringAccepts: records stored while a Checkpoint validates
// its snapshot, before and after the snapshot's last key, are counted
// exactly once: the next Open finds the checkpoint continuous.
func TestCheckpointDuringAccepts(t *testing.T) {
	t.Parallel()
	mem := crashfs.New()
	prepareArchiveDir(t, mem)
	s := mustOpen(t, testOptions(t, mem))
	for i := uint64(2); i <= 1000; i += 2 { // even sequences: odd ones arrive later, below them
		k, r := rec(t, testDatabase, i, 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	done := make(chan error)
	go func() {
		var err error
		for range 20 {
			if err = s.Checkpoint(context.Background()); err != nil {
				break
			}
		}
		done <- err
	}()
	for i := uint64(1); i <= 1200; i++ {
		if i%2 == 0 && i <= 1000 {
			continue
		}
		k, r := rec(t, testDatabase, i, 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
		if i%50 == 1 {
			if err := s.Checkpoint(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Deterministically: records stored between the snapshot and the
	// write, one before the snapshot's last key and one after it.
	for _, seq := range []uint64{1202, 1300} {
		k, r := rec(t, testDatabase, seq, 0, "payload")
		mustAccept(t, s, k, r, deliverytype.Stored)
	}
	s.testCheckpointSnapshot = func() {
		for _, seq := range []uint64{1201, 1301} {
			k, r := rec(t, testDatabase, seq, 0, "payload")
			mustAccept(t, s, k, r, deliverytype.Stored)
		}
	}
	if err := s.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.testCheckpointSnapshot = nil
	if s.ckpt.key.Event.Seq != 1300 || s.ckpt.acct.Records != 1203 {
		t.Fatalf("checkpoint %+v, want the 1203 records up to sequence 1300", s.ckpt)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()
	opts, logs := observedOptions(t, crashed)
	s = mustOpen(t, opts)
	if _, whole := openValidation(t, logs); whole {
		t.Fatal("Open validated the whole archive: the checkpoint did not hold")
	}
	if u := s.Usage(); u.Records != 1204 {
		t.Fatalf("Usage %+v", u)
	}
}

// TestCrashDuringCheckpointing takes a crash clone at every write operation
// of a workload that checkpoints between accepts (and at Close), and opens
// each clone: nothing acknowledged is lost, the accounting matches the
// records, and the checkpoint found is continuous (Open never has to fall
// back to the whole archive), whether the crash kept the old checkpoint or
// the new one.
func TestCrashDuringCheckpointing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a crash campaign (a crash clone at every write operation, each reopened)")
	}
	t.Parallel()
	keys := make([]event.Key, 48)
	recs := make([][]byte, len(keys))
	for i := range keys {
		// Sequences out of order, some below checkpoints already taken.
		seq := uint64(i*7%len(keys)) + 1
		keys[i], recs[i] = rec(t, testDatabase, seq, 0, "payload")
	}
	workload := func(cloneAt int, clone **vfs.MemFS, ackedAt *int) int {
		mem := crashfs.New()
		prepareArchiveDir(t, mem)
		var ops, acked atomic.Int64
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && int(ops.Add(1)) == cloneAt {
				*ackedAt = int(acked.Load())
				*clone = mem.CrashClone(vfs.CrashCloneCfg{})
			}
			return nil
		})
		s, err := Open(context.Background(), testDir, testOptions(t, errorfs.Wrap(mem, inj)))
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			mustAccept(t, s, keys[i], recs[i], deliverytype.Stored)
			acked.Store(int64(i + 1))
			if i%5 == 4 {
				if err := s.Checkpoint(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if i%16 == 15 {
				if err := s.db.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return int(ops.Load())
	}
	var none *vfs.MemFS
	var n int
	total := workload(-1, &none, &n)
	checked := 0
	for k := 1; k <= total; k++ {
		var clone *vfs.MemFS
		var acked int
		workload(k, &clone, &acked)
		if clone == nil {
			continue // background work made this run shorter
		}
		checked++
		opts, logs := observedOptions(t, clone)
		s, err := Open(context.Background(), testDir, opts)
		if err != nil {
			t.Fatalf("crash at op %d (acked %d): reopen: %v", k, acked, err)
		}
		if u := s.Usage(); u.Records < int64(acked) {
			t.Fatalf("crash at op %d: %d records, %d accepts had returned", k, u.Records, acked)
		}
		if u := s.Usage(); u.Records > 0 {
			if _, whole := openValidation(t, logs); whole && logs.FilterMessageSnippet("checkpoint").Len() > 0 {
				t.Fatalf("crash at op %d: the checkpoint did not hold: %v", k, logs.FilterMessageSnippet("checkpoint").All())
			}
		}
		for i := 0; i < acked; i++ {
			mustAccept(t, s, keys[i], recs[i], deliverytype.Duplicate)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The checkpoint Close wrote holds too.
		opts, logs = observedOptions(t, clone)
		s, err = Open(context.Background(), testDir, opts)
		if err != nil {
			t.Fatalf("crash at op %d: second reopen: %v", k, err)
		}
		if n, whole := openValidation(t, logs); s.Usage().Records > 0 && (n != 0 || whole) {
			t.Fatalf("crash at op %d: after a clean close Open validated %d records (whole %v)", k, n, whole)
		}
		_ = s.Close()
	}
	if checked < total*9/10 {
		t.Fatalf("only %d of %d crash points were reached", checked, total)
	}
	t.Logf("checked %d crash points", checked)
}

// TestCorruptRecordBeyondTheCheckpointIsRefused: a record after the
// checkpoint that fails validation is found by Open (ErrCorrupt, class
// stop), as is a damaged checkpoint record.
func TestCorruptRecordBeyondTheCheckpointIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seq  uint64
	}{{"beyond", 301}, {"the checkpoint's own record", 300}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mem := crashfs.New()
			prepareArchiveDir(t, mem)
			s := mustOpen(t, testOptions(t, mem))
			fillRange(t, s, 1, 300)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, testOptions(t, mem))
			fillRange(t, s, 301, 400)
			crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // the checkpoint stays at 300
			_ = s.Close()
			editStore(t, crashed, func(db *pebble.DB) {
				k, r := rec(t, testDatabase, tc.seq, 0, "payload")
				v := encodeValue(k, r)
				v[len(v)/2] ^= 0x20
				setKey(t, db, recordKey(k), v)
			})
			_, err := Open(context.Background(), testDir, testOptions(t, crashed))
			if !errors.Is(err, ErrCorrupt) || ClassOf(err) != deliverytype.Stop {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestCheckpointThatDoesNotHoldIsNotTrusted: a damaged checkpoint value, or
// one whose totals disagree with the records, or one naming a record that
// does not exist, makes Open validate the whole archive: it opens when the
// records match the accounting and refuses when they do not.
func TestCheckpointThatDoesNotHoldIsNotTrusted(t *testing.T) {
	t.Parallel()
	k, r := rec(t, testDatabase, 150, 0, "payload")
	charge := Charge(k, r)
	for _, tc := range []struct {
		name    string
		value   []byte
		corrupt bool // also damage a record of the prefix
	}{
		{"damaged value", append(encodeCheckpoint(checkpoint{key: k, acct: accounting{150, 150 * charge}})[:10], 1, 2, 3), false},
		{"flipped checksum", func() []byte {
			v := encodeCheckpoint(checkpoint{key: k, acct: accounting{150, 150 * charge}})
			v[len(v)-1] ^= 1
			return v
		}(), false},
		{"totals too low", encodeCheckpoint(checkpoint{key: k, acct: accounting{149, 149 * charge}}), false},
		{"totals too high", encodeCheckpoint(checkpoint{key: k, acct: accounting{301, 301 * charge}}), false},
		{"missing record", func() []byte {
			k2, _ := rec(t, testDatabase, 1000, 0, "payload")
			return encodeCheckpoint(checkpoint{key: k2, acct: accounting{300, 300 * charge}})
		}(), false},
		{"covers everything", encodeCheckpoint(checkpoint{key: k, acct: accounting{300, 300 * charge}}), false},
		{"covers everything, a prefix record damaged", encodeCheckpoint(checkpoint{key: k, acct: accounting{300, 300 * charge}}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := closedStore(t, 300)
			editStore(t, fs, func(db *pebble.DB) {
				setKey(t, db, keyCheckpoint, tc.value)
				if tc.corrupt {
					k, r := rec(t, testDatabase, 10, 0, "payload")
					v := encodeValue(k, r)
					v[len(v)/2] ^= 0x20
					setKey(t, db, recordKey(k), v)
				}
			})
			opts, logs := observedOptions(t, fs)
			s, err := Open(context.Background(), testDir, opts)
			if tc.corrupt {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			if n, whole := openValidation(t, logs); !whole || n != 300 {
				t.Fatalf("Open validated %d records (whole %v), want the whole archive", n, whole)
			}
			if s.ckpt.acct.Records != 300 || s.ckpt.key.Event.Seq != 300 {
				t.Fatalf("fresh checkpoint %+v", s.ckpt)
			}
		})
	}
}
