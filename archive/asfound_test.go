package archive_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/treestate"
)

// diffTree says what changed in dir since before (treestate.Diff).
func diffTree(t *testing.T, dir string, before treestate.State) []string {
	t.Helper()
	return treestate.Diff(before, treestate.MustTake(t, dir))
}

// TestOpenLogsOpenedForWriting: an archive accepted at open says so in the
// log, once, after every check passed (the damage matrix tells a refusal
// at open from damage found later by it).
func TestOpenLogsOpenedForWriting(t *testing.T) {
	dir, opts := filledArchive(t, 10)
	core, logs := observer.New(zap.InfoLevel)
	opts.Logger = zap.New(core)
	s, err := archive.Open(context.Background(), dir, opts)
	must(t, err)
	must(t, s.Close())
	if got := logs.FilterMessage("archive opened for writing").Len(); got != 1 {
		t.Fatalf("%q logged %d times, want once", "archive opened for writing", got)
	}
}

// TestRefusedArchiveIsLeftAsFound: every refusal that Open decides after
// the storage engine has read the store (a cut WAL found by the floor file,
// the primary's delivery mark or its history, another binding) leaves every
// file of the archive as it was: Open decides on a read-only view and opens
// read-write only an archive it accepts (decide.go). Before, Pebble's
// read-write open had replayed and deleted the cut WAL, flushed what it held
// into a new table and written a new MANIFEST, markers and OPTIONS by the
// time the archive was refused.
func TestRefusedArchiveIsLeftAsFound(t *testing.T) {
	const n = 2000
	cut := func(size func(int64) int64) func(*testing.T, string, *archive.Options) {
		return func(t *testing.T, dir string, _ *archive.Options) {
			logs := storeFiles(t, dir, "*.log")
			newest := logs[len(logs)-1]
			fi, err := os.Stat(newest)
			must(t, err)
			must(t, os.Truncate(newest, size(fi.Size())))
		}
	}
	for _, c := range []struct {
		name   string
		damage func(*testing.T, string, *archive.Options)
		want   error
	}{
		{"wal cut to zero", cut(func(int64) int64 { return 0 }), archive.ErrLostRecords},
		{"wal cut to half", cut(func(size int64) int64 { return size / 2 }), archive.ErrLostRecords},
		{"below the primary's delivery mark", func(_ *testing.T, _ string, o *archive.Options) { o.Floor = n + 1 }, archive.ErrLostRecords},
		{"beyond the primary's history", func(_ *testing.T, _ string, o *archive.Options) {
			o.CheckHistory, o.Incarnation, o.LastCommit = true, 1, n-1
		}, archive.ErrHistoryBehind},
		{"bound to another database", func(_ *testing.T, _ string, o *archive.Options) {
			o.Database = event.DatabaseID{0x01, 0x93, 0x2a, 0x71, 0x01, 0x81, 0x70, 0x01, 0x81, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x03}
		}, archive.ErrBindingChanged},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir, opts := filledArchive(t, n)
			c.damage(t, dir, &opts)
			before := treestate.MustTake(t, dir)
			core, logs := observer.New(zap.InfoLevel)
			opts.Logger = zap.New(core)
			_, err := archive.Open(context.Background(), dir, opts)
			if !errors.Is(err, c.want) {
				t.Fatalf("Open = %v, want %v", err, c.want)
			}
			if logs.FilterMessage("archive opened for writing").Len() != 0 {
				t.Errorf("a refused archive logged %q", "archive opened for writing")
			}
			if d := diffTree(t, dir, before); d != nil {
				t.Fatalf("the refused archive was changed: %q", d)
			}
			// A second refusal (the next probe) changes nothing either.
			if _, err := archive.Open(context.Background(), dir, opts); !errors.Is(err, c.want) {
				t.Fatalf("Open again = %v, want %v", err, c.want)
			}
			if d := diffTree(t, dir, before); d != nil {
				t.Fatalf("the refused archive was changed by the second open: %q", d)
			}
		})
	}
}
