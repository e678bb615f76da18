package archive

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riffdb/riffdb/event"
)

// Offsets of a step cursor's fields (inspectcursor.go), as a tool that
// edits cursors would know them.
const (
	forgeLast    = 2 + 16 + 1 // the last key scanned (event.KeyLen)
	forgeRecords = forgeLast + 36 + 16 + 4 + 8
	forgeBytes   = forgeRecords + 8
)

// forgeCursor decodes text, lets edit change its bytes and encodes it again
// with a CRC32C over everything before its last four bytes recomputed, as
// a checksum-only cursor would be forged.
func forgeCursor(t *testing.T, text string, edit func(b []byte)) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil {
		t.Fatal(err)
	}
	edit(b)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestForgedStepCursorIsRefused: a cursor whose last key is rewritten to
// the end of the keyspace and whose totals are rewritten to the accounting,
// with its checksum recomputed, must not complete the scan after one page:
// it is invalid_cursor. So is a cursor with any other byte changed, its
// checksum recomputed.
func TestForgedStepCursorIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := steppedSetup(t, 700)
	rep, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1})
	if err != nil || rep.Integrity != IntegrityIncomplete || rep.TotalRecords >= 700 {
		t.Fatalf("step 1: %+v, %v", rep, err)
	}
	before := storeListing(t, fs)
	forged := forgeCursor(t, rep.NextCursor, func(b []byte) {
		end := event.Key{Database: testDatabase, Incarnation: math.MaxUint64, Event: event.ID{Seq: math.MaxUint64, Pos: math.MaxUint32}}
		copy(b[forgeLast:], end.Bytes())
		binary.BigEndian.PutUint64(b[forgeRecords:], uint64(rep.RecordCount))
		binary.BigEndian.PutUint64(b[forgeBytes:], uint64(rep.EncodedBytes))
	})
	got, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1, After: forged})
	if !errors.Is(err, ErrInvalidCursor) || got.Integrity != "" {
		t.Fatalf("forged cursor (last key at the end, totals at the accounting): integrity %q after %d pages, %v; want invalid_cursor",
			got.Integrity, got.PagesExamined, err)
	}
	assertNoPath(t, err)

	raw, _ := base64.RawURLEncoding.DecodeString(rep.NextCursor)
	for i := 2; i < len(raw)-4; i++ { // the tag and version are refused by their own check
		f := forgeCursor(t, rep.NextCursor, func(b []byte) { b[i] ^= 0x01 })
		if got, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages, After: f}); !errors.Is(err, ErrInvalidCursor) {
			t.Fatalf("byte %d changed, checksum recomputed: integrity %q, %v; want invalid_cursor", i, got.Integrity, err)
		}
	}
	// The untouched cursor still resumes the scan, to the same verdict as
	// one scan.
	got, err = inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages, After: rep.NextCursor})
	if err != nil || got.Integrity != IntegrityVerified || got.TotalRecords != 700 {
		t.Fatalf("genuine cursor: %+v, %v", got, err)
	}
	if after := storeListing(t, fs); after != before {
		t.Fatalf("inspection changed the store:\n%s\nthen\n%s", before, after)
	}
}

// storeListing lists the store directory's files with their sizes and
// the CRC32C of their contents.
func storeListing(t *testing.T, fs vfs.FS) string {
	t.Helper()
	dir := fs.PathJoin(testDir, StoreDirName)
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		f, err := fs.Open(fs.PathJoin(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %08x\n", n, len(data), crc32.Checksum(data, castagnoli))
	}
	return b.String()
}
