package archive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
)

// filledArchive creates an archive on disk holding n records and closes it.
func filledArchive(t *testing.T, n int) (string, archive.Options) {
	t.Helper()
	ctx := context.Background()
	dir := privateDir(t)
	opts := archive.Options{Database: db, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1, Logger: zaptest.NewLogger(t)}
	s, err := archive.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		k, r := stored(t, uint64(i), fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", 64)))
		if _, err := s.Accept(ctx, k, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, opts
}

func storeListing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, archive.StoreDirName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %d %v %d", e.Name(), fi.Size(), fi.Mode(), fi.ModTime().UnixNano()))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func storeFiles(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, archive.StoreDirName, pattern))
	if err != nil || len(m) == 0 {
		t.Fatalf("no %s in the store (%v)", pattern, err)
	}
	sort.Strings(m)
	return m
}

// TestMissingManifestMarkerIsRefused is the second reproduction of the
// fail-closed issue: deleting marker.manifest.* made Open log "creation was
// interrupted" and Pebble delete every record. Open must refuse (class
// stop), Inspect must call it corrupt (not "not found"), and no file may
// change.
func TestMissingManifestMarkerIsRefused(t *testing.T) {
	dir, opts := filledArchive(t, 300)
	for _, f := range storeFiles(t, dir, "marker.manifest.*") {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	before := storeListing(t, dir)
	_, err := archive.Open(context.Background(), dir, opts)
	if !errors.Is(err, archive.ErrCorrupt) || archive.ClassOf(err) != deliverytype.Stop {
		t.Fatalf("Open = %v, want ErrCorrupt (class stop)", err)
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("the error names the path: %v", err)
	}
	rep, err := archive.Inspect(context.Background(), dir, db, archive.InspectOptions{MaxPages: 256})
	if err != nil || rep.Integrity != archive.IntegrityCorrupt {
		t.Fatalf("Inspect = %+v, %v; want integrity corrupt", rep, err)
	}
	if after := storeListing(t, dir); after != before {
		t.Fatalf("files changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestTruncatedLogIsLostRecords is the third reproduction: a truncated
// newest WAL loses its tail quietly, and the accounting rolls back with the
// records. The floor file written at the last clean close proves the loss:
// Open refuses with a *LostRecordsError and Inspect says mismatch, never
// verified.
func TestTruncatedLogIsLostRecords(t *testing.T) {
	for _, damage := range []string{"truncate", "zero", "delete"} {
		t.Run(damage, func(t *testing.T) {
			dir, opts := filledArchive(t, 2000)
			logs := storeFiles(t, dir, "*.log")
			newest := logs[len(logs)-1]
			switch damage {
			case "truncate":
				must(t, os.Truncate(newest, 5000))
			case "zero":
				fi, err := os.Stat(newest)
				must(t, err)
				must(t, os.WriteFile(newest, make([]byte, fi.Size()), 0o600))
			case "delete":
				must(t, os.Remove(newest))
			}
			_, err := archive.Open(context.Background(), dir, opts)
			var lost *archive.LostRecordsError
			if !errors.As(err, &lost) || !errors.Is(err, archive.ErrLostRecords) || archive.ClassOf(err) != deliverytype.Stop {
				t.Fatalf("Open = %v, want a LostRecordsError (class stop)", err)
			}
			if lost.Missing <= 0 || lost.Missing > 2000 {
				t.Fatalf("missing = %d", lost.Missing)
			}
			rep, err := archive.Inspect(context.Background(), dir, db, archive.InspectOptions{MaxPages: 256})
			if err != nil || rep.Integrity != archive.IntegrityMismatch || rep.MissingRecords != lost.Missing {
				t.Fatalf("Inspect = %+v, %v; want mismatch with %d missing", rep, err, lost.Missing)
			}
		})
	}
}

// TestPrimaryFloor: the primary's record of completed deliveries is a lower
// bound of the record count; an archive below it, or a missing archive
// while it is positive, is refused, and nothing is created.
func TestPrimaryFloor(t *testing.T) {
	ctx := context.Background()
	dir, opts := filledArchive(t, 10)
	opts.Floor = 10
	s, err := archive.Open(ctx, dir, opts)
	must(t, err)
	must(t, s.Close())
	opts.Floor = 13
	_, err = archive.Open(ctx, dir, opts)
	var lost *archive.LostRecordsError
	if !errors.As(err, &lost) || lost.Missing != 3 {
		t.Fatalf("Open below the floor = %v", err)
	}
	empty := privateDir(t)
	_, err = archive.Open(ctx, empty, opts)
	if !errors.As(err, &lost) || lost.Missing != 13 {
		t.Fatalf("Open of an empty directory with a floor = %v", err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("an archive was created: %v", names)
	}
	// An empty store directory (its files deleted) is no better.
	must(t, os.Mkdir(filepath.Join(empty, archive.StoreDirName), 0o700))
	_, err = archive.Open(ctx, empty, opts)
	if !errors.As(err, &lost) || lost.Missing != 13 {
		t.Fatalf("Open of an empty store directory with a floor = %v", err)
	}
	if names, _ := os.ReadDir(filepath.Join(empty, archive.StoreDirName)); len(names) != 0 {
		t.Fatalf("an archive was created: %v", names)
	}
}

// TestHistoryBehindArchive: an archive holding an event of the primary's
// incarnation beyond the primary's last commit is refused (the primary
// lost its tail or was copied back by hand).
func TestHistoryBehindArchive(t *testing.T) {
	ctx := context.Background()
	dir, opts := filledArchive(t, 10)
	opts.CheckHistory, opts.Incarnation, opts.LastCommit = true, 1, 10
	s, err := archive.Open(ctx, dir, opts)
	must(t, err)
	must(t, s.Close())
	opts.LastCommit = 9
	if _, err := archive.Open(ctx, dir, opts); !errors.Is(err, archive.ErrHistoryBehind) || archive.ClassOf(err) != deliverytype.Stop {
		t.Fatalf("Open = %v, want ErrHistoryBehind (class stop)", err)
	}
	opts.Incarnation = 2 // another incarnation's events do not count
	s, err = archive.Open(ctx, dir, opts)
	must(t, err)
	must(t, s.Close())
}

// TestFloorFileDamage: a lost floor file is written again (it only marks
// and bounds), with a warning; a damaged one stops the archive; an older
// copy is still a true lower bound.
func TestFloorFileDamage(t *testing.T) {
	ctx := context.Background()
	dir, opts := filledArchive(t, 5)
	core, logs := observer.New(zap.WarnLevel)
	opts.Logger = zap.New(core)
	// A new archive writes its first floor file without a warning.
	fresh, err := archive.Open(ctx, privateDir(t), opts)
	must(t, err)
	must(t, fresh.Close())
	floor := filepath.Join(dir, archive.StoreDirName, archive.FloorFileName)
	old, err := os.ReadFile(floor)
	must(t, err)
	s, err := archive.Open(ctx, dir, opts)
	must(t, err)
	for i := 6; i <= 8; i++ {
		k, r := stored(t, uint64(i), "later")
		_, err := s.Accept(ctx, k, r)
		must(t, err)
	}
	must(t, s.Close())

	must(t, os.WriteFile(floor, old, 0o600)) // an older copy
	s, err = archive.Open(ctx, dir, opts)
	must(t, err)
	must(t, s.Close())
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d warnings with the floor file in place: %v", n, logs.All())
	}

	must(t, os.Remove(floor))
	s, err = archive.Open(ctx, dir, opts)
	must(t, err)
	if u := s.Usage(); u.Records != 8 {
		t.Fatalf("records = %d", u.Records)
	}
	must(t, s.Close())
	if _, err := os.Stat(floor); err != nil {
		t.Fatalf("the floor file was not written again: %v", err)
	}
	warned := logs.FilterMessageSnippet("floor file was missing").All()
	if len(warned) != 1 || warned[0].ContextMap()["records"] != int64(8) {
		t.Fatalf("warnings after the floor file was lost: %v", logs.All())
	}

	b, err := os.ReadFile(floor)
	must(t, err)
	b[len(b)/2] ^= 0x40
	must(t, os.WriteFile(floor, b, 0o600))
	if _, err := archive.Open(ctx, dir, opts); !errors.Is(err, archive.ErrCorrupt) {
		t.Fatalf("Open with a damaged floor file = %v", err)
	}
	if rep, err := archive.Inspect(ctx, dir, db, archive.InspectOptions{MaxPages: 256}); err != nil || rep.Integrity != archive.IntegrityCorrupt {
		t.Fatalf("Inspect with a damaged floor file = %+v, %v", rep, err)
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
