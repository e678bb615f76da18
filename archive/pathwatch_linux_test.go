//go:build linux

package archive

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// quietAudits returns how many audits the path's watch decided alone.
func (w *auditWatch) quietAudits() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.quiet
}

// requireQuiet audits dir until an audit is decided by the path's watch
// alone (the first quick audit after a change watches the path again).
func requireQuiet(t *testing.T, w *auditWatch, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := w.quietAudits()
		if _, err := w.audit(dir); err != nil {
			t.Fatal(err)
		}
		if w.quietAudits() > before {
			return
		}
		w.mu.Lock()
		broken := w.pathBroken
		w.mu.Unlock()
		if broken {
			t.Skip("a directory on the test directory's path is on a filesystem the watch does not trust (or /proc is missing): the path is opened by every audit")
		}
		if time.Now().After(deadline) {
			t.Fatal("no audit was decided by the path's watch")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAuditWatchQuietPath: once the path is watched, an audit without a
// change opens nothing (one poll), and entries made in a directory on the
// path beside it do not change that.
func TestAuditWatchQuietPath(t *testing.T) {
	t.Parallel()
	base, dir, _, w := openWatched(t)
	requireQuiet(t, w, dir)
	w.mu.Lock()
	watched := len(w.pathWds)
	w.mu.Unlock()
	if want := len(strings.Split(filepath.Clean(dir)[1:], "/")); watched != want {
		t.Fatalf("%d directories of the path are watched, want %d (from / to the archive directory's parent)", watched, want)
	}
	writeFile(t, filepath.Join(base, "beside"), 0o600)
	mkdir(t, filepath.Join(base, "other"))
	chmod(t, filepath.Join(base, "beside"), 0o644)
	before := w.quietAudits()
	for range 100 {
		if exists, err := w.audit(dir); err != nil || !exists {
			t.Fatalf("audit = %v, %v", exists, err)
		}
	}
	// Another process's mount makes one audit open the path again; more
	// than half must still be quiet ones.
	if n := w.quietAudits() - before; n < 50 {
		t.Fatalf("%d of 100 audits without a change on the path were decided by its watch", n)
	}
}

// TestAuditWatchPathMovedUnderANewParent: the archive directory moved under
// a new directory at the same path is still the audited directory; the
// audit passes, watches the new path, and is quiet again after it.
func TestAuditWatchPathMovedUnderANewParent(t *testing.T) {
	t.Parallel()
	base, dir, _, w := openWatched(t)
	requireQuiet(t, w, dir)
	old := base + "-old"
	t.Cleanup(func() { _ = os.RemoveAll(old) })
	if err := os.Rename(base, old); err != nil {
		t.Fatal(err)
	}
	mkdir(t, base)
	if err := os.Rename(filepath.Join(old, filepath.Base(dir)), dir); err != nil {
		t.Fatal(err)
	}
	before := w.quietAudits()
	if _, err := w.audit(dir); err != nil {
		t.Fatal(err)
	}
	if w.quietAudits() != before {
		t.Fatal("the audit after a directory on the path was replaced was decided by the path's old watch")
	}
	requireQuiet(t, w, dir)
}

// TestStoreDirectoryHeld: the open store answers for its directory from its
// watches while nothing on the path changed, and cannot tell (false) after a
// change, until an audit watches the path again.
func TestStoreDirectoryHeld(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "outbox")
	mkdir(t, dir)
	skipUnlessWatchable(t, dir)
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	fi, err := os.Lstat(filepath.Join(dir, StoreDirName))
	if err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		deadline := time.Now().Add(10 * time.Second)
		for !s.DirectoryHeld(fi) {
			if err := s.Audit(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(time.Millisecond)
		}
		return true
	}
	if !held() {
		t.Fatal("the watches never answered for the store directory")
	}
	if other, err := os.Lstat(dir); err != nil || s.DirectoryHeld(other) {
		t.Fatalf("DirectoryHeld answered for another directory (%v)", err)
	}
	// A directory on the path renamed away and back: the same directories
	// again, but the watch cannot tell until an audit has looked.
	if err := os.Rename(base, base+"-x"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(base+"-x", base); err != nil {
		t.Fatal(err)
	}
	if s.DirectoryHeld(fi) {
		t.Fatal("DirectoryHeld answered after a directory on the path was renamed")
	}
	if !held() {
		t.Fatal("the watches did not answer again after an audit")
	}
	// The store directory moved away: never held again by this watch.
	if err := os.Rename(filepath.Join(dir, StoreDirName), filepath.Join(base, "away")); err != nil {
		t.Fatal(err)
	}
	if s.DirectoryHeld(fi) {
		t.Fatal("DirectoryHeld answered after the store directory was moved away")
	}
}

// TestAuditWatchPathMounts: a mount over a directory on the path, or over
// the store directory, raises no inotify event; the mount table's poll
// reports it. Mounting needs root; the test mounts a tmpfs in the test's
// directory and unmounts it at its end. Not parallel: the mount table is
// the process's, and parallel tests count quiet audits.
func TestAuditWatchPathMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mount := func(t *testing.T, at string) {
		t.Helper()
		if err := unix.Mount("riffdb-test", at, "tmpfs", 0, "mode=0700"); err != nil {
			t.Skipf("cannot mount a tmpfs: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(at, unix.MNT_DETACH) })
	}
	t.Run("over a directory on the path", func(t *testing.T) {
		base, dir, _, w := openWatched(t)
		requireQuiet(t, w, dir)
		mount(t, base)
		_, err := w.audit(dir)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("audit with a tmpfs over a directory on the path = %v, want the archive directory missing", err)
		}
	})
	t.Run("over the store directory", func(t *testing.T) {
		_, dir, _, w := openWatched(t)
		requireQuiet(t, w, dir)
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, StoreDirName), &st); err != nil {
			t.Fatal(err)
		}
		if !w.holds(dir, uint64(st.Dev), st.Ino) {
			t.Fatal("the watch does not answer for the store directory before the mount")
		}
		mount(t, filepath.Join(dir, StoreDirName))
		if w.holds(dir, uint64(st.Dev), st.Ino) {
			t.Fatal("the watch answered for the store directory with a tmpfs mounted over it")
		}
		// The audit after it does not watch a path that resolves to
		// another store directory.
		if _, err := w.audit(dir); err != nil {
			t.Fatal(err)
		}
		if w.holds(dir, uint64(st.Dev), st.Ino) {
			t.Fatal("the watch answered for the store directory after an audit, with a tmpfs mounted over it")
		}
	})
}

// overlayBase returns a directory made through an overlay (the root
// filesystem of most containers) mounted for the test, below a directory
// that was in the overlay's lower layer only (making the new directory
// copied it up). It skips the test where no overlay can be mounted (not
// root; an upper layer that is itself on an overlay).
func overlayBase(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting an overlay needs root")
	}
	root := t.TempDir()
	lower, upper, work, merged := filepath.Join(root, "lower"), filepath.Join(root, "upper"),
		filepath.Join(root, "work"), filepath.Join(root, "merged")
	for _, d := range []string{lower, filepath.Join(lower, "image"), upper, work, merged} {
		mkdir(t, d)
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("riffdb-test", merged, "overlay", 0, opts); err != nil {
		t.Skipf("cannot mount an overlay over %s: %v", root, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	base := filepath.Join(merged, "image", "data")
	mkdir(t, base)
	return base
}

// TestAuditWatchOnOverlay: a store on an overlayfs, a container's root
// filesystem, is watched as on a local filesystem: audits without a change
// are decided by the path's watch, entries made beside the path (in a
// directory copied up from the lower layer by the change) do not change
// that, and every change of TestAuditWatchCatchesChangesWhileOpen, made
// through the overlay, is found.
func TestAuditWatchOnOverlay(t *testing.T) {
	t.Run("quiet", func(t *testing.T) {
		base := overlayBase(t)
		if !PathWatchable(base) {
			t.Fatal("the custody audit's watch does not trust an overlay")
		}
		dir, _, w := openWatchedIn(t, base)
		if _, err := w.audit(dir); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		broken, watched := w.pathBroken, w.broken
		w.mu.Unlock()
		if broken || watched {
			t.Fatalf("on an overlay: the path's watch broken %v, the store's %v", broken, watched)
		}
		requireQuiet(t, w, dir)
		writeFile(t, filepath.Join(base, "beside"), 0o600)
		writeFile(t, filepath.Join(filepath.Dir(base), "beside"), 0o600)
		before, full := w.quietAudits(), w.fullAudits()
		for range 20 {
			if exists, err := w.audit(dir); err != nil || !exists {
				t.Fatalf("audit = %v, %v", exists, err)
			}
		}
		if n := w.quietAudits() - before; n < 10 {
			t.Fatalf("%d of 20 audits without a change on an overlay were decided by the path's watch", n)
		}
		if n := w.fullAudits() - full; n != 0 {
			t.Fatalf("%d of 20 audits without a change on an overlay listed the store", n)
		}
	})
	t.Run("changes", func(t *testing.T) {
		catchesChangesWhileOpen(t, overlayBase)
	})
}
