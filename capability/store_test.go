package capability_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/riffdb/riffdb/capability"
	"github.com/riffdb/riffdb/internal/testsupport/testutil"
)

// clock is a manual clock shared by the stores of one test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// After implements the clock interface; the store never waits on it.
func (c *clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type bundle struct {
	dir   string
	clock *clock
}

func setup(t *testing.T) (*capability.Store, bundle) {
	t.Helper()
	b := bundle{dir: filepath.Join(t.TempDir(), "credentials"),
		clock: &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	s, err := capability.OpenWith(b.dir, capability.Options{Clock: b.clock})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, b
}

func (b bundle) open(t *testing.T) *capability.Store {
	t.Helper()
	s, err := capability.OpenWith(b.dir, capability.Options{Clock: b.clock})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestCreateAuthenticateRevokeList(t *testing.T) {
	s, b := setup(t)
	tokA, a, err := s.Create("stats poller", []capability.Permission{capability.ReadHealth, capability.ReadStatistics, capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tokA, "riffdb_") {
		t.Fatalf("token %q lacks the prefix", tokA)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tokA, "riffdb_"))
	if err != nil || len(raw) != 32 {
		t.Fatalf("token body is not 32 bytes of base64url: %v, %d", err, len(raw))
	}
	if len(a.ID) != 16 || strings.Trim(a.ID, "0123456789abcdef") != "" {
		t.Fatalf("id %q is not short hex", a.ID)
	}
	if fmt.Sprint(a.Permissions) != "[read_statistics read_health]" || a.Name != "stats poller" ||
		a.Database != "" || a.Revoked || !a.CreatedAt.Equal(b.clock.Now()) {
		t.Fatalf("created = %+v", a)
	}
	b.clock.Advance(time.Second)
	tokB, bc, err := s.Create("", []capability.Permission{capability.ExecuteCommands}, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if tokA == tokB || a.ID == bc.ID {
		t.Fatal("tokens or ids repeat")
	}

	got, err := s.Authenticate(tokA)
	if err != nil || got.ID != a.ID || fmt.Sprint(got) != fmt.Sprint(a) {
		t.Fatalf("Authenticate(A) = %+v, %v; want %+v", got, err, a)
	}
	got, err = s.Authenticate(tokB)
	if err != nil || got.ID != bc.ID || got.Database != "orders" {
		t.Fatalf("Authenticate(B) = %+v, %v", got, err)
	}

	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != bc.ID {
		t.Fatalf("List = %+v, %v", list, err)
	}

	if err := s.Revoke(a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(tokA); !errors.Is(err, capability.ErrUnauthenticated) {
		t.Fatalf("revoked token: err = %v", err)
	}
	if _, err := s.Authenticate(tokB); err != nil {
		t.Fatalf("other token after revoke: %v", err)
	}
	if err := s.Revoke(a.ID); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	for _, id := range []string{"0123456789abcdef", "nope", ""} {
		if err := s.Revoke(id); !errors.Is(err, capability.ErrNotFound) {
			t.Fatalf("Revoke(%q) = %v, want ErrNotFound", id, err)
		}
	}
	list, err = s.List()
	if err != nil || !list[0].Revoked || list[1].Revoked {
		t.Fatalf("List after revoke = %+v, %v", list, err)
	}

	// A restart keeps the key and the store.
	s2 := b.open(t)
	if got, err := s2.Authenticate(tokB); err != nil || got.ID != bc.ID {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	if _, err := s2.Authenticate(tokA); !errors.Is(err, capability.ErrUnauthenticated) {
		t.Fatalf("revoked after reopen: %v", err)
	}
}

func TestAuthenticateRefuses(t *testing.T) {
	s, _ := setup(t)
	tok, _, err := s.Create("x", []capability.Permission{capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(tok, "riffdb_")
	flipped := []byte(body)
	flipped[0] ^= 1
	if flipped[0] == '-' || flipped[0] == '_' {
		flipped[0] = 'A'
	}
	cases := map[string]string{
		"empty":             "",
		"prefix only":       "riffdb_",
		"no prefix":         body,
		"other prefix":      "riffdX_" + body,
		"wrong token":       "riffdb_" + string(flipped),
		"random token":      "riffdb_" + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)),
		"truncated":         tok[:len(tok)-1],
		"extended":          tok + "A",
		"padded":            tok + "=",
		"std alphabet":      "riffdb_" + strings.Repeat("+", 43),
		"whitespace":        " " + tok,
		"non-canonical end": "riffdb_" + body[:42] + "B", // nonzero trailing bits
	}
	for name, token := range cases {
		t.Run(name, func(t *testing.T) {
			if token == tok {
				t.Skip("case equals the real token")
			}
			c, err := s.Authenticate(token)
			if !errors.Is(err, capability.ErrUnauthenticated) {
				t.Fatalf("Authenticate = %+v, %v; want ErrUnauthenticated", c, err)
			}
			if token != "" && strings.Contains(err.Error(), token) {
				t.Fatal("error echoes the token")
			}
		})
	}
}

func TestCreateInvalid(t *testing.T) {
	s, _ := setup(t)
	cases := []struct {
		name, capName, db string
		perms             []capability.Permission
	}{
		{"no permissions", "n", "", nil},
		{"unknown permission", "n", "", []capability.Permission{"read_everything"}},
		{"bad alias", "n", "Orders", []capability.Permission{capability.ExecuteCommands}},
		{"alias with slash", "n", "a/b", []capability.Permission{capability.ExecuteCommands}},
		{"control in name", "a\nb", "", []capability.Permission{capability.ReadHealth}},
		{"invalid utf8 name", "\xff", "", []capability.Permission{capability.ReadHealth}},
		{"long name", strings.Repeat("n", 129), "", []capability.Permission{capability.ReadHealth}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := s.Create(tc.capName, tc.perms, tc.db); !errors.Is(err, capability.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Fatalf("invalid creations stored something: %+v, %v", list, err)
	}
}

func TestParsePermission(t *testing.T) {
	for _, p := range capability.AllPermissions() {
		got, err := capability.ParsePermission(string(p))
		if err != nil || got != p {
			t.Fatalf("ParsePermission(%q) = %q, %v", p, got, err)
		}
	}
	want := []capability.Permission{capability.ExecuteCommands, capability.ReadStatistics, capability.ReadHealth,
		capability.ManageCapabilities, capability.ManageBackups, capability.ReadOutbox, capability.ManageOutbox}
	if got := capability.AllPermissions(); !slices.Equal(got, want) {
		t.Fatalf("AllPermissions() = %v, want %v (canonical order)", got, want)
	}
	if capability.ManageBackups != "manage_backups" || capability.ManageBackups.GlobalOnly() {
		t.Fatal("manage_backups must be spelled so and allowed on a database-scoped capability")
	}
	if capability.ReadOutbox != "read_outbox" || capability.ReadOutbox.GlobalOnly() {
		t.Fatal("read_outbox must be spelled so and allowed on a database-scoped capability")
	}
	if capability.ManageOutbox != "manage_outbox" || capability.ManageOutbox.GlobalOnly() {
		t.Fatal("manage_outbox must be spelled so and allowed on a database-scoped capability")
	}
	if _, err := capability.ParsePermission("outbox"); err == nil || !strings.Contains(err.Error(), "read_outbox") ||
		!strings.Contains(err.Error(), "manage_outbox") {
		t.Fatalf("the unknown-permission error does not list read_outbox: %v", err)
	}
	if _, err := capability.ParsePermission("backup"); err == nil || !strings.Contains(err.Error(), "manage_backups") {
		t.Fatalf("the unknown-permission error does not list manage_backups: %v", err)
	}
	for _, s := range []string{"", "READ_HEALTH", "read_health ", "admin"} {
		if _, err := capability.ParsePermission(s); !errors.Is(err, capability.ErrInvalid) {
			t.Fatalf("ParsePermission(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestAllows(t *testing.T) {
	all := capability.AllPermissions()
	for _, granted := range all {
		global := capability.Capability{Permissions: []capability.Permission{granted}}
		scoped := capability.Capability{Permissions: []capability.Permission{granted}, Database: "orders"}
		revoked := capability.Capability{Permissions: all, Revoked: true}
		for _, want := range all {
			match := granted == want
			checks := []struct {
				c    capability.Capability
				db   string
				want bool
			}{
				{global, "", match},        // global requirement, global capability
				{global, "orders", match},  // database requirement, global capability
				{global, "billing", match}, // any database
				{scoped, "", false},        // global requirement, scoped capability
				{scoped, "orders", match},  // its own database
				{scoped, "billing", false}, // another database
				{revoked, "", false},
				{revoked, "orders", false},
			}
			for _, ch := range checks {
				if got := ch.c.Allows(want, ch.db); got != ch.want {
					t.Errorf("%+v.Allows(%s, %q) = %v, want %v", ch.c, want, ch.db, got, ch.want)
				}
			}
		}
	}
}

// TestOtherInstanceChangesSeen is the running server (s) and the offline CLI
// (cli) sharing one directory.
func TestOtherInstanceChangesSeen(t *testing.T) {
	s, b := setup(t)
	cli := b.open(t)
	tok, c, err := cli.Create("ops", []capability.Permission{capability.ReadStatistics}, "")
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(capability.DefaultRefreshInterval)
	if got, err := s.Authenticate(tok); err != nil || got.ID != c.ID {
		t.Fatalf("server does not see the CLI's creation: %+v, %v", got, err)
	}
	if err := cli.Revoke(c.ID); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(capability.DefaultRefreshInterval)
	if _, err := s.Authenticate(tok); !errors.Is(err, capability.ErrUnauthenticated) {
		t.Fatalf("server does not see the CLI's revocation: %v", err)
	}
	// And the other way round: List always looks.
	tok2, c2, err := s.Create("srv", []capability.Permission{capability.ManageCapabilities}, "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := cli.List()
	if err != nil || len(list) != 2 || list[1].ID != c2.ID {
		t.Fatalf("CLI list = %+v, %v", list, err)
	}
	if got, err := cli.Authenticate(tok2); err != nil || got.ID != c2.ID {
		t.Fatalf("CLI authenticate = %+v, %v", got, err)
	}
}

func TestConcurrentWritersLoseNothing(t *testing.T) {
	_, b := setup(t)
	stores := []*capability.Store{b.open(t), b.open(t), b.open(t)}
	const each = 8
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*each)
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, _, err := s.Create("w", []capability.Permission{capability.ReadHealth}, ""); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list, err := b.open(t).List()
	if err != nil || len(list) != len(stores)*each {
		t.Fatalf("got %d capabilities, %v; want %d", len(list), err, len(stores)*each)
	}
}

func TestModes(t *testing.T) {
	// A restrictive umask must not leave the store unusable, nor a lax one
	// make it readable: Open sets the modes explicitly.
	for _, mask := range []int{0o022, 0o277, 0o000} {
		t.Run(fmt.Sprintf("umask %04o", mask), func(t *testing.T) {
			old := syscall.Umask(mask)
			defer syscall.Umask(old)
			dir := filepath.Join(t.TempDir(), "a", "credentials")
			s, err := capability.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Create("m", []capability.Permission{capability.ReadHealth}, ""); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("dir mode = %v, %v", fi.Mode(), err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			names := []string{}
			for _, e := range entries {
				names = append(names, e.Name())
				info, err := e.Info()
				if err != nil || !info.Mode().IsRegular() || info.Mode().Perm() != 0o600 {
					t.Fatalf("%s: mode %v, %v", e.Name(), info.Mode(), err)
				}
			}
			if fmt.Sprint(names) != "[capabilities.json key lock]" {
				t.Fatalf("files = %v (temporary files left behind?)", names)
			}
			key, err := os.ReadFile(filepath.Join(dir, "key"))
			if err != nil || len(key) != 32 {
				t.Fatalf("key file: %d bytes, %v", len(key), err)
			}
		})
	}
}

func TestTokenNeverStored(t *testing.T) {
	s, b := setup(t)
	var tokens []string
	for i := range 5 {
		tok, _, err := s.Create(fmt.Sprint("c", i), capability.AllPermissions(), "")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(b.dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range tokens {
			body := strings.TrimPrefix(tok, "riffdb_")
			raw, _ := base64.RawURLEncoding.DecodeString(body)
			if bytes.Contains(data, []byte(body)) || bytes.Contains(data, raw) ||
				bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(raw))) {
				t.Fatalf("%s contains a token", e.Name())
			}
		}
	}
}

func TestInsecureDirectory(t *testing.T) {
	t.Run("lax directory mode", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "cred")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		_, err := capability.Open(dir)
		if !errors.Is(err, capability.ErrInsecure) {
			t.Fatalf("err = %v, want ErrInsecure", err)
		}
		if strings.Contains(err.Error(), dir) {
			t.Fatalf("error %q contains the path", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatal("Open wrote into an insecure directory")
		}
	})
	t.Run("symlinked directory", func(t *testing.T) {
		root := t.TempDir()
		real := filepath.Join(root, "real")
		if err := os.Mkdir(real, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(root, "link")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(link); !errors.Is(err, capability.ErrInsecure) {
			t.Fatalf("err = %v, want ErrInsecure", err)
		}
	})
	t.Run("a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(f); !errors.Is(err, capability.ErrInsecure) {
			t.Fatalf("err = %v, want ErrInsecure", err)
		}
	})
	t.Run("readable store file", func(t *testing.T) {
		_, b := setup(t)
		if err := os.Chmod(filepath.Join(b.dir, "capabilities.json"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrInsecure) {
			t.Fatalf("err = %v, want ErrInsecure", err)
		}
	})
	t.Run("symlinked key", func(t *testing.T) {
		_, b := setup(t)
		key := filepath.Join(b.dir, "key")
		moved := filepath.Join(t.TempDir(), "key")
		if err := os.Rename(key, moved); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(moved, key); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrInsecure) {
			t.Fatalf("err = %v, want ErrInsecure", err)
		}
	})
	t.Run("hard-linked key", func(t *testing.T) {
		_, b := setup(t)
		if err := os.Link(filepath.Join(b.dir, "key"), filepath.Join(b.dir, "key2")); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrInsecure) {
			t.Fatalf("err = %v, want ErrInsecure", err)
		}
	})
}

func TestCorruptStore(t *testing.T) {
	write := func(t *testing.T, path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{
		"garbage":        "not json",
		"empty":          "",
		"truncated":      `{"version":1,"capabilities":[`,
		"no list":        `{"version":1}`,
		"wrong version":  `{"version":3,"capabilities":[]}`,
		"unknown field":  `{"version":1,"capabilities":[],"tokens":[]}`,
		"trailing data":  `{"version":1,"capabilities":[]} {}`,
		"bad hash":       `{"version":1,"capabilities":[{"id":"0123456789abcdef","name":"","permissions":["read_health"],"database":"","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"zz"}]}`,
		"bad id":         `{"version":1,"capabilities":[{"id":"x","name":"","permissions":["read_health"],"database":"","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"` + strings.Repeat("00", 32) + `"}]}`,
		"bad permission": `{"version":1,"capabilities":[{"id":"0123456789abcdef","name":"","permissions":["root"],"database":"","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"` + strings.Repeat("00", 32) + `"}]}`,
		"no permissions": `{"version":1,"capabilities":[{"id":"0123456789abcdef","name":"","permissions":[],"database":"","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"` + strings.Repeat("00", 32) + `"}]}`,
		"bad database":   `{"version":1,"capabilities":[{"id":"0123456789abcdef","name":"","permissions":["read_health"],"database":"A B","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"` + strings.Repeat("00", 32) + `"}]}`,
		"duplicate ids":  `{"version":1,"capabilities":[` + strings.Repeat(`{"id":"0123456789abcdef","name":"","permissions":["read_health"],"database":"","created_at":"2030-01-01T00:00:00Z","revoked":false,"token_hash":"`+strings.Repeat("00", 32)+`"},`, 2) + `]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if name == "duplicate ids" {
				data = strings.Replace(data, "},]}", "}]}", 1)
			}
			s, b := setup(t)
			tok, _, err := s.Create("x", []capability.Permission{capability.ReadHealth}, "")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(b.dir, "capabilities.json")
			write(t, path, data)
			if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrCorrupt) {
				t.Fatalf("Open: err = %v, want ErrCorrupt", err)
			}
			// The running store notices on its next refresh and fails
			// closed instead of treating the store as empty.
			b.clock.Advance(capability.DefaultRefreshInterval)
			if _, err := s.Authenticate(tok); !errors.Is(err, capability.ErrCorrupt) || errors.Is(err, capability.ErrUnauthenticated) {
				t.Fatalf("Authenticate: err = %v, want ErrCorrupt only", err)
			}
			// And it keeps failing: a failed reload is not a check that
			// lets the old capabilities serve the next interval.
			if _, err := s.Authenticate(tok); !errors.Is(err, capability.ErrCorrupt) {
				t.Fatalf("second Authenticate within the refresh interval: err = %v, want ErrCorrupt", err)
			}
			if _, err := s.List(); !errors.Is(err, capability.ErrCorrupt) {
				t.Fatalf("List: err = %v, want ErrCorrupt", err)
			}
			if _, _, err := s.Create("y", []capability.Permission{capability.ReadHealth}, ""); !errors.Is(err, capability.ErrCorrupt) {
				t.Fatalf("Create: err = %v, want ErrCorrupt", err)
			}
			if got, _ := os.ReadFile(path); string(got) != data {
				t.Fatal("a failed Create rewrote the corrupt store")
			}
		})
	}
	t.Run("store file missing", func(t *testing.T) {
		_, b := setup(t)
		if err := os.Remove(filepath.Join(b.dir, "capabilities.json")); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
	})
	t.Run("key missing with capabilities", func(t *testing.T) {
		s, b := setup(t)
		if _, _, err := s.Create("x", []capability.Permission{capability.ReadHealth}, ""); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(b.dir, "key")); err != nil {
			t.Fatal(err)
		}
		if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
		if _, err := os.Stat(filepath.Join(b.dir, "key")); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("Open re-keyed a store that holds capabilities")
		}
	})
	t.Run("key missing with an empty store", func(t *testing.T) {
		// A crash between writing the empty store and the key.
		_, b := setup(t)
		if err := os.Remove(filepath.Join(b.dir, "key")); err != nil {
			t.Fatal(err)
		}
		s := b.open(t)
		if _, _, err := s.Create("x", []capability.Permission{capability.ReadHealth}, ""); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("short key", func(t *testing.T) {
		_, b := setup(t)
		write(t, filepath.Join(b.dir, "key"), "short")
		if _, err := capability.Open(b.dir); !errors.Is(err, capability.ErrCorrupt) {
			t.Fatalf("err = %v, want ErrCorrupt", err)
		}
	})
}

// TestManageBackupsScoped: manage_backups may be granted to a capability
// scoped to one database, is stored in canonical order after the older
// permissions, and allows that database only.
func TestManageBackupsScoped(t *testing.T) {
	s, _ := setup(t)
	tok, c, err := s.Create("ops", []capability.Permission{capability.ManageBackups, capability.ExecuteCommands, capability.ManageBackups}, "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := []capability.Permission{capability.ExecuteCommands, capability.ManageBackups}
	if !slices.Equal(c.Permissions, want) {
		t.Fatalf("permissions = %v, want %v", c.Permissions, want)
	}
	got, err := s.Authenticate(tok)
	if err != nil || !slices.Equal(got.Permissions, want) {
		t.Fatalf("authenticate = %+v, %v", got, err)
	}
	if !got.Allows(capability.ManageBackups, "orders") || got.Allows(capability.ManageBackups, "billing") ||
		got.Allows(capability.ManageBackups, "") {
		t.Fatalf("a capability scoped to orders with manage_backups allows the wrong databases: %+v", got)
	}
}

// TestAuthenticateAllocations holds Authenticate's allocations on a known
// token (every authenticated request's path) to the one it needs: the
// returned capability's permissions. Making an HMAC state per call (the key
// hashed into both pads) and a buffer for the decoded token cost six more,
// and two SHA-256 blocks; hashing the token through a new []byte of it and
// summing into a new slice, two more.
func TestAuthenticateAllocations(t *testing.T) {
	testutil.SkipUnderRace(t)
	s, _ := setup(t)
	tok, _, err := s.Create("commands", []capability.Permission{capability.ExecuteCommands}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(tok); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := s.Authenticate(tok); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Authenticate allocates %.0f times, want at most 1", allocs)
	}
}
