package primary

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/riffdb/riffdb/primary/contract"
)

// TestStampWritesTheCleanFloor: the stamped copy's creation marker names its
// identity, its last commit and the MANIFEST its clean close left, so Open
// checks the copy against it like any cleanly closed database.
func TestStampWritesTheCleanFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := contract.Compile([]byte("[commands.one]\ninput = { x = \"int\" }\nemits = [\"e\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "db"), Contract: c, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 3; i++ {
		if _, err := db.Execute(ctx, "one", json.RawMessage(`{"x":1}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if err := db.Checkpoint(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, marked, _ := readFloor(vfs.Default, dir); marked {
		t.Fatal("the checkpoint carries a creation marker before it is stamped")
	}
	lock, err := LockDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := Stamp(ctx, dir, lock, 7); err != nil {
		t.Fatal(err)
	}
	f, marked, err := readFloor(vfs.Default, dir)
	if err != nil || !marked {
		t.Fatalf("marker: %v, marked %v", err, marked)
	}
	if f.ID != db.Identity() || f.Last != 3 || f.ManifestNum == 0 || f.ManifestSize == 0 {
		t.Fatalf("floor %+v", f)
	}
}
