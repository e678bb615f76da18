package archive

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

const testDir = "/arch"

var testDatabase = event.DatabaseID{0x01, 0x93, 0x2a, 0x71, 0x01, 0x81, 0x70, 0x01, 0x81, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01}

// rec builds a key and the exact stored-event bytes for (seq, pos).
func rec(t testing.TB, db event.DatabaseID, seq uint64, pos uint32, payload string) (event.Key, []byte) {
	t.Helper()
	id := event.ID{Seq: seq, Pos: pos}
	st, err := event.NewStored(id, "order_placed", []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return event.Key{Database: db, Incarnation: 1, Event: id}, st.Encode()
}

// newMemFS returns a MemFS holding the (empty) archive directory.
func newMemFS(t testing.TB, crashable bool) *vfs.MemFS {
	t.Helper()
	fs := vfs.NewMem()
	if crashable {
		fs = vfs.NewCrashableMem()
	}
	prepareArchiveDir(t, fs)
	return fs
}

// prepareArchiveDir creates the archive directory and makes it durable, so
// that a crash clone keeps it.
func prepareArchiveDir(t testing.TB, fs vfs.FS) {
	t.Helper()
	if err := fs.MkdirAll(testDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
}

func testOptions(t testing.TB, fs vfs.FS) Options {
	o := Options{Database: testDatabase, QuotaEncodedBytes: 1 << 30, FS: fs, TxnTimeout: 10 * time.Second}
	if tt, ok := t.(*testing.T); ok {
		o.Logger = zaptest.NewLogger(tt)
	}
	return o
}

func mustOpen(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), testDir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustAccept(t testing.TB, s *Store, k event.Key, r []byte, want deliverytype.Outcome) {
	t.Helper()
	got, err := s.Accept(context.Background(), k, r)
	if err != nil || got != want {
		t.Fatalf("Accept(%s) = %v, %v; want %v", k.Event, got, err, want)
	}
}

// editStore opens the closed store directly with Pebble and applies fn.
func editStore(t testing.TB, fs vfs.FS, fn func(db *pebble.DB)) {
	t.Helper()
	db, err := pebble.Open(fs.PathJoin(testDir, StoreDirName), &pebble.Options{FS: fs, FormatMajorVersion: FormatMajorVersion, Logger: testutil.QuietPebbleLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	fn(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// assertNoPath fails when an error message leaks a path of the test.
func assertNoPath(t testing.TB, err error, paths ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, p := range append(paths, testDir, StoreDirName, ".log", ".sst") {
		if strings.Contains(err.Error(), p) {
			t.Fatalf("error %q contains %q", err, p)
		}
	}
}

// snapshotFiles returns every file's bytes under dir (recursively).
func snapshotFiles(t testing.TB, fs vfs.FS, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		p := fs.PathJoin(dir, n)
		fi, err := fs.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() {
			for k, v := range snapshotFiles(t, fs, p) {
				out[k] = v
			}
			continue
		}
		f, err := fs.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(readerOf{f}); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		out[p] = buf.Bytes()
	}
	return out
}

type readerOf struct{ f vfs.File }

func (r readerOf) Read(p []byte) (int, error) { return r.f.Read(p) }

func sameFiles(a, b map[string][]byte) error {
	if len(a) != len(b) {
		return fmt.Errorf("file count %d != %d", len(a), len(b))
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return fmt.Errorf("file %s changed", k)
		}
	}
	return nil
}
