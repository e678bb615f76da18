package config_test

import (
	"path/filepath"
	"testing"

	"github.com/riffdb/riffdb/config"
)

func TestDevTOML(t *testing.T) {
	t.Parallel()
	for _, root := range []string{
		"/var/lib/riffdb-dev",
		`/tmp/with"quote`,
		`/tmp/with\backslash`,
		"/tmp/both\"and\\ and spaces/é",
		"/tmp/control\tchar",
		"/tmp/trailing/",
		"/",
	} {
		c, err := config.Parse(config.DevTOML(root), nil, config.Overrides{})
		if err != nil {
			t.Errorf("root %q: %v\n%s", root, err, config.DevTOML(root))
			continue
		}
		r := filepath.Clean(root)
		if c.Server.Mode != "primary" || c.Server.CredentialPath != filepath.Join(r, "credentials") {
			t.Errorf("root %q: server = %+v", root, c.Server)
		}
		if len(c.Databases) != 1 {
			t.Fatalf("root %q: %d databases", root, len(c.Databases))
		}
		d := c.Databases[0]
		if d.Alias != "default" || d.Path != filepath.Join(r, "db") || d.Contract != filepath.Join(r, "contract.toml") ||
			d.BackupRoot != filepath.Join(r, "backups") {
			t.Errorf("root %q: database = %+v", root, d)
		}
		want := config.Outbox{Kind: "durable_local", Directory: filepath.Join(r, "outbox"), QuotaEncodedBytes: 1 << 30,
			ScrubPagesPerSecond: config.DefaultScrubPagesPerSecond}
		if d.Outbox == nil || *d.Outbox != want {
			t.Errorf("root %q: outbox = %+v, want %+v", root, d.Outbox, want)
		}
	}
}
