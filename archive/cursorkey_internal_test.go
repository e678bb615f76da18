package archive

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/riffdb/riffdb/internal/store/dirsync"
)

// firstStep builds an archive of 300 records and runs the first step of
// a scan of one page, returning the archive and the step's cursor.
func firstStep(t *testing.T) (*vfs.MemFS, string) {
	t.Helper()
	fs := steppedSetup(t, 300)
	rep, err := inspect(context.Background(), testDir, testDatabase, fs, InspectOptions{MaxPages: 1})
	if err != nil || rep.NextCursor == "" {
		t.Fatalf("step 1: %+v, %v", rep, err)
	}
	return fs, rep.NextCursor
}

func keyPath(fs vfs.FS) string { return fs.PathJoin(testDir, StoreDirName, CursorKeyFileName) }

func readKeyFile(t *testing.T, fs vfs.FS) []byte {
	t.Helper()
	b, ok, err := readOwnFile(fs, fs.PathJoin(testDir, StoreDirName), CursorKeyFileName, 1<<10, "reading the key")
	if err != nil || !ok {
		t.Fatalf("reading the key file: %v (exists: %t)", err, ok)
	}
	return b
}

func writeKeyFile(t *testing.T, fs vfs.FS, b []byte) {
	t.Helper()
	if err := dirsync.WriteFile(fs, fs.PathJoin(testDir, StoreDirName), CursorKeyFileName, b); err != nil {
		t.Fatal(err)
	}
}

// TestCursorKeyIsCreatedWithTheStore: a new archive has a key file, and the
// cursors it issues carry neither the key nor anything that reveals it.
func TestCursorKeyIsCreatedWithTheStore(t *testing.T) {
	t.Parallel()
	fs, cursor := firstStep(t)
	k, err := decodeCursorKey(readKeyFile(t, fs))
	if err != nil || k == (cursorKey{}) {
		t.Fatalf("key file: %v", err)
	}
	raw, _ := decodeCursorText([]byte(cursor))
	if bytes.Contains(raw, k.b[:8]) || strings.Contains(cursor, string(k.b[:8])) {
		t.Fatal("the cursor carries the key")
	}
}

// TestDamagedCursorKeyIsRefused: a key file that is truncated, zeroed or
// has a flipped byte is damage: inspect says corrupt (with or without a
// cursor), the server's Open refuses the archive as corrupt, and neither
// replaces the file.
func TestDamagedCursorKeyIsRefused(t *testing.T) {
	t.Parallel()
	damages := map[string]func([]byte) []byte{
		"truncate-0":    func([]byte) []byte { return nil },
		"truncate-half": func(b []byte) []byte { return b[:len(b)/2] },
		"zero-fill":     func(b []byte) []byte { return make([]byte, len(b)) },
		"flip-byte":     func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0xff; return b },
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			fs, cursor := firstStep(t)
			writeKeyFile(t, fs, damage(readKeyFile(t, fs)))
			damaged := readKeyFile(t, fs)
			before := storeListing(t, fs)
			for _, after := range []string{"", cursor} {
				got, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages, After: after})
				if err != nil || got.Integrity != IntegrityCorrupt || got.NextCursor != "" {
					t.Fatalf("inspect (with a cursor: %t): %+v, %v; want corrupt", after != "", got, err)
				}
			}
			_, err := Open(ctx, testDir, testOptions(t, fs))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v; want ErrCorrupt", err)
			}
			assertNoPath(t, err)
			if !bytes.Equal(readKeyFile(t, fs), damaged) {
				t.Fatal("the damaged key file was replaced")
			}
			if after := storeListing(t, fs); after != before {
				t.Fatalf("the refused store changed:\n%s\nthen\n%s", before, after)
			}
		})
	}
}

// TestMissingCursorKey: an archive without a key file (created by an
// older riffdb, or the file was removed) is still verified in one step;
// inspect refuses to issue or accept a cursor and creates nothing. The
// server's Open writes a new key, with a warning that names the file but
// not the key; the cursors of the old key are invalid_cursor.
func TestMissingCursorKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs, cursor := firstStep(t)
	old := cursor
	if err := fs.Remove(keyPath(fs)); err != nil {
		t.Fatal(err)
	}
	before := storeListing(t, fs)
	got, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: MaxInspectPages})
	if err != nil || got.Integrity != IntegrityVerified || got.TotalRecords != 300 {
		t.Fatalf("one-step inspect without a key: %+v, %v", got, err)
	}
	for _, opts := range []InspectOptions{{MaxPages: 1}, {MaxPages: MaxInspectPages, After: old}} {
		got, err := inspect(ctx, testDir, testDatabase, fs, opts)
		if !errors.Is(err, ErrRefused) || got.NextCursor != "" || got.Integrity != "" ||
			!strings.Contains(err.Error(), "no cursor key") {
			t.Fatalf("inspect %+v without a key: %+v, %v; want ErrRefused", opts, got, err)
		}
		assertNoPath(t, err)
	}
	if after := storeListing(t, fs); after != before {
		t.Fatalf("inspection changed the store:\n%s\nthen\n%s", before, after)
	}

	core, logs := observer.New(zapcore.WarnLevel)
	o := testOptions(t, fs)
	o.Logger = zap.New(core)
	s, err := Open(ctx, testDir, o)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	k, err := decodeCursorKey(readKeyFile(t, fs))
	if err != nil {
		t.Fatalf("the key was not written: %v", err)
	}
	warned := false
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "no cursor key") {
			warned = true
		}
		for _, f := range e.Context {
			if strings.Contains(f.String, string(k.b[:])) {
				t.Fatal("a log line carries the key")
			}
		}
	}
	if !warned {
		t.Fatal("the new key was not logged")
	}
	if _, err := inspect(ctx, testDir, testDatabase, fs, InspectOptions{MaxPages: 1, After: old}); !errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("cursor of the old key: %v; want invalid_cursor", err)
	}
	if reps := runSteps(t, fs, 1, false); reps[len(reps)-1].Integrity != IntegrityVerified {
		t.Fatalf("stepped scan under the new key: %+v", reps[len(reps)-1])
	}
}
