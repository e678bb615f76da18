package backup_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/primary"
)

// backedUp returns an env whose database committed first commits, was
// backed up, then committed more and was closed, with the backup's
// manifest.
func backedUp(t *testing.T, first, more int) (*env, backup.Manifest) {
	t.Helper()
	e := newEnv(t)
	db := e.open()
	commitN(t, db, 0, first)
	m, err := backup.Create(context.Background(), db, e.root, backup.Options{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	commitN(t, db, first, more)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return e, m
}

func (e *env) request(name string) backup.RestoreRequest {
	return backup.RestoreRequest{DatabasePath: e.opts.Path, BackupRoot: e.root, Name: name, Clock: e.clock}
}

// state opens the database at the path and returns what it holds.
func (e *env) state(t *testing.T) primary.StoreInfo {
	t.Helper()
	db, err := primary.Open(context.Background(), e.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return primary.StoreInfo{ID: db.Identity(), Incarnation: db.Incarnation(), LastCommit: db.LastCommitSequence()}
}

// TestRestoreRoundTrip: a restore brings back the backup's history under
// incarnation 2 and moves the replaced data aside, verifiable and
// restorable; a second restore gives incarnation 3.
func TestRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, m := backedUp(t, 10, 15)
	id, _ := event.ParseDatabaseID(m.DatabaseID)

	res, err := backup.Restore(ctx, e.request(m.Name))
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != m.Name || res.DatabaseID != m.DatabaseID || res.PreviousIncarnation != 1 || res.NewIncarnation != 2 ||
		res.LastCommitSequence != 10 || !strings.HasPrefix(res.ReplacedAs, "replaced-") || !strings.HasSuffix(res.ReplacedAs, "-inc1") {
		t.Fatalf("result %+v", res)
	}
	if got := e.state(t); got != (primary.StoreInfo{ID: id, Incarnation: 2, LastCommit: 10}) {
		t.Fatalf("restored database: %+v", got)
	}
	if fi, err := os.Stat(e.opts.Path); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("restored directory: %v %v", fi, err)
	}
	if names, _ := filepath.Glob(filepath.Join(filepath.Dir(e.opts.Path), ".db.restore-*")); len(names) != 0 {
		t.Fatalf("staging left: %v", names)
	}
	if list, err := backup.List(e.root, id); err != nil || len(list) != 1 || list[0].Name != m.Name {
		t.Fatalf("List after restore = %+v, %v (moved-aside data is not a backup)", list, err)
	}

	// The replaced data, restored in turn, is the database as it was.
	e.clock.Advance(time.Second)
	res2, err := backup.Restore(ctx, e.request(res.ReplacedAs))
	if err != nil {
		t.Fatal(err)
	}
	if res2.PreviousIncarnation != 2 || res2.NewIncarnation != 3 || res2.LastCommitSequence != 25 {
		t.Fatalf("second restore %+v", res2)
	}
	if got := e.state(t); got != (primary.StoreInfo{ID: id, Incarnation: 3, LastCommit: 25}) {
		t.Fatalf("after the second restore: %+v", got)
	}
	e.clock.Advance(time.Second)
	res3, err := backup.Restore(ctx, e.request(m.Name))
	if err != nil || res3.NewIncarnation != 4 || res3.LastCommitSequence != 10 {
		t.Fatalf("third restore %+v, %v", res3, err)
	}
}

// TestRestoreIntoNoOrAnEmptyDirectory: without data to replace, nothing is
// moved aside.
func TestRestoreIntoNoOrAnEmptyDirectory(t *testing.T) {
	t.Parallel()
	for _, empty := range []bool{false, true} {
		e, m := backedUp(t, 4, 0)
		if err := os.RemoveAll(e.opts.Path); err != nil {
			t.Fatal(err)
		}
		if empty {
			if err := os.Mkdir(e.opts.Path, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		res, err := backup.Restore(context.Background(), e.request(m.Name))
		if err != nil {
			t.Fatal(err)
		}
		if res.PreviousIncarnation != 0 || res.NewIncarnation != 2 || res.ReplacedAs != "" {
			t.Fatalf("empty=%v: %+v", empty, res)
		}
		if got := e.state(t); got.Incarnation != 2 || got.LastCommit != 4 {
			t.Fatalf("empty=%v: %+v", empty, got)
		}
		if names, _ := os.ReadDir(e.root); len(names) != 1 {
			t.Fatalf("empty=%v: backup_root holds %d entries", empty, len(names))
		}
		if names, _ := os.ReadDir(filepath.Dir(e.opts.Path)); len(names) != 1 {
			t.Fatalf("empty=%v: the parent holds %d entries", empty, len(names))
		}
	}
}

// TestRestoreRefusalsChangeNothing: every refusal has its own error, names
// no path, and leaves the database directory and backup_root exactly as they
// were (names, modes, sizes, contents).
func TestRestoreRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	other, om := backedUp(t, 3, 0)
	cases := []struct {
		name    string
		prepare func(t *testing.T, e *env, m backup.Manifest) (req backup.RestoreRequest, cleanup func())
		want    error
		// live: the database is open, and Pebble removes its obsolete
		// files in the background; only backup_root and the parent's
		// entry names are compared.
		live bool
	}{
		{"busy", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			db, err := primary.Open(ctx, e.opts)
			if err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), func() { _ = db.Close() }
		}, backup.ErrDatabaseBusy, true},
		{"busy (the lock a server holds)", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			lock, err := primary.LockDirectory(e.opts.Path)
			if err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), func() { _ = lock.Close() }
		}, backup.ErrDatabaseBusy, false},
		{"other identity", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			if err := os.Rename(filepath.Join(other.root, om.Name), filepath.Join(e.root, "backup-other")); err != nil {
				t.Fatal(err)
			}
			return e.request("backup-other"), nil
		}, backup.ErrIdentityMismatch, false},
		{"flipped byte", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			f := largest(m)
			name := filepath.Join(e.root, m.Name, "store", f.Name)
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x10
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), nil
		}, backup.ErrBackupDamaged, false},
		{"missing file", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			if err := os.Remove(filepath.Join(e.root, m.Name, "store", largest(m).Name)); err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), nil
		}, backup.ErrBackupDamaged, false},
		{"extra file", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			if err := os.WriteFile(filepath.Join(e.root, m.Name, "store", "000999.sst"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), nil
		}, backup.ErrBackupDamaged, false},
		{"manifest out of step with the data", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			name := filepath.Join(e.root, m.Name, "manifest.json")
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Replace(string(b), `"last_commit_sequence": 5`, `"last_commit_sequence": 4`, 1))
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), nil
		}, backup.ErrBackupDamaged, false},
		{"bad name", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			return e.request("../" + filepath.Base(e.root) + "/" + m.Name), nil
		}, backup.ErrInvalidName, false},
		{"dot name", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			return e.request(".."), nil
		}, backup.ErrInvalidName, false},
		{"not found", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			return e.request("backup-none"), nil
		}, backup.ErrBackupNotFound, false},
		{"no root", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			req := e.request(m.Name)
			req.BackupRoot = ""
			return req, nil
		}, backup.ErrNoRoot, false},
		{"open root", func(t *testing.T, e *env, m backup.Manifest) (backup.RestoreRequest, func()) {
			if err := os.Chmod(e.root, 0o750); err != nil {
				t.Fatal(err)
			}
			return e.request(m.Name), nil
		}, backup.ErrRootUnusable, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, m := backedUp(t, 5, 5)
			req, cleanup := c.prepare(t, e, m)
			if cleanup != nil {
				defer cleanup()
			}
			parent := filepath.Dir(e.opts.Path)
			snapshot := func() string {
				if c.live {
					return strings.Join(dirNames(t, parent), " ") + "\n" + tree(t, e.root)
				}
				return tree(t, parent, e.root)
			}
			before := snapshot()
			res, err := backup.Restore(ctx, req)
			if !errors.Is(err, c.want) {
				t.Fatalf("Restore = %+v, %v; want %v", res, err, c.want)
			}
			if msg := err.Error(); strings.Contains(msg, e.root) || strings.Contains(msg, parent) {
				t.Fatalf("the error names a path: %s", msg)
			}
			if after := snapshot(); after != before {
				t.Fatalf("the refusal changed the disk:\n%s\n--- after ---\n%s", before, after)
			}
		})
	}
}

func largest(m backup.Manifest) backup.File {
	var f backup.File
	for _, x := range m.Files {
		if x.Size > f.Size {
			f = x
		}
	}
	return f
}

// TestRestoreIncarnationCountsTheArchive: the new incarnation is above the
// highest the archive holds records of, and an archive bound to another
// database refuses the restore.
func TestRestoreIncarnationCountsTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, m := backedUp(t, 3, 0)
	id, _ := event.ParseDatabaseID(m.DatabaseID)
	outbox := filepath.Join(t.TempDir(), "outbox")
	if err := os.Mkdir(outbox, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := archive.Open(ctx, outbox, archive.Options{Database: id, QuotaEncodedBytes: 1 << 30, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, inc := range []uint64{1, 5} {
		key := event.Key{Database: id, Incarnation: inc, Event: event.ID{Seq: 1}}
		st, err := event.NewStored(key.Event, "put", []byte(`{"x":0}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Accept(ctx, key, st.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	archiveBefore := tree(t, outbox)
	req := e.request(m.Name)
	req.ArchiveDirectory = outbox
	res, err := backup.Restore(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.NewIncarnation != 6 {
		t.Fatalf("new incarnation %d, want 6 (the archive holds incarnation 5)", res.NewIncarnation)
	}
	if after := tree(t, outbox); after != archiveBefore {
		t.Fatal("the restore changed the archive")
	}

	// Another database's backup over no data: the archive's binding decides.
	o, om := backedUp(t, 2, 0)
	if err := os.RemoveAll(o.opts.Path); err != nil {
		t.Fatal(err)
	}
	req = o.request(om.Name)
	req.ArchiveDirectory = outbox
	if _, err := backup.Restore(ctx, req); !errors.Is(err, backup.ErrIdentityMismatch) {
		t.Fatalf("restore against another database's archive: %v", err)
	}
	// An archive that exists but cannot be read refuses: the incarnation
	// formula cannot be completed.
	if err := os.Chmod(outbox, 0o750); err != nil {
		t.Fatal(err)
	}
	req = e.request(m.Name)
	req.ArchiveDirectory = outbox
	if _, err := backup.Restore(ctx, req); !errors.Is(err, backup.ErrUnknownState) {
		t.Fatalf("restore with an unreadable archive: %v", err)
	}
}

// TestRestoreRefusesToMoveAcrossFilesystems: with data to replace, a
// backup_root on another filesystem than the database's parent directory is
// refused before anything changes (the replaced data could not be moved
// aside by a rename). It needs a second filesystem (/dev/shm).
func TestRestoreRefusesToMoveAcrossFilesystems(t *testing.T) {
	t.Parallel()
	e, m := backedUp(t, 3, 2)
	shm, err := os.MkdirTemp("/dev/shm", "riffdb-backup-test-")
	if err != nil {
		t.Skipf("no second filesystem: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shm) })
	if err := os.Chmod(shm, 0o700); err != nil {
		t.Fatal(err)
	}
	var a, b syscall.Stat_t
	if syscall.Stat(shm, &a) != nil || syscall.Stat(e.root, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the test's filesystem")
	}
	root := filepath.Join(shm, "backups")
	if err := os.Rename(e.root, root); err != nil {
		// A rename across filesystems fails: copy the backup instead.
		if err := os.CopyFS(root, os.DirFS(e.root)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Dir(e.opts.Path)
	before := tree(t, parent, root)
	req := e.request(m.Name)
	req.BackupRoot = root
	if _, err := backup.Restore(context.Background(), req); !errors.Is(err, backup.ErrCrossDevice) {
		t.Fatalf("Restore = %v, want ErrCrossDevice", err)
	}
	if after := tree(t, parent, root); after != before {
		t.Fatalf("the refusal changed the disk:\n%s\n---\n%s", before, after)
	}
	// Without data to replace nothing is moved aside: the restore runs.
	if err := os.RemoveAll(e.opts.Path); err != nil {
		t.Fatal(err)
	}
	if res, err := backup.Restore(context.Background(), req); err != nil || res.NewIncarnation != 2 {
		t.Fatalf("restore into a missing directory: %+v, %v", res, err)
	}
}
