//go:build linux

package archive

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
	"golang.org/x/sys/unix"
)

const otherUID = 12345

// custodySetup returns a fresh temp base and a compliant outbox directory
// below it holding an empty store directory.
func custodySetup(t *testing.T) (base, dir string) {
	t.Helper()
	base = t.TempDir()
	return base, custodySetupIn(t, base)
}

// custodySetupIn is custodySetup in the directory base.
func custodySetupIn(t *testing.T, base string) (dir string) {
	t.Helper()
	dir = filepath.Join(base, "outbox")
	mkdir(t, dir)
	mkdir(t, filepath.Join(dir, StoreDirName))
	return dir
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o700); err != nil { // umask-independent
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("data"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// requireCustody asserts err is a custody violation whose message mentions
// want and contains no part of base.
func requireCustody(t *testing.T, err error, base, want string) {
	t.Helper()
	if !errors.Is(err, ErrCustody) {
		t.Fatalf("err = %v, want ErrCustody", err)
	}
	if strings.Contains(err.Error(), base) {
		t.Fatalf("error %q reveals the path %q", err, base)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func TestAuditAcceptsCompliantDirectory(t *testing.T) {
	t.Parallel()
	_, dir := custodySetup(t)
	exists, err := Audit(dir)
	if err != nil || !exists {
		t.Fatalf("Audit(empty store) = %v, %v; want true, nil", exists, err)
	}
	writeFile(t, filepath.Join(dir, StoreDirName, "000001.sst"), 0o600)
	writeFile(t, filepath.Join(dir, StoreDirName, "LOCK"), 0o600)
	if exists, err := Audit(dir + "/"); err != nil || !exists {
		t.Fatalf("Audit(populated store) = %v, %v; want true, nil", exists, err)
	}
	if err := os.Remove(filepath.Join(dir, StoreDirName, "000001.sst")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, StoreDirName, "LOCK")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, StoreDirName)); err != nil {
		t.Fatal(err)
	}
	if exists, err := Audit(dir); err != nil || exists {
		t.Fatalf("Audit(no store) = %v, %v; want false, nil", exists, err)
	}
}

func TestAuditRefusesHostileDirectories(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// prepare mutates a compliant layout and returns the directory to audit.
		prepare func(t *testing.T, base, dir string) string
		want    string
	}{
		{"top-level symlink", func(t *testing.T, base, dir string) string {
			link := filepath.Join(base, "link")
			if err := os.Symlink(dir, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "the archive directory is a symbolic link"},
		{"intermediate symlink", func(t *testing.T, base, dir string) string {
			link := filepath.Join(base, "parentlink")
			if err := os.Symlink(base, link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "outbox")
		}, "a component of the archive directory is a symbolic link"},
		{"intermediate regular file", func(t *testing.T, base, dir string) string {
			writeFile(t, filepath.Join(base, "plain"), 0o600)
			return filepath.Join(base, "plain", "outbox")
		}, "a component of the archive directory is not a directory"},
		{"directory owned by another uid", func(t *testing.T, base, dir string) string {
			chown(t, dir)
			return dir
		}, "the archive directory is owned by uid 12345"},
		{"mode 0750", chmodCase(0o750), "archive directory mode is 0750; it must be 0700"},
		{"mode 0755", chmodCase(0o755), "archive directory mode is 0755; it must be 0700"},
		{"mode 0701", chmodCase(0o701), "archive directory mode is 0701; it must be 0700"},
		{"mode 0600", chmodCase(0o600), "archive directory mode is 0600; it must be 0700"},
		{"mode 1700", chmodCase(0o1700), "archive directory mode is 1700; it must be 0700"},
		{"extra file", func(t *testing.T, base, dir string) string {
			writeFile(t, filepath.Join(dir, "archive.redb"), 0o600)
			return dir
		}, "the archive directory holds an entry other than archive.pebble"},
		{"extra directory", func(t *testing.T, base, dir string) string {
			mkdir(t, filepath.Join(dir, "backup"))
			return dir
		}, "the archive directory holds an entry other than archive.pebble"},
		{"store is a symlink", func(t *testing.T, base, dir string) string {
			store := filepath.Join(dir, StoreDirName)
			elsewhere := filepath.Join(base, "elsewhere")
			if err := os.Rename(store, elsewhere); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, store); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "the store directory is a symbolic link"},
		{"store is a regular file", func(t *testing.T, base, dir string) string {
			store := filepath.Join(dir, StoreDirName)
			if err := os.Remove(store); err != nil {
				t.Fatal(err)
			}
			writeFile(t, store, 0o600)
			return dir
		}, "the store directory is not a directory"},
		{"store owned by another uid", func(t *testing.T, base, dir string) string {
			chown(t, filepath.Join(dir, StoreDirName))
			return dir
		}, "the store directory is owned by uid 12345"},
		{"store mode 0755", func(t *testing.T, base, dir string) string {
			chmod(t, filepath.Join(dir, StoreDirName), 0o755)
			return dir
		}, "the store directory mode is 0755; it must be 0700"},
		{"store file owned by another uid", func(t *testing.T, base, dir string) string {
			f := filepath.Join(dir, StoreDirName, "000005.sst")
			writeFile(t, f, 0o600)
			chown(t, f)
			return dir
		}, "a store file is owned by uid 12345"},
		{"store file mode 0644", func(t *testing.T, base, dir string) string {
			writeFile(t, filepath.Join(dir, StoreDirName, "000005.sst"), 0o644)
			return dir
		}, "a store file has mode 0644; it must be 0600"},
		{"store file mode 0400", func(t *testing.T, base, dir string) string {
			writeFile(t, filepath.Join(dir, StoreDirName, "000005.sst"), 0o400)
			return dir
		}, "a store file has mode 0400; it must be 0600"},
		{"hard link to a store file", func(t *testing.T, base, dir string) string {
			f := filepath.Join(dir, StoreDirName, "000005.sst")
			writeFile(t, f, 0o600)
			if err := os.Link(f, filepath.Join(base, "copy.sst")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "a store file has 2 hard links"},
		{"fifo in the store", func(t *testing.T, base, dir string) string {
			if err := unix.Mkfifo(filepath.Join(dir, StoreDirName, "000005.sst"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "the store holds an entry that is not a regular file"},
		{"symlink in the store", func(t *testing.T, base, dir string) string {
			target := filepath.Join(base, "target")
			writeFile(t, target, 0o600)
			if err := os.Symlink(target, filepath.Join(dir, StoreDirName, "000005.sst")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "the store holds a symbolic link"},
		{"directory in the store", func(t *testing.T, base, dir string) string {
			mkdir(t, filepath.Join(dir, StoreDirName, "archive"))
			return dir
		}, "the store holds a directory"},
		{"relative path", func(t *testing.T, base, dir string) string {
			return "outbox"
		}, "must be an absolute path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, dir := custodySetup(t)
			target := tc.prepare(t, base, dir)
			_, err := Audit(target)
			requireCustody(t, err, base, tc.want)
		})
	}
}

func chmodCase(mode os.FileMode) func(t *testing.T, base, dir string) string {
	return func(t *testing.T, base, dir string) string {
		chmod(t, dir, mode)
		return dir
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	// os.Chmod maps the sticky bit from os.ModeSticky; use the raw call.
	if err := unix.Chmod(p, uint32(mode)); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("changing ownership needs root")
	}
	if err := os.Lchown(p, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
}

func TestAuditMissingDirectory(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	for _, p := range []string{filepath.Join(base, "absent"), filepath.Join(base, "absent", "outbox")} {
		_, err := Audit(p)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Audit(missing) = %v, want os.ErrNotExist", err)
		}
		if errors.Is(err, ErrCustody) {
			t.Fatalf("a missing directory is unavailability, not a custody violation: %v", err)
		}
		if strings.Contains(err.Error(), base) || strings.Contains(err.Error(), "absent") {
			t.Fatalf("error %q reveals the path", err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Audit created the directory: %v", err)
	}
}

// archiveOptions returns Pebble options over the custody FS, as the archive
// opens its store.
func archiveOptions(fs vfs.FS) *pebble.Options {
	o := &pebble.Options{
		FS:                 newCustodyFS(fs),
		FormatMajorVersion: pebble.FormatValueSeparation,
		EventListener:      &pebble.EventListener{},
		Logger:             testutil.QuietPebbleLogger{},
	}
	o.WithFSDefaults()
	return o
}

// openPopulated opens a store in a compliant directory through the custody
// FS, writes n records and flushes them to sstables.
func openPopulated(t *testing.T, n int) (base, dir string, db *pebble.DB) {
	t.Helper()
	base, dir = custodySetup(t)
	db, err := pebble.Open(filepath.Join(dir, StoreDirName), archiveOptions(vfs.Default))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(t, db) })
	for i := range n {
		if err := db.Set(fmt.Appendf(nil, "key-%06d", i), make([]byte, 512), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	return base, dir, db
}

func TestCustodyFSMakesStorePrivate(t *testing.T) {
	t.Parallel()
	_, dir, db := openPopulated(t, 200)
	store := filepath.Join(dir, StoreDirName)
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	var sawSST, sawLock bool
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a 0600 regular file", e.Name(), info.Mode())
		}
		sawSST = sawSST || strings.HasSuffix(e.Name(), ".sst")
		sawLock = sawLock || e.Name() == "LOCK"
	}
	if !sawSST || !sawLock {
		t.Fatalf("store lacks an sstable or LOCK: %v", entries)
	}
	if exists, err := Audit(dir); err != nil || !exists {
		t.Fatalf("Audit(open store) = %v, %v", exists, err)
	}
	// Audit must not have dropped Pebble's fcntl lock: another process
	// still cannot take it.
	requireLockedElsewhere(t, filepath.Join(store, "LOCK"))
	if err := db.Set([]byte("after-audit"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func TestCustodyFSMkdirAllIsPrivate(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	nested := filepath.Join(root, "a", "b")
	if err := newCustodyFS(vfs.Default).MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "a"), nested} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o700 {
			t.Fatalf("MkdirAll made mode %v, want 0700", info.Mode().Perm())
		}
	}
}

func TestAuditCatchesTamperingWhileOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, base, sst string)
		want   string
	}{
		{"hard link", func(t *testing.T, base, sst string) {
			if err := os.Link(sst, filepath.Join(base, "stolen.sst")); err != nil {
				t.Fatal(err)
			}
		}, "a store file has 2 hard links"},
		{"chmod 0644", func(t *testing.T, base, sst string) {
			chmod(t, sst, 0o644)
		}, "a store file has mode 0644"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, dir, _ := openPopulated(t, 50)
			tc.tamper(t, base, firstSST(t, filepath.Join(dir, StoreDirName)))
			_, err := Audit(dir)
			requireCustody(t, err, base, tc.want)
		})
	}
}

// closeDB closes db once; later calls (the cleanup) do nothing.
func closeDB(t *testing.T, db *pebble.DB) {
	t.Helper()
	closedDBs.Lock()
	defer closedDBs.Unlock()
	if closedDBs.m == nil {
		closedDBs.m = map[*pebble.DB]bool{}
	}
	if closedDBs.m[db] {
		return
	}
	closedDBs.m[db] = true
	if err := db.Close(); err != nil {
		t.Error(err)
	}
}

var closedDBs struct {
	sync.Mutex
	m map[*pebble.DB]bool
}

func firstSST(t *testing.T, store string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(store, "*.sst"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no sstable in the store: %v", err)
	}
	return m[0]
}

func TestCustodyFSRefusesLinkAndCheckpointCopies(t *testing.T) {
	t.Parallel()
	base, dir, db := openPopulated(t, 100)
	store := filepath.Join(dir, StoreDirName)
	fs := newCustodyFS(vfs.Default)
	sst := firstSST(t, store)
	err := fs.Link(sst, filepath.Join(base, "linked.sst"))
	requireCustody(t, err, base, "hard links are refused")

	// Checkpoint links by default; through the wrapper it must copy.
	if err := db.Checkpoint(filepath.Join(base, "checkpoint"), pebble.WithFlushedWAL()); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(sst, &st); err != nil {
		t.Fatal(err)
	}
	if st.Nlink != 1 {
		t.Fatalf("checkpoint hard-linked a store file: nlink %d", st.Nlink)
	}
	if exists, err := Audit(dir); err != nil || !exists {
		t.Fatalf("Audit after checkpoint = %v, %v", exists, err)
	}
}

func TestCustodyFSVerifiesOpenedFiles(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	fs := newCustodyFS(vfs.Default)
	good := filepath.Join(base, "000001.sst")
	writeFile(t, good, 0o600)
	f, err := fs.Open(good)
	if err != nil {
		t.Fatalf("Open(compliant file) = %v", err)
	}
	f.Close()

	linked := filepath.Join(base, "000002.sst")
	writeFile(t, linked, 0o600)
	if err := os.Link(linked, filepath.Join(base, "other")); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Open(linked)
	requireCustody(t, err, base, "a store file has 2 hard links")
	_, err = fs.OpenReadWrite(linked, vfs.WriteCategoryUnspecified)
	requireCustody(t, err, base, "a store file has 2 hard links")

	sym := filepath.Join(base, "000003.sst")
	if err := os.Symlink(good, sym); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Open(sym)
	requireCustody(t, err, base, "not a plain regular file")

	public := filepath.Join(base, "000004.sst")
	writeFile(t, public, 0o644)
	_, err = fs.Open(public)
	requireCustody(t, err, base, "a store file has mode 0644")
	// Opening for writing fixes the mode on the fd.
	f, err = fs.OpenReadWrite(public, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatalf("OpenReadWrite(0644) = %v, want the mode fixed", err)
	}
	f.Close()
	if info, _ := os.Stat(public); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after OpenReadWrite, want 0600", info.Mode().Perm())
	}

	foreign := filepath.Join(base, "000005.sst")
	writeFile(t, foreign, 0o600)
	chown(t, foreign)
	_, err = fs.Open(foreign)
	requireCustody(t, err, base, "owned by uid 12345")

	created := filepath.Join(base, "000006.sst")
	f, err = fs.Create(created, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if info, _ := os.Stat(created); info.Mode().Perm() != 0o600 {
		t.Fatalf("Create made mode %v, want 0600", info.Mode().Perm())
	}
}

func TestCustodyFSRefusesHardLinkedSSTAtOpen(t *testing.T) {
	t.Parallel()
	base, dir, db := openPopulated(t, 100)
	closeDB(t, db)
	store := filepath.Join(dir, StoreDirName)
	if err := os.Link(firstSST(t, store), filepath.Join(base, "stolen.sst")); err != nil {
		t.Fatal(err)
	}
	db2, err := pebble.Open(store, archiveOptions(vfs.Default))
	if err == nil {
		// Tables may be opened lazily: the first read must then fail.
		it, ierr := db2.NewIter(nil)
		if ierr == nil {
			for it.First(); it.Valid(); it.Next() {
			}
			err = it.Close()
		} else {
			err = ierr
		}
		db2.Close()
	}
	if !errors.Is(err, ErrCustody) && !strings.Contains(fmt.Sprint(err), ErrCustody.Error()) {
		t.Fatalf("reading a hard-linked sstable = %v, want a custody violation", err)
	}
}

func TestCustodyFSOnMemFS(t *testing.T) {
	t.Parallel()
	db, err := pebble.Open("/archive", archiveOptions(vfs.NewMem()))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAllocatedBytes(t *testing.T) {
	t.Parallel()
	_, dir, _ := openPopulated(t, 2000)
	store := filepath.Join(dir, StoreDirName)
	got, err := allocatedBytes(store)
	if err != nil {
		t.Fatal(err)
	}
	var sumSizes int64
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		sumSizes += info.Size()
	}
	if got <= 0 || got < sumSizes {
		t.Fatalf("allocatedBytes = %d, want > 0 and >= the %d bytes of file sizes", got, sumSizes)
	}
	if _, err := Audit(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := allocatedBytes(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("allocatedBytes(missing) = %v, want os.ErrNotExist", err)
	}
}

// requireLockedElsewhere asserts that another process cannot take the fcntl
// lock on path, so this process still holds it.
func requireLockedElsewhere(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTryLock$")
	cmd.Env = append(os.Environ(), "RIFFDB_ARCHIVE_TRYLOCK="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lock helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "LOCKSTATE=busy") {
		t.Fatalf("another process could take the store lock after Audit:\n%s", out)
	}
}

// TestHelperTryLock is run in a child process by requireLockedElsewhere.
func TestHelperTryLock(t *testing.T) {
	path := os.Getenv("RIFFDB_ARCHIVE_TRYLOCK")
	if path == "" {
		t.Skip("helper process only")
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
		fmt.Println("LOCKSTATE=busy")
	case err == nil:
		fmt.Println("LOCKSTATE=free")
	default:
		t.Fatal(err)
	}
}

// TestOpenPathAgreesWithTheWalk: the one-call open of the audit's path
// (openat2, RESOLVE_NO_SYMLINKS) opens what the walk from "/" opens, and
// refuses, with the walk's own error, what the walk refuses: a symbolic
// link as the last or an intermediate component (to a directory, so that
// following it would succeed), a regular file as a component, a missing
// component.
func TestOpenPathAgreesWithTheWalk(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "a", "outbox")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(base, "last")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "a"), filepath.Join(base, "mid")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(base, "plain"), 0o600)
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{dir, true},
		{filepath.Join(base, "a") + "/./outbox/", true},
		{filepath.Join(base, "last"), false},
		{filepath.Join(base, "mid", "outbox"), false},
		{filepath.Join(base, "plain", "outbox"), false},
		{filepath.Join(base, "missing", "outbox"), false},
	} {
		fast, ferr := openPath(tc.path)
		walked, werr := walkPath(tc.path)
		if (ferr == nil) != tc.ok || (werr == nil) != tc.ok {
			t.Fatalf("%s: openPath error %v, walk error %v, want success %v", tc.path, ferr, werr, tc.ok)
		}
		if !tc.ok {
			if ferr.Error() != werr.Error() {
				t.Fatalf("%s: openPath error %q, walk error %q", tc.path, ferr, werr)
			}
			continue
		}
		var a, b unix.Stat_t
		if err := errors.Join(unix.Fstat(fast, &a), unix.Fstat(walked, &b)); err != nil {
			t.Fatal(err)
		}
		unix.Close(fast)
		unix.Close(walked)
		if a.Dev != b.Dev || a.Ino != b.Ino {
			t.Fatalf("%s: openPath and the walk opened different directories", tc.path)
		}
	}
}
