package archive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/internal/process/clock"
)

// validationSetup is a store of 2000 records in one table of the bottom
// level, closed (its clean close checkpointed every record), on a MemFS,
// with a clock that moves only when the test moves *now.
func validationSetup(t *testing.T) (opts Options, fs *vfs.MemFS, now *time.Time) {
	t.Helper()
	fs = newMemFS(t, false)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now = &at
	opts = testOptions(t, fs)
	opts.Clock = clock.Func(func() time.Time { return *now })
	s, err := Open(context.Background(), testDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	fillRange(t, s, 1, 2000)
	if err := s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return opts, fs, now
}

// TestStartPastTheIntervalValidatesEverything: a byte flipped in an old
// table, inside the checkpointed prefix, is trusted by a start within the
// full validation interval (only the records beyond the checkpoint are
// read), and refused as corrupt by the first start past it, which
// validates every record.
func TestStartPastTheIntervalValidatesEverything(t *testing.T) {
	t.Parallel()
	opts, fs, now := validationSetup(t)
	created := *now
	flipSSTByte(t, fs)
	opts.FullValidationInterval = time.Hour

	*now = created.Add(30 * time.Minute)
	s, err := Open(context.Background(), testDir, opts)
	if err != nil {
		t.Fatalf("a start within the interval trusts the prefix, yet: %v", err)
	}
	if got, ok := s.LastFullValidation(); !ok || !got.Equal(created) {
		t.Fatalf("last full validation %v, %v; want the creation, %v", got, ok, created)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	*now = created.Add(time.Hour)
	if _, err := Open(context.Background(), testDir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a start past the interval: %v, want ErrCorrupt", err)
	}
}

// TestScrubPassRecordsTheLastFullValidation: a complete scrub pass records
// the time its snapshot was taken as the last full validation, durably
// (the next start reads it) and for the Monitor; a start within the
// interval after it trusts the prefix.
func TestScrubPassRecordsTheLastFullValidation(t *testing.T) {
	t.Parallel()
	opts, _, now := validationSetup(t)
	opts.FullValidationInterval = time.Hour
	opts.Monitor = new(Monitor)
	*now = now.Add(2 * time.Hour) // past the interval: this start validates everything
	s := mustOpen(t, opts)
	started := *now
	if got, ok := opts.Monitor.LastFullValidation(); !ok || !got.Equal(started) {
		t.Fatalf("after the full validation at the start: %v, %v; want %v", got, ok, started)
	}
	began := now.Add(time.Minute)
	*now = began
	sc, err := s.NewScrub()
	if err != nil {
		t.Fatal(err)
	}
	*now = began.Add(10 * time.Minute) // the pass's reads take time
	for {
		p, err := sc.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if p.Complete {
			break
		}
	}
	_ = sc.Close()
	if got, ok := s.LastFullValidation(); !ok || !got.Equal(began) {
		t.Fatalf("after a scrub pass: %v, %v; want the pass's snapshot time %v", got, ok, began)
	}
	if got, _ := opts.Monitor.LastFullValidation(); !got.Equal(began) {
		t.Fatalf("the Monitor serves %v; want %v", got, began)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	*now = began.Add(59 * time.Minute)
	s = mustOpen(t, opts)
	if got, ok := s.LastFullValidation(); !ok || !got.Equal(began) {
		t.Fatalf("after a restart: %v, %v; want %v", got, ok, began)
	}
}

// TestFormatTwoIsWrittenAndAnUnknownFormatIsIncompatible: a new archive is
// of format 2 (the first with the last full validation's key), and an
// archive of a format above the one a riffdb reads is refused as
// incompatible_format even when it holds metadata keys this riffdb does
// not know. That is what a riffdb of format 1 meets in an archive of
// format 2: before the bump, it met the new key under the marker it knew,
// and refused the archive as corrupt.
func TestFormatTwoIsWrittenAndAnUnknownFormatIsIncompatible(t *testing.T) {
	t.Parallel()
	if formatVersion != 2 {
		t.Fatalf("formatVersion = %d, want 2", formatVersion)
	}
	opts, fs, _ := validationSetup(t)
	editStore(t, fs, func(db *pebble.DB) {
		v, closer, err := db.Get(keyFormat)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMarker(v)
		_ = closer.Close()
		if err != nil || got != 2 {
			t.Fatalf("a new archive's marker: %d, %v; want format 2", got, err)
		}
		if _, closer, err := db.Get(keyValidated); err != nil {
			t.Fatalf("a new archive holds no last full validation: %v", err)
		} else {
			_ = closer.Close()
		}
		setKey(t, db, keyFormat, encodeMarker(formatVersion+1))
		setKey(t, db, []byte("mfuture"), []byte("a key of a newer format"))
	})
	_, err := Open(context.Background(), testDir, opts)
	if !errors.Is(err, ErrIncompatibleFormat) || deliverytype.ReasonOf(err) != deliverytype.ReasonIncompatibleFormat {
		t.Fatalf("Open of a newer format with an unknown key: %v; want ErrIncompatibleFormat", err)
	}
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 256})
	if !errors.Is(err, ErrIncompatibleFormat) {
		t.Fatalf("Inspect of a newer format: %+v, %v; want ErrIncompatibleFormat", rep, err)
	}
}

// TestFormatOneOpensAndIsUpgradedWithTheFirstValidationTime: an archive of
// format 1, as a riffdb before the bump left it (no last full validation),
// still opens; it stays at format 1 until the first time of a full
// validation is written, and that write raises the marker to 2 in the same
// batch. Inspect reads both formats and writes nothing. A format-1 archive
// that holds the key of format 2 is corrupt.
func TestFormatOneOpensAndIsUpgradedWithTheFirstValidationTime(t *testing.T) {
	t.Parallel()
	opts, fs, now := validationSetup(t)
	toFormatOne := func() {
		editStore(t, fs, func(db *pebble.DB) {
			setKey(t, db, keyFormat, encodeMarker(1))
			if err := db.Delete(keyValidated, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		})
	}
	marker := func() uint16 {
		var v uint16
		editStore(t, fs, func(db *pebble.DB) {
			b, closer, err := db.Get(keyFormat)
			if err != nil {
				t.Fatal(err)
			}
			v, err = decodeMarker(b)
			_ = closer.Close()
			if err != nil {
				t.Fatal(err)
			}
		})
		return v
	}
	toFormatOne()
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 256})
	if err != nil || rep.Integrity != IntegrityVerified || rep.Format != "riffarch/1 pebble/24" {
		t.Fatalf("Inspect of format 1: %+v, %v", rep, err)
	}

	// Without an interval, a start trusts the checkpoint and writes no key
	// of format 2: the archive stays readable by a riffdb of format 1.
	s := mustOpen(t, opts)
	if _, ok := s.LastFullValidation(); ok {
		t.Fatal("a format-1 archive reports a last full validation")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := marker(); v != 1 {
		t.Fatalf("marker after a start that wrote no validation time: %d, want 1", v)
	}

	// With one, the unknown time is due: the whole archive is validated,
	// and its time and the marker of format 2 are written together.
	opts.FullValidationInterval = 24 * time.Hour
	s = mustOpen(t, opts)
	if got, ok := s.LastFullValidation(); !ok || !got.Equal(*now) {
		t.Fatalf("last full validation %v, %v; want %v", got, ok, *now)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := marker(); v != 2 {
		t.Fatalf("marker after the first validation time: %d, want 2", v)
	}

	// A complete scrub pass upgrades a format-1 archive alike.
	toFormatOne()
	opts.FullValidationInterval = 0
	s = mustOpen(t, opts)
	if _, err := scrubAll(t, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := marker(); v != 2 {
		t.Fatalf("marker after a scrub pass: %d, want 2", v)
	}

	// Format 1 with the key of format 2: a state no riffdb writes.
	editStore(t, fs, func(db *pebble.DB) { setKey(t, db, keyFormat, encodeMarker(1)) })
	if _, err := Open(context.Background(), testDir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of format 1 holding the validation key: %v, want ErrCorrupt", err)
	}
}

// TestScrubbedNeverAbandonsTheStoreOnCancel: a scrub pass completing as the
// server shuts down (its context cancelled) writes nothing and leaves the
// store usable. Before, the write ran under the cancelled context, which
// abandoned the engine as if the write's outcome were unknown: a SIGTERM
// during a scrub step ended the server with a fatal archive error.
func TestScrubbedNeverAbandonsTheStoreOnCancel(t *testing.T) {
	t.Parallel()
	opts, _, now := validationSetup(t)
	opts.FullValidationInterval = time.Hour
	s := mustOpen(t, opts)
	defer s.Close()
	before, _ := s.LastFullValidation()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.scrubbed(ctx, now.Add(2*time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("scrubbed with a cancelled context = %v, want context.Canceled", err)
	}
	if err := s.usable(); err != nil {
		t.Fatalf("the store is unusable after a cancelled scrub write: %v", err)
	}
	if got, _ := s.LastFullValidation(); !got.Equal(before) {
		t.Fatalf("last full validation %v, want it unchanged (%v)", got, before)
	}
	if err := s.scrubbed(context.Background(), before.Add(validatedGrain/2)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.LastFullValidation(); !got.Equal(before) {
		t.Fatalf("a pass %v after the last full validation was written; want it skipped", validatedGrain/2)
	}
	if err := s.scrubbed(context.Background(), before.Add(validatedGrain)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.LastFullValidation(); !got.Equal(before.Add(validatedGrain)) {
		t.Fatalf("last full validation %v, want %v", got, before.Add(validatedGrain))
	}
}
