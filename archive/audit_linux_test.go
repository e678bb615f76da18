//go:build linux

package archive

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/deliverytype"
)

// openWatched opens a Pebble store with sstables in a compliant outbox
// directory through the custody FS, and returns the FS's audit watch.
func openWatched(t *testing.T) (base, dir string, db *pebble.DB, w *auditWatch) {
	t.Helper()
	base = t.TempDir()
	dir, db, w = openWatchedIn(t, base)
	return base, dir, db, w
}

// openWatchedIn is openWatched in the directory base.
func openWatchedIn(t *testing.T, base string) (dir string, db *pebble.DB, w *auditWatch) {
	t.Helper()
	dir = custodySetupIn(t, base)
	skipUnlessWatchable(t, dir)
	opts := archiveOptions(vfs.Default)
	cfs := newCustodyFS(vfs.Default).(custodyFS)
	opts.FS, w = cfs, cfs.watch
	db, err := pebble.Open(filepath.Join(dir, StoreDirName), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(t, db) })
	for i := range 3 {
		if err := db.Set(fmt.Appendf(nil, "key-%06d", i), make([]byte, 512), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	quiesce(t, w, dir)
	return dir, db, w
}

// skipUnlessWatchable skips a test of the watch where the test's
// directories are on a filesystem the watch is not trusted on.
func skipUnlessWatchable(t *testing.T, dir string) {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if !watchable(fs.Type) {
		t.Skipf("the test directory is on a filesystem (f_type %#x) where audits do not use inotify", fs.Type)
	}
}

// quiesce audits until an audit passes without a full audit (the store's
// own file creations of the open make the first ones full).
func quiesce(t *testing.T, w *auditWatch, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := w.fullAudits()
		if _, err := w.audit(dir); err != nil {
			t.Fatal(err)
		}
		if w.fullAudits() == before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("every audit is a full one")
		}
		time.Sleep(time.Millisecond)
	}
}

// audits returns the counts of full and partial audits.
func (w *auditWatch) audits() (full, partial int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.full, w.partial
}

func (w *auditWatch) fullAudits() int    { full, _ := w.audits(); return full }
func (w *auditWatch) partialAudits() int { _, partial := w.audits(); return partial }

func TestAuditWatchSkipsEntriesWithoutChange(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	before := w.fullAudits()
	for range 100 {
		exists, err := w.audit(dir)
		if err != nil || !exists {
			t.Fatalf("audit = %v, %v", exists, err)
		}
	}
	if n := w.fullAudits() - before; n != 0 {
		t.Fatalf("%d of 100 audits without a change listed the store", n)
	}
}

func TestAuditWatchQuickWithoutChange(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	w.mu.Lock()
	before := w.quick
	w.mu.Unlock()
	for range 100 {
		if exists, err := w.audit(dir); err != nil || !exists {
			t.Fatalf("audit = %v, %v", exists, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.quick - before; n != 100 {
		t.Fatalf("%d of 100 audits without a change were quick ones", n)
	}
}

func TestAuditWatchCatchesChangesWhileOpen(t *testing.T) {
	t.Parallel()
	catchesChangesWhileOpen(t, func(t *testing.T) string { return t.TempDir() })
}

// catchesChangesWhileOpen is TestAuditWatchCatchesChangesWhileOpen with
// each case's directory made by newBase.
func catchesChangesWhileOpen(t *testing.T, newBase func(t *testing.T) string) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, base, dir, sst string)
		want   string
	}{
		{"chmod 0644", func(t *testing.T, base, dir, sst string) {
			chmod(t, sst, 0o644)
		}, "a store file has mode 0644"},
		{"hard link from outside", func(t *testing.T, base, dir, sst string) {
			if err := os.Link(sst, filepath.Join(base, "stolen.sst")); err != nil {
				t.Fatal(err)
			}
		}, "a store file has 2 hard links"},
		{"new entry", func(t *testing.T, base, dir, sst string) {
			writeFile(t, filepath.Join(filepath.Dir(sst), "000999.sst"), 0o644)
		}, "a store file has mode 0644"},
		{"symbolic link", func(t *testing.T, base, dir, sst string) {
			if err := os.Symlink(sst, filepath.Join(filepath.Dir(sst), "000999.sst")); err != nil {
				t.Fatal(err)
			}
		}, "the store holds a symbolic link"},
		{"file replaced by rename", func(t *testing.T, base, dir, sst string) {
			other := filepath.Join(base, "other")
			writeFile(t, other, 0o640)
			if err := os.Rename(other, sst); err != nil {
				t.Fatal(err)
			}
		}, "a store file has mode 0640"},
		{"entry beside the store directory", func(t *testing.T, base, dir, sst string) {
			writeFile(t, filepath.Join(dir, "stray"), 0o600)
		}, "the archive directory holds an entry other than " + StoreDirName},
		{"hard link beside the store directory", func(t *testing.T, base, dir, sst string) {
			if err := os.Link(sst, filepath.Join(dir, "stray.sst")); err != nil {
				t.Fatal(err)
			}
		}, "the archive directory holds an entry other than " + StoreDirName},
		{"archive directory mode", func(t *testing.T, base, dir, sst string) {
			chmod(t, dir, 0o750)
		}, "the archive directory mode is 0750"},
		{"store directory renamed away and back", func(t *testing.T, base, dir, sst string) {
			store := filepath.Dir(sst)
			if err := os.Rename(store, filepath.Join(dir, "x")); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "x", "000999.sst"), 0o644)
			if err := os.Rename(filepath.Join(dir, "x"), store); err != nil {
				t.Fatal(err)
			}
		}, "a store file has mode 0644"},
		{"store directory mode", func(t *testing.T, base, dir, sst string) {
			chmod(t, filepath.Dir(sst), 0o750)
		}, "the store directory mode is 0750"},
		{"archive directory replaced", func(t *testing.T, base, dir, sst string) {
			if err := os.Rename(dir, filepath.Join(base, "moved")); err != nil {
				t.Fatal(err)
			}
			mkdir(t, dir)
			mkdir(t, filepath.Join(dir, StoreDirName))
			writeFile(t, filepath.Join(dir, StoreDirName, "000001.sst"), 0o644)
		}, "a store file has mode 0644"},
		{"parent replaced by a symbolic link", func(t *testing.T, base, dir, sst string) {
			if err := os.Rename(dir, filepath.Join(base, "moved")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(base, "moved"), dir); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		// A directory on the path above the archive directory: neither
		// the archive nor the store directory's watch sees it, the
		// path's own watch does (armPath).
		{"a directory on the path replaced by a symbolic link", func(t *testing.T, base, dir, sst string) {
			moveAway(t, base)
			if err := os.Symlink(base+"-moved", base); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a directory on the path replaced by another holding another store", func(t *testing.T, base, dir, sst string) {
			moveAway(t, base)
			mkdir(t, base)
			mkdir(t, dir)
			mkdir(t, filepath.Join(dir, StoreDirName))
			writeFile(t, filepath.Join(dir, StoreDirName, "000001.sst"), 0o644)
		}, "a store file has mode 0644"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := newBase(t)
			dir, _, w := openWatchedIn(t, base)
			// Every case starts from an audit that the path's watch
			// decided alone.
			requireQuiet(t, w, dir)
			tc.tamper(t, base, dir, firstSST(t, filepath.Join(dir, StoreDirName)))
			_, err := w.audit(dir)
			requireCustody(t, err, base, tc.want)
			// The violation stays reported until it is repaired.
			_, err = w.audit(dir)
			requireCustody(t, err, base, tc.want)
		})
	}
}

// moveAway renames the test's directory base to base-moved, and removes
// both at the test's end (base may be a symbolic link by then).
func moveAway(t *testing.T, base string) {
	t.Helper()
	if err := os.Rename(base, base+"-moved"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(base)
		_ = os.RemoveAll(base + "-moved")
	})
}

func TestAuditWatchRepairedViolationPasses(t *testing.T) {
	t.Parallel()
	base, dir, _, w := openWatched(t)
	sst := firstSST(t, filepath.Join(dir, StoreDirName))
	chmod(t, sst, 0o644)
	_, err := w.audit(dir)
	requireCustody(t, err, base, "mode 0644")
	chmod(t, sst, 0o600)
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
}

// inotifyEvent encodes one inotify event without a name.
func inotifyEvent(wd int32, mask uint32) []byte {
	b := make([]byte, unix.SizeofInotifyEvent)
	binary.NativeEndian.PutUint32(b[0:], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:], mask)
	return b
}

func TestAuditWatchOverflowForcesFullAudit(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	w.mu.Lock()
	w.consume(inotifyEvent(-1, unix.IN_Q_OVERFLOW))
	w.mu.Unlock()
	before := w.fullAudits()
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	if w.fullAudits() != before+1 {
		t.Fatal("the audit after an overflow was not a full one")
	}
	quiesce(t, w, dir)
}

func TestAuditWatchLostWatchRearms(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	w.mu.Lock()
	w.consume(append(inotifyEvent(w.dirWd+1, unix.IN_ATTRIB), inotifyEvent(w.dirWd, unix.IN_IGNORED)...))
	disarmed := w.fd < 0
	w.mu.Unlock()
	if !disarmed {
		t.Fatal("the loss of the directory's watch did not close the watch")
	}
	before := w.fullAudits()
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	if w.fullAudits() != before+1 {
		t.Fatal("the audit after a lost watch was not a full one")
	}
	quiesce(t, w, dir) // armed again
}

func TestAuditWatchWithoutInotifyIsFull(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	w.mu.Lock()
	w.disarm()
	w.broken = true
	w.mu.Unlock()
	before := w.fullAudits()
	for range 3 {
		if _, err := w.audit(dir); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.fullAudits() - before; n != 3 {
		t.Fatalf("%d of 3 audits without inotify were full ones", n)
	}
}

func TestAuditWatchClosedWithStore(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	mkdir(t, dir)
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	w := s.fs.(custodyFS).watch
	if _, err := auditOpen(s.fs, dir); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	fd := w.fd
	w.mu.Unlock()
	if fd < 0 {
		t.Fatal("the audit of the open store armed no watch")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	closed, cur := w.closed, w.fd
	w.mu.Unlock()
	if !closed || cur >= 0 {
		t.Fatal("closing the store left the watch open")
	}
	// After the close, audits are full ones and arm nothing.
	before := w.fullAudits()
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	if w.fullAudits() != before+1 || w.fd >= 0 {
		t.Fatal("an audit after the close used or armed a watch")
	}
}

// BenchmarkAuditPerClaim measures the audit of an open store with n
// sstable-like files: full (Audit), watched without a change, watched
// after an event that names no entry (a full audit that also watches every
// entry), and watched after one entry changed (a partial audit: that
// entry's attributes changed, as a new or removed table's would), in
// alternating slices of 100 calls.
func BenchmarkAuditPerClaim(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprint("files=", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "outbox")
			store := filepath.Join(dir, StoreDirName)
			for _, d := range []string{dir, store} {
				if err := os.Mkdir(d, 0o700); err != nil {
					b.Fatal(err)
				}
				if err := os.Chmod(d, 0o700); err != nil {
					b.Fatal(err)
				}
			}
			for i := range n {
				p := filepath.Join(store, fmt.Sprintf("%06d.sst", i))
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					b.Fatal(err)
				}
				if err := os.Chmod(p, 0o600); err != nil {
					b.Fatal(err)
				}
			}
			w := newAuditWatch()
			defer w.close()
			if _, err := w.audit(dir); err != nil {
				b.Fatal(err)
			}
			const slice = 100
			var full, watched, changed, partial time.Duration
			one := filepath.Join(store, "000000.sst")
			for range b.N {
				start := time.Now()
				for range slice {
					if _, err := Audit(dir); err != nil {
						b.Fatal(err)
					}
				}
				full += time.Since(start)
				start = time.Now()
				for range slice {
					if _, err := w.audit(dir); err != nil {
						b.Fatal(err)
					}
				}
				watched += time.Since(start)
				start = time.Now()
				for range slice {
					w.mu.Lock()
					w.dirty = true
					w.mu.Unlock()
					if _, err := w.audit(dir); err != nil {
						b.Fatal(err)
					}
				}
				changed += time.Since(start)
				start = time.Now()
				for range slice {
					if err := unix.Chmod(one, 0o600); err != nil {
						b.Fatal(err)
					}
					if _, err := w.audit(dir); err != nil {
						b.Fatal(err)
					}
				}
				partial += time.Since(start)
			}
			calls := float64(b.N * slice)
			b.ReportMetric(float64(full.Microseconds())/calls, "µs/full")
			b.ReportMetric(float64(watched.Microseconds())/calls, "µs/watched")
			b.ReportMetric(float64(changed.Microseconds())/calls, "µs/changed")
			b.ReportMetric(float64(partial.Microseconds())/calls, "µs/partial")
			if want := 1 + b.N*slice; w.fullAudits() != want || w.partialAudits() != b.N*slice {
				b.Fatalf("%d full and %d partial watched audits, want %d and %d", w.fullAudits(), w.partialAudits(), want, b.N*slice)
			}
		})
	}
}

func TestAuditWatchWatchesAReplacedEntry(t *testing.T) {
	t.Parallel()
	base, dir, _, w := openWatched(t)
	sst := firstSST(t, filepath.Join(dir, StoreDirName))
	// A compliant file renamed over a watched entry passes the audit; its
	// inode has no watch yet, and the audit must add one. The replaced
	// inode stays open, so its watch is not yet dropped.
	held, err := os.Open(sst)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	other := filepath.Join(base, "other")
	writeFile(t, other, 0o600)
	if err := os.Rename(other, sst); err != nil {
		t.Fatal(err)
	}
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	quiesce(t, w, dir)
	if err := os.Link(sst, filepath.Join(base, "stolen.sst")); err != nil {
		t.Fatal(err)
	}
	_, err = w.audit(dir)
	requireCustody(t, err, base, "a store file has 2 hard links")
}

func TestAuditWatchKeepsEntryWatches(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	w.mu.Lock()
	w.dirty = true
	added, watched := w.added, len(w.entries)
	w.mu.Unlock()
	if watched == 0 {
		t.Fatal("no entry is watched")
	}
	before := w.fullAudits()
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	again := w.added - added
	w.mu.Unlock()
	if w.fullAudits() != before+1 || again != 0 {
		t.Fatalf("a full audit watched %d entries again", again)
	}
	// A lost entry watch (its file was removed) is forgotten, so that an
	// inode reusing the name is watched.
	w.mu.Lock()
	var name string
	var e entryWatch
	for name, e = range w.entries {
		break
	}
	w.consume(inotifyEvent(e.wd, unix.IN_IGNORED))
	_, kept := w.entries[name]
	_, kept2 := w.names[e.wd]
	w.mu.Unlock()
	if kept || kept2 {
		t.Fatal("a lost entry watch is still recorded")
	}
}
func TestStoreAuditUsesTheWatch(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "outbox")
	mkdir(t, dir)
	skipUnlessWatchable(t, dir)
	s, w := openStoreWatch(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := w.fullAudits()
		if err := s.Audit(); err != nil {
			t.Fatal(err)
		}
		if w.fullAudits() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("every Store.Audit is a full one")
		}
		time.Sleep(time.Millisecond)
	}
	w.mu.Lock()
	armed := w.fd >= 0
	w.mu.Unlock()
	if !armed {
		t.Fatal("Store.Audit armed no watch")
	}
	writeFile(t, filepath.Join(dir, StoreDirName, "000999.sst"), 0o644)
	if err := s.Audit(); !errors.Is(err, ErrCustody) {
		t.Fatalf("Store.Audit after a change = %v, want ErrCustody", err)
	}
}

// TestWatchOnlyOnLocalFilesystems: the watch is trusted on local
// filesystems only; on a network or FUSE filesystem a change made by
// another host raises no inotify event, so every audit stays full there.
// Overlayfs, a container's root filesystem, is trusted
// (TestAuditWatchOnOverlay).
func TestWatchOnlyOnLocalFilesystems(t *testing.T) {
	for _, c := range []struct {
		name  string
		magic int64
		ok    bool
	}{
		{"ext4", unix.EXT4_SUPER_MAGIC, true},
		{"xfs", unix.XFS_SUPER_MAGIC, true},
		{"btrfs", unix.BTRFS_SUPER_MAGIC, true},
		{"tmpfs", unix.TMPFS_MAGIC, true},
		{"zfs", 0x2fc12fc1, true},
		{"overlayfs", unix.OVERLAYFS_SUPER_MAGIC, true},
		{"nfs", unix.NFS_SUPER_MAGIC, false},
		{"cifs", unix.CIFS_SUPER_MAGIC, false},
		{"smb2", unix.SMB2_SUPER_MAGIC, false},
		{"fuse", unix.FUSE_SUPER_MAGIC, false},
		{"ceph", unix.CEPH_SUPER_MAGIC, false},
		{"9p", unix.V9FS_MAGIC, false},
	} {
		if got := watchable(c.magic); got != c.ok {
			t.Errorf("%s: watchable = %v, want %v", c.name, got, c.ok)
		}
	}
}

// inotifyNamedEvent encodes one inotify event with a name, padded with
// NULs as the kernel pads it.
func inotifyNamedEvent(wd int32, mask uint32, name string) []byte {
	n := (len(name) + 1 + 15) &^ 15
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[0:], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

// TestAuditWatchChecksOnlyChangedEntries: the engine's own new files make
// the next audit check those files (and watch them), not list the store.
func TestAuditWatchChecksOnlyChangedEntries(t *testing.T) {
	t.Parallel()
	base, dir, db, w := openWatched(t)
	full, partial := w.fullAudits(), w.partialAudits()
	if err := db.Set([]byte("key-new"), make([]byte, 512), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	if w.fullAudits() != full || w.partialAudits() != partial+1 {
		t.Fatalf("after a flush: %d full and %d partial audits, want 0 and 1",
			w.fullAudits()-full, w.partialAudits()-partial)
	}
	// The partial audit watched the new table: a hard link made to it from
	// outside the store, which changes nothing in the store directory, is
	// reported.
	store := filepath.Join(dir, StoreDirName)
	names, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	for _, e := range names {
		if filepath.Ext(e.Name()) == ".sst" && e.Name() > newest {
			newest = e.Name()
		}
	}
	w.mu.Lock()
	_, watched := w.entries[newest]
	w.mu.Unlock()
	if !watched {
		t.Fatalf("the flushed table %s is not watched", newest)
	}
	if err := os.Link(filepath.Join(store, newest), filepath.Join(base, "stolen.sst")); err != nil {
		t.Fatal(err)
	}
	_, err = w.audit(dir)
	requireCustody(t, err, base, "a store file has 2 hard links")
	// Reported again, by a full audit, until repaired.
	full = w.fullAudits()
	_, err = w.audit(dir)
	requireCustody(t, err, base, "a store file has 2 hard links")
	if w.fullAudits() != full+1 {
		t.Fatal("the audit after a failed partial audit was not a full one")
	}
}

// TestAuditWatchEventsThatNameNoEntry: only an event that names an entry
// makes a partial audit; any other event makes the next audit a full one.
func TestAuditWatchEventsThatNameNoEntry(t *testing.T) {
	t.Parallel()
	_, dir, _, w := openWatched(t)
	w.mu.Lock()
	dirWd := w.dirWd
	w.mu.Unlock()
	for _, tc := range []struct {
		name string
		buf  []byte
		full bool
	}{
		{"a created entry", inotifyNamedEvent(dirWd, unix.IN_CREATE, "000999.sst"), false},
		{"the store directory's attributes", inotifyEvent(dirWd, unix.IN_ATTRIB), true},
		{"the store directory moved", inotifyEvent(dirWd, unix.IN_MOVE_SELF), true},
		{"an unknown watch", inotifyEvent(dirWd+10_000, unix.IN_ATTRIB), true},
		{"a truncated event", inotifyNamedEvent(dirWd, unix.IN_CREATE, "000999.sst")[:unix.SizeofInotifyEvent+2], true},
		{"an overflow", inotifyEvent(-1, unix.IN_Q_OVERFLOW), true},
	} {
		w.mu.Lock()
		w.consume(tc.buf)
		w.mu.Unlock()
		full, partial := w.fullAudits(), w.partialAudits()
		if _, err := w.audit(dir); err != nil {
			t.Fatal(tc.name, err)
		}
		gotFull := w.fullAudits() == full+1
		if gotFull != tc.full || (!tc.full && w.partialAudits() != partial+1) {
			t.Errorf("%s: full audit %v, want %v", tc.name, gotFull, tc.full)
		}
		quiesce(t, w, dir)
	}
}

// openStoreWatch opens the store in dir, closed at the test's end, and
// returns it with its custody FS's watch.
func openStoreWatch(t *testing.T, dir string) (*Store, *auditWatch) {
	t.Helper()
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, s.fs.(custodyFS).watch
}

// reopenedStore creates a store with a few tables in a new outbox
// directory, closes it and returns the directory.
func reopenedStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outbox")
	mkdir(t, dir)
	skipUnlessWatchable(t, dir)
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		k, r := rec(t, testDatabase, uint64(i+1), 0, "p")
		mustAccept(t, s, k, r, deliverytype.Stored)
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOpenWatchesEntriesWhileTheEngineOpens: Open arms the watch and runs
// its full audit in the background, so that the first audit of the open
// store (the first claim's) is not a full one.
func TestOpenWatchesEntriesWhileTheEngineOpens(t *testing.T) {
	t.Parallel()
	dir := reopenedStore(t)
	s, w := openStoreWatch(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for w.fullAudits() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch was not armed and audited without an Audit call")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Audit(); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	full, watched := w.full, len(w.entries)
	w.mu.Unlock()
	if full != 1 || watched == 0 {
		t.Fatalf("after the first Audit: %d full audits and %d entries watched, want 1 and some", full, watched)
	}
}

// inotifyFds counts the process's inotify descriptors.
func inotifyFds(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range names {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestFailedOpenReleasesTheWatch: an Open that fails before the engine
// takes the store's lock (here: the engine's manifest marker is missing)
// leaves no watch armed. Not parallel: it counts the process's inotify
// descriptors.
func TestFailedOpenReleasesTheWatch(t *testing.T) {
	dir := reopenedStore(t)
	markers, err := filepath.Glob(filepath.Join(dir, StoreDirName, "marker.manifest.*"))
	if err != nil || len(markers) != 1 {
		t.Fatalf("manifest markers %v, %v", markers, err)
	}
	if err := os.Remove(markers[0]); err != nil {
		t.Fatal(err)
	}
	before := inotifyFds(t)
	for range 20 {
		if _, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open without the manifest marker = %v, want ErrCorrupt", err)
		}
	}
	time.Sleep(50 * time.Millisecond) // a prearm that had not started yet
	if after := inotifyFds(t); after != before {
		t.Fatalf("failed opens left %d inotify descriptors", after-before)
	}
}
