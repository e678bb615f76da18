package backup_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/primary"
)

// TestCreateKeepsTheNewestBackups: with Keep 3, each backup after the third
// removes this database's oldest one, and only that: moved-aside data
// (replaced-…), another database's backups, an entry whose manifest cannot
// be read, a partial entry and a backup renamed by the operator stay.
func TestCreateKeepsTheNewestBackups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	ctx := context.Background()
	take := func(db *primary.DB) backup.Manifest {
		t.Helper()
		e.clock.Advance(time.Second)
		m, err := backup.Create(ctx, db, e.root, backup.Options{Clock: e.clock, Keep: 3})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// Another database's backup, older than every one of db's.
	oe := newEnv(t)
	oe.opts.Path = filepath.Join(filepath.Dir(filepath.Dir(e.root)), "other", "db")
	other := oe.open()
	commitN(t, other, 0, 1)
	otherBackup := take(other).Name

	commitN(t, db, 0, 1)
	pinnedFrom := take(db).Name
	pinned := "backup-pinned-by-the-operator"
	if err := os.Rename(filepath.Join(e.root, pinnedFrom), filepath.Join(e.root, pinned)); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"replaced-20261201T000000.000000Z", "backup-0-damaged", "backup-0.partial"} {
		if err := os.MkdirAll(filepath.Join(e.root, dir, "store"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Moved-aside data carries a manifest of db: retention must not
	// count it.
	b, err := os.ReadFile(filepath.Join(e.root, pinned, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "replaced-20261201T000000.000000Z", "manifest.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	var mine []string
	for i := range 5 {
		commitN(t, db, i+1, 1)
		m := take(db)
		mine = append(mine, m.Name)
		var want []string
		if i >= 3 {
			want = mine[i-3 : i-2]
		}
		if !slices.Equal(m.Removed, want) {
			t.Fatalf("backup %d removed %v, want %v", i, m.Removed, want)
		}
	}
	want := append([]string{"backup-0-damaged", "backup-0.partial", pinned, otherBackup, "replaced-20261201T000000.000000Z"}, mine[2:]...)
	slices.Sort(want)
	if got := entries(t, e.root); !slices.Equal(got, want) {
		t.Fatalf("backup_root holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	list, err := backup.List(e.root, db.Identity())
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range list {
		if m.Name == pinnedFrom {
			continue // the pinned entry: List reports its manifest's name
		}
		listed = append(listed, m.Name)
	}
	if wantList := append([]string{"backup-0-damaged"}, mine[2:]...); !slices.Equal(listed, wantList) {
		t.Fatalf("List = %v, want %v", listed, wantList)
	}
}

// TestCreateNeverRemovesTheNewBackup: retention counts the backup just
// taken as the newest even when the clock went back, and a failed backup
// removes nothing.
func TestCreateNeverRemovesTheNewBackup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	ctx := context.Background()
	commitN(t, db, 0, 1)
	first, err := backup.Create(ctx, db, e.root, backup.Options{Clock: e.clock, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(-time.Hour)
	second, err := backup.Create(ctx, db, e.root, backup.Options{Clock: e.clock, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(second.Removed, []string{first.Name}) {
		t.Fatalf("removed %v, want the first backup %s", second.Removed, first.Name)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := backup.Create(canceled, db, e.root, backup.Options{Clock: e.clock, Keep: 1}); err == nil {
		t.Fatal("a canceled backup succeeded")
	}
	if got := entries(t, e.root); !slices.Equal(got, []string{second.Name}) {
		t.Fatalf("backup_root holds %v, want %s", got, second.Name)
	}
}
