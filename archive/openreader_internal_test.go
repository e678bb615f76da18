//go:build linux

package archive

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
	"github.com/riffdb/riffdb/event"
)

// readAll reads every page of r after cursor after and returns the number
// of records and the last cursor before the end.
func readAll(t *testing.T, r *Reader, after Cursor) (int, Cursor) {
	t.Helper()
	n, last := 0, after
	for {
		p, err := r.ReadPage(context.Background(), after)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Records)
		if p.Next == nil {
			return n, last
		}
		after, last = p.Next, p.Next
	}
}

func TestOpenReaderReadsWithoutATrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := realArchive(t, 600)
	root := filepath.Dir(dir)
	before := listing(t, root)
	r, err := OpenReader(ctx, dir, testDatabase)
	if err != nil {
		t.Fatal(err)
	}
	// Custody is exclusive: neither a server nor an inspection gets in.
	if _, err := Open(ctx, dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Open while a reader holds the archive: %v", err)
	}
	if _, err := Inspect(ctx, dir, testDatabase, InspectOptions{MaxPages: 1}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Inspect while a reader holds the archive: %v", err)
	}
	p, err := r.ReadPage(ctx, nil)
	if err != nil || p.Next == nil {
		t.Fatalf("first page: %d records, %v", len(p.Records), err)
	}
	// A campaign resumes in a new reader with the text form of the cursor.
	text, _ := p.Next.MarshalText()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadPage(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadPage after Close: %v", err)
	}
	var cur Cursor
	if err := cur.UnmarshalText(text); err != nil {
		t.Fatal(err)
	}
	r, err = OpenReader(ctx, dir, testDatabase)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := readAll(t, r, cur)
	if n+len(p.Records) != 600 {
		t.Fatalf("read %d records after the first page of %d", n, len(p.Records))
	}
	_ = r.Close()
	requireSameListing(t, "OpenReader", before, listing(t, root))

	// The server's reader issues cursors of the same archive.
	s, err := Open(ctx, dir, Options{Database: testDatabase, QuotaEncodedBytes: 1 << 40, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	sr := s.NewReader()
	sp, err := sr.ReadPage(ctx, nil)
	_ = sr.Close()
	_ = s.Close()
	if err != nil {
		t.Fatal(err)
	}
	r, err = OpenReader(ctx, dir, testDatabase)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n, _ := readAll(t, r, sp.Next); n != 600-MaxPageRecords {
		t.Fatalf("read %d records after the server's first page", n)
	}
}

func TestOpenReaderRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := bulkDir(t)
	if _, err := OpenReader(ctx, empty, testDatabase); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty directory: %v", err)
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatal("OpenReader created entries")
	}
	if _, err := OpenReader(ctx, filepath.Join(empty, "missing"), testDatabase); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing directory: %v", err)
	}
	dir := realArchive(t, 300)
	if _, err := OpenReader(ctx, dir, event.DatabaseID{0xee}); !errors.Is(err, ErrBindingChanged) {
		t.Fatalf("other database: %v", err)
	}
	// A cursor of another archive of the same database is refused.
	other := realArchive(t, 300)
	ro, err := OpenReader(ctx, other, testDatabase)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ro.ReadPage(ctx, nil)
	_ = ro.Close()
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(ctx, dir, testDatabase)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.ReadPage(ctx, p.Next); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("cursor of another archive: %v", err)
	}
	if _, err := OpenReader(ctx, dir, testDatabase); !errors.Is(err, ErrBusy) {
		t.Fatalf("second reader in the process: %v", err)
	}
}

// TestHighestIncarnation: one reverse seek finds the highest incarnation
// of which the archive holds a record, whatever the order of acceptance;
// an archive without records has none.
func TestHighestIncarnation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	highest := func(dir string) (uint64, bool) {
		t.Helper()
		r, err := OpenReader(ctx, dir, testDatabase)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		inc, ok, err := r.HighestIncarnation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return inc, ok
	}
	empty := bulkDir(t)
	bulkLoad(t, empty, testDatabase, 0, "payload")
	if inc, ok := highest(empty); ok {
		t.Fatalf("an empty archive: incarnation %d", inc)
	}
	dir := bulkDir(t)
	bulkLoadAt(t, dir, testDatabase, 5, 300, "payload", false)
	editReal(t, dir, func(s *Store) {
		// An older incarnation accepted later sorts below incarnation 5.
		k, r := rec(t, testDatabase, 1_000_000, 0, "late")
		mustAccept(t, s, k, r, deliverytype.Stored)
	})
	if inc, ok := highest(dir); !ok || inc != 5 {
		t.Fatalf("HighestIncarnation = %d, %v; want 5", inc, ok)
	}
}
