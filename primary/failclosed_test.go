package primary_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/internal/testsupport/treestate"
	"github.com/riffdb/riffdb/primary"
)

// listing is a directory's names with size, mode and mtime, to prove that a
// refused open left every file as it was.
func listing(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%d %v %d", fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
	}
	return out
}

func sameListing(t *testing.T, before, after map[string]string) {
	t.Helper()
	for n, v := range before {
		if after[n] != v {
			t.Errorf("%s changed: %q → %q", n, v, after[n])
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			t.Errorf("%s was created", n)
		}
	}
}

// diskDB creates a database on disk with n acknowledged commits and closes it.
func diskDB(t *testing.T, n int) (primary.Options, uint64) {
	t.Helper()
	opts := primary.Options{Path: filepath.Join(t.TempDir(), "db"), Contract: compile(t)}
	db, err := primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		exec(t, db, "place_order", fmt.Sprintf(`{"order_id":"o-%d","amount_cents":%d}`, i, i), fmt.Sprint("k", i))
	}
	last := db.LastCommitSequence()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return opts, last
}

func removeGlob(t *testing.T, dir, pattern string) {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) == 0 {
		t.Fatalf("no %s in the store (%v)", pattern, err)
	}
	for _, f := range m {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMissingManifestMarkerIsRefused is the first reproduction of the
// fail-closed issue: with marker.manifest.* deleted, Pebble's plain Open
// creates a new store and deletes the old tables and logs. Open must refuse
// with ErrCorrupt and leave every file exactly as it was.
func TestMissingManifestMarkerIsRefused(t *testing.T) {
	opts, _ := diskDB(t, 200)
	removeGlob(t, opts.Path, "marker.manifest.*")
	before := listing(t, opts.Path)
	_, err := primary.Open(context.Background(), opts)
	if !errors.Is(err, primary.ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if strings.Contains(err.Error(), opts.Path) {
		t.Errorf("the error names the path: %v", err)
	}
	sameListing(t, before, listing(t, opts.Path))
}

// TestMissingFormatMarkerIsRefused: without marker.format-version.* Pebble
// would take the store for a new one; it must be refused, files untouched.
func TestMissingFormatMarkerIsRefused(t *testing.T) {
	opts, _ := diskDB(t, 50)
	removeGlob(t, opts.Path, "marker.format-version.*")
	before := listing(t, opts.Path)
	if _, err := primary.Open(context.Background(), opts); !errors.Is(err, primary.ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	sameListing(t, before, listing(t, opts.Path))
}

// TestLostCreationMarkerKeepsTheStore: riffdb's own marker lost from an
// intact store is not a reason to create anything: the store opens with its
// identity and every commit, and the marker is written again.
func TestLostCreationMarkerKeepsTheStore(t *testing.T) {
	opts, last := diskDB(t, 100)
	db, err := primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	id := db.Identity()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	opts.Logger = zap.New(core)
	db, err = primary.Open(context.Background(), opts) // the marker in place: no warning
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Fatalf("warnings with the marker in place: %v", logs.All())
	}
	removeGlob(t, opts.Path, "riffdb-created")
	db, err = primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if w := logs.FilterMessageSnippet("creation marker was missing").Len(); w != 1 {
		t.Fatalf("warnings after the marker was lost: %v", logs.All())
	}
	if db.Identity() != id || db.LastCommitSequence() != last {
		t.Fatalf("reopened as %s at %d, want %s at %d", db.Identity(), db.LastCommitSequence(), id, last)
	}
	if _, err := os.Stat(filepath.Join(opts.Path, "riffdb-created")); err != nil {
		t.Fatalf("the creation marker was not written again: %v", err)
	}
}

// TestLostIdentityIsRefused: a store that held commits but lost the key
// holding its identity (here: every table and log gone, the marker kept) is
// refused rather than given a new identity.
func TestLostIdentityIsRefused(t *testing.T) {
	opts, _ := diskDB(t, 20)
	for _, pat := range []string{"*.sst", "*.log"} {
		m, _ := filepath.Glob(filepath.Join(opts.Path, pat))
		for _, f := range m {
			if err := os.Truncate(f, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err := primary.Open(context.Background(), opts)
	if err == nil {
		t.Fatal("Open succeeded on a store whose every table and log was emptied")
	}
	if !errors.Is(err, primary.ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
}

// TestSecondOpenIsBusy: a second Open of a held store fails with ErrBusy and
// leaves the first working.
func TestSecondOpenIsBusy(t *testing.T) {
	opts, _ := diskDB(t, 1)
	db, err := primary.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := primary.Open(context.Background(), opts); !errors.Is(err, primary.ErrBusy) {
		t.Fatalf("second Open = %v, want ErrBusy", err)
	}
	exec(t, db, "place_order", `{"order_id":"after","amount_cents":1}`, "after")
}

// TestDeliveryMarkCountsCompletions: every completion counts in the durable
// delivery mark, in the completion's own batch, and CompleteArchived raises
// the archive floor (never lowers it); both survive a reopen.
func TestDeliveryMarkCountsCompletions(t *testing.T) {
	db, bu := setup(t)
	ctx := context.Background()
	for i := range 5 {
		exec(t, db, "two", fmt.Sprintf(`{"x":%d}`, i), fmt.Sprint("k", i))
	}
	page, err := db.ScanIntents(ctx, nil, 100)
	if err != nil || len(page) != 10 {
		t.Fatalf("scan: %d, %v", len(page), err)
	}
	claimed, err := db.Claim(ctx, page, bu.clock.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CompleteArchived(ctx, claimed[:4], 40); err != nil {
		t.Fatal(err)
	}
	if err := db.CompleteArchived(ctx, claimed[4:6], 7); err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, claimed[6:]); err != nil {
		t.Fatal(err)
	}
	want := primary.DeliveryMark{Incarnation: 1, Completed: 10, ArchiveFloor: 40}
	if got := db.Delivered(); got != want {
		t.Fatalf("mark %+v, want %+v", got, want)
	}
	db = reopen(t, db, bu)
	if got := db.Delivered(); got != want {
		t.Fatalf("after reopen: mark %+v, want %+v", got, want)
	}
	if db.OpenedLastSequence() != 5 {
		t.Fatalf("opened last = %d", db.OpenedLastSequence())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRolledBackHistoryIsRefused: damage that Pebble takes for a torn write
// or an older state (the newest WAL truncated, zeroed, deleted or replaced
// by an older copy; an older MANIFEST or manifest marker) leaves a store
// consistent with itself but without acknowledged commits. The floor in the
// creation marker, written at every clean Close, makes Open refuse it, and
// the refused store is left exactly as found: the decision is taken on a
// read-only view, before Pebble's read-write open could replay and delete
// the damaged WAL.
func TestRolledBackHistoryIsRefused(t *testing.T) {
	build := func(t *testing.T) (primary.Options, string) {
		opts, _ := diskDB(t, 100)
		older := t.TempDir()
		entries, _ := os.ReadDir(opts.Path)
		for _, e := range entries {
			copyFile(t, filepath.Join(opts.Path, e.Name()), filepath.Join(older, e.Name()))
		}
		db, err := primary.Open(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			exec(t, db, "place_order", fmt.Sprintf(`{"order_id":"p-%d","amount_cents":1}`, i), fmt.Sprint("p", i))
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return opts, older
	}
	newest := func(t *testing.T, dir, pattern string) string {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(m) == 0 {
			t.Fatalf("no %s", pattern)
		}
		sort.Strings(m)
		return m[len(m)-1]
	}
	for name, damage := range map[string]func(t *testing.T, dir, older string){
		"wal deleted":   func(t *testing.T, dir, _ string) { must(t, os.Remove(newest(t, dir, "*.log"))) },
		"wal emptied":   func(t *testing.T, dir, _ string) { must(t, os.Truncate(newest(t, dir, "*.log"), 0)) },
		"wal truncated": func(t *testing.T, dir, _ string) { must(t, os.Truncate(newest(t, dir, "*.log"), 4096)) },
		"wal zeroed": func(t *testing.T, dir, _ string) {
			f := newest(t, dir, "*.log")
			fi, err := os.Stat(f)
			must(t, err)
			must(t, os.WriteFile(f, make([]byte, fi.Size()), 0o600))
		},
		"wal older copy": func(t *testing.T, dir, older string) {
			copyFile(t, newest(t, older, "*.log"), newest(t, dir, "*.log"))
		},
		"manifest older copy": func(t *testing.T, dir, older string) {
			copyFile(t, newest(t, older, "MANIFEST-*"), newest(t, dir, "MANIFEST-*"))
		},
		"manifest marker older copy": func(t *testing.T, dir, older string) {
			old := newest(t, older, "marker.manifest.*")
			must(t, os.Remove(newest(t, dir, "marker.manifest.*")))
			copyFile(t, old, filepath.Join(dir, filepath.Base(old)))
		},
		"marker damaged": func(t *testing.T, dir, _ string) {
			f := filepath.Join(dir, "riffdb-created")
			b, err := os.ReadFile(f)
			must(t, err)
			b[len(b)/2] ^= 1
			must(t, os.WriteFile(f, b, 0o600))
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts, older := build(t)
			damage(t, opts.Path, older)
			before := treestate.MustTake(t, opts.Path)
			db, err := primary.Open(context.Background(), opts)
			if err == nil {
				last := db.LastCommitSequence()
				db.Close()
				t.Fatalf("Open succeeded with history at %d of 200", last)
			}
			if !errors.Is(err, primary.ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			if strings.Contains(err.Error(), opts.Path) {
				t.Errorf("the error names the path: %v", err)
			}
			// Refused on a read-only view: every file as the damage left it.
			if d := treestate.Diff(before, treestate.MustTake(t, opts.Path)); d != nil {
				t.Errorf("the refused store was changed: %q", d)
			}
		})
	}
}

// TestOlderMarkerIsStillTrue: an older copy of the creation marker, or none,
// is not damage: the store opens with every commit.
func TestOlderMarkerIsStillTrue(t *testing.T) {
	opts, _ := diskDB(t, 10)
	marker := filepath.Join(opts.Path, "riffdb-created")
	old, err := os.ReadFile(marker)
	must(t, err)
	db, err := primary.Open(context.Background(), opts)
	must(t, err)
	exec(t, db, "place_order", `{"order_id":"x","amount_cents":1}`, "x")
	must(t, db.Close())
	must(t, os.WriteFile(marker, old, 0o600))
	db, err = primary.Open(context.Background(), opts)
	must(t, err)
	if db.LastCommitSequence() != 11 {
		t.Fatalf("last = %d", db.LastCommitSequence())
	}
	must(t, db.Close())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDamagedTableIsCorruptWithoutPaths: a table cut short is refused as
// ErrCorrupt, and Pebble's message reaches the caller without the path.
func TestDamagedTableIsCorruptWithoutPaths(t *testing.T) {
	opts, _ := diskDB(t, 300)
	db, err := primary.Open(context.Background(), opts) // flushes the log into a table
	must(t, err)
	must(t, db.Close())
	tables, _ := filepath.Glob(filepath.Join(opts.Path, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table")
	}
	fi, err := os.Stat(tables[0])
	must(t, err)
	must(t, os.Truncate(tables[0], fi.Size()/2))
	_, err = primary.Open(context.Background(), opts)
	if !errors.Is(err, primary.ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if strings.Contains(err.Error(), opts.Path) {
		t.Fatalf("the error names the path: %v", err)
	}
}
