package backup_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/backup"
	"github.com/riffdb/riffdb/event"
)

// TestManifestWithARepeatedKeyIsDamaged: a manifest is read under
// strictjson's rules, so one that holds a key twice (encoding/json would
// keep the last) is damaged: List shows it so and Restore refuses it.
func TestManifestWithARepeatedKeyIsDamaged(t *testing.T) {
	t.Parallel()
	e, m := backedUp(t, 3, 0)
	id, _ := event.ParseDatabaseID(m.DatabaseID)
	name := filepath.Join(e.root, m.Name, "manifest.json")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("{"), []byte(`{"history_incarnation": 99,`), 1)
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := backup.List(e.root, id)
	if err != nil || len(list) != 1 || !list[0].Damaged {
		t.Fatalf("List = %+v, %v; want the entry listed as damaged", list, err)
	}
	if _, err := backup.Restore(context.Background(), e.request(m.Name)); !errors.Is(err, backup.ErrBackupDamaged) {
		t.Fatalf("Restore = %v, want ErrBackupDamaged", err)
	}
}
