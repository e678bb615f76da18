package walfill_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/riffdb/riffdb/internal/store/walfill"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// allocated returns the bytes the filesystem allocated to the file at path.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func allZero(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }

// newLog creates a WAL file through walfill in a new folder.
func newLog(t *testing.T) (vfs.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "000001.log")
	f, err := walfill.New(vfs.Default).Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, path
}

func TestWritesFillTheReservationAhead(t *testing.T) {
	f, path := newLog(t)
	write := func(p []byte) {
		t.Helper()
		if n, err := f.Write(p); n != len(p) || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	size := func() int {
		t.Helper()
		return len(readAll(t, path))
	}
	write([]byte("hello"))
	if size() != 5 {
		t.Fatalf("a write without a reservation filled the file to %d bytes", size())
	}
	const reserved = 3*walfill.Step - 100
	if err := f.Preallocate(0, reserved); err != nil {
		t.Fatal(err)
	}
	if size() != 5 {
		t.Fatalf("Preallocate itself wrote: the file is %d bytes", size())
	}
	if a := allocated(t, path); a >= walfill.Step {
		t.Fatalf("Preallocate allocated: %d bytes for a 5-byte file", a)
	}
	write([]byte("world"))
	if size() != 10+walfill.MinStep {
		t.Fatalf("after a write into the reservation the file is %d bytes, want the write plus the least step", size())
	}
	// Past the filled space, zeros reach as far again as the log.
	mid := bytes.Repeat([]byte{'y'}, 200<<10)
	write(mid)
	if end := 10 + len(mid); size() != 2*end {
		t.Fatalf("after writing past the least step the file is %d bytes, want twice the log's %d", size(), end)
	}
	big := bytes.Repeat([]byte{'x'}, 2*walfill.Step)
	write(big)
	b := readAll(t, path)
	if len(b) != reserved {
		t.Fatalf("after writing past the filled space the file is %d bytes, want the whole reservation %d", len(b), reserved)
	}
	logged := 10 + len(mid) + len(big)
	if string(b[:10]) != "helloworld" || !bytes.Equal(b[10:10+len(mid)], mid) || !bytes.Equal(b[10+len(mid):logged], big) || !allZero(b[logged:]) {
		t.Fatal("the file does not hold the writes followed by zeros")
	}
	if a := allocated(t, path); a < reserved {
		t.Fatalf("only %d bytes allocated, want at least the %d written", a, reserved)
	}
	write(big) // past the reservation: appended, nothing filled
	if size() != logged+len(big) {
		t.Fatalf("writes past the reservation left %d bytes", size())
	}
}

func TestRecycledContentIsNotOverwritten(t *testing.T) {
	fs := walfill.New(vfs.Default)
	dir := t.TempDir()
	old := bytes.Repeat([]byte{0xab}, 64<<10)
	if err := os.WriteFile(filepath.Join(dir, "000001.log"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "000002.log")
	f, err := fs.ReuseForWrite(filepath.Join(dir, "000001.log"), path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Preallocate(0, 128<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, path); len(b) != len(old) || string(b[:2]) != "hi" || !bytes.Equal(b[2:], old[2:]) {
		t.Fatalf("a write inside the recycled size changed more than it wrote (%d bytes)", len(b))
	}
	data := bytes.Repeat([]byte{'d'}, 70<<10)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	b := readAll(t, path)
	if len(b) != 128<<10 || string(b[:2]) != "hi" || !bytes.Equal(b[2:2+len(data)], data) || !allZero(b[2+len(data):]) {
		t.Fatalf("want the writes then zeros to the 128 KiB reservation, got %d bytes", len(b))
	}
}

func TestRootIsTheWrappedFS(t *testing.T) {
	if vfs.Root(walfill.New(vfs.Default)) != vfs.Default {
		t.Fatal("vfs.Root does not see through the wrapper (the archive's custody checks rely on it)")
	}
	mem := vfs.NewMem()
	f, err := walfill.New(mem).Create("x", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Preallocate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("an in-memory file was filled to %d bytes", st.Size())
	}
}

// TestPebbleRecoversFromZeroFilledWALs commits synced batches through Pebble
// on the wrapped filesystem across several WAL rotations, copies the store
// while it is open (as a crash would leave it: every commit is synced; the
// newest WAL ends in zeros), and
// checks that the copy opens with every commit present and that new WAL files
// really are zero-filled.
func TestPebbleRecoversFromZeroFilledWALs(t *testing.T) {
	dir := t.TempDir()
	const memtable = 256 << 10
	db, err := pebble.Open(dir, &pebble.Options{FS: walfill.New(vfs.Default), MemTableSize: memtable, DisableAutomaticCompactions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	value := []byte(strings.Repeat("v", 1000))
	key := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	// Pebble reserves a WAL's space at its second write.
	for i := range 2 {
		if err := db.Set(key(i), value, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if size := largestWAL(t, dir); size < walfill.MinStep {
		t.Fatalf("the first WAL is %d bytes after two commits: not zero-filled", size)
	}
	const commits = 1500 // about 6 memtables
	for i := 2; i < commits; i++ {
		if err := db.Set(key(i), value, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	// Copy once flushes are done: a flush finishing mid-copy could pair a
	// manifest with tables the copy lacks, which no crash can produce.
	testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "Pebble's flushes to finish", func() bool {
		m := db.Metrics()
		return m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 && m.MemTable.Count == 1
	})
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	re, err := pebble.Open(crashed, &pebble.Options{})
	if err != nil {
		t.Fatalf("a store with zero-filled WALs does not reopen: %v", err)
	}
	defer re.Close()
	for i := range commits {
		v, closer, err := re.Get(key(i))
		if err != nil {
			t.Fatalf("commit %d lost: %v", i, err)
		}
		if !bytes.Equal(v, value) {
			t.Fatalf("commit %d changed", i)
		}
		closer.Close()
	}
}

// largestWAL returns the size of the newest WAL file in dir.
func largestWAL(t *testing.T, dir string) int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no WAL file: %v", err)
	}
	slices.Sort(names)
	st, err := os.Stat(names[len(names)-1])
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// copyDir copies every regular file of src into dst (Pebble's LOCK too: the
// copy is a separate store).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // an obsolete file Pebble deleted in the meantime
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCleanerDeletesObsoleteWALs commits synced batches through Pebble over
// many WAL rotations, once with Pebble's default cleaner and once with
// Cleaner: by default obsolete WALs are kept for recycling, with Cleaner
// they are deleted, and the one WAL left allocates no more than its log plus
// one Step (Pebble's 1.1-memtable reservation is not allocated). It fails if
// a Pebble upgrade stops turning recycling off for Cleaner.
func TestCleanerDeletesObsoleteWALs(t *testing.T) {
	const memtable = 256 << 10
	logs := func(dir string) []string {
		names, err := filepath.Glob(filepath.Join(dir, "*.log"))
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	run := func(cleaner pebble.Cleaner, settled func(logs int) bool) (names []string) {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{FS: walfill.New(vfs.Default), MemTableSize: memtable, Cleaner: cleaner})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		value := []byte(strings.Repeat("v", 1000))
		for i := range 3000 { // about 12 memtables
			if err := db.Set(fmt.Appendf(nil, "k%06d", i), value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		testutil.WaitFor(t, 10*time.Second, 10*time.Millisecond, "Pebble's flushes and file deletions to finish", func() bool {
			m := db.Metrics()
			return m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 && m.MemTable.Count == 1 && settled(len(logs(dir)))
		})
		return logs(dir)
	}
	if names := run(nil, func(n int) bool { return n >= 2 }); len(names) < 2 {
		t.Fatalf("with Pebble's default cleaner %d WAL files are left", len(names))
	}
	names := run(walfill.Cleaner{}, func(n int) bool { return n == 1 })
	st, err := os.Stat(names[0])
	if err != nil {
		t.Fatal(err)
	}
	// The live WAL's size includes the zeros written ahead of its log.
	if a := allocated(t, names[0]); a > st.Size()+64<<10 || st.Size() > memtable*11/10+walfill.Step {
		t.Fatalf("the live WAL allocates %d bytes for a size of %d: more than its log and one step", a, st.Size())
	}
	if got := fmt.Sprint(walfill.Cleaner{}); got != "delete" {
		t.Fatalf("Cleaner records itself as %q in Pebble's OPTIONS, want delete", got)
	}
}

// TestZerosOnlyWhileFewLogsAreOpen opens MaxFilledLogs+1 reserved files: a
// write into any of them appends without zeros, and once one is closed the
// next write fills ahead again.
func TestZerosOnlyWhileFewLogsAreOpen(t *testing.T) {
	fs := walfill.New(vfs.Default)
	dir := t.TempDir()
	var files []vfs.File
	for i := range walfill.MaxFilledLogs + 1 {
		f, err := fs.Create(filepath.Join(dir, fmt.Sprintf("%06d.log", i)), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Preallocate(0, 4*walfill.Step); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	last := filepath.Join(dir, fmt.Sprintf("%06d.log", walfill.MaxFilledLogs))
	if _, err := files[walfill.MaxFilledLogs].Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, last)); n != 5 {
		t.Fatalf("with %d logs open a write left the file at %d bytes, want 5 (no zeros)", walfill.MaxFilledLogs+1, n)
	}
	if err := files[0].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := files[walfill.MaxFilledLogs].Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, last); len(b) != 10+walfill.MinStep || string(b[:10]) != "helloworld" || !allZero(b[10:]) {
		t.Fatalf("with %d logs open the next write left %d bytes, want the writes and one step of zeros", walfill.MaxFilledLogs, len(b))
	}
}

// TestGroupsCountTheirOwnLogs: each Group counts only its own WALs, so two
// servers in one process (two Groups of MaxFilledLogs WALs each) both write
// zeros ahead, while one more WAL in a Group stops its zeros.
func TestGroupsCountTheirOwnLogs(t *testing.T) {
	dir := t.TempDir()
	open := func(g *walfill.Group, name string) (vfs.File, string) {
		t.Helper()
		path := filepath.Join(dir, name)
		f, err := walfill.NewIn(vfs.Default, g).Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if err := f.Preallocate(0, 4*walfill.Step); err != nil {
			t.Fatal(err)
		}
		return f, path
	}
	filled := func(f vfs.File, path string) bool {
		t.Helper()
		if _, err := f.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		return len(readAll(t, path)) > 5
	}
	var a, b walfill.Group
	var files []vfs.File
	var paths []string
	for i := range walfill.MaxFilledLogs {
		for _, g := range []*walfill.Group{&a, &b} {
			f, p := open(g, fmt.Sprintf("%p-%d.log", g, i))
			files, paths = append(files, f), append(paths, p)
		}
	}
	for i, f := range files {
		if !filled(f, paths[i]) {
			t.Fatalf("%s: no zeros with %d logs open in its group and %d in the process", filepath.Base(paths[i]), walfill.MaxFilledLogs, len(files))
		}
	}
	if f, p := open(&a, "a-extra.log"); filled(f, p) {
		t.Fatalf("zeros with %d logs open in the group", walfill.MaxFilledLogs+1)
	}
}

// TestZerosAheadFollowTheLog writes a log in commits of varied sizes into a
// large reservation: every write lands in space written before it (the
// point of the zeros), and the zeros ahead of the log never exceed the log
// itself, MinStep for a log shorter than that, nor Step. A WAL's allocation
// therefore stays within twice its log plus MinStep.
func TestZerosAheadFollowTheLog(t *testing.T) {
	f, path := newLog(t)
	if err := f.Preallocate(0, 8*walfill.Step); err != nil {
		t.Fatal(err)
	}
	var end, fills int64
	prev := int64(0)
	for i := 0; end < 5*walfill.Step; i++ {
		rec := bytes.Repeat([]byte{byte(i)}, 100+i*37%3000)
		if _, err := f.Write(rec); err != nil {
			t.Fatal(err)
		}
		end += int64(len(rec))
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size := st.Size()
		if size < end {
			t.Fatalf("after %d bytes of log the file is %d bytes", end, size)
		}
		if size != prev {
			fills++
			// A fill happened at this write: the log had just gone past
			// the filled space, and the new zeros start at its end.
			want := min(walfill.Step, max(walfill.MinStep, end))
			if ahead := size - end; ahead != want {
				t.Fatalf("with %d bytes of log, %d bytes of zeros were written ahead, want %d", end, ahead, want)
			}
		}
		prev = size
	}
	// 64 KiB, then doubling to 1 MiB, then a MiB at a time: about ten
	// fills for 5 MiB, not one per commit.
	if fills < 5 || fills > 12 {
		t.Fatalf("%d fills for %d bytes of log", fills, end)
	}
}
