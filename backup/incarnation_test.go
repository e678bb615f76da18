package backup_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/primary"
)

// copyEntry copies the entry name under root to a new entry to, file by
// file (0600 files, 0700 directories), and returns to's path.
func copyEntry(t *testing.T, root, name, to string) string {
	t.Helper()
	src, dst := filepath.Join(root, name), filepath.Join(root, to)
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.Mkdir(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// rewriteManifest rewrites the manifest of the entry dir: its files are
// measured again from the store, then edit changes what it likes.
func rewriteManifest(t *testing.T, dir string, edit func(*backup.Manifest)) {
	t.Helper()
	name := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var m backup.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.Name = filepath.Base(dir)
	entries, err := os.ReadDir(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	m.Files = nil
	for _, e := range entries { // sorted by name
		b, err := os.ReadFile(filepath.Join(dir, "store", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m.Files = append(m.Files, backup.File{Name: e.Name(), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])})
	}
	edit(&m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// stamp makes the store of the entry dir one of history incarnation inc.
func stamp(t *testing.T, dir string, inc uint64) {
	t.Helper()
	store := filepath.Join(dir, "store")
	lock, err := primary.LockDirectory(store)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := primary.Stamp(context.Background(), store, lock, inc); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreIncarnationCountsOnlyVerifiedManifests: an entry under
// backup_root whose store does not match its manifest (a manifest edited to
// claim incarnation 41, or 2⁶⁴ − 1, which wrapped the formula to 0) cannot
// raise the new incarnation; an entry that verifies does.
func TestRestoreIncarnationCountsOnlyVerifiedManifests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, claim := range []uint64{41, math.MaxUint64} {
		e, m := backedUp(t, 3, 0)
		forged := copyEntry(t, e.root, m.Name, "backup-forged")
		rewriteManifest(t, forged, func(f *backup.Manifest) { f.HistoryIncarnation = claim })
		res, err := backup.Restore(ctx, e.request(m.Name))
		if err != nil || res.NewIncarnation != 2 {
			t.Fatalf("claim %d: restore = %+v, %v; want incarnation 2 (the forged entry does not verify)", claim, res, err)
		}
	}
	e, m := backedUp(t, 3, 0)
	real := copyEntry(t, e.root, m.Name, "backup-real")
	stamp(t, real, 7)
	rewriteManifest(t, real, func(f *backup.Manifest) { f.HistoryIncarnation = 7 })
	if res, err := backup.Restore(ctx, e.request(m.Name)); err != nil || res.NewIncarnation != 8 {
		t.Fatalf("restore = %+v, %v; want incarnation 8 (a verified entry of incarnation 7)", res, err)
	}
}

// TestRestoreRefusesAnExhaustedIncarnation: when the highest incarnation
// of the formula is 2⁶⁴ − 1 (here a verified entry's), the restore is
// refused with ErrIncarnationExhausted and changes nothing, instead of
// wrapping to 0.
func TestRestoreRefusesAnExhaustedIncarnation(t *testing.T) {
	t.Parallel()
	e, m := backedUp(t, 3, 0)
	top := copyEntry(t, e.root, m.Name, "backup-top")
	stamp(t, top, math.MaxUint64)
	rewriteManifest(t, top, func(f *backup.Manifest) { f.HistoryIncarnation = math.MaxUint64 })
	before := tree(t, e.root, filepath.Dir(e.opts.Path))
	_, err := backup.Restore(context.Background(), e.request(m.Name))
	if !errors.Is(err, backup.ErrIncarnationExhausted) {
		t.Fatalf("restore = %v, want ErrIncarnationExhausted", err)
	}
	if after := tree(t, e.root, filepath.Dir(e.opts.Path)); after != before {
		t.Fatalf("the refused restore changed something:\n%s\n---\n%s", before, after)
	}
}
