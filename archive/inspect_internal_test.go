package archive

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// inspectSetup creates a closed store with n records on a MemFS.
func inspectSetup(t *testing.T, n int) *vfs.MemFS {
	t.Helper()
	fs := newMemFS(t, false)
	s := mustOpen(t, testOptions(t, fs))
	fillStore(t, s, n, "payload")
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestInspectVerifiedIsReadOnly(t *testing.T) {
	t.Parallel()
	fs := inspectSetup(t, 300)
	before := snapshotFiles(t, fs, testDir)
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 2})
	if err != nil {
		t.Fatal(err)
	}
	k, r := rec(t, testDatabase, 1, 0, "payload")
	want := InspectReport{
		Format: fmt.Sprintf("riffarch/%d pebble/24", formatVersion), DatabaseBinding: testDatabase.String(),
		RecordCount: 300, EncodedBytes: 300 * Charge(k, r), ScannedRecords: 300, ScannedBytes: 300 * Charge(k, r),
		TotalRecords: 300, TotalBytes: 300 * Charge(k, r), Steps: 1,
		AllocatedBytes: rep.AllocatedBytes, PagesExamined: 2, Integrity: IntegrityVerified,
	}
	if !reflect.DeepEqual(rep, want) || rep.AllocatedBytes <= 0 {
		t.Fatalf("report %+v\nwant   %+v", rep, want)
	}
	if err := sameFiles(before, snapshotFiles(t, fs, testDir)); err != nil {
		t.Fatalf("inspect changed the archive: %v", err)
	}
}

func TestInspectIncomplete(t *testing.T) {
	t.Parallel()
	fs := inspectSetup(t, 300)
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 1})
	if err != nil || rep.Integrity != IntegrityIncomplete || rep.PagesExamined != 1 || rep.ScannedRecords != 256 || rep.RecordCount != 300 {
		t.Fatalf("report %+v, %v", rep, err)
	}
}

func TestInspectMismatchAndCorrupt(t *testing.T) {
	t.Parallel()
	k, r := rec(t, testDatabase, 5, 0, "payload")
	cases := []struct {
		name string
		edit func(t *testing.T, fs *vfs.MemFS)
		want string
	}{
		{"accounting disagrees", func(t *testing.T, fs *vfs.MemFS) {
			editStore(t, fs, func(db *pebble.DB) {
				setKey(t, db, keyAccounting, encodeAccounting(accounting{Records: 11, EncodedBytes: 11 * Charge(k, r)}))
			})
		}, IntegrityMismatch},
		{"record deleted", func(t *testing.T, fs *vfs.MemFS) {
			editStore(t, fs, func(db *pebble.DB) {
				if err := db.Delete(recordKey(k), pebble.Sync); err != nil {
					t.Fatal(err)
				}
			})
		}, IntegrityMismatch},
		{"flipped record byte", func(t *testing.T, fs *vfs.MemFS) {
			editStore(t, fs, func(db *pebble.DB) {
				v := encodeValue(k, r)
				v[len(v)-1] ^= 1
				setKey(t, db, recordKey(k), v)
			})
		}, IntegrityCorrupt},
		{"flipped sstable byte", func(t *testing.T, fs *vfs.MemFS) {
			flipSSTByte(t, fs)
		}, IntegrityCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := inspectSetup(t, 10)
			tc.edit(t, fs)
			rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 4})
			if err != nil || rep.Integrity != tc.want {
				t.Fatalf("report %+v, %v; want %s", rep, err, tc.want)
			}
		})
	}
}

// flipSSTByte flips a byte in the middle of the first sstable.
func flipSSTByte(t *testing.T, fs *vfs.MemFS) {
	t.Helper()
	dir := fs.PathJoin(testDir, StoreDirName)
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The largest table holds records: the metadata keys have tables of
	// their own (splitMetaFromRecords), which Open reads.
	var largest []byte
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		buf, err := fs.UnsafeGetFileDataBuffer(fs.PathJoin(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if len(buf) > len(largest) {
			largest = buf
		}
	}
	if largest == nil {
		t.Fatal("no sstable")
	}
	largest[len(largest)/3] ^= 0x10
}

func TestInspectRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	empty := newMemFS(t, false)
	if _, err := inspect(ctx, testDir, testDatabase, empty, InspectOptions{MaxPages: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty directory: %v", err)
	}
	if names, _ := empty.List(testDir); len(names) != 0 {
		t.Fatalf("inspect created %v", names)
	}
	missing := vfs.NewMem()
	if _, err := inspect(ctx, testDir, testDatabase, missing, InspectOptions{MaxPages: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing directory: %v", err)
	}
	if _, err := missing.Stat(testDir); err == nil {
		t.Fatal("inspect created the directory")
	}

	fs := inspectSetup(t, 3)
	other := event.DatabaseID{0xff}
	rep, err := inspect(ctx, testDir, other, fs, InspectOptions{MaxPages: 1})
	if !errors.Is(err, ErrBindingChanged) || rep.DatabaseBinding != testDatabase.String() {
		t.Fatalf("other database: %+v, %v", rep, err)
	}
	for _, n := range []int{0, 257} {
		if _, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: n}); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("max pages %d: %v", n, err)
		}
	}
	// While a server holds the archive, inspection is refused.
	s := mustOpen(t, testOptions(t, fs))
	if _, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1}); !errors.Is(err, ErrBusy) {
		t.Fatalf("held archive: %v", err)
	}
	_ = s.Close()
	if rep, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1}); err != nil || rep.Integrity != IntegrityVerified {
		t.Fatalf("after release: %+v, %v", rep, err)
	}
}

func TestInspectTruncatedTableIsCorrupt(t *testing.T) {
	t.Parallel()
	fs := inspectSetup(t, 10)
	dir := fs.PathJoin(testDir, StoreDirName)
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		p := fs.PathJoin(dir, n)
		buf, err := fs.UnsafeGetFileDataBuffer(p)
		if err != nil {
			t.Fatal(err)
		}
		short := append([]byte(nil), buf[:len(buf)-100]...)
		f, err := fs.Create(p, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(short); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 1})
	if err != nil || rep.Integrity != IntegrityCorrupt {
		t.Fatalf("report %+v, %v", rep, err)
	}
}

// TestOpenDetectsEngineCorruption: a flipped byte in an sstable is found by
// startup validation (Pebble's block checksum), without taking the process
// down, and reported as ErrCorrupt.
func TestOpenDetectsEngineCorruption(t *testing.T) {
	t.Parallel()
	fs := inspectSetup(t, 50)
	flipSSTByte(t, fs)
	_, err := Open(context.Background(), testDir, testOptions(t, fs))
	if !errors.Is(err, ErrCorrupt) || ClassOf(err) != deliverytype.Stop {
		t.Fatalf("Open of a corrupt store: %v", err)
	}
	assertNoPath(t, err)
}

func TestInspectReportsProgressPerPage(t *testing.T) {
	t.Parallel()
	fs := inspectSetup(t, 300)
	var calls []int64
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 4, Progress: func(pages int, records, _, _ int64) {
		if pages != len(calls)+1 {
			t.Errorf("progress page %d after %d calls", pages, len(calls))
		}
		calls = append(calls, records)
	}})
	if err != nil || rep.Integrity != IntegrityVerified {
		t.Fatalf("inspect: %+v %v", rep, err)
	}
	if len(calls) != 2 || calls[0] != MaxPageRecords || calls[1] != 300 {
		t.Fatalf("progress calls %v, want [256 300]", calls)
	}
}
