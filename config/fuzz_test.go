package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/config"
)

// FuzzParse checks that Parse never panics, that every error wraps
// ErrInvalid and carries the package prefix, and that every accepted
// configuration validates again.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		singleTOML, namedTOML, followerTOML, serverTOML, "",
		string(config.DevTOML("/srv/dev")),
		rolesTOML(rolePaths(), "/srv/secret-contract.toml", "/srv/secret-contract.toml"),
		singleTOML + "[database]\n",
		"database = { path = \"/a\", path = \"/b\" }\n",
		"[databases.a]\npath = \"/a\"\ncontract = \"/c\"\n[databases.a.outbox]\nquota_encoded_bytes = 1.5\n",
		"[[database]]\n",
		"[server]\nmode = 'follower'\n[maintenance.outbox]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, nil, config.Overrides{})
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted configuration does not validate again: %v", err)
		}
		if len(c.Databases) == 0 || len(c.Databases) > config.MaxDatabases {
			t.Fatalf("accepted %d databases", len(c.Databases))
		}
		for i := 1; i < len(c.Databases); i++ {
			if c.Databases[i-1].Alias >= c.Databases[i].Alias {
				t.Fatalf("databases not sorted by alias")
			}
		}
	})
}
