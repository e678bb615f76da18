//go:build linux

package archive

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// entryState is what the no-trace tests compare of every entry.
type entryState struct {
	size  int64
	mode  uint32
	mtime int64 // nanoseconds
	ino   uint64
}

// listing returns every entry under root, root included: name, size, mode,
// mtime (ns) and inode number, from lstat.
func listing(t *testing.T, root string) map[string]entryState {
	t.Helper()
	out := map[string]entryState{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		out[p] = entryState{size: st.Size, mode: st.Mode, mtime: st.Mtim.Nano(), ino: st.Ino}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func requireSameListing(t *testing.T, what string, before, after map[string]entryState) {
	t.Helper()
	if reflect.DeepEqual(before, after) {
		return
	}
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s disappeared", what, p)
		} else if a != b {
			t.Errorf("%s: %s changed: %+v -> %+v", what, p, b, a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
	t.FailNow()
}

// realArchive creates a closed archive of n records on the real disk.
func realArchive(t *testing.T, n int) string {
	t.Helper()
	dir := bulkDir(t)
	bulkLoad(t, dir, testDatabase, n, "payload")
	return dir
}

// editReal opens the closed archive in dir and applies fn to its store.
func editReal(t *testing.T, dir string, fn func(s *Store)) {
	t.Helper()
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	fn(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// holdElsewhere opens the archive in dir in a child process (this test
// binary, TestHelperHoldArchive) until the test ends.
func holdElsewhere(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldArchive$")
	cmd.Env = append(os.Environ(), "RIFFDB_ARCHIVE_HOLD="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the holding child said %q, %v", line, err)
	}
	// Pebble in the child may still delete the files its open made
	// obsolete, or finish a flush, after Open returned: wait until the
	// directory stops changing, so that what the test compares around
	// Inspect is Inspect's doing alone (a walk racing a deletion once
	// failed with "no such file or directory").
	deadline := time.Now().Add(10 * time.Second)
	prev, stable := settling(dir), 0
	for stable < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the archive held by the child kept changing for 10 s")
		}
		time.Sleep(50 * time.Millisecond)
		cur := settling(dir)
		if reflect.DeepEqual(prev, cur) {
			stable++
		} else {
			stable = 0
		}
		prev = cur
	}
}

// settling is listing that tolerates entries vanishing during the walk
// (nil when the walk failed otherwise).
func settling(root string) map[string]entryState {
	out := map[string]entryState{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		out[p] = entryState{size: st.Size, mode: st.Mode, mtime: st.Mtim.Nano(), ino: st.Ino}
		return nil
	})
	if err != nil {
		return nil
	}
	return out
}

// TestHelperHoldArchive is the child of holdElsewhere: it holds the archive
// open until its stdin closes.
func TestHelperHoldArchive(t *testing.T) {
	dir := os.Getenv("RIFFDB_ARCHIVE_HOLD")
	if dir == "" {
		t.Skip("helper process of holdElsewhere")
	}
	s, err := Open(context.Background(), dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = s.Close()
	os.Exit(0)
}

// TestInspectLeavesNoTrace runs Inspect, on the real filesystem, to every
// outcome it has, and compares the full listing of the directory tree
// (names, sizes, modes, mtimes in nanoseconds, inode numbers) before and
// after: nothing is created, removed or touched.
func TestInspectLeavesNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, r := rec(t, testDatabase, 150, 0, "payload")
	type setup struct {
		dir  string
		db   event.DatabaseID
		opts InspectOptions
	}
	cases := []struct {
		name      string
		prepare   func(t *testing.T) setup
		integrity string
		err       error
	}{
		{"verified", func(t *testing.T) setup {
			return setup{realArchive(t, 300), testDatabase, InspectOptions{MaxPages: 256, CountIncarnations: true}}
		}, IntegrityVerified, nil},
		{"incomplete", func(t *testing.T) setup {
			return setup{realArchive(t, 300), testDatabase, InspectOptions{MaxPages: 1}}
		}, IntegrityIncomplete, nil},
		{"final step", func(t *testing.T) setup {
			dir := realArchive(t, 300)
			rep, err := Inspect(ctx, dir, testDatabase, InspectOptions{MaxPages: 1})
			if err != nil || rep.NextCursor == "" {
				t.Fatalf("step 1: %+v, %v", rep, err)
			}
			return setup{dir, testDatabase, InspectOptions{MaxPages: 1, After: rep.NextCursor}}
		}, IntegrityVerified, nil},
		{"changed", func(t *testing.T) setup {
			dir := realArchive(t, 300)
			rep, err := Inspect(ctx, dir, testDatabase, InspectOptions{MaxPages: 1})
			if err != nil || rep.NextCursor == "" {
				t.Fatalf("step 1: %+v, %v", rep, err)
			}
			editReal(t, dir, func(s *Store) {
				k, r := rec(t, testDatabase, 1000, 0, "late")
				mustAccept(t, s, k, r, deliverytype.Stored)
			})
			return setup{dir, testDatabase, InspectOptions{MaxPages: 1, After: rep.NextCursor}}
		}, IntegrityChanged, nil},
		{"corrupt", func(t *testing.T) setup {
			dir := realArchive(t, 300)
			editReal(t, dir, func(s *Store) {
				v := encodeValue(k, r)
				v[len(v)/2] ^= 1
				if err := s.db.Set(recordKey(k), v, pebble.Sync); err != nil {
					t.Fatal(err)
				}
			})
			return setup{dir, testDatabase, InspectOptions{MaxPages: 256}}
		}, IntegrityCorrupt, nil},
		{"mismatch", func(t *testing.T) setup {
			dir := realArchive(t, 300)
			editReal(t, dir, func(s *Store) {
				if err := s.db.Set(keyAccounting, encodeAccounting(accounting{Records: 301, EncodedBytes: 301 * Charge(k, r)}), pebble.Sync); err != nil {
					t.Fatal(err)
				}
			})
			return setup{dir, testDatabase, InspectOptions{MaxPages: 256}}
		}, IntegrityMismatch, nil},
		{"busy", func(t *testing.T) setup {
			dir := realArchive(t, 300)
			holdElsewhere(t, dir)
			return setup{dir, testDatabase, InspectOptions{MaxPages: 1}}
		}, "", ErrBusy},
		{"not found (empty directory)", func(t *testing.T) setup {
			return setup{bulkDir(t), testDatabase, InspectOptions{MaxPages: 1}}
		}, "", ErrNotFound},
		{"not found (no directory)", func(t *testing.T) setup {
			return setup{filepath.Join(bulkDir(t), "missing"), testDatabase, InspectOptions{MaxPages: 1}}
		}, "", ErrNotFound},
		{"no lock file", func(t *testing.T) setup {
			dir := realArchive(t, 3)
			if err := os.Remove(filepath.Join(dir, StoreDirName, "LOCK")); err != nil {
				t.Fatal(err)
			}
			return setup{dir, testDatabase, InspectOptions{MaxPages: 1}}
		}, "", ErrRefused},
		{"other database", func(t *testing.T) setup {
			return setup{realArchive(t, 3), event.DatabaseID{0xee}, InspectOptions{MaxPages: 1}}
		}, "", ErrBindingChanged},
		{"damaged cursor", func(t *testing.T) setup {
			return setup{realArchive(t, 3), testDatabase, InspectOptions{MaxPages: 1, After: "SQEAAAAA"}}
		}, "", ErrInvalidCursor},
		{"cursor of another archive of the database", func(t *testing.T) setup {
			other := realArchive(t, 300)
			rep, err := Inspect(ctx, other, testDatabase, InspectOptions{MaxPages: 1})
			if err != nil || rep.NextCursor == "" {
				t.Fatalf("step 1 elsewhere: %+v, %v", rep, err)
			}
			return setup{realArchive(t, 300), testDatabase, InspectOptions{MaxPages: 1, After: rep.NextCursor}}
		}, "", ErrInvalidCursor},
		{"invalid max pages", func(t *testing.T) setup {
			return setup{realArchive(t, 3), testDatabase, InspectOptions{MaxPages: MaxInspectPages + 1}}
		}, "", ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.prepare(t)
			root := filepath.Dir(s.dir)
			before := listing(t, root)
			rep, err := Inspect(ctx, s.dir, s.db, s.opts)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || rep.Integrity != "" || rep.NextCursor != "" {
					t.Fatalf("Inspect = %+v, %v; want %v", rep, err, tc.err)
				}
				if strings.Contains(err.Error(), root) || strings.Contains(err.Error(), StoreDirName) {
					t.Fatalf("error %q names a path", err)
				}
			} else if err != nil || rep.Integrity != tc.integrity {
				t.Fatalf("Inspect = %+v, %v; want %s", rep, err, tc.integrity)
			}
			requireSameListing(t, "inspect "+tc.name, before, listing(t, root))
		})
	}
}
