package capability_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/capability"
)

// requireCorrupt checks that err is an ErrCorrupt refusal that names the
// damaged file's role, says what to do, and reveals no path.
func requireCorrupt(t *testing.T, err error, b bundle, role string) {
	t.Helper()
	if !errors.Is(err, capability.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	msg := err.Error()
	if strings.Contains(msg, b.dir) || strings.Contains(msg, filepath.Dir(b.dir)) || strings.Contains(msg, "/") {
		t.Fatalf("message %q contains a path", msg)
	}
	if !strings.Contains(msg, role) {
		t.Fatalf("message %q does not name the %s", msg, role)
	}
	if !strings.Contains(msg, "from a backup") || !strings.Contains(msg, "create new capabilities") {
		t.Fatalf("message %q does not say what to do", msg)
	}
}

// populate fills a store with a global capability, a scoped one and a
// revoked one (so that revoked_at is present), and returns their tokens.
func populate(t *testing.T, s *capability.Store, b bundle) []string {
	t.Helper()
	var tokens []string
	for _, c := range []struct {
		name string
		perm capability.Permission
		db   string
	}{
		{"ops <admin> & é", capability.ManageCapabilities, ""},
		{"orders writer", capability.ExecuteCommands, "orders"},
		{"old poller", capability.ReadStatistics, ""},
	} {
		b.clock.Advance(1234567891) // nanoseconds, so created_at has a fraction
		tok, _, err := s.Create(c.name, []capability.Permission{c.perm}, c.db)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(list[2].ID); err != nil {
		t.Fatal(err)
	}
	return tokens
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedKeyRefused damages the key file without changing its length:
// before the integrity tag, Open succeeded and every token was refused.
func TestDamagedKeyRefused(t *testing.T) {
	for _, populated := range []bool{false, true} {
		name := "empty store"
		if populated {
			name = "populated store"
		}
		t.Run(name, func(t *testing.T) {
			s, b := setup(t)
			if populated {
				populate(t, s, b)
			}
			keyPath := filepath.Join(b.dir, "key")
			key := readFile(t, keyPath)

			t.Run("zero-filled", func(t *testing.T) {
				writeFile(t, keyPath, make([]byte, len(key)))
				defer writeFile(t, keyPath, key)
				_, err := capability.Open(b.dir)
				requireCorrupt(t, err, b, "key file")
			})
			t.Run("one byte flipped", func(t *testing.T) {
				defer writeFile(t, keyPath, key)
				for i := range key {
					for _, mask := range []byte{0x01, 0xff} {
						damaged := bytes.Clone(key)
						damaged[i] ^= mask
						writeFile(t, keyPath, damaged)
						_, err := capability.Open(b.dir)
						requireCorrupt(t, err, b, "key file")
					}
				}
			})
			t.Run("another store's key", func(t *testing.T) {
				_, other := setup(t)
				writeFile(t, keyPath, readFile(t, filepath.Join(other.dir, "key")))
				defer writeFile(t, keyPath, key)
				_, err := capability.Open(b.dir)
				requireCorrupt(t, err, b, "key file")
			})
			if _, err := capability.Open(b.dir); err != nil {
				t.Fatalf("the restored key no longer opens: %v", err)
			}
		})
	}
}

// TestDamagedStoreFileRefused changes the store file in ways that keep the
// JSON valid (a byte of a name, a digit of a time, a hex digit of a token
// hash); before the integrity tag those changed a capability silently. Each
// must now be refused, at Open and by a running store at its next reload.
// TestDecodeRefusesEveryFlippedByte flips every byte.
func TestDamagedStoreFileRefused(t *testing.T) {
	s, b := setup(t)
	tokens := populate(t, s, b)
	path := filepath.Join(b.dir, "capabilities.json")
	good := readFile(t, path)
	if !bytes.Contains(good, []byte(`"integrity": "`)) {
		t.Fatalf("the store file has no integrity tag:\n%s", good)
	}

	// Targeted changes that keep the JSON valid and mean something else.
	var doc struct {
		Capabilities []struct {
			CreatedAt string `json:"created_at"`
			TokenHash string `json:"token_hash"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(good, &doc); err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) func() []byte {
		return func() []byte {
			if !bytes.Contains(good, []byte(old)) {
				t.Fatalf("%q is not in the store file:\n%s", old, good)
			}
			return bytes.Replace(good, []byte(old), []byte(new), 1)
		}
	}
	// otherHexDigit changes the hex digit at i to another lowercase one.
	otherHexDigit := func(s string, i int) string {
		d := byte('0')
		if s[i] == '0' {
			d = 'a'
		}
		return s[:i] + string(d) + s[i+1:]
	}
	created, hash := doc.Capabilities[0].CreatedAt, doc.Capabilities[0].TokenHash
	tag := string(good[bytes.Index(good, []byte(`"integrity": "`))+len(`"integrity": "`):][:64])
	for name, damage := range map[string]func() []byte{
		"name character":       replace(`"name": "orders writer"`, `"name": "orders wruter"`),
		"created_at digit":     replace(created, strings.Replace(created, "2030", "2031", 1)),
		"token hash digit":     replace(hash, otherHexDigit(hash, 10)),
		"token hash uppercase": replace(hash, strings.ToUpper(hash)),
		"database alias":       replace(`"database": "orders"`, `"database": "ordens"`),
		"revoked flag":         replace(`"revoked": true`, `"revoked": false`),
		"version":              replace(`"version": 2`, `"version": 1`),
		"integrity digit":      replace(tag, otherHexDigit(tag, 0)),
		"integrity uppercase":  replace(tag, strings.ToUpper(tag)),
	} {
		t.Run(name, func(t *testing.T) {
			damaged := damage()
			if bytes.Equal(damaged, good) {
				t.Fatal("the damage changes nothing")
			}
			running := b.open(t)
			writeFile(t, path, damaged)
			defer writeFile(t, path, good)
			_, err := capability.Open(b.dir)
			requireCorrupt(t, err, b, "store file")
			// A running store notices at its next reload and fails closed.
			b.clock.Advance(capability.DefaultRefreshInterval)
			if _, err := running.Authenticate(tokens[0]); !errors.Is(err, capability.ErrCorrupt) {
				t.Fatalf("running store: Authenticate err = %v, want ErrCorrupt", err)
			}
			if _, _, err := running.Create("x", []capability.Permission{capability.ReadHealth}, ""); !errors.Is(err, capability.ErrCorrupt) {
				t.Fatalf("running store: Create err = %v, want ErrCorrupt", err)
			}
			if got := readFile(t, path); !bytes.Equal(got, damaged) {
				t.Fatal("a refused Create rewrote the damaged store file")
			}
		})
	}

	// Whitespace outside strings is not covered by the tag: changing it
	// changes nothing the store means.
	t.Run("whitespace", func(t *testing.T) {
		var compact bytes.Buffer
		if err := json.Compact(&compact, good); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, compact.Bytes())
		defer writeFile(t, path, good)
		if _, err := capability.Open(b.dir); err != nil {
			t.Fatalf("a compacted store file: %v", err)
		}
	})
}

// legacyFile rewrites the store file as an earlier build wrote it: version
// 1, no integrity tag, otherwise the same bytes.
func legacyFile(t *testing.T, path string) []byte {
	t.Helper()
	var f struct {
		Capabilities json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(readFile(t, path), &f); err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(struct {
		Version      int             `json:"version"`
		Capabilities json.RawMessage `json:"capabilities"`
	}{1, f.Capabilities}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, '\n')
	writeFile(t, path, data)
	return data
}

// TestLegacyStoreFile checks that a store file written by an earlier build
// (version 1, no integrity tag) still opens and authenticates, is left as it
// is by reads, and is sealed by the next write.
func TestLegacyStoreFile(t *testing.T) {
	for _, write := range []string{"create", "revoke"} {
		t.Run(write, func(t *testing.T) {
			s, b := setup(t)
			tokens := populate(t, s, b)
			path := filepath.Join(b.dir, "capabilities.json")
			legacy := legacyFile(t, path)

			s = b.open(t)
			for i, tok := range tokens[:2] {
				if _, err := s.Authenticate(tok); err != nil {
					t.Fatalf("token %d of a legacy store: %v", i, err)
				}
			}
			list, err := s.List()
			if err != nil || len(list) != 3 {
				t.Fatalf("List = %+v, %v", list, err)
			}
			if got := readFile(t, path); !bytes.Equal(got, legacy) {
				t.Fatal("reading a legacy store rewrote it")
			}

			switch write {
			case "create":
				_, _, err = s.Create("new", []capability.Permission{capability.ReadHealth}, "")
			case "revoke":
				err = s.Revoke(list[0].ID)
			}
			if err != nil {
				t.Fatal(err)
			}
			sealed := readFile(t, path)
			if !bytes.Contains(sealed, []byte(`"version": 2`)) || !bytes.Contains(sealed, []byte(`"integrity": "`)) {
				t.Fatalf("the write did not seal the legacy store:\n%s", sealed)
			}
			s = b.open(t)
			if _, err := s.Authenticate(tokens[1]); err != nil {
				t.Fatalf("after sealing: %v", err)
			}
			// Sealed, it is protected: a damaged key is now noticed.
			key := readFile(t, filepath.Join(b.dir, "key"))
			key[0] ^= 1
			writeFile(t, filepath.Join(b.dir, "key"), key)
			_, err = capability.Open(b.dir)
			requireCorrupt(t, err, b, "key file")
		})
	}
	t.Run("legacy file with a tag", func(t *testing.T) {
		s, b := setup(t)
		populate(t, s, b)
		path := filepath.Join(b.dir, "capabilities.json")
		writeFile(t, path, bytes.Replace(readFile(t, path), []byte(`"version": 2`), []byte(`"version": 1`), 1))
		_, err := capability.Open(b.dir)
		requireCorrupt(t, err, b, "store file")
	})
}

// TestOlderStoreFileOpens replaces the store file by an older copy of
// itself. The copy is authentic (sealed with the same key), only older, so
// the integrity tag cannot tell it from the current file, and without an
// anchor it opens: a capability revoked after the copy was taken works
// again, and one created after it is gone. riffdb always opens the store
// with an anchor, which refuses the copy (TestRolledBackStoreIsRefusedAtOpen).
func TestOlderStoreFileOpens(t *testing.T) {
	s, b := setup(t)
	tokOld, old, err := s.Create("old", []capability.Permission{capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.dir, "capabilities.json")
	older := readFile(t, path)
	tokNew, _, err := s.Create("new", []capability.Permission{capability.ReadHealth}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(old.ID); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, older)

	s = b.open(t)
	if _, err := s.Authenticate(tokOld); err != nil {
		t.Fatalf("the older copy's capability: %v", err)
	}
	if _, err := s.Authenticate(tokNew); !errors.Is(err, capability.ErrUnauthenticated) {
		t.Fatalf("a capability newer than the copy: err = %v, want ErrUnauthenticated", err)
	}
}
