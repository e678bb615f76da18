package primary_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/primary"
)

// TestCredentialAnchorOnlyInACreatedDatabase writes, reads and damages a
// credential anchor: a directory without the creation marker (a database
// not created yet) gets none and reads as zero, and a damaged file is
// ErrCorrupt without the path.
func TestCredentialAnchorOnlyInACreatedDatabase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if wrote, err := primary.WriteCredentialAnchor(dir, primary.CredentialAnchor{Generation: 5}); err != nil || wrote {
		t.Fatalf("a database not created yet: wrote %v, %v", wrote, err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("a database not created yet got files: %v", names)
	}
	if err := os.WriteFile(filepath.Join(dir, "riffdb-created"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want := primary.CredentialAnchor{Generation: 7, AcceptedFrom: 9}
	if wrote, err := primary.WriteCredentialAnchor(dir, want); err != nil || !wrote {
		t.Fatalf("write: %v, %v", wrote, err)
	}
	if got, err := primary.ReadCredentialAnchor(dir); err != nil || got != want {
		t.Fatalf("read = %+v, %v; want %+v", got, err, want)
	}
	path := filepath.Join(dir, "riffdb-credentials")
	b, _ := os.ReadFile(path)
	b[10] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := primary.ReadCredentialAnchor(dir)
	if !errors.Is(err, primary.ErrCorrupt) || strings.Contains(err.Error(), dir) {
		t.Fatalf("damaged anchor: %v, want ErrCorrupt without the path", err)
	}
}
