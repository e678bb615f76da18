package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/config"
)

// TestScrubRateFollowsTheConfiguration: each database's archive destination
// scrubs at its outbox section's scrub_pages_per_second, 0 disabling it, and
// at config.DefaultScrubPagesPerSecond when the section does not say.
func TestScrubRateFollowsTheConfiguration(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "contract.toml"), []byte(statsContract), 0o600); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\ncredential_path = %q\n", root+"/creds")
	rates := map[string]string{"a": "", "b": "scrub_pages_per_second = 0\nfull_validation_interval = \"24h\"\n", "c": "scrub_pages_per_second = 9\n"}
	for _, alias := range []string{"a", "b", "c"} {
		dir := filepath.Join(root, "outbox-"+alias)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		toml += fmt.Sprintf("[databases.%s]\npath = %q\ncontract = %q\n[databases.%s.outbox]\nkind = \"durable_local\"\ndirectory = %q\nquota_encoded_bytes = 1000000\n%s",
			alias, root+"/db-"+alias, root+"/contract.toml", alias, dir, rates[alias])
	}
	cfg, err := config.Parse([]byte(toml), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Options{Config: cfg, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}()
	want := map[string]int{"a": config.DefaultScrubPagesPerSecond, "b": 0, "c": 9}
	if len(s.dbs) != len(want) {
		t.Fatalf("%d databases, want %d", len(s.dbs), len(want))
	}
	for _, d := range s.dbs {
		if got := d.dest.ScrubRate(); got != want[d.alias] {
			t.Errorf("database %s scrubs at %d pages/s, want %d", d.alias, got, want[d.alias])
		}
	}
}
