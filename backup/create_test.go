package backup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// TestCreateWritesAVerifiableBackup: a backup of a running database holds
// its identity, incarnation and last commit, a checksum of every file of
// the copy, is private, leaves no partial entry, and is listed; commands
// committed during it are acknowledged.
func TestCreateWritesAVerifiableBackup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, 25)
	ctx := context.Background()

	var wg sync.WaitGroup
	var acked atomic.Int64
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Execute(context.Background(), "put", json.RawMessage(fmt.Sprintf(`{"x":%d}`, i)), ""); err != nil {
				t.Error(err)
				return
			}
			acked.Add(1)
		}
	}()
	m, err := backup.Create(ctx, db, e.root, backup.Options{Clock: e.clock})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if m.Format != 1 || m.DatabaseID != db.Identity().String() || m.HistoryIncarnation != 1 ||
		m.LastCommitSequence < 25 || m.LastCommitSequence > 25+uint64(acked.Load()) || !m.CreatedAt.Equal(e.clock.Now()) {
		t.Fatalf("manifest %+v", m)
	}
	if m.Name != "backup-20261201T060000.000000Z" {
		t.Fatalf("name %q", m.Name)
	}
	dir := filepath.Join(e.root, m.Name)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("backup directory: %v %v", fi, err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(m.Files) {
		t.Fatalf("%d files in the store, %d in the manifest", len(entries), len(m.Files))
	}
	var lock bool
	for i, f := range m.Files {
		if entries[i].Name() != f.Name {
			t.Fatalf("file %d: %s in the store, %s in the manifest", i, entries[i].Name(), f.Name)
		}
		lock = lock || f.Name == "LOCK"
		if got := tree(t, filepath.Join(dir, "store", f.Name)); !strings.Contains(got, f.SHA256[:16]) {
			t.Fatalf("%s: checksum differs: %s vs %s", f.Name, got, f.SHA256)
		}
	}
	if !lock {
		t.Fatal("the backup has no LOCK file")
	}
	root, _ := os.ReadDir(e.root)
	if len(root) != 1 {
		t.Fatalf("backup_root holds %d entries, want 1", len(root))
	}
	list, err := backup.List(e.root, db.Identity())
	if err != nil || len(list) != 1 || list[0].Name != m.Name || len(list[0].Files) != len(m.Files) {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

func TestCreateRefusesAnUnusableRoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	base := t.TempDir()
	file := filepath.Join(base, "file")
	open := filepath.Join(base, "open")
	link := filepath.Join(base, "link")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.root, link); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{filepath.Join(base, "missing"), file, open, link} {
		_, err := backup.Create(context.Background(), db, root, backup.Options{})
		if !errors.Is(err, backup.ErrRootUnusable) || strings.Contains(err.Error(), base) {
			t.Fatalf("%s: %v, want a path-free ErrRootUnusable", filepath.Base(root), err)
		}
		if _, err := backup.List(root, db.Identity()); !errors.Is(err, backup.ErrRootUnusable) {
			t.Fatalf("List %s: %v", filepath.Base(root), err)
		}
	}
	if _, err := backup.Create(context.Background(), db, "", backup.Options{}); !errors.Is(err, backup.ErrNoRoot) {
		t.Fatalf("no root: %v", err)
	}
	if names, _ := os.ReadDir(e.root); len(names) != 0 {
		t.Fatalf("the link's target got %d entries", len(names))
	}
}

// TestCreateFailureLeavesNothing: a backup that fails (here: canceled, and
// of a closed database) leaves no entry under backup_root.
func TestCreateFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := backup.Create(ctx, db, e.root, backup.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Create(context.Background(), db, e.root, backup.Options{}); !errors.Is(err, primary.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if names, _ := os.ReadDir(e.root); len(names) != 0 {
		t.Fatalf("backup_root holds %v", names)
	}
}

// TestCreateIsPaced: a backup copies and checksums at Options.BytesPerSecond.
// At 1 KiB/s the copy of a store of several hundred KiB cannot finish
// within its deadline (unpaced it takes milliseconds), and the backup that
// ran out of time leaves nothing behind.
func TestCreateIsPaced(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: measures a paced backup over seconds")
	}
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, 2000)
	if _, err := backup.Create(context.Background(), db, e.root, backup.Options{BytesPerSecond: -1}); err != nil {
		t.Fatalf("unpaced backup: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := backup.Create(ctx, db, e.root, backup.Options{BytesPerSecond: 1 << 10}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("backup paced at 1 KiB/s with a 2 s deadline = %v, want the deadline", err)
	}
	if names, _ := os.ReadDir(e.root); len(names) != 1 {
		t.Fatalf("backup_root holds %d entries, want only the unpaced backup", len(names))
	}
}

// TestCreateRemovesOnlyItsOwnPartials: the next backup removes a partial
// copy this database's crashed backup left (its marker names the database)
// and nothing else.
func TestCreateRemovesOnlyItsOwnPartials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	other, _ := event.NewDatabaseID(time.Now())
	mk := func(name, marker string) {
		dir := filepath.Join(e.root, name)
		if err := os.MkdirAll(filepath.Join(dir, "store"), 0o700); err != nil {
			t.Fatal(err)
		}
		if marker != "" {
			if err := os.WriteFile(filepath.Join(dir, "riffdb-backup-partial"), []byte(marker+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("backup-1.partial", db.Identity().String())
	mk("backup-2.partial", other.String())
	mk("backup-3.partial", "")
	mk("notes", db.Identity().String())
	if _, err := backup.Create(context.Background(), db, e.root, backup.Options{Clock: e.clock}); err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(e.root)
	for _, en := range entries {
		names = append(names, en.Name())
	}
	if got, want := strings.Join(names, " "), "backup-2.partial backup-20261201T060000.000000Z backup-3.partial notes"; got != want {
		t.Fatalf("backup_root holds %s, want %s", got, want)
	}
}

// TestListIsOldestFirstAndShowsDamage: List orders by creation time, leaves
// out other databases' backups, partial and moved-aside entries, and shows a
// backup whose manifest is unreadable as damaged.
func TestListIsOldestFirstAndShowsDamage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.open()
	ctx := context.Background()
	var names []string
	for i := 0; i < 3; i++ {
		commitN(t, db, i, 1)
		m, err := backup.Create(ctx, db, e.root, backup.Options{Clock: e.clock})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m.Name)
		e.clock.Advance(-time.Hour) // names sort against creation order
	}
	if err := os.Mkdir(filepath.Join(e.root, "backup-0-broken"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(e.root, "replaced-x"), 0o700); err != nil {
		t.Fatal(err)
	}
	list, err := backup.List(e.root, db.Identity())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 || !list[0].Damaged || list[0].Name != "backup-0-broken" {
		t.Fatalf("List = %+v", list)
	}
	for i, m := range list[1:] {
		if m.Name != names[2-i] || m.Damaged || m.LastCommitSequence != uint64(3-i) {
			t.Fatalf("entry %d: %+v, want %s", i+1, m, names[2-i])
		}
	}
	other, _ := event.NewDatabaseID(time.Now())
	if list, err := backup.List(e.root, other); err != nil || len(list) != 1 || !list[0].Damaged {
		t.Fatalf("List of another database = %+v, %v", list, err)
	}
}
