package archive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/archive"
	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

var db = event.DatabaseID{0x01, 0x93, 0x2a, 0x71, 0x01, 0x81, 0x70, 0x01, 0x81, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x02}

func stored(tb testing.TB, seq uint64, payload string) (event.Key, []byte) {
	tb.Helper()
	id := event.ID{Seq: seq}
	st, err := event.NewStored(id, "order_placed", []byte(payload))
	if err != nil {
		tb.Fatal(err)
	}
	return event.Key{Database: db, Incarnation: 1, Event: id}, st.Encode()
}

// privateDir returns a fresh 0700 archive directory on the real disk.
func privateDir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "outbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// TestRealDirectory exercises the default filesystem path: custody audit,
// creation with private modes, accept, reopen, busy, and offline Inspect.
func TestRealDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := privateDir(t)
	opts := archive.Options{Database: db, QuotaEncodedBytes: 1 << 20, MinFreeBytes: -1, Logger: zaptest.NewLogger(t)}
	s, err := archive.Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 20; i++ {
		k, r := stored(t, i, "payload")
		if out, err := s.Accept(ctx, k, r); err != nil || out != deliverytype.Stored {
			t.Fatalf("Accept: %v, %v", out, err)
		}
	}
	if err := s.Audit(); err != nil {
		t.Fatalf("Audit of the open store: %v", err)
	}
	if u := s.Usage(); u.Records != 20 || u.AllocatedBytes <= 0 {
		t.Fatalf("Usage %+v", u)
	}
	fi, err := os.Stat(filepath.Join(dir, archive.StoreDirName))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store directory mode: %v, %v", fi, err)
	}
	// The server holds the archive: inspection is refused.
	if _, err := archive.Inspect(ctx, dir, db, archive.InspectOptions{MaxPages: 1}); !errors.Is(err, archive.ErrBusy) {
		t.Fatalf("Inspect while open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := archive.Inspect(ctx, dir, db, archive.InspectOptions{MaxPages: 1})
	if err != nil || rep.Integrity != archive.IntegrityVerified || rep.RecordCount != 20 || rep.AllocatedBytes <= 0 {
		t.Fatalf("Inspect: %+v, %v", rep, err)
	}
	s, err = archive.Open(ctx, dir, opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if u := s.Usage(); u.Records != 20 {
		t.Fatalf("after reopen: %+v", u)
	}
}

func TestRealDirectoryRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	missing := filepath.Join(base, "missing")
	_, err := archive.Inspect(ctx, missing, db, archive.InspectOptions{MaxPages: 1})
	if !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("Inspect of a missing directory: %v", err)
	}
	if strings.Contains(err.Error(), base) {
		t.Fatalf("error contains a path: %v", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatal("Inspect created the directory")
	}
	empty := privateDir(t)
	if _, err := archive.Inspect(ctx, empty, db, archive.InspectOptions{MaxPages: 1}); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("Inspect of an empty directory: %v", err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatal("Inspect created entries")
	}
	// A world-readable directory is refused before anything is created.
	open := privateDir(t)
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = archive.Open(ctx, open, archive.Options{Database: db, QuotaEncodedBytes: 1 << 20})
	if archive.ClassOf(err) != deliverytype.Refused || !errors.Is(err, archive.ErrRefused) || !errors.Is(err, archive.ErrCustody) || strings.Contains(err.Error(), base) {
		t.Fatalf("Open of a 0755 directory: %v", err)
	}
	if names, _ := os.ReadDir(open); len(names) != 0 {
		t.Fatal("Open created entries in a refused directory")
	}
}

// Example archives two events, retries one, and reads the archive back in
// validated pages.
func Example() {
	ctx := context.Background()
	fs := vfs.NewMem() // production passes FS: nil (the real disk, with custody checks)
	_ = fs.MkdirAll("/var/lib/riffdb/outbox", 0o700)
	db, _ := event.ParseDatabaseID("00000000002a71018101010101010101")
	s, err := archive.Open(ctx, "/var/lib/riffdb/outbox", archive.Options{
		Database: db, QuotaEncodedBytes: 1 << 30, FS: fs,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for _, seq := range []uint64{1, 2, 1} {
		st, _ := event.NewStored(event.ID{Seq: seq}, "order_placed", []byte(`{"order_id":"A-1"}`))
		out, err := s.Accept(ctx, event.Key{Database: db, Incarnation: 1, Event: st.ID}, st.Encode())
		fmt.Println(st.ID, out, err)
	}
	r := s.NewReader()
	defer r.Close()
	var after archive.Cursor
	for {
		page, err := r.ReadPage(ctx, after)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, rec := range page.Records {
			fmt.Println(rec.Key.Event, rec.Event.Type, rec.Charge)
		}
		if after = page.Next; after == nil {
			break
		}
	}
	u := s.Usage()
	fmt.Println(u.Records, u.EncodedBytes)
	// Output:
	// 1.0 stored <nil>
	// 2.0 stored <nil>
	// 1.0 duplicate <nil>
	// 1.0 order_placed 121
	// 2.0 order_placed 121
	// 2 242
}
